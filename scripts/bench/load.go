package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// stats of one load phase.
type stats struct {
	n, errs int
	err     error // the first error, when errs > 0
	dur     time.Duration
	lat     []time.Duration
}

func (s stats) rps() float64 { return float64(s.n) / s.dur.Seconds() }

func (s stats) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	sort.Slice(s.lat, func(i, j int) bool { return s.lat[i] < s.lat[j] })
	return s.lat[min(len(s.lat)-1, int(float64(len(s.lat))*p))]
}

func (s stats) String() string {
	first := ""
	if s.err != nil {
		first = fmt.Sprintf(", the first: %.200s", s.err)
	}
	return fmt.Sprintf("%.0f/s (p50 %s, p99 %s, %d errors%s)", s.rps(), s.pct(0.50).Round(10*time.Microsecond), s.pct(0.99).Round(10*time.Microsecond), s.errs, first)
}

// load runs fn from workers goroutines for d.
func load(ctx context.Context, workers int, d time.Duration, fn func(w int) error) stats {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var all stats
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local stats
			for ctx.Err() == nil {
				t := time.Now()
				err := fn(w)
				if ctx.Err() != nil && err != nil {
					break
				}
				local.lat = append(local.lat, time.Since(t))
				local.n++
				if err != nil {
					local.errs++
					if local.err == nil {
						local.err = err
					}
				}
			}
			mu.Lock()
			all.n += local.n
			all.errs += local.errs
			if all.err == nil {
				all.err = local.err
			}
			all.lat = append(all.lat, local.lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	all.dur = time.Since(start)
	return all
}

func httpClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}, Timeout: 5 * time.Minute}
}

// send does one request: body, when not nil, as JSON unless hdr sets
// another Content-Type, then the headers hdr.
func send(ctx context.Context, c *http.Client, method, url string, body []byte, hdr map[string]string) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return c.Do(req)
}

// call does one request and fails unless the status is want.
func call(c *http.Client, method, url string, body any, hdr map[string]string, want int) (map[string]any, http.Header, error) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	resp, err := send(context.Background(), c, method, url, b, hdr)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return nil, resp.Header, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return m, resp.Header, nil
}

func ratio(a, b float64) string { return fmt.Sprintf("%.2f", a/b) }
