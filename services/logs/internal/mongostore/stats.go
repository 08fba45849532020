package mongostore

import (
	"context"
	"time"

	"github.com/acme/platform/services/logs/internal/logs"
)

// Stats implements logs.Store. Each type's chain (or the app's) is walked
// back from its head to the first chunk whose HiAt is older than q.From,
// skipping blocks with nothing older than q.To (blocks.go). A chunk whose
// records all fall in one bucket (its MinAt and MaxAt say so) adds its
// Count without looking at its records; only chunks that straddle a bucket
// boundary or the range's ends are counted record by record.
func (s *Store) Stats(ctx context.Context, q logs.StatsQuery) (logs.Stats, error) {
	n := int((q.To.Sub(q.From) + q.Step - 1) / q.Step)
	out := logs.Stats{Counts: make([]map[string]int64, n)}
	for i := range out.Counts {
		out.Counts[i] = make(map[string]int64, len(logs.Types))
		for _, t := range logs.Types {
			out.Counts[i][t] = 0
		}
	}
	bucket := func(t time.Time) int {
		if t.Before(q.From) || !t.Before(q.To) {
			return -1
		}
		return int(t.Sub(q.From) / q.Step)
	}
	sk := newSkipper(logs.Query{To: q.To})
	for _, typ := range logs.Types {
		key := typeKey(typ)
		if q.AppID != "" {
			key = appKey(q.AppID, typ)
		}
		c, err := s.head(ctx, key)
		if err != nil {
			return out, err
		}
		for looked := 0; c != nil; looked++ {
			if c.HiAt.Before(q.From) {
				break // nothing here or before is as new as from
			}
			if looked >= s.filterScan {
				out.Partial = true
				break
			}
			if back := sk.skip(c); back > 0 {
				if c, err = s.chunk(ctx, key, c.N-back); err != nil {
					return out, err
				}
				continue
			}
			if b := bucket(c.MinAt); b >= 0 && b == bucket(c.MaxAt) {
				out.Counts[b][typ] += c.Count
			} else {
				for _, r := range c.Records {
					if b := bucket(r.CreatedAt); b >= 0 {
						out.Counts[b][typ]++
					}
				}
			}
			if err := ctx.Err(); err != nil {
				return out, err
			}
			if c, err = s.chunk(ctx, key, c.N-1); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}
