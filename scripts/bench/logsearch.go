package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
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
	js, cons, err := logsConsumer(ctx, e, nc)
	if err != nil {
		return err
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
				CreatedAt: start.Add(time.Duration(i) * (24 * time.Hour / time.Duration(n)))})
			m := nats.NewMsg(subject)
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("search-%d", i))
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		if err := awaitAcks(ctx, futures); err != nil {
			return err
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
	// page searches q in the 24 h window ending at to (the first page of 50).
	page := func(q string, to time.Time) (time.Duration, map[string]any, error) {
		v := url.Values{"from": {to.Add(-24 * time.Hour).Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}, "limit": {"50"}, "q": {q}}
		t := time.Now()
		m, _, err := call(c, "GET", e.p.GatewayURL+"/log/db/1/LOGGING?"+v.Encode(), nil, hdr, 201)
		return time.Since(t), m, err
	}
	// The stream sequence of the newest record before to: where a search
	// of the window ending at to starts reading.
	topBefore := func(to time.Time) (uint64, error) {
		m, _, err := call(c, "GET", e.p.GatewayURL+"/log/db/1/LOGGING?limit=1&to="+url.QueryEscape(to.Format(time.RFC3339Nano)), nil, hdr, 201)
		return seqOf(firstID(m)), err
	}
	type sample struct {
		d       time.Duration
		scanned uint64 // records read, from the newest in the window down to the last listed (or the cursor)
		partial bool
		short   bool
	}
	measure := func(q string, to time.Time) (sample, error) {
		top, err := topBefore(to)
		if err != nil {
			return sample{}, err
		}
		d, m, err := page(q, to)
		if err != nil {
			return sample{}, err
		}
		ls, _ := m["logs"].([]any)
		s := sample{d: d, partial: m["partial"] == true, short: len(ls) < 50}
		last, _ := m["cursor"].(string)
		if last == "" && len(ls) > 0 {
			last, _ = ls[len(ls)-1].(map[string]any)["id"].(string)
		}
		if sq := seqOf(last); sq > 0 && sq <= top {
			s.scanned = top - sq + 1
		}
		return s, nil
	}
	summarize := func(ss []sample) (lat []time.Duration, rate float64, partial, short int) {
		var rates []float64
		for _, s := range ss {
			lat = append(lat, s.d)
			if s.scanned > 0 {
				rates = append(rates, float64(s.scanned)/s.d.Seconds())
			}
			if s.partial {
				partial++
			}
			if s.short {
				short++
			}
		}
		return lat, median(rates), partial, short
	}
	// Cold: a logs process started afresh (empty chunk cache) before each
	// search, windows ending 1/10 of the data apart, so each first page
	// (about 50,000 records: 50 matches at one in 1,000) reads its chunks
	// from the database. Then warm: the newest window again and again (its
	// chunks in the service's chunk cache).
	var cold, warm, none []sample
	for k := range 10 {
		if err := restartLogs(e, c, hdr); err != nil {
			return err
		}
		s, err := measure("needle", end.Add(time.Millisecond-time.Duration(k)*24*time.Hour/10))
		if err != nil {
			return err
		}
		cold = append(cold, s)
	}
	for len(warm) < 200 {
		s, err := measure("needle", end.Add(time.Millisecond))
		if err != nil {
			return err
		}
		warm = append(warm, s)
	}
	for len(none) < 20 {
		s, err := measure("haystack-only", end.Add(time.Millisecond))
		if err != nil {
			return err
		}
		none = append(none, s)
	}
	// Volume over time: the 24 hours per hour, counted from the chunks.
	var stats []time.Duration
	sq := url.Values{"app": {"LOGGING"}, "from": {start.Format(time.RFC3339Nano)}, "to": {end.Add(time.Millisecond).Format(time.RFC3339Nano)}, "step": {"1h"}}
	for range 20 {
		t := time.Now()
		m, _, err := call(c, "GET", e.p.GatewayURL+"/log/stats?"+sq.Encode(), nil, hdr, 200)
		if err != nil {
			return err
		}
		stats = append(stats, time.Since(t))
		var total float64
		bs, _ := m["buckets"].([]any)
		for _, b := range bs {
			total += b.(map[string]any)["counts"].(map[string]any)["db"].(float64)
		}
		if int(total) != n {
			return fmt.Errorf("stats counted %v records of the %d: %v", total, n, m)
		}
	}
	lat, rate, partial, short := summarize(cold)
	e.report("logsearch", fmt.Sprintf("q=<word in 0.1%%>, first page of 50, 24 h window (%d records), cold (logs restarted)", n),
		fmt.Sprintf("%s; %d partial, %d short", latString(lat), partial, short), "p99 <= 500 ms")
	e.report("logsearch", "  records scanned per second (cold)", fmt.Sprintf("%.0f (median)", rate), "")
	lat, rate, partial, short = summarize(warm)
	e.report("logsearch", "the same search, warm (chunks in the chunk cache)", fmt.Sprintf("%s; %d partial, %d short", latString(lat), partial, short), "p99 <= 500 ms")
	e.report("logsearch", "  records scanned per second (warm)", fmt.Sprintf("%.0f (median)", rate), "")
	lat, rate, partial, _ = summarize(none)
	e.report("logsearch", "q=<word in no record>: stops at LOGS_SEARCH_BUDGET (1 s)", fmt.Sprintf("%s; %d of %d partial", latString(lat), partial, len(none)), "")
	e.report("logsearch", "  records scanned per second (within the budget)", fmt.Sprintf("%.0f (median)", rate), "")
	e.report("logsearch", fmt.Sprintf("GET /log/stats, 24 h per hour, %d records", n), latString(stats), "")
	return nil
}

// restartLogs stops the logs process and starts a new one in its place,
// then waits until the gateway reaches it.
func restartLogs(e *env, c *http.Client, hdr map[string]string) error {
	old := e.p.Procs["logs"]
	old.Stop(10 * time.Second)
	if _, err := e.p.Restart(old); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, err := call(c, "GET", e.p.GatewayURL+"/log/apps", nil, hdr, 200); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("logs not reachable after a restart: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// awaitAcks waits for every asynchronous publish's acknowledgement.
func awaitAcks(ctx context.Context, futures []jetstream.PubAckFuture) error {
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// logsConsumer returns JetStream on nc and the logs service's durable
// consumer of the platform's log stream (to watch it drain).
func logsConsumer(ctx context.Context, e *env, nc *nats.Conn) (jetstream.JetStream, jetstream.Consumer, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	cons, err := js.Consumer(ctx, strings.ToUpper(e.servers.SubjectPrefix)+"_LOGS", "logs-writer")
	if err != nil {
		return nil, nil, fmt.Errorf("logs consumer: %w", err)
	}
	return js, cons, nil
}
