package main

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// logDocsRead is one request of each layout; nil where a layout has none.
type logDocsRead struct {
	name         string
	target       time.Duration
	docs, chunks func() error
	prep         func() error // before each chunk store sample, untimed
	partials     *int         // search answers cut short by the budget
	note         string
}

// docsPage returns a find of filter's newest 20 by _id, as a per-record
// store would list a page, checking that it is full and, with below set,
// that it starts below that id.
func (b *logDocsBench) docsPage(filter bson.D, below *bson.ObjectID) func() error {
	ctx := b.e.ctx
	return func() error {
		cur, err := b.coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(logDocsPage))
		if err != nil {
			return err
		}
		var page []logDocRecord
		if err := cur.All(ctx, &page); err != nil {
			return err
		}
		if len(page) != logDocsPage {
			return fmt.Errorf("find %v: %d records, want %d", filter, len(page), logDocsPage)
		}
		if below != nil && bytes.Compare(page[0].ID[:], below[:]) >= 0 {
			return fmt.Errorf("find %v: page starts at %s, not below %s", filter, page[0].ID.Hex(), below.Hex())
		}
		return nil
	}
}

// docsSearch reads the newest records of the type, window at most, newest
// first, and matches them in the client until it has a page of 50, as the
// service's search reads its chunks: the one way a search can use the
// pushdown (a sort with a limit and one equality).
func (b *logDocsBench) docsSearch(word string) func() error {
	ctx := b.e.ctx
	return func() error {
		cur, err := b.coll.Find(ctx, bson.D{{Key: "type", Value: "log"}},
			options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(int64(b.window)).SetBatchSize(1000))
		if err != nil {
			return err
		}
		defer cur.Close(ctx)
		found := 0
		for found < logDocsSearchPage && cur.Next(ctx) {
			var r logDocRecord
			if err := cur.Decode(&r); err != nil {
				return err
			}
			if matchesQ(r.LogBody, word) {
				found++
			}
		}
		if found < logDocsSearchPage {
			return fmt.Errorf("search %q in the newest %d: %d found (%v)", word, b.window, found, cur.Err())
		}
		return nil
	}
}

// docsRegex is the same search as a MongoDB user writes it: the match on
// the server, sorted and limited there.
func (b *logDocsBench) docsRegex(word string) func() error {
	ctx := b.e.ctx
	return func() error {
		filter := bson.D{{Key: "type", Value: "log"}, {Key: "logBody", Value: bson.D{{Key: "$regex", Value: word}, {Key: "$options", Value: "i"}}}}
		cur, err := b.coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: -1}}).SetLimit(logDocsSearchPage))
		if err != nil {
			return err
		}
		var page []logDocRecord
		if err := cur.All(ctx, &page); err != nil {
			return err
		}
		if len(page) != logDocsSearchPage {
			return fmt.Errorf("$regex %q: %d records", word, len(page))
		}
		return nil
	}
}

// chunkGet returns a GET of the logs API through the gateway that must
// list want records; with partials set, an answer cut short by the search
// budget ("partial": true) is counted there instead.
func (b *logDocsBench) chunkGet(path string, want int, partials *int) func() error {
	c := httpClient(2)
	return func() error {
		m, _, err := call(c, "GET", b.gw+path, nil, b.hdr, 201)
		if err != nil {
			return err
		}
		if partials != nil && m["partial"] == true {
			*partials++
			return nil
		}
		if ls, _ := m["logs"].([]any); len(ls) != want {
			return fmt.Errorf("GET %s: %d records, want %d (partial %v)", path, len(ls), want, m["partial"])
		}
		return nil
	}
}

// readBoth measures every read of both layouts, request by request, the
// two layouts one after the other on the same data.
func (b *logDocsBench) readBoth() ([]*logDocsRow, error) {
	e, ctx := b.e, b.e.ctx
	cookie, err := signInCookie(e)
	if err != nil {
		return nil, err
	}
	b.hdr = map[string]string{"Cookie": "sessionId=" + cookie}
	// The record b.depth deep in each layout.
	var deep logDocRecord
	if err := b.coll.FindOne(ctx, bson.D{{Key: "type", Value: "log"}},
		options.FindOne().SetSort(bson.D{{Key: "_id", Value: -1}}).SetSkip(int64(b.depth-1))).Decode(&deep); err != nil {
		return nil, fmt.Errorf("the record %d deep: %w", b.depth, err)
	}
	b.cursorDoc = deep.ID
	if b.cursorChunk, err = logCursor(ctx, httpClient(2), b.gw, b.hdr, b.depth); err != nil {
		return nil, err
	}
	c := httpClient(2)
	ms50 := 50 * time.Millisecond
	page := fmt.Sprintf("limit=%d", logDocsPage)
	search := fmt.Sprintf("limit=%d&q=needle", logDocsSearchPage)
	var warmPartial, coldPartial int
	reads := []logDocsRead{
		{name: "first page of a type (20)", target: ms50,
			docs:   b.docsPage(bson.D{{Key: "type", Value: "log"}}, nil),
			chunks: b.chunkGet("/log/log/1?"+page, logDocsPage, nil)},
		{name: fmt.Sprintf("cursor page %d deep (20)", b.depth), target: ms50,
			docs:   b.docsPage(bson.D{{Key: "type", Value: "log"}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: b.cursorDoc}}}}, &b.cursorDoc),
			chunks: b.chunkGet("/log/log/1?"+page+"&before="+url.QueryEscape(b.cursorChunk), logDocsPage, nil)},
		{name: "an app's first page (20)", target: ms50,
			docs:   b.docsPage(bson.D{{Key: "app", Value: logDocsApp}}, nil),
			chunks: b.chunkGet("/log/log/1/"+logDocsApp+"?"+page, logDocsPage, nil)},
		{name: fmt.Sprintf("q=needle, first page of 50 (docs: newest %d matched in the client)", b.window), target: 500 * time.Millisecond,
			docs:   b.docsSearch("needle"),
			chunks: b.chunkGet("/log/log/1?"+search, logDocsSearchPage, &warmPartial), partials: &warmPartial, note: "chunks warm (in the chunk cache)"},
		{name: "q=needle, cold (logs restarted before each)", target: 500 * time.Millisecond,
			chunks: b.chunkGet("/log/log/1?"+search, logDocsSearchPage, &coldPartial), partials: &coldPartial,
			prep: func() error { return restartLogs(e, c, b.hdr) }},
		{name: "q=needle as a server-side $regex, sort, limit 50", target: 500 * time.Millisecond,
			docs: b.docsRegex("needle")},
		{name: "count of a type (countDocuments)",
			docs: func() error {
				n, err := b.coll.CountDocuments(ctx, bson.D{{Key: "type", Value: "log"}})
				if err == nil && n != int64(b.n) {
					err = fmt.Errorf("countDocuments: %d, want %d", n, b.n)
				}
				return err
			}},
	}
	docsOrder := []string{"ferretdb", "bench"}
	chunkOrder := []string{"gateway", "logs", "ferretdb", "bench"}
	var rows []*logDocsRow
	for _, rd := range reads {
		r := &logDocsRow{name: rd.name, target: rd.target, note: rd.note, partials: rd.partials}
		t := time.Now()
		if rd.docs != nil {
			if r.docs, r.docsCPU, err = b.sample(nil, rd.docs, docsOrder); err != nil {
				return nil, fmt.Errorf("%s (documents): %w", rd.name, err)
			}
		}
		if rd.chunks != nil {
			saved := b.samples
			if rd.prep != nil {
				b.samples = min(b.samples, 10) // a restart each
			}
			r.chunks, r.chunksCPU, err = b.sample(rd.prep, rd.chunks, chunkOrder)
			b.samples = saved
			if err != nil {
				return nil, fmt.Errorf("%s (chunks): %w", rd.name, err)
			}
		}
		fmt.Fprintf(e.out, "    %-70s documents %s; chunks %s (%s)\n", rd.name, latOrDash(r.docs), latOrDash(r.chunks), time.Since(t).Round(100*time.Millisecond))
		rows = append(rows, r)
	}
	return rows, nil
}

func latOrDash(l []time.Duration) string {
	if len(l) == 0 {
		return "-"
	}
	return latString(slices.Clone(l))
}

// printTable prints both layouts side by side with the targets, and
// reports each measure.
func (b *logDocsBench) printTable(in ingestResult, rows []*logDocsRow) {
	e := b.e
	fmt.Fprintf(e.out, "\n  %d log records: one document each (per-record) vs the chunk store (chunks), one request at a time\n", b.n)
	tw := tabwriter.NewWriter(e.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  measure\tper-record p50\tp99\tchunks p50\tp99\tper-record ÷ chunks (p50)\ttarget\tper-record\tchunks")
	ingestOK := func(rate float64) string { return mark(rate/in.raw >= 0.7) }
	fmt.Fprintf(tw, "  ingest, records/s (÷ raw InsertMany %.0f/s)\t%.0f (%.2f)\t\t%.0f (%.2f)\t\t%.2f\t>= 0.7 of raw\t%s\t%s\n",
		in.raw, in.docs, in.docs/in.raw, in.chunks, in.chunks/in.raw, in.docs/in.chunks, ingestOK(in.docs), ingestOK(in.chunks))
	fmt.Fprintf(tw, "  ingest, FerretDB CPU µs/record\t%.0f\t\t%.0f\t\t%.2f\treport\t\t\n", in.docsFerret, in.chunkFerret, in.docsFerret/max(in.chunkFerret, 1e-9))
	ms := func(l []time.Duration, p float64) string {
		if len(l) == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", float64(quantile(l, p))/1e6)
	}
	for _, r := range rows {
		ratio, target := "-", "report"
		if len(r.docs) > 0 && len(r.chunks) > 0 {
			ratio = fmt.Sprintf("%.1f", float64(quantile(r.docs, 0.5))/float64(max(quantile(r.chunks, 0.5), 1)))
		}
		if r.target > 0 {
			target = fmt.Sprintf("p99 <= %s", r.target)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, ms(r.docs, 0.5), ms(r.docs, 0.99), ms(r.chunks, 0.5), ms(r.chunks, 0.99),
			ratio, target, r.meets(r.docs), r.meets(r.chunks))
	}
	_ = tw.Flush()
	fmt.Fprintf(e.out, "\n  CPU per request (samples: per-record / chunks)\n")
	fmt.Fprintf(e.out, "    ingest: per-record %s; chunks %s (per record)\n", in.docsCPU, in.chunksCPU)
	for _, r := range rows {
		note := r.note
		if r.partials != nil {
			note += fmt.Sprintf(" %d of %d chunk store answers partial (the 1 s search budget)", *r.partials, len(r.chunks))
		}
		fmt.Fprintf(e.out, "    %s: per-record %s (%d); chunks %s (%d) %s\n", r.name, orDash(r.docsCPU), len(r.docs), orDash(r.chunksCPU), len(r.chunks), note)
	}
	const big = 10_000_000
	fmt.Fprintf(e.out, "\n  at this run's rates, %d records would take %s as documents, %s in the chunk store\n",
		big, ingestDuration(big, in.docs).Round(time.Second), ingestDuration(big, in.chunks).Round(time.Second))
	e.report("logdocs", fmt.Sprintf("ingest ÷ raw InsertMany, %d records: per-record / chunks", b.n), fmt.Sprintf("%.2f / %.2f", in.docs/in.raw, in.chunks/in.raw), ">= 0.7")
	for _, r := range rows {
		target := "report"
		if r.target > 0 {
			target = fmt.Sprintf("p99 <= %s", r.target)
		}
		e.report("logdocs", r.name+": per-record / chunks", fmt.Sprintf("%s / %s", latOrDash(r.docs), latOrDash(r.chunks)), target)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
