package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// unusable reports whether the group has marked itself unavailable (a
// request found nothing usable and waits, or waited).
func unusable(g *Group) func() bool {
	return func() bool { return g.unusableSince.Load() != 0 }
}

type answer struct {
	status int
	body   string
	err    error
	took   time.Duration
}

// send runs one request through g in the background.
func send(g *Group, ctx context.Context, method, path, body string) <-chan answer {
	c := make(chan answer, 1)
	go func() {
		var rd io.Reader
		if body != "" {
			rd = io.NopCloser(strings.NewReader(body)) // no GetBody: never replayable
		}
		req, _ := http.NewRequestWithContext(ctx, method, g.Next()+path, rd)
		if body != "" {
			req.ContentLength = int64(len(body))
		}
		start := time.Now()
		resp, err := g.RoundTrip(req)
		if err != nil {
			c <- answer{err: err, took: time.Since(start)}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c <- answer{status: resp.StatusCode, body: string(b), took: time.Since(start)}
	}()
	return c
}

func receive(t *testing.T, what string, c <-chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no answer", what)
		return answer{}
	}
}

// Every address of the service vanishes (its containers replaced all at
// once) and a new one appears about a second later: a GET and a POST sent
// during the gap wait for it and succeed, the POST's body arriving once.
// Both forms of the gap: the name resolving to nothing, and the old
// addresses still listed but refusing connections.
func TestRequestsWaitThroughAGap(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			bs := startBackends(t, 3)
			old, next := bs[:2], bs[2]
			next.srv.Close() // started later, on its address
			d := &dns{}
			d.set(ips(old)...)
			reg := prometheus.NewRegistry()
			o := fast(d, reg)
			o.RetryWait = 20 * time.Second // generous: the test waits on conditions
			// Fresh connections only: a POST written to a kept-alive
			// connection the closed server had already shut (broken pipe)
			// counts as sent and is rightly not sent again; that race is
			// not what this test is about.
			o.Transport = &http.Transport{DisableKeepAlives: true}
			g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, o)
			waitFor(t, "both ready", allIn(g, "ready", old...))

			for _, b := range old {
				b.srv.Close()
			}
			if !stale {
				d.set()
				waitFor(t, "no address left", func() bool { return len(g.Endpoints()) == 0 })
			}
			payload := strings.Repeat("p", 10<<10)
			getc := send(g, context.Background(), "GET", "/x", "")
			postc := send(g, context.Background(), "POST", "/x", payload)
			waitFor(t, "the service is unavailable", unusable(g))
			time.Sleep(time.Second) // the gap
			select {
			case a := <-getc:
				t.Fatalf("the GET ended during the gap: %+v", a)
			case a := <-postc:
				t.Fatalf("the POST ended during the gap: %+v %v", a, a.err)
			default:
			}
			if err := next.listen(t); err != nil {
				t.Fatal(err)
			}
			d.set(next.ip)

			get, post := receive(t, "GET", getc), receive(t, "POST", postc)
			if get.err != nil || get.status != 200 || !strings.Contains(get.body, next.ip) {
				t.Fatalf("GET: %+v", get)
			}
			if post.err != nil || post.status != 200 || !strings.Contains(post.body, fmt.Sprintf(`"bytes":%d`, len(payload))) {
				t.Fatalf("POST: %+v", post)
			}
			if n := next.hits.Load(); n != 2 {
				t.Errorf("the new replica got %d requests, want 2 (each once)", n)
			}
			if g.unusableSince.Load() != 0 {
				t.Error("the service is still marked unavailable")
			}
			s := scrape(t, reg)
			if v, _ := s.Sum("acme_gateway_upstream_unavailable_total", "service", "svc"); v != 0 {
				t.Errorf("unavailable_total %v, want 0", v)
			}
			if v, _ := s.Sum("acme_gateway_upstream_wait_seconds_count", "service", "svc", "result", "found"); v != 2 {
				t.Errorf("waits found %v, want 2", v)
			}
			if v, _ := s.Sum("acme_gateway_upstream_wait_seconds_sum", "service", "svc", "result", "found"); v < 2*0.9 {
				t.Errorf("waited %v s in all, want about 2 (two requests, a second each)", v)
			}
		})
	}
}

// A service gone for longer than RetryWait: the first request waits
// RetryWait and fails; after that, requests fail at once (nobody waits
// once the service has been gone that long), until an address is usable
// again, and then requests wait again for the next gap.
func TestLongOutageAnswersAtOnceAfterRetryWait(t *testing.T) {
	const wait = 3 * time.Second
	bs := startBackends(t, 1)
	d := &dns{}
	d.set(ips(bs)...)
	reg := prometheus.NewRegistry()
	o := fast(d, reg)
	o.RetryWait = wait
	g := newGroup(t, []string{"http://svc.test:" + bs[0].port}, o)
	waitFor(t, "ready", allIn(g, "ready", bs...))
	bs[0].srv.Close()
	d.set()
	waitFor(t, "no address left", func() bool { return len(g.Endpoints()) == 0 })

	first := receive(t, "first", send(g, context.Background(), "GET", "/x", ""))
	if !errors.Is(first.err, ErrUnavailable) || first.took < wait-50*time.Millisecond {
		t.Fatalf("first request: %v after %v, want ErrUnavailable after about %v", first.err, first.took, wait)
	}
	for i := range 5 {
		a := receive(t, "later", send(g, context.Background(), "POST", "/x", "{}"))
		if !errors.Is(a.err, ErrUnavailable) || a.took > wait/3 {
			t.Fatalf("request %d after the wait: %v after %v, want ErrUnavailable well under %v", i, a.err, a.took, wait)
		}
	}
	s := scrape(t, reg)
	if v, _ := s.Sum("acme_gateway_upstream_unavailable_total", "service", "svc"); v != 6 {
		t.Errorf("unavailable_total %v, want 6", v)
	}
	if v, _ := s.Sum("acme_gateway_upstream_wait_seconds_count", "service", "svc", "result", "expired"); v != 1 {
		t.Errorf("expired waits %v, want 1 (the later requests did not wait)", v)
	}

	// Back, then gone again: the clock starts afresh.
	if err := bs[0].listen(t); err != nil {
		t.Fatal(err)
	}
	d.set(bs[0].ip)
	waitFor(t, "usable again", func() bool { return !unusable(g)() })
	if status, _, err := get(t, g, "/x"); err != nil || status != 200 {
		t.Fatalf("after the outage: %d %v", status, err)
	}
	bs[0].srv.Close()
	d.set()
	waitFor(t, "no address left", func() bool { return len(g.Endpoints()) == 0 })
	c := send(g, context.Background(), "GET", "/x", "")
	waitFor(t, "unavailable again", unusable(g))
	time.Sleep(300 * time.Millisecond)
	if err := bs[0].listen(t); err != nil {
		t.Fatal(err)
	}
	d.set(bs[0].ip)
	if a := receive(t, "in the second gap", c); a.err != nil || a.status != 200 {
		t.Fatalf("a request in a second, short gap: %+v", a)
	}
}

// A waiting request stops waiting when its client goes away, and when the
// gateway stops (StopWaiting, Close).
func TestWaitEndsWithTheRequestOrTheGateway(t *testing.T) {
	d := &dns{}
	reg := prometheus.NewRegistry()
	o := fast(d, reg)
	o.RetryWait = time.Minute
	g := newGroup(t, []string{"http://svc.test:80"}, o)

	ctx, cancel := context.WithCancel(context.Background())
	c := send(g, ctx, "GET", "/x", "")
	waitFor(t, "the request waits", unusable(g))
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	cancel()
	if a := receive(t, "canceled", c); !errors.Is(a.err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Fatalf("after the cancel: %v, %v later", a.err, time.Since(start))
	}

	c = send(g, context.Background(), "POST", "/x", "{}")
	time.Sleep(200 * time.Millisecond)
	select {
	case a := <-c:
		t.Fatalf("the POST did not wait: %+v", a)
	default:
	}
	start = time.Now()
	g.StopWaiting(time.Now())
	if a := receive(t, "stopped", c); !errors.Is(a.err, ErrUnavailable) || time.Since(start) > 5*time.Second {
		t.Fatalf("after StopWaiting: %v, %v later", a.err, time.Since(start))
	}
	if a := receive(t, "after StopWaiting", send(g, context.Background(), "GET", "/x", "")); !errors.Is(a.err, ErrUnavailable) || a.took > 5*time.Second {
		t.Fatalf("a request after StopWaiting: %v after %v", a.err, a.took)
	}
	if v, _ := scrape(t, reg).Sum("acme_gateway_upstream_wait_seconds_count", "service", "svc", "result", "canceled"); v != 2 {
		t.Errorf("canceled waits %v, want 2", v)
	}

	g2 := newGroup(t, []string{"http://svc.test:80"}, o)
	c = send(g2, context.Background(), "GET", "/x", "")
	waitFor(t, "the request waits", unusable(g2))
	g2.Close()
	if a := receive(t, "closed", c); !errors.Is(a.err, ErrUnavailable) {
		t.Fatalf("after Close: %v", a.err)
	}
}

// Waiting changes nothing for a request that may have been acted on: a
// POST whose body went out to a replica that hung up is not sent again and
// fails at once; a GET is sent once more and then fails at once.
func TestWaitingNeverResendsWhatWasSent(t *testing.T) {
	bs := startBackends(t, 2)
	o := fast(nil, nil)
	o.ProbeInterval = time.Hour
	o.Transport = &http.Transport{DisableKeepAlives: true}
	o.RetryWait = time.Minute
	g := newGroup(t, []string{"http://" + bs[0].addr(), "http://" + bs[1].addr()}, o)
	waitFor(t, "ready", allIn(g, "ready", bs...))
	for _, b := range bs {
		b.hangUp.Store(true)
	}
	total := func() int64 { return bs[0].hits.Load() + bs[1].hits.Load() }
	a := receive(t, "POST", send(g, context.Background(), "POST", "/x", `{"a":1}`))
	if a.err == nil || errors.Is(a.err, ErrUnavailable) || a.took > 5*time.Second || total() != 1 {
		t.Fatalf("POST: %v after %v, arrived %d times; want its own error at once, once", a.err, a.took, total())
	}
	a = receive(t, "GET", send(g, context.Background(), "GET", "/x", ""))
	if a.err == nil || a.took > 5*time.Second || total() != 3 {
		t.Fatalf("GET: %v after %v, %d arrivals in all; want an error at once, after 2 more", a.err, a.took, total())
	}
	if g.unusableSince.Load() != 0 {
		t.Error("marked unavailable although every replica accepts connections")
	}

	// A lone replica: the GET's one retry goes to it again (the
	// connection that broke may have been a kept-alive one it had just
	// closed); a POST still is not sent again.
	lone := newGroup(t, []string{"http://" + bs[0].addr()}, o)
	waitFor(t, "ready", allIn(lone, "ready", bs[0]))
	before := total()
	a = receive(t, "GET", send(lone, context.Background(), "GET", "/x", ""))
	if a.err == nil || a.took > 5*time.Second || total()-before != 2 {
		t.Fatalf("GET to a lone replica: %v after %v, arrived %d times; want an error at once, after 2", a.err, a.took, total()-before)
	}
	before = total()
	a = receive(t, "POST", send(lone, context.Background(), "POST", "/x", "{}"))
	if a.err == nil || a.took > 5*time.Second || total()-before != 1 {
		t.Fatalf("POST to a lone replica: %v after %v, arrived %d times; want an error at once, once", a.err, a.took, total()-before)
	}
}

// Requests waiting for a lone replica that refuses connections try it
// now and then, not in a busy loop; when it listens again on its address
// (a restarted process) the very next try gets through.
func TestWaitingRequestsPaceTheirTries(t *testing.T) {
	bs := startBackends(t, 1)
	o := fast(nil, nil)
	o.ProbeInterval, o.BackoffMin, o.BackoffMax = time.Hour, time.Hour, time.Hour // only requests try it
	o.RetryWait = 20 * time.Second
	var dials dialCounter
	o.Transport = &http.Transport{DialContext: dials.dial, DisableKeepAlives: true}
	g := newGroup(t, []string{"http://" + bs[0].addr()}, o)
	waitFor(t, "ready", allIn(g, "ready", bs...))
	bs[0].srv.Close()
	var cs []<-chan answer
	for range 20 {
		cs = append(cs, send(g, context.Background(), "GET", "/x", ""))
	}
	waitFor(t, "unavailable", unusable(g))
	before := dials.n.Load()
	time.Sleep(time.Second)
	// 20 waiting requests, one try per waitPoll (50 ms) at most, plus
	// slack for timers; a busy loop would be thousands.
	if n := dials.n.Load() - before; n > 40 {
		t.Errorf("%d connection attempts in a second by 20 waiting requests", n)
	}
	if err := bs[0].listen(t); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if a := receive(t, "waiting GET", c); a.err != nil || a.status != 200 {
			t.Fatalf("request %d: %+v", i, a)
		}
	}
}

// dialCounter counts connection attempts.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}
