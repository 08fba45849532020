package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/acme/platform/scripts/stack"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// leg is one side of an alternating comparison: what it runs, and the
// sampler of the CPU of the processes it is charged with.
type leg struct {
	s      *side
	sample func() cpuSample
	fn     func(int) error
}

// alternate runs the legs in turn, rounds times, n workers each, after a
// one-second warm-up of each.
func alternate(e *env, n, rounds int, legs ...leg) error {
	for _, l := range legs {
		load(e.ctx, n, time.Second, l.fn)
	}
	for range rounds {
		for _, l := range legs {
			if err := l.s.run(e.ctx, n, e.seconds, l.sample, l.fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// pbInstance is a PocketBase set up for the benchmark: a superuser's token,
// and a user's in the `users` collection.
type pbInstance struct {
	*pocketBase
	suToken, userToken, userID string
	userCreds                  map[string]string
}

// setUpPocketBase signs the superuser in, creates a user and signs it in.
func setUpPocketBase(c *http.Client, pb *pocketBase, suEmail, suPass string) (*pbInstance, error) {
	su, _, err := call(c, "POST", pb.URL+"/api/collections/_superusers/auth-with-password",
		map[string]string{"identity": suEmail, "password": suPass}, nil, 200)
	if err != nil {
		return nil, err
	}
	in := &pbInstance{pocketBase: pb}
	in.suToken, _ = su["token"].(string)
	userEmail, userPass := "user@bench.local", stack.Secret(12)
	if _, _, err := call(c, "POST", pb.URL+"/api/collections/users/records",
		map[string]string{"email": userEmail, "password": userPass, "passwordConfirm": userPass},
		map[string]string{"Authorization": in.suToken}, 200); err != nil {
		return nil, err
	}
	in.userCreds = map[string]string{"identity": userEmail, "password": userPass}
	ua, _, err := call(c, "POST", pb.URL+"/api/collections/users/auth-with-password", in.userCreds, nil, 200)
	if err != nil {
		return nil, err
	}
	in.userToken, _ = ua["token"].(string)
	rec, _ := ua["record"].(map[string]any)
	in.userID, _ = rec["id"].(string)
	if in.userToken == "" || in.userID == "" {
		return nil, fmt.Errorf("pocketbase auth-with-password: no token or record id in %v", ua)
	}
	return in, nil
}

// pbDocs is the collection of the file measures: one protected file field
// (a file token to download), records created and viewed by any signed-in
// user.
const pbDocs = "docs"

// createDocs creates the docs collection, and gives the users' file tokens
// an hour (180 s by default: less than a run of rounds).
func (in *pbInstance) createDocs(c *http.Client) error {
	su := map[string]string{"Authorization": in.suToken}
	if _, _, err := call(c, "POST", in.URL+"/api/collections", map[string]any{
		"name": pbDocs, "type": "base",
		"createRule": "@request.auth.id != ''", "viewRule": "@request.auth.id != ''",
		"fields": []map[string]any{{"name": "file", "type": "file", "maxSelect": 1, "maxSize": 1 << 20, "protected": true}},
	}, su, 200); err != nil {
		return err
	}
	_, _, err := call(c, "PATCH", in.URL+"/api/collections/users", map[string]any{"fileToken": map[string]any{"duration": 3600}}, su, 200)
	return err
}

// fileForm is a multipart form of one `file` part holding data.
func fileForm(name string, data []byte) ([]byte, string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	w, _ := mw.CreateFormFile("file", name)
	_, _ = w.Write(data)
	_ = mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

// post sends a prepared body of type ct and decodes the JSON answer.
func post(e *env, c *http.Client, url string, body []byte, ct string, hdr map[string]string, want int) (map[string]any, error) {
	h := map[string]string{"Content-Type": ct}
	for k, v := range hdr {
		h[k] = v
	}
	resp, err := send(e.ctx, c, "POST", url, body, h)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return nil, fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("POST %s: %q: %w", url, raw, err)
	}
	return m, nil
}

// fetchOnce downloads url and returns its Content-Encoding, failing unless
// the answer is 200 and, unencoded, size bytes.
func fetchOnce(e *env, c *http.Client, url string, hdr map[string]string, size int) (string, error) {
	resp, err := send(e.ctx, c, "GET", url, nil, hdr)
	if err != nil {
		return "", err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	enc := resp.Header.Get("Content-Encoding")
	if err != nil || resp.StatusCode != 200 || enc == "" && n != int64(size) {
		return "", fmt.Errorf("GET %s: %d, %d bytes (%q), %v", url, resp.StatusCode, n, enc, err)
	}
	return enc, nil
}

// benchPocketBaseFiles: 4 KiB uploads and downloads, the platform beside
// PocketBase (pb: files on its local disk; a second instance with its S3
// setting on the same MinIO) and beside raw minio-go PutObject, 8
// connections each, in alternating rounds, with the CPU per request of
// every process. raw makes a load function of the raw client; meHdr is the
// platform's session.
func benchPocketBaseFiles(e *env, bin string, c *http.Client, pb *pbInstance, meHdr map[string]string,
	raw func(method, url string, body []byte, hdr map[string]string, want, n int) (func(int) error, error)) error {
	const rounds, workers, size = 3, 8, 4 << 10
	suEmail, suPass := "root@bench.local", "pb"+stack.Secret(12)

	// PocketBase with its files in a bucket of its own on the platform's
	// MinIO (its S3 setting, path-style).
	mc, err := minio.New(e.servers.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.servers.S3Access, e.servers.S3Secret, "")})
	if err != nil {
		return err
	}
	const pbBucket, rawBucket = "pocketbase", "bench-raw-4k"
	for _, b := range []string{pbBucket, rawBucket} {
		if err := mc.MakeBucket(e.ctx, b, minio.MakeBucketOptions{}); err != nil {
			return fmt.Errorf("make bucket %s: %w", b, err)
		}
	}
	pb2proc, err := startPocketBase(e.ctx, bin, filepath.Join(e.tmp, "pocketbase-s3"), suEmail, suPass)
	if err != nil {
		return err
	}
	defer pb2proc.Stop()
	pb2, err := setUpPocketBase(c, pb2proc, suEmail, suPass)
	if err != nil {
		return err
	}
	if _, _, err := call(c, "PATCH", pb2.URL+"/api/settings", map[string]any{"s3": map[string]any{
		"enabled": true, "bucket": pbBucket, "region": "us-east-1", "endpoint": "http://" + e.servers.S3Endpoint,
		"accessKey": e.servers.S3Access, "secret": e.servers.S3Secret, "forcePathStyle": true,
	}}, map[string]string{"Authorization": pb2.suToken}, 200); err != nil {
		return err
	}
	for _, in := range []*pbInstance{pb, pb2} {
		if err := in.createDocs(c); err != nil {
			return err
		}
	}

	// CPU: each PocketBase is one process, the one on S3 charged with
	// MinIO's too; the platform is every other child of this process; raw
	// PutObject is MinIO's. The bench process (load generator, NATS) is
	// counted apart.
	plat := platformCPU(e, pb.Pid(), pb2.Pid())
	minioCPU := func() cpuSample { return cpuSample{"minio": plat()["minio"]} }
	pbLocalCPU := func() cpuSample { return samplePid(pb.Pid(), "pocketbase") }
	pbS3CPU := func() cpuSample {
		s := samplePid(pb2.Pid(), "pocketbase")
		s["minio"] = plat()["minio"]
		return s
	}

	// Uploads: 4 KiB of incompressible bytes, as one multipart part.
	data, _ := io.ReadAll(genReader(size))
	form, formCT := fileForm("bench.bin", data)
	pbUp := func(in *pbInstance) (func(int) error, error) {
		hdr := map[string]string{"Authorization": in.userToken}
		if _, err := post(e, c, in.URL+"/api/collections/"+pbDocs+"/records", form, formCT, hdr, 200); err != nil {
			return nil, err
		}
		hdr["Content-Type"] = formCT
		return raw("POST", in.URL+"/api/collections/"+pbDocs+"/records", form, hdr, 200, workers)
	}
	pbLocalUp, err := pbUp(pb)
	if err != nil {
		return err
	}
	pbS3Up, err := pbUp(pb2)
	if err != nil {
		return err
	}
	if objs := mc.ListObjects(e.ctx, pbBucket, minio.ListObjectsOptions{Recursive: true}); func() bool { _, ok := <-objs; return !ok }() {
		return fmt.Errorf("pocketbase with S3 set: nothing in bucket %s after a record with a file", pbBucket)
	}
	if _, err := post(e, c, e.p.GatewayURL+"/upload/file", form, formCT, meHdr, 201); err != nil {
		return err
	}
	upHdr := map[string]string{"Content-Type": formCT}
	for k, v := range meHdr {
		upHdr[k] = v
	}
	platUp, err := raw("POST", e.p.GatewayURL+"/upload/file", form, upHdr, 201, workers)
	if err != nil {
		return err
	}
	var seq atomic.Int64
	rawPut := func(int) error {
		_, err := mc.PutObject(e.ctx, rawBucket, fmt.Sprintf("put-%d", seq.Add(1)), bytes.NewReader(data), size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
		return err
	}
	var pbLocal, pbS3, up, put side
	if err := alternate(e, workers, rounds,
		leg{&pbLocal, pbLocalCPU, pbLocalUp}, leg{&pbS3, pbS3CPU, pbS3Up}, leg{&up, plat, platUp}, leg{&put, minioCPU, rawPut}); err != nil {
		return err
	}
	order := []string{"gateway", "auth", "files", "logs", "ferretdb", "minio"}
	e.report("pocketbase", fmt.Sprintf("PocketBase 4 KiB record+file create, local disk (%d conns)", workers), pbLocal.String(), "")
	e.report("pocketbase", fmt.Sprintf("PocketBase 4 KiB record+file create, S3 on the same MinIO (%d conns)", workers), pbS3.String(), "")
	e.report("pocketbase", fmt.Sprintf("platform 4 KiB POST /upload/file via gateway (%d conns)", workers), up.String(), "")
	e.report("pocketbase", fmt.Sprintf("raw minio-go PutObject 4 KiB (%d workers)", workers), put.String(), "")
	upRate := up.median().rps()
	r := upRate / pbS3.median().rps()
	e.report("pocketbase", "uploads/s platform ÷ PocketBase on the same MinIO", fmt.Sprintf("%.2f %s (paired rounds: %s)", r, mark(r >= 1.2), pairedRatio(up, pbS3)), ">= 1.2")
	e.report("pocketbase", "uploads/s platform ÷ PocketBase on its local disk", ratio(upRate, pbLocal.median().rps()), "report")
	e.report("pocketbase", "uploads/s platform ÷ raw PutObject (the bound)", ratio(upRate, put.median().rps()), "report")
	e.report("pocketbase", "uploads/s PocketBase on MinIO ÷ raw PutObject", ratio(pbS3.median().rps(), put.median().rps()), "")
	pbLocalC, _ := pbLocal.perRequest(nil)
	pbS3C, _ := pbS3.perRequest(order)
	upC, upTotal := up.perRequest(order)
	putC, _ := put.perRequest(order)
	e.report("pocketbase", "CPU/upload, PocketBase local disk", pbLocalC, "")
	e.report("pocketbase", "CPU/upload, PocketBase on MinIO", pbS3C, "")
	e.report("pocketbase", "CPU/upload, platform", upC, "")
	e.report("pocketbase", "CPU/PUT, raw PutObject", putC, "")
	e.report("pocketbase", "CPU/upload, platform (every process but the bench's)", fmt.Sprintf("%.2f ms %s", upTotal/1000, mark(upTotal <= 2500)), "<= 2.5 ms")
	e.report("pocketbase", "bench process CPU/request (load generator, NATS)", fmt.Sprintf("%.0f µs (PocketBase local) / %.0f (on MinIO) / %.0f (platform upload) / %.0f (raw PutObject), not counted",
		pbLocal.selfPerRequest(), pbS3.selfPerRequest(), up.selfPerRequest(), put.selfPerRequest()), "")

	// Downloads: a 4 KiB text file, which the files service stores
	// gzip-compressed and the gateway sends from its object cache, against
	// PocketBase's protected file on its local disk, fetched with a file
	// token.
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; ", size/45+1)[:size])
	tform, tformCT := fileForm("notes.txt", text)
	upd, err := post(e, c, e.p.GatewayURL+"/upload/file", tform, tformCT, meHdr, 201)
	if err != nil {
		return err
	}
	f, _ := upd["file"].(map[string]any)
	id, _ := f["id"].(string)
	if id == "" {
		return fmt.Errorf("upload 4 KiB text: no file id in %v", upd)
	}
	getURL := e.p.GatewayURL + "/download/file/" + id
	gzHdr := map[string]string{"Accept-Encoding": "gzip"}
	for k, v := range meHdr {
		gzHdr[k] = v
	}
	for range 2 { // as a user's repeated downloads: the second caches it
		if _, err := fetchOnce(e, c, getURL, meHdr, size); err != nil {
			return err
		}
		if enc, err := fetchOnce(e, c, getURL, gzHdr, size); err != nil || enc != "gzip" {
			return fmt.Errorf("download with Accept-Encoding: gzip: %q, %v", enc, err)
		}
	}
	rec, err := post(e, c, pb.URL+"/api/collections/"+pbDocs+"/records", tform, tformCT, map[string]string{"Authorization": pb.userToken}, 200)
	if err != nil {
		return err
	}
	recID, _ := rec["id"].(string)
	name, _ := rec["file"].(string)
	ft, _, err := call(c, "POST", pb.URL+"/api/files/token", nil, map[string]string{"Authorization": pb.userToken}, 200)
	if err != nil {
		return err
	}
	tok, _ := ft["token"].(string)
	pbURL := fmt.Sprintf("%s/api/files/%s/%s/%s?token=%s", pb.URL, pbDocs, recID, name, tok)
	if _, err := fetchOnce(e, c, strings.TrimSuffix(pbURL, tok), nil, size); err == nil {
		return fmt.Errorf("pocketbase protected file served without a token")
	}
	pbEnc, err := fetchOnce(e, c, pbURL, map[string]string{"Accept-Encoding": "gzip"}, size)
	if err != nil {
		return err
	}
	pbGet, err := raw("GET", pbURL, nil, map[string]string{"Accept-Encoding": "gzip"}, 200, workers)
	if err != nil {
		return err
	}
	plainGet, err := raw("GET", getURL, nil, meHdr, 200, workers)
	if err != nil {
		return err
	}
	gzGet, err := raw("GET", getURL, nil, gzHdr, 200, workers)
	if err != nil {
		return err
	}
	var pbDown, plain, gz side
	if err := alternate(e, workers, rounds, leg{&pbDown, pbLocalCPU, pbGet}, leg{&plain, plat, plainGet}, leg{&gz, plat, gzGet}); err != nil {
		return err
	}
	pbEncName := "identity"
	if pbEnc != "" {
		pbEncName = pbEnc
	}
	e.report("pocketbase", fmt.Sprintf("PocketBase 4 KiB protected file, local disk, ?token= (%d conns; sent %s)", workers, pbEncName), pbDown.String(), "")
	e.report("pocketbase", fmt.Sprintf("platform 4 KiB text GET /download/file/:id, no Accept-Encoding (%d conns)", workers), plain.String(), "")
	e.report("pocketbase", fmt.Sprintf("platform 4 KiB text GET /download/file/:id, Accept-Encoding: gzip (%d conns)", workers), gz.String(), "")
	match, matchName := plain, "no Accept-Encoding"
	if pbEnc == "gzip" {
		match, matchName = gz, "gzip"
	}
	r = match.median().rps() / pbDown.median().rps()
	e.report("pocketbase", fmt.Sprintf("downloads/s platform (%s, as PocketBase sends) ÷ PocketBase", matchName), fmt.Sprintf("%.2f %s (paired rounds: %s)", r, mark(r >= 1.5), pairedRatio(match, pbDown)), ">= 1.5")
	if pbEnc == "gzip" {
		e.report("pocketbase", "downloads/s platform (no Accept-Encoding) ÷ PocketBase", ratio(plain.median().rps(), pbDown.median().rps()), "")
	} else {
		e.report("pocketbase", "downloads/s platform (Accept-Encoding: gzip) ÷ PocketBase", ratio(gz.median().rps(), pbDown.median().rps()), "")
	}
	pbDownC, _ := pbDown.perRequest(nil)
	plainC, _ := plain.perRequest(order)
	gzC, _ := gz.perRequest(order)
	e.report("pocketbase", "CPU/download, PocketBase protected file", pbDownC, "")
	e.report("pocketbase", "CPU/download, platform, no Accept-Encoding", plainC, "")
	e.report("pocketbase", "CPU/download, platform, Accept-Encoding: gzip", gzC, "")
	e.report("pocketbase", "bench process CPU/request (load generator, NATS)", fmt.Sprintf("%.0f µs (PocketBase) / %.0f (platform) / %.0f (platform, gzip), not counted",
		pbDown.selfPerRequest(), plain.selfPerRequest(), gz.selfPerRequest()), "")
	return nil
}
