package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/scripts/stack"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// genReader is the benchmark's file content: size deterministic,
// incompressible bytes (so the files service stores them as is), generated on
// the fly and never held in memory.
func genReader(size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{'a', 'c', 'm', 'e'}), size)
}

// signInCookie signs the administrator in through the gateway.
func signInCookie(e *env) (string, error) {
	c := httpClient(4)
	_, h, err := call(c, "POST", e.p.GatewayURL+"/signin", map[string]string{"email": e.sec.AdminEmail, "password": e.sec.AdminPassword}, nil, 200)
	if err != nil {
		return "", err
	}
	for _, ck := range (&http.Response{Header: h}).Cookies() {
		if ck.Name == "sessionId" {
			return ck.Value, nil
		}
	}
	return "", fmt.Errorf("sign-in set no sessionId cookie")
}

// streamForm returns a multipart body with one `file` part whose content is
// src, written through a pipe as it is read.
func streamForm(name string, src io.Reader) (io.ReadCloser, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, err := mw.CreateFormFile("file", name)
		if err == nil {
			_, err = io.Copy(w, src)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, mw.FormDataContentType()
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// benchFiles: a BENCH_FILE_SIZE (default 256 MiB) upload and download through
// the gateway against raw minio-go PutObject/GetObject of the same bytes on
// the same MinIO, the gateway's and files' peak memory, and 12-megapixel
// JPEG re-encodes per second.
func benchFiles(e *env) error {
	size := int64(256 << 20)
	if s := os.Getenv("BENCH_FILE_SIZE"); s != "" {
		n, err := config.ParseSize(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("BENCH_FILE_SIZE: %q is not a size", s)
		}
		size = n
	}
	ctx := e.ctx
	cookie, err := signInCookie(e)
	if err != nil {
		return err
	}
	auth := map[string]string{"Cookie": "sessionId=" + cookie}

	// The expected digest, computed before anything is timed.
	h := sha256.New()
	if _, err := io.Copy(h, genReader(size)); err != nil {
		return err
	}
	want := hex.EncodeToString(h.Sum(nil))

	// Raw PutObject to a bucket of our own on the same MinIO.
	mc, err := minio.New(e.servers.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.servers.S3Access, e.servers.S3Secret, "")})
	if err != nil {
		return err
	}
	const rawBucket = "bench-raw"
	if ok, err := mc.BucketExists(ctx, rawBucket); err != nil {
		return err
	} else if !ok {
		if err := mc.MakeBucket(ctx, rawBucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	start := time.Now()
	if _, err := mc.PutObject(ctx, rawBucket, "raw-object", genReader(size), size, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("raw PutObject: %w", err)
	}
	rawPut := time.Since(start)
	e.report("files", fmt.Sprintf("raw minio-go PutObject, %s", mib(size)), fmt.Sprintf("%.0f MB/s (%s)", mbps(size, rawPut), rawPut.Round(time.Millisecond)), "")

	gwPID, filesPID := e.p.Procs["gateway"].Pid(), e.p.Procs["files"].Pid()
	// The peak of the upload alone, not of the sections run before it.
	for _, pid := range []int{gwPID, filesPID} {
		if err := stack.ResetPeakRSS(pid); err != nil {
			return err
		}
	}
	gwBefore, _ := stack.PeakRSS(gwPID)
	filesBefore, _ := stack.PeakRSS(filesPID)

	// The same bytes through the gateway as a streamed multipart upload.
	body, ct := streamForm("bench.bin", genReader(size))
	req, err := http.NewRequestWithContext(ctx, "POST", e.p.GatewayURL+"/upload/file", body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Cookie", "sessionId="+cookie)
	c := httpClient(8)
	c.Timeout = 30 * time.Minute
	start = time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	gwPut := time.Since(start)
	if resp.StatusCode != 201 {
		return fmt.Errorf("upload: %d %s", resp.StatusCode, raw)
	}
	var up struct {
		File struct {
			ID     string `json:"id"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
		} `json:"file"`
	}
	if err := json.Unmarshal(raw, &up); err != nil {
		return fmt.Errorf("upload answer %q: %w", raw, err)
	}
	intact := "intact"
	if up.File.Size != size || up.File.SHA256 != want {
		intact = fmt.Sprintf("CORRUPT (size %d, sha256 %s)", up.File.Size, up.File.SHA256)
	}
	e.report("files", "multipart upload through the gateway", fmt.Sprintf("%.0f MB/s (%s), %s", mbps(size, gwPut), gwPut.Round(time.Millisecond), intact), "")
	e.report("files", "upload throughput gateway ÷ raw PutObject", ratio(rawPut.Seconds(), gwPut.Seconds()), ">= 0.7")

	gwPeak, err := stack.PeakRSS(gwPID)
	if err != nil {
		return err
	}
	filesPeak, err := stack.PeakRSS(filesPID)
	if err != nil {
		return err
	}
	e.report("files", "gateway peak RSS (VmHWM) during the upload", fmt.Sprintf("%s (resident before it %s)", mib(gwPeak), mib(gwBefore)), "<= 64 MiB")
	e.report("files", "files peak RSS (VmHWM) during the upload", fmt.Sprintf("%s (resident before it %s)", mib(filesPeak), mib(filesBefore)), "<= 64 MiB")

	// Download through the gateway vs raw GetObject: three rounds,
	// alternating, best of each (both objects are then equally warm in
	// MinIO's page cache; a single run swings by a fifth on this machine).
	const rounds = 3
	gwGet, rawGet := time.Duration(1<<62), time.Duration(1<<62)
	for range rounds {
		start = time.Now()
		req, _ = http.NewRequestWithContext(ctx, "GET", e.p.GatewayURL+"/download/file/"+up.File.ID, nil)
		req.Header.Set("Cookie", "sessionId="+cookie)
		resp, err = c.Do(req)
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		gwGet = min(gwGet, time.Since(start))
		if err != nil || resp.StatusCode != 200 || n != size {
			return fmt.Errorf("download: %d, %d of %d bytes, %v", resp.StatusCode, n, size, err)
		}
		start = time.Now()
		obj, err := mc.GetObject(ctx, rawBucket, "raw-object", minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		n, err = io.Copy(io.Discard, obj)
		obj.Close()
		rawGet = min(rawGet, time.Since(start))
		if err != nil || n != size {
			return fmt.Errorf("raw GetObject: %d of %d bytes, %v", n, size, err)
		}
	}
	e.report("files", fmt.Sprintf("download through the gateway (best of %d)", rounds), fmt.Sprintf("%.0f MB/s (%s)", mbps(size, gwGet), gwGet.Round(time.Millisecond)), "")
	e.report("files", fmt.Sprintf("raw minio-go GetObject (best of %d)", rounds), fmt.Sprintf("%.0f MB/s (%s)", mbps(size, rawGet), rawGet.Round(time.Millisecond)), "")
	e.report("files", fmt.Sprintf("download throughput gateway ÷ raw GetObject, %s", mib(size)), ratio(rawGet.Seconds(), gwGet.Seconds()), ">= 0.8")
	gwPeak2, _ := stack.PeakRSS(gwPID)
	filesPeak2, _ := stack.PeakRSS(filesPID)
	e.report("files", "gateway / files peak RSS since the upload began, after the download", mib(gwPeak2)+" / "+mib(filesPeak2), "")
	_ = mc.RemoveObject(context.Background(), rawBucket, "raw-object", minio.RemoveObjectOptions{})

	if err := benchSmallDownloads(e, mc, rawBucket, auth); err != nil {
		return err
	}

	// 12-megapixel JPEGs posted to /upload/image: re-encodes per second.
	form, formCT, err := jpegForm(4000, 3000)
	if err != nil {
		return err
	}
	ic := httpClient(8)
	imgs := load(ctx, runtime.NumCPU(), e.seconds, func(int) error {
		hdr := map[string]string{"Content-Type": formCT}
		for k, v := range auth {
			hdr[k] = v
		}
		return hit(ic, "POST", e.p.GatewayURL+"/upload/image", form, hdr, 201)
	})
	e.report("files", fmt.Sprintf("12 MP JPEG (%s) re-encoded via /upload/image", mib(int64(len(form)))), imgs.String(), "")
	e.report("files", "images re-encoded per second (12 MP JPEG)", fmt.Sprintf("%.2f images/s (%d errors)", imgs.rps(), imgs.errs), "report")
	return nil
}

// benchSmallDownloads: 1 MiB files downloaded one at a time, and by 4
// clients at once, through the gateway (session, record lookup,
// authorization, the bytes sent by the gateway: docs/files.md, "Handoff")
// against raw GetObject of the same size on the same MinIO, in downloads per
// second. One file asked for again and again is sent from the gateway's
// object cache (docs/files.md, "Object cache"); coldFiles files in turn,
// more than the cache holds, are each fetched from MinIO (a second
// figure); and, as a diagnostic, straight from the files service.
func benchSmallDownloads(e *env, mc *minio.Client, rawBucket string, auth map[string]string) error {
	const size = 1 << 20
	const workers = 4
	const coldFiles = 48 // MiB: more than GATEWAY_OBJECT_CACHE_BYTES's 32 by default
	ctx := e.ctx
	c := httpClient(2 * workers)
	upload := func() (string, error) {
		return uploadThrough(e, c, auth, "small.bin", genReader(size))
	}
	hot, err := upload()
	if err != nil {
		return err
	}
	cold := make([]string, coldFiles)
	for i := range cold {
		if cold[i], err = upload(); err != nil {
			return err
		}
	}
	if _, err := mc.PutObject(ctx, rawBucket, "raw-small", genReader(size), size, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("raw PutObject 1 MiB: %w", err)
	}
	defer mc.RemoveObject(context.Background(), rawBucket, "raw-small", minio.RemoveObjectOptions{})
	get := func(url string) error { return download(ctx, c, url, auth, size) }
	rawGet := func(int) error {
		obj, err := mc.GetObject(ctx, rawBucket, "raw-small", minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		n, err := io.Copy(io.Discard, obj)
		obj.Close()
		if err != nil || n != size {
			return fmt.Errorf("raw GetObject 1 MiB: %d bytes, %v", n, err)
		}
		return nil
	}
	gw := func(int) error { return get(e.p.GatewayURL + "/download/file/" + hot) }
	var next atomic.Int64
	gwCold := func(int) error {
		return get(e.p.GatewayURL + "/download/file/" + cold[int(next.Add(1))%len(cold)])
	}
	for range 2 * len(cold) { // every cold file fetched twice: they are admitted to the cache, and push each other out
		if err := gwCold(0); err != nil {
			return err
		}
	}
	// The files service alone, with an identity token as the gateway signs
	// it: what the gateway's hop costs (a diagnostic, no target).
	filesDirect, err := directToFiles(e, c, auth, "/download/file/"+hot, size)
	if err != nil {
		return err
	}

	// One download at a time, as a user's download is: three alternating
	// rounds of each, the median round compared (the target).
	var via1, cold1, raw1, files1 side
	for range 3 {
		via1.rounds = append(via1.rounds, load(ctx, 1, e.seconds/3+time.Second, gw))
		raw1.rounds = append(raw1.rounds, load(ctx, 1, e.seconds/3+time.Second, rawGet))
		cold1.rounds = append(cold1.rounds, load(ctx, 1, e.seconds/3+time.Second, gwCold))
		files1.rounds = append(files1.rounds, load(ctx, 1, e.seconds/3+time.Second, filesDirect))
	}
	e.report("files", "1 MiB downloads through the gateway, one at a time (the same file: object cache)", via1.String(), "")
	e.report("files", fmt.Sprintf("1 MiB downloads through the gateway, one at a time (%d files in turn: each from MinIO)", coldFiles), cold1.String(), "")
	e.report("files", "1 MiB raw minio-go GetObject, one at a time", raw1.String(), "")
	e.report("files", "1 MiB downloads directly from files (no gateway), one at a time", files1.String(), "")
	e.report("files", "1 MiB downloads/s, directly from files ÷ raw GetObject", ratio(files1.median().rps(), raw1.median().rps()), "report")
	e.report("files", "1 MiB downloads/s, gateway fetching each from MinIO ÷ raw GetObject", ratio(cold1.median().rps(), raw1.median().rps()), "report")
	e.report("files", "download throughput gateway ÷ raw GetObject, 1 MiB", ratio(via1.median().rps(), raw1.median().rps()), ">= 0.8")

	// Four at once saturate this machine's cores: what each costs, per
	// process (the raw path is MinIO alone; ours adds the gateway's hop,
	// which copies the bytes once more (with handoff; twice without), the
	// session and record lookups and the files service's authorization).
	sample := platformCPU(e)
	self := func() cpuSample { return samplePid(os.Getpid(), "bench") }
	cpuVia, cpuDirect := cpuSample{}, cpuSample{}
	before, selfBefore := sample(), self()
	via := load(ctx, workers, e.seconds, gw)
	cpuVia.add(before, sample())
	cpuVia.add(selfBefore, self())
	before, selfBefore = sample(), self()
	direct := load(ctx, workers, e.seconds, rawGet)
	cpuDirect.add(before, sample())
	cpuDirect.add(selfBefore, self())
	order := []string{"gateway", "files", "ferretdb", "minio", "bench"}
	viaCPU, _ := cpuVia.perRequest(via.n, order)
	directCPU, _ := cpuDirect.perRequest(direct.n, order)
	e.report("files", "1 MiB downloads through the gateway, 4 at once", via.String(), "")
	e.report("files", "1 MiB raw minio-go GetObject, 4 at once", direct.String(), "")
	e.report("files", "1 MiB downloads/s, 4 at once, gateway ÷ raw (cores saturated)", ratio(via.rps(), direct.rps()), "report")
	e.report("files", "CPU per 1 MiB download through the gateway", viaCPU, "")
	e.report("files", "CPU per 1 MiB raw GetObject", directCPU, "")
	return nil
}

// jpegForm makes a multipart form holding a w×h JPEG with some detail (a
// gradient and noise, so it is not trivially compressible).
func jpegForm(w, h int) ([]byte, string, error) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	rnd := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			n := uint8(rnd.IntN(32))
			img.SetRGBA(x, y, color.RGBA{uint8(x*255/w) ^ n, uint8(y*255/h) + n, uint8((x+y)/16) ^ n, 255})
		}
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", "photo.jpg")
	if err != nil {
		return nil, "", err
	}
	if err := jpeg.Encode(fw, img, &jpeg.Options{Quality: 90}); err != nil {
		return nil, "", err
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

// directToFiles returns a download of path straight from the files service,
// skipping the gateway: the signed-in user's id (GET /me through the
// gateway) in an identity token signed as the gateway signs it, renewed well
// before it expires.
func directToFiles(e *env, c *http.Client, auth map[string]string, path string, size int64) (func(int) error, error) {
	me, _, err := call(c, "GET", e.p.GatewayURL+"/me", nil, auth, 200)
	if err != nil {
		return nil, err
	}
	user, _ := me["user"].(map[string]any)
	uid, _ := user["id"].(string)
	role, _ := user["role"].(string)
	if role == "" {
		role = identity.RoleAdmin // the benchmark signs in as the administrator
	}
	key, err := identity.ParsePrivateKey(e.sec.IdentityPrivatePEM)
	if err != nil {
		return nil, err
	}
	signer := identity.NewSigner(key, 10*time.Minute)
	var tok string
	var signed time.Time
	url := "http://" + e.p.Procs["files"].Addr + path
	get := func(int) error {
		if time.Since(signed) > time.Minute {
			var serr error
			if tok, serr = signer.Sign(identity.Claims{Role: role, ClientIP: "127.0.0.1", RegisteredClaims: subject(uid)}, "files"); serr != nil {
				return serr
			}
			signed = time.Now()
		}
		return download(e.ctx, c, url, map[string]string{identity.Header: tok}, size)
	}
	return get, get(0)
}

// download GETs url with the headers hdr and reads the answer, which must
// be a 200 of size bytes.
func download(ctx context.Context, c *http.Client, url string, hdr map[string]string, size int64) error {
	resp, err := send(ctx, c, "GET", url, nil, hdr)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || n != size {
		return fmt.Errorf("download %s: %d, %d bytes of %d, %v", url, resp.StatusCode, n, size, err)
	}
	return nil
}

// uploadThrough uploads src as one file through the gateway with the
// headers auth (the session) and returns the new file's id.
func uploadThrough(e *env, c *http.Client, auth map[string]string, name string, src io.Reader) (string, error) {
	body, ct := streamForm(name, src)
	req, err := http.NewRequestWithContext(e.ctx, "POST", e.p.GatewayURL+"/upload/file", body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", ct)
	for k, v := range auth {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", name, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var up struct {
		File struct {
			ID string `json:"id"`
		} `json:"file"`
	}
	if resp.StatusCode != 201 || json.Unmarshal(raw, &up) != nil || up.File.ID == "" {
		return "", fmt.Errorf("upload %s: %d %s", name, resp.StatusCode, raw)
	}
	return up.File.ID, nil
}
