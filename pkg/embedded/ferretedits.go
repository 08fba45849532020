package embedded

// ferretDBEdit replaces one exact piece of a FerretDB source file; the
// build refuses when the piece is not there exactly `count` times.
type ferretDBEdit struct {
	file, from, to string
	count          int
}

// The patch FerretDB 1.24 needs (docs/design/ferretdb.md), in two parts.
//
// The _id index: its SQLite backend creates the _id index on the expression
// `_ferretdb_sjson->"_id"` but looks documents up (find, update and delete
// by _id) with `_ferretdb_sjson->'$._id'`, which SQLite cannot match to that
// index, so every lookup by _id scanned the whole table (measured: 2-3 s for
// a missing _id among 200,000 documents, 86 µs with the index). Same
// results either way: both extract the _id member as JSON. Upstream:
// FerretDB issue 4646 (the same mismatch on PostgreSQL); v1 is no longer
// developed.
//
// The pushdown: the backend narrows a query only by a filter that is
// exactly {_id: v}; every other find, count, aggregate, update and delete
// read and decoded the whole collection, and the indexes createIndexes made
// were never used. The added files (ferretpatch/*.go.txt) make the backend
// narrow by every top-level equality and $in of strings, ObjectIDs, bools
// and numbers (acmeWhere), sort and limit by an index that serves the sort when
// the filter has no condition (acmeOrderBy, acmeSortLimit), and count a
// whole collection with SQL (acmeFastCount). FerretDB still filters, sorts,
// skips and limits every returned document itself, so the pushdown narrows
// what is read and never decides a match.
var ferretDBEdits = []ferretDBEdit{
	{file: "internal/backends/sqlite/metadata/metadata.go", count: 1,
		from: `IDColumn = DefaultColumn + "->'$._id'"`,
		to:   `IDColumn = DefaultColumn + "->\"_id\""`},
	{file: "internal/backends/sqlite/collection.go", count: 1,
		from: "\tvar whereClause string\n\tvar args []any\n\n\t// that logic should exist in one place\n\t// TODO https://github.com/FerretDB/FerretDB/issues/3235\n\tif params.Filter.Len() == 1 {\n\t\tv, _ := params.Filter.Get(\"_id\")\n\t\tswitch v.(type) {\n\t\tcase string, types.ObjectID:\n\t\t\twhereClause = fmt.Sprintf(` WHERE %s = ?`, metadata.IDColumn)\n\t\t\targs = []any{string(must.NotFail(sjson.MarshalSingleValue(v)))}\n\t\t}\n\t}\n\n\tq += whereClause\n\tq += prepareOrderByClause(params.Sort)\n\n\tif params.Limit != 0 {\n\t\tq += ` LIMIT ?`\n\t\targs = append(args, params.Limit)\n\t}\n\n\trows, err := db.QueryContext(ctx, q, args...)\n",
		// With ACME_FERRETDB_SCAN_LOG set, every query no index serves is
		// reported (acmeReportScan; pkg/testkit fails the test that made it).
		to: "\tplan := acmeQuery(meta, params, q)\n\n\tacmeReportScan(ctx, db, c.dbName, c.name, plan.q, plan.args, params)\n\n\trows, err := db.QueryContext(ctx, plan.q, plan.args...)\n"},
	{file: "internal/backends/sqlite/collection.go", count: 1,
		from: "\treturn &backends.QueryResult{\n\t\tIter: newQueryIterator(ctx, rows, params.OnlyRecordIDs),\n\t}, nil\n}\n\n// InsertAll",
		to:   "\treturn &backends.QueryResult{\n\t\tIter:              newQueryIterator(ctx, rows, params.OnlyRecordIDs),\n\t\tAcmeOffsetApplied: plan.offsetApplied,\n\t}, nil\n}\n\n// InsertAll"},
	{file: "internal/backends/sqlite/collection.go", count: 1,
		from: "\tvar filterPushdown bool\n\tvar whereClause string\n\tvar args []any\n\n\t// that logic should exist in one place\n\t// TODO https://github.com/FerretDB/FerretDB/issues/3235\n\tif params.Filter.Len() == 1 {\n\t\tv, _ := params.Filter.Get(\"_id\")\n\t\tswitch v.(type) {\n\t\tcase string, types.ObjectID:\n\t\t\tfilterPushdown = true\n\t\t\twhereClause = fmt.Sprintf(` WHERE %s = ?`, metadata.IDColumn)\n\t\t\targs = []any{string(must.NotFail(sjson.MarshalSingleValue(v)))}\n\t\t}\n\t}\n\n\torderByClause := prepareOrderByClause(params.Sort)\n\tsortPushdown := orderByClause != \"\"\n\n\tq := `EXPLAIN QUERY PLAN ` + selectClause + whereClause + orderByClause\n\n\tvar limitPushdown bool\n\n\tif params.Limit != 0 {\n\t\tq += ` LIMIT ?`\n\t\targs = append(args, params.Limit)\n\t\tlimitPushdown = true\n\t}\n",
		to:   "\tplan := acmeQuery(meta, &backends.QueryParams{Filter: params.Filter, Sort: params.Sort, Limit: params.Limit}, selectClause)\n\tfilterPushdown, sortPushdown, limitPushdown := plan.filter, plan.sort, plan.limit\n\tq, args := `EXPLAIN QUERY PLAN `+plan.q, plan.args\n"},
	// The backends' contract admits sorts on fields, not only $natural.
	{file: "internal/backends/collection.go", count: 2,
		from: "\tif params.Sort.Len() != 0 {\n\t\tmust.BeTrue(params.Sort.Len() == 1)",
		to:   "\tif params.Sort.Len() != 0 && params.Sort.Has(\"$natural\") {\n\t\tmust.BeTrue(params.Sort.Len() == 1)"},
	{file: "internal/handler/msg_find.go", count: 1,
		from: "\tif !h.DisablePushdown && params.Filter.Len() == 0 && params.Sort.Len() == 0 && params.Skip == 0 {\n\t\tqp.Limit = params.Limit\n\t}\n",
		to:   "\tif !h.DisablePushdown && params.Filter.Len() == 0 && params.Sort.Len() == 0 && params.Skip == 0 {\n\t\tqp.Limit = params.Limit\n\t}\n\n\tif acmeSortPushable(params.Filter, params.Sort, params.Skip, params.Limit) && !h.DisablePushdown {\n\t\tqp.Sort, qp.Limit, qp.AcmeOffset = params.Sort, params.Limit, params.Skip\n\t}\n"},
	// A skip the backend applied (with a sort an index serves) is not
	// applied again.
	{file: "internal/handler/msg_find.go", count: 1,
		from: "\tqueryRes, err := coll.Query(ctx, qp)\n\tif err != nil {\n\t\treturn nil, handleMaxTimeMSError(err, params.MaxTimeMS, \"find\")\n\t}\n",
		to:   "\tqueryRes, err := coll.Query(ctx, qp)\n\tif err != nil {\n\t\treturn nil, handleMaxTimeMSError(err, params.MaxTimeMS, \"find\")\n\t}\n\n\tif queryRes.AcmeOffsetApplied {\n\t\tparams.Skip = 0\n\t}\n"},
	{file: "internal/backends/collection.go", count: 1,
		from: "type QueryParams struct {\n\tFilter *types.Document\n\tSort   *types.Document\n\tLimit  int64\n",
		to:   "type QueryParams struct {\n\tFilter *types.Document\n\tSort   *types.Document\n\tLimit  int64\n\n\t// AcmeOffset rows are skipped before Limit, only with a sort the\n\t// backend applies; QueryResult.AcmeOffsetApplied says so.\n\tAcmeOffset int64\n"},
	{file: "internal/backends/collection.go", count: 1,
		from: "type QueryResult struct {\n\tIter types.DocumentsIterator\n",
		to:   "type QueryResult struct {\n\tIter types.DocumentsIterator\n\n\tAcmeOffsetApplied bool\n"},
	{file: "internal/handler/msg_explain.go", count: 1,
		from: "\tif !h.DisablePushdown && params.Filter.Len() == 0 && params.Sort.Len() == 0 && params.Skip == 0 {\n\t\tqp.Limit = params.Limit\n\t}\n",
		to:   "\tif !h.DisablePushdown && params.Filter.Len() == 0 && params.Sort.Len() == 0 && params.Skip == 0 {\n\t\tqp.Limit = params.Limit\n\t}\n\n\tif acmeSortPushable(params.Filter, params.Sort, params.Skip, params.Limit) && !h.DisablePushdown {\n\t\tqp.Sort, qp.Limit = params.Sort, params.Skip+params.Limit\n\t}\n"},
	{file: "internal/handler/msg_aggregate.go", count: 1,
		from: "iter, err = processStagesDocuments(ctx, closer, &stagesDocumentsParams{c, qp, stagesDocuments})",
		to:   "iter, err = acmeProcessStages(ctx, closer, &stagesDocumentsParams{c, qp, stagesDocuments}, aggregationStages)"},
	{file: "internal/handler/msg_count.go", count: 1,
		from: "\tvar qp backends.QueryParams\n\tif !h.DisablePushdown {\n\t\tqp.Filter = params.Filter\n\t}\n",
		to:   "\tif n, ok, err := acmeFastCount(connCtx, c, params.Filter, params.Skip, params.Limit); err != nil {\n\t\treturn nil, lazyerrors.Error(err)\n\t} else if ok && !h.DisablePushdown {\n\t\treturn documentOpMsg(must.NotFail(types.NewDocument(\"n\", n, \"ok\", float64(1))))\n\t}\n\n\tvar qp backends.QueryParams\n\tif !h.DisablePushdown {\n\t\tqp.Filter = params.Filter\n\t}\n"},
	// An update or findAndModify reads the matching documents, changes
	// them in Go and writes them back: without a lock, two concurrent $inc
	// of one document both read the old value and one increment is lost.
	// The server is one process, so a lock per collection makes each such
	// command atomic against the others (acmeLockWrites).
	{file: "internal/handler/msg_update.go", count: 1,
		from: "\tmatched, modified, upserted, err := h.updateDocument(connCtx, params)\n",
		to:   "\tunlock := acmeLockWrites(params.DB, params.Collection)\n\tmatched, modified, upserted, err := h.updateDocument(connCtx, params)\n\tunlock()\n"},
	{file: "internal/handler/msg_findandmodify.go", count: 1,
		from: "\tres, err := h.findAndModifyDocument(connCtx, params)\n",
		to:   "\tunlock := acmeLockWrites(params.DB, params.Collection)\n\tres, err := h.findAndModifyDocument(connCtx, params)\n\tunlock()\n"},
}

// ferretDBFiles are the files the patch adds: the copy's path, and the
// name under ferretpatch/ (embedded into this package).
var ferretDBFiles = map[string]string{
	"internal/backends/sqlite/acme_pushdown.go":        "acme_pushdown.go.txt",
	"internal/backends/acme_backends.go":               "acme_backends.go.txt",
	"internal/handler/acme_handler.go":                 "acme_handler.go.txt",
	"internal/backends/decorators/oplog/acme_oplog.go": "acme_oplog.go.txt",
}
