package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/acme/platform/pkg/metrics"
)

// benchTextDownloads (BENCH_ONLY=textdownloads): one 4 KiB text file,
// which the files service stores gzip-compressed, downloaded one at a time
// through the gateway by a client that does not accept gzip (the bytes
// inflated on their way) and by one that does (sent as stored), in
// alternating rounds: downloads per second, latencies, CPU per download of
// each process, and the share of downloads the gateway sent from its
// object cache (docs/files.md, "Object cache").
func benchTextDownloads(e *env) error {
	const size = 4 << 10
	const rounds = 3
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; ", size/45+1)[:size])
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	auth := map[string]string{"Cookie": "sessionId=" + cookie}
	c := httpClient(2)
	id, err := uploadThrough(e, c, auth, "notes.txt", bytes.NewReader(text))
	if err != nil {
		return err
	}
	url := e.p.GatewayURL + "/download/file/" + id
	gzipHdr := map[string]string{"Cookie": auth["Cookie"], "Accept-Encoding": "gzip"}
	get := func(hdr map[string]string, encoding string) func(int) error {
		return func(int) error {
			resp, err := send(e.ctx, c, "GET", url, nil, hdr)
			if err != nil {
				return err
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != encoding || encoding == "" && n != size || n == 0 {
				return fmt.Errorf("download %s (%q): %d %q, %d bytes, %v", url, encoding, resp.StatusCode, resp.Header.Get("Content-Encoding"), n, err)
			}
			return nil
		}
	}
	identity, gzipped := get(auth, ""), get(gzipHdr, "gzip")
	for range 2 { // as a user's repeated downloads: the second caches it
		if err := identity(0); err != nil {
			return err
		}
		if err := gzipped(0); err != nil {
			return err
		}
	}

	sample := platformCPU(e)
	hits0 := cacheHits(c, e.p.MetricsURLs["gateway"])
	var plain, gz side
	for range rounds {
		if err := plain.run(e.ctx, 1, e.seconds/rounds+time.Second, sample, identity); err != nil {
			return err
		}
		if err := gz.run(e.ctx, 1, e.seconds/rounds+time.Second, sample, gzipped); err != nil {
			return err
		}
	}
	hits := cacheHits(c, e.p.MetricsURLs["gateway"]) - hits0
	order := []string{"gateway", "files", "ferretdb", "minio"}
	plainCPU, _ := plain.perRequest(order)
	gzCPU, _ := gz.perRequest(order)
	e.report("textdownloads", "4 KiB text (stored gzip) via gateway, one at a time, no Accept-Encoding", plain.String(), "")
	e.report("textdownloads", "4 KiB text (stored gzip) via gateway, one at a time, Accept-Encoding: gzip", gz.String(), "")
	e.report("textdownloads", "CPU per 4 KiB text download, no Accept-Encoding", plainCPU, "")
	e.report("textdownloads", "CPU per 4 KiB text download, Accept-Encoding: gzip", gzCPU, "")
	e.report("textdownloads", "4 KiB text downloads sent from the gateway's object cache", fmt.Sprintf("%.0f of %d", hits, plain.requests()+gz.requests()), "report")
	return nil
}

var cacheHitSeries = regexp.MustCompile(`(?m)^` + metrics.Namespace + `_gateway_object_cache_total\{result="hit"\} (\S+)$`)

// cacheHits reads the gateway's object cache hits (0 when unreadable).
func cacheHits(c *http.Client, metricsURL string) float64 {
	resp, err := c.Get(metricsURL)
	if err != nil {
		return 0
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := cacheHitSeries.FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
