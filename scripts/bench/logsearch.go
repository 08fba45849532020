package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/acme/platform/pkg/logclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchLogSearch is the search benchmark: BENCH_SEARCH_RECORDS (1,000,000)
// records of one chain (app LOGGING, type db, which nothing else writes)
// spread evenly over the last 24 hours, the word "needle" in one record of
// 1,000 (0.1%), then GET /log/db/1/LOGGING?q=needle&from=<24 h ago>&to=<now>
// (the first page of 50) through the gateway. Records scanned per second
// come from the stream sequences in the record ids: a page that ends at the
// 50th match has read from the newest record down to it, a search cut by
// its time budget down to its cursor.
func benchLogSearch(e *env) error {
	ctx := e.ctx
	n, err := envCount("BENCH_SEARCH_RECORDS", 1_000_000)
	if err != nil {
		return err
	}
	const every = 1000 // one record in every contains the word
	nc, err := nats.Connect(e.servers.NATSURL, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, strings.ToUpper(e.servers.SubjectPrefix)+"_LOGS", "logs-writer")
	if err != nil {
		return fmt.Errorf("logs consumer: %w", err)
	}
	end := time.Now().UTC().Truncate(time.Millisecond)
	start := end.Add(-24 * time.Hour)
	subject := logclient.Subject(e.servers.SubjectPrefix, "LOGGING", logclient.TypeDB)
	pubStart := time.Now()
	for i := 0; i < n; {
		// In windows of 2,000 unacknowledged publishes (the client allows 4,000).
		var futures []jetstream.PubAckFuture
		for ; i < n && len(futures) < 2000; i++ {
			body := fmt.Sprintf("search record %d from host-%d: query took %d ms", i, i%50, i%997)
			if i%every == every/2 {
				body += ", needle found"
			}
			data, _ := json.Marshal(logclient.Message{App: "LOGGING", Type: logclient.TypeDB, LogBody: body,
				CreatedAt: start.Add(time.Duration(int64(24*time.Hour) * int64(i) / int64(n)))})
			m := nats.NewMsg(subject)
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("search-%d", i))
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	published := time.Since(pubStart)
	if err := waitDrained(ctx, cons, time.Duration(n/500)*time.Second+5*time.Minute); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "  (published %d records over 24 h in %s, stored in %s)\n", n, published.Round(time.Millisecond), time.Since(pubStart).Round(time.Millisecond))

	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	c := httpClient(2)
	hdr := map[string]string{"Cookie": "sessionId=" + cookie}
	window := url.Values{"from": {start.Format(time.RFC3339Nano)}, "to": {end.Add(time.Millisecond).Format(time.RFC3339Nano)}, "limit": {"50"}}
	page := func(q string) (time.Duration, map[string]any, error) {
		v := url.Values{}
		for k, x := range window {
			v[k] = x
		}
		v.Set("q", q)
		t := time.Now()
		m, _, err := call(c, "GET", e.p.GatewayURL+"/log/db/1/LOGGING?"+v.Encode(), nil, hdr, 201)
		return time.Since(t), m, err
	}
	// The newest record's stream sequence: where every search starts.
	newest, _, err := call(c, "GET", e.p.GatewayURL+"/log/db/1/LOGGING?limit=1", nil, hdr, 201)
	if err != nil {
		return err
	}
	top := seqOf(firstID(newest))

	var found, none []time.Duration
	var scannedFound, scannedNone []float64
	var partialFound, partialNone, short int
	budget := time.Now().Add(2 * time.Minute)
	for len(found) < 200 && (len(found) < 20 || time.Now().Before(budget)) {
		d, m, err := page("needle")
		if err != nil {
			return err
		}
		ls, _ := m["logs"].([]any)
		if m["partial"] == true {
			partialFound++
		}
		if len(ls) < 50 {
			short++
		}
		if len(ls) > 0 {
			last, _ := ls[len(ls)-1].(map[string]any)["id"].(string)
			scannedFound = append(scannedFound, float64(top-seqOf(last)+1)/d.Seconds())
		}
		found = append(found, d)
	}
	budget = time.Now().Add(time.Minute)
	for len(none) < 50 && (len(none) < 5 || time.Now().Before(budget)) {
		d, m, err := page("haystack-only")
		if err != nil {
			return err
		}
		if m["partial"] == true {
			partialNone++
			if cur, _ := m["cursor"].(string); cur != "" {
				scannedNone = append(scannedNone, float64(top-seqOf(cur)+1)/d.Seconds())
			}
		}
		none = append(none, d)
	}
	e.report("logsearch", fmt.Sprintf("q=<word in 0.1%%>, first page of 50, 24 h window, %d records", n),
		fmt.Sprintf("%s; %d partial, %d short", latString(found), partialFound, short), "p99 <= 500 ms")
	e.report("logsearch", "  records scanned per second (that search)", fmt.Sprintf("%.0f (median)", median(scannedFound)), "")
	e.report("logsearch", "q=<word in no record> (stops at LOGS_SEARCH_BUDGET, 1 s)",
		fmt.Sprintf("%s; %d of %d partial", latString(none), partialNone, len(none)), "")
	e.report("logsearch", "  records scanned per second (within the budget)", fmt.Sprintf("%.0f (median)", median(scannedNone)), "")
	return nil
}

// waitDrained waits until the consumer has acked everything published.
func waitDrained(ctx context.Context, cons jetstream.Consumer, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not drained after %s: consumer pending %d, ack pending %d", budget, info.NumPending, info.NumAckPending)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func firstID(m map[string]any) string {
	ls, _ := m["logs"].([]any)
	if len(ls) == 0 {
		return ""
	}
	id, _ := ls[0].(map[string]any)["id"].(string)
	return id
}

// seqOf is the stream sequence in a stream record's id (logs.StreamRecordID:
// kind 0x01, 5 bytes of stream tag, 6 bytes of sequence); 0 otherwise.
func seqOf(id string) uint64 {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 12 || b[0] != 0x01 {
		return 0
	}
	var s uint64
	for _, x := range b[6:] {
		s = s<<8 | uint64(x)
	}
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
