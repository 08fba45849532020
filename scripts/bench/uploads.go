package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// benchUploads (BENCH_ONLY=uploads, run only when named): the pocketbase
// section's 4 KiB upload without PocketBase, for profiling the upload
// path. The platform's `POST /upload/file` through the gateway and raw
// minio-go PutObject of the same bytes, 8 connections each, three
// alternating rounds, with the CPU per upload of every process and what
// what the two sides asked of MinIO (its S3 calls, when MinIO was
// started with MINIO_PROMETHEUS_AUTH_TYPE=public) and of FerretDB (its commands, from
// serverStatus). BENCH_UPLOAD_PAUSE (a duration) holds one long platform
// round for an outside profiler (perf record -p, pprof) instead.
func benchUploads(e *env) error {
	const rounds, workers, size = 3, 8, 4 << 10
	c := httpClient(16)
	gw := e.p.GatewayURL
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	data, _ := io.ReadAll(genReader(size))
	form, formCT := fileForm("bench.bin", data)
	hdr := map[string]string{"Cookie": "sessionId=" + cookie, "Content-Type": formCT}
	if _, err := post(e, c, gw+"/upload/file", form, formCT, hdr, 201); err != nil {
		return err
	}
	rh, err := newRawHitter("POST", gw+"/upload/file", form, hdr, 201, workers)
	if err != nil {
		return err
	}
	defer rh.close()

	mc, err := minio.New(e.servers.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.servers.S3Access, e.servers.S3Secret, "")})
	if err != nil {
		return err
	}
	const rawBucket = "bench-raw-uploads"
	if err := mc.MakeBucket(e.ctx, rawBucket, minio.MakeBucketOptions{}); err != nil {
		return err
	}
	var seq atomic.Int64
	rawPut := func(int) error {
		_, err := mc.PutObject(e.ctx, rawBucket, fmt.Sprintf("put-%d", seq.Add(1)), bytes.NewReader(data), size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
		return err
	}
	plat := platformCPU(e)
	minioCPU := func() cpuSample { return cpuSample{"minio": plat()["minio"]} }

	if d, _ := time.ParseDuration(os.Getenv("BENCH_UPLOAD_PAUSE")); d > 0 {
		fmt.Fprintf(e.out, "  uploading for %s; pids: %v\n", d, pids(e))
		var up side
		if err := up.run(e.ctx, workers, d, plat, rh.hit); err != nil {
			return err
		}
		c, total := up.perRequest(nil)
		e.report("uploads", "platform 4 KiB POST /upload/file, long round", up.String(), "")
		e.report("uploads", "CPU/upload", fmt.Sprintf("%s (%.2f ms)", c, total/1000), "")
		return nil
	}

	var up, put side
	if err := alternate(e, workers, 1, leg{&up, plat, rh.hit}, leg{&put, minioCPU, rawPut}); err != nil {
		return err
	}
	up, put = side{}, side{}
	s3Before, s3Err := minioCalls(e)
	dbBefore, dbErr := ferretCommands(e)
	n0 := 0
	for range rounds {
		if err := up.run(e.ctx, workers, e.seconds, plat, rh.hit); err != nil {
			return err
		}
		if n0 == 0 { // the first round's commands, before any raw PutObject
			dbAfter, err := ferretCommands(e)
			if dbErr == nil && err == nil {
				e.report("uploads", "FerretDB commands per upload", perUpload(dbBefore, dbAfter, up.requests()), "")
			} else {
				e.report("uploads", "FerretDB commands per upload", fmt.Sprintf("unknown (%v %v)", dbErr, err), "")
			}
			n0 = up.requests()
		}
		if err := put.run(e.ctx, workers, e.seconds, minioCPU, rawPut); err != nil {
			return err
		}
	}
	// MinIO refreshes its counters every few seconds: they are read once
	// more after that, over all rounds of both sides.
	time.Sleep(12 * time.Second)
	if s3After, err := minioCalls(e); s3Err == nil && err == nil {
		e.report("uploads", "MinIO S3 calls per upload or raw PUT", perUpload(s3Before, s3After, up.requests()+put.requests()), "")
	} else {
		e.report("uploads", "MinIO S3 calls per upload or raw PUT", fmt.Sprintf("unknown (%v %v; start MinIO with MINIO_PROMETHEUS_AUTH_TYPE=public)", s3Err, err), "")
	}
	order := []string{"gateway", "auth", "files", "logs", "ferretdb", "minio"}
	e.report("uploads", fmt.Sprintf("platform 4 KiB POST /upload/file via gateway (%d conns)", workers), up.String(), "")
	e.report("uploads", fmt.Sprintf("raw minio-go PutObject 4 KiB (%d workers)", workers), put.String(), "")
	upC, upTotal := up.perRequest(order)
	putC, _ := put.perRequest(order)
	e.report("uploads", "CPU/upload, platform", upC, "")
	e.report("uploads", "CPU/PUT, raw PutObject", putC, "")
	e.report("uploads", "CPU/upload, platform (every process but the bench's)", fmt.Sprintf("%.2f ms %s", upTotal/1000, mark(upTotal <= 2500)), "<= 2.5 ms")
	e.report("uploads", "bench process CPU/request", fmt.Sprintf("%.0f µs (platform upload) / %.0f (raw PutObject), not counted", up.selfPerRequest(), put.selfPerRequest()), "")
	return nil
}

// pids names the platform's processes by pid, for an outside profiler.
func pids(e *env) map[string]int {
	m := map[string]int{}
	for name, procs := range e.p.Replicas {
		for _, p := range procs {
			m[name] = p.Pid()
		}
	}
	return m
}

// perUpload formats the growth of each counter divided by n, the largest
// first, leaving out those that grew by less than one per 20 uploads.
func perUpload(before, after map[string]float64, n int) string {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range after {
		if d := (v - before[k]) / float64(max(n, 1)); d >= 0.05 {
			l = append(l, kv{k, d})
		}
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	var parts []string
	for _, x := range l {
		parts = append(parts, fmt.Sprintf("%s %.2f", x.k, x.v))
	}
	return fmt.Sprintf("%s (%d uploads)", strings.Join(parts, ", "), n)
}

// minioCalls reads MinIO's count of S3 calls by API
// (minio_s3_requests_total), which needs MINIO_PROMETHEUS_AUTH_TYPE=public.
func minioCalls(e *env) (map[string]float64, error) {
	resp, err := http.Get("http://" + e.servers.S3Endpoint + "/minio/v2/metrics/cluster")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("minio metrics: %s", resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "minio_s3_requests_total{") {
			continue
		}
		i := strings.Index(line, `api="`)
		sp := strings.LastIndexByte(line, ' ')
		if i < 0 || sp < 0 {
			continue
		}
		api := line[i+5:]
		api = api[:strings.IndexByte(api, '"')]
		v, _ := strconv.ParseFloat(line[sp+1:], 64)
		m[api] += v
	}
	return m, sc.Err()
}

// ferretCommands reads FerretDB's count of commands by name
// (serverStatus metrics.commands).
func ferretCommands(e *env) (map[string]float64, error) {
	var doc struct {
		Metrics struct {
			Commands map[string]struct {
				Total int64 `bson:"total"`
			} `bson:"commands"`
		} `bson:"metrics"`
	}
	if err := e.mongo.Database("admin").RunCommand(e.ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&doc); err != nil {
		return nil, err
	}
	if doc.Metrics.Commands == nil {
		return nil, errors.New("serverStatus: no metrics.commands")
	}
	m := map[string]float64{}
	for name, v := range doc.Metrics.Commands {
		m[name] = float64(v.Total)
	}
	return m, nil
}
