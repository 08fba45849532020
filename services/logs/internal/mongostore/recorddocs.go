// The copy of type chain chunks' records as plain documents in
// log_records (LOGS_RECORD_DOCUMENTS, docs/design/log-store.md).

package mongostore

import (
	"context"

	"github.com/acme/platform/services/logs/internal/logs"
)

// copyRecords writes the records documents of the type chains' chunks
// among cs (log_records, chunkdoc.go), those not there yet. A write
// cut short between its chunks and this leaves them out until its
// redelivery (chainState) writes them.
func (s *Store) copyRecords(ctx context.Context, cs []any) error {
	if !s.recordDocs {
		return nil
	}
	if s.beforeCopy != nil {
		if err := s.beforeCopy(); err != nil {
			return err
		}
	}
	return s.writeRecordDocs(ctx, cs)
}

// writeRecordDocs writes the records documents of the type chains' chunks
// among cs that are not there yet.
func (s *Store) writeRecordDocs(ctx context.Context, cs []any) error {
	var docs []any
	for _, d := range cs {
		c := d.(*chunkDoc)
		if isAppKey(c.Key) {
			continue
		}
		raw, err := recordsDoc(c)
		if err != nil {
			return err
		}
		docs = append(docs, raw)
	}
	if len(docs) == 0 {
		return nil
	}
	return insertNew(ctx, s.records, docs)
}

// CopyAllRecords writes the records documents of every kept chunk of the
// type chains that has none (those stored before log_records existed, or
// with LOGS_RECORD_DOCUMENTS off), 16 chunks at a time, and returns how
// many chunks it looked at. It reads every chunk of the type chains once:
// a one-off for an operator (cmd/copyrecords), safe to run again and
// beside running replicas.
func (s *Store) CopyAllRecords(ctx context.Context) (int, error) {
	const per = 16
	looked := 0
	for _, typ := range logs.Types {
		key := typeKey(typ)
		head, err := s.head(ctx, key)
		if err != nil || head == nil {
			if err != nil {
				return looked, err
			}
			continue
		}
		tail, err := s.tail(ctx, key, head.N)
		if err != nil {
			return looked, err
		}
		var batch []any
		for n := tail; n <= head.N; n++ {
			c, err := s.storedChunk(ctx, key, n)
			if err != nil {
				return looked, err
			}
			if c != nil {
				looked++
				batch = append(batch, c)
			}
			if len(batch) == per || (n == head.N && len(batch) > 0) {
				if err := s.writeRecordDocs(ctx, batch); err != nil {
					return looked, err
				}
				batch = batch[:0]
			}
		}
	}
	return looked, nil
}
