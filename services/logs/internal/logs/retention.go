package logs

import (
	"context"
	"log/slog"
	"time"
)

// RunRetention deletes records older than maxAge every interval until ctx
// ends. Several replicas may run it at once: a delete by age is idempotent,
// so the worst case is redundant work, never a wrong result.
func RunRetention(ctx context.Context, s Store, maxAge, interval time.Duration, log *slog.Logger) {
	if maxAge <= 0 || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := s.DeleteBefore(ctx, time.Now().Add(-maxAge))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention: delete failed", "err", err)
		case n > 0:
			log.Info("retention: deleted old records", "records", n, "max_age", maxAge.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
