package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/pkg/config"
	"github.com/acme/platform/pkg/testkit"
	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestMain(m *testing.M) { testkit.Main(m) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// job is one deployment's settings for the program, secrets in files.
type job struct {
	t      *testing.T
	s      *testkit.Servers
	dir    string
	env    map[string]string
	bucket string
	policy string
	user   string
	root   *madmin.AdminClient
}

// newJob picks a bucket, policy and user of this test's own and removes
// them at the end (the MinIO server is shared by the package's tests).
func newJob(t *testing.T) *job {
	t.Helper()
	s := testkit.Get(t, testkit.S3)
	j := &job{
		t:      t,
		s:      s,
		dir:    t.TempDir(),
		bucket: testkit.Name(t),
		policy: "acme-files-" + randHex(4),
		user:   "files-" + randHex(4),
	}
	var err error
	j.root, err = madmin.NewWithOptions(s.S3Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(s.S3Access, s.S3Secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	j.env = map[string]string{
		"S3_ENDPOINT":              s.S3Endpoint,
		"S3_ROOT_USER":             s.S3Access,
		"S3_ROOT_PASSWORD_FILE":    j.secretFile("root_password", s.S3Secret),
		"S3_BUCKET":                j.bucket,
		"S3_FILES_ACCESS_KEY_FILE": j.secretFile("files_access_key", j.user+"\n"),
		"S3_FILES_POLICY":          j.policy,
	}
	j.setSecret(randHex(16))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = j.root.RemoveUser(ctx, j.user)
		_ = j.root.RemoveCannedPolicy(ctx, j.policy)
		if ok, _ := s.S3.BucketExists(ctx, j.bucket); !ok {
			return
		}
		objs := s.S3.ListObjects(ctx, j.bucket, minio.ListObjectsOptions{Recursive: true})
		for e := range s.S3.RemoveObjects(ctx, j.bucket, objs, minio.RemoveObjectsOptions{}) {
			t.Logf("remove object %s: %v", e.ObjectName, e.Err)
		}
		_ = s.S3.RemoveBucket(ctx, j.bucket)
	})
	return j
}

func (j *job) secretFile(name, value string) string {
	p := filepath.Join(j.dir, name)
	if err := os.WriteFile(p, []byte(value), 0o600); err != nil {
		j.t.Fatal(err)
	}
	return p
}

// setSecret writes the files user's secret key, as compose would mount it.
func (j *job) setSecret(secret string) string {
	j.env["S3_FILES_SECRET_KEY_FILE"] = j.secretFile("files_secret_key", secret)
	return secret
}

func (j *job) secret() string {
	b, err := os.ReadFile(j.env["S3_FILES_SECRET_KEY_FILE"])
	if err != nil {
		j.t.Fatal(err)
	}
	return string(b)
}

// run runs the program and returns its exit code, stdout and stderr; no
// output may contain a secret.
func (j *job) run() (int, string, string) {
	j.t.Helper()
	var out, errb bytes.Buffer
	code := cli(nil, func(k string) string { return j.env[k] }, &out, &errb)
	for _, secret := range []string{j.s.S3Secret, j.secret()} {
		if strings.Contains(out.String()+errb.String(), secret) {
			j.t.Fatalf("output shows a secret:\n%s%s", out.String(), errb.String())
		}
	}
	return code, out.String(), errb.String()
}

// mustRun runs the program, which must succeed with one line of output.
func (j *job) mustRun() string {
	j.t.Helper()
	code, out, errOut := j.run()
	if code != 0 || errOut != "" || strings.Count(out, "\n") != 1 {
		j.t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	j.t.Logf("%s", strings.TrimSpace(out))
	return out
}

// client is a minio-go client as the files service makes it
// (services/files/internal/s3store) with the given credentials.
func (j *job) client(access, secret string) *minio.Client {
	j.t.Helper()
	c, err := minio.New(j.s.S3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), MaxRetries: 1})
	if err != nil {
		j.t.Fatal(err)
	}
	return c
}

func wantCode(t *testing.T, what string, err error, codes ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want %v", what, codes)
		return
	}
	code := minio.ToErrorResponse(err).Code
	if code == "" {
		code = adminCode(err)
	}
	if !slices.Contains(codes, code) {
		t.Errorf("%s: %v (code %q), want %v", what, err, code, codes)
	}
}

func TestSetupGivesTheFilesUserItsBucketOnly(t *testing.T) {
	j := newJob(t)
	ctx := context.Background()

	first := j.mustRun()
	for _, want := range []string{
		"bucket " + j.bucket + " created",
		"policy " + j.policy + " created",
		"user " + j.user + " created, policy attached",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("first run %q lacks %q", first, want)
		}
	}
	second := j.mustRun()
	for _, want := range []string{
		"bucket " + j.bucket + " exists",
		"policy " + j.policy + " unchanged",
		"user " + j.user + " updated, policy already attached",
	} {
		if !strings.Contains(second, want) {
			t.Errorf("second run %q lacks %q", second, want)
		}
	}

	info, err := j.root.GetUserInfo(ctx, j.user)
	if err != nil {
		t.Fatal(err)
	}
	if info.PolicyName != j.policy || info.Status != madmin.AccountEnabled {
		t.Errorf("user: policies %q, status %q; want only %q, enabled", info.PolicyName, info.Status, j.policy)
	}

	c := j.client(j.user, j.secret())
	core := minio.Core{Client: c}

	// Everything the files service does, on its bucket.
	t.Run("own bucket", func(t *testing.T) {
		if ok, err := c.BucketExists(ctx, j.bucket); err != nil || !ok {
			t.Fatalf("BucketExists: %v, %v", ok, err)
		}
		small := []byte("hello")
		if _, err := c.PutObject(ctx, j.bucket, "f/small", bytes.NewReader(small), int64(len(small)),
			minio.PutObjectOptions{ContentType: "text/plain"}); err != nil {
			t.Fatalf("PutObject: %v", err)
		}
		// An upload of unknown size, streamed in parts as s3store does.
		big := bytes.Repeat([]byte("0123456789abcdef"), (11<<20)/16)
		if _, err := c.PutObject(ctx, j.bucket, "f/big", bytes.NewReader(big), -1, minio.PutObjectOptions{
			PartSize: 5 << 20, NumThreads: 2, ConcurrentStreamParts: true,
		}); err != nil {
			t.Fatalf("PutObject multipart: %v", err)
		}
		var opts minio.GetObjectOptions
		_ = opts.SetRange(1, 3)
		body, _, _, err := core.GetObject(ctx, j.bucket, "f/small", opts)
		if err != nil {
			t.Fatalf("GetObject: %v", err)
		}
		got, err := io.ReadAll(body)
		body.Close()
		if err != nil || string(got) != "ell" {
			t.Fatalf("GetObject range: %q, %v", got, err)
		}
		if st, err := c.StatObject(ctx, j.bucket, "f/big", minio.StatObjectOptions{}); err != nil || st.Size != int64(len(big)) {
			t.Fatalf("StatObject: %d, %v", st.Size, err)
		}
		var keys []string
		for o := range c.ListObjectsIter(ctx, j.bucket, minio.ListObjectsOptions{Prefix: "f/", Recursive: true}) {
			if o.Err != nil {
				t.Fatalf("ListObjects: %v", o.Err)
			}
			keys = append(keys, o.Key)
		}
		if !slices.Equal(keys, []string{"f/big", "f/small"}) {
			t.Fatalf("ListObjects: %q", keys)
		}
		// A failed streamed upload is aborted.
		id, err := core.NewMultipartUpload(ctx, j.bucket, "f/aborted", minio.PutObjectOptions{})
		if err != nil {
			t.Fatalf("NewMultipartUpload: %v", err)
		}
		if err := core.AbortMultipartUpload(ctx, j.bucket, "f/aborted", id); err != nil {
			t.Fatalf("AbortMultipartUpload: %v", err)
		}
		for _, k := range keys {
			if err := c.RemoveObject(ctx, j.bucket, k, minio.RemoveObjectOptions{}); err != nil {
				t.Fatalf("RemoveObject: %v", err)
			}
		}
		_, err = c.StatObject(ctx, j.bucket, "f/small", minio.StatObjectOptions{})
		wantCode(t, "StatObject of a removed object", err, "NoSuchKey")
		// Nothing beyond the objects: not the bucket itself.
		wantCode(t, "RemoveBucket", c.RemoveBucket(ctx, j.bucket), "AccessDenied")
		wantCode(t, "SetBucketPolicy", c.SetBucketPolicy(ctx, j.bucket, `{"Version":"2012-10-17","Statement":[]}`), "AccessDenied")
	})

	// The same calls on a bucket root made: all refused, nothing changed.
	t.Run("other bucket", func(t *testing.T) {
		other := j.s.Bucket(t)
		if _, err := j.s.S3.PutObject(ctx, other, "k", strings.NewReader("root's"), 6, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := c.BucketExists(ctx, other)
		wantCode(t, "BucketExists", err, "AccessDenied")
		_, err = c.PutObject(ctx, other, "x", strings.NewReader("x"), 1, minio.PutObjectOptions{})
		wantCode(t, "PutObject", err, "AccessDenied")
		_, _, _, err = core.GetObject(ctx, other, "k", minio.GetObjectOptions{})
		wantCode(t, "GetObject", err, "AccessDenied")
		_, err = c.StatObject(ctx, other, "k", minio.StatObjectOptions{})
		wantCode(t, "StatObject", err, "AccessDenied")
		err = nil
		for o := range c.ListObjectsIter(ctx, other, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				t.Errorf("ListObjects lists %q", o.Key)
				continue
			}
			err = o.Err
		}
		wantCode(t, "ListObjects", err, "AccessDenied")
		wantCode(t, "RemoveObject", c.RemoveObject(ctx, other, "k", minio.RemoveObjectOptions{}), "AccessDenied")
		_, err = core.NewMultipartUpload(ctx, other, "m", minio.PutObjectOptions{})
		wantCode(t, "NewMultipartUpload", err, "AccessDenied")
		if _, err := j.s.S3.StatObject(ctx, other, "k", minio.StatObjectOptions{}); err != nil {
			t.Errorf("root's object after the refused calls: %v", err)
		}
		buckets, err := c.ListBuckets(ctx)
		if err == nil {
			for _, b := range buckets {
				if b.Name != j.bucket {
					t.Errorf("ListBuckets shows %s", b.Name)
				}
			}
		} else {
			wantCode(t, "ListBuckets", err, "AccessDenied")
		}
	})

	t.Run("new bucket", func(t *testing.T) {
		name := testkit.Name(t)
		err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{})
		wantCode(t, "MakeBucket", err, "AccessDenied")
		if err == nil {
			_ = j.s.S3.RemoveBucket(ctx, name)
		}
	})

	t.Run("admin API", func(t *testing.T) {
		adm, err := madmin.NewWithOptions(j.s.S3Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(j.user, j.secret(), "")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = adm.ListUsers(ctx)
		wantCode(t, "ListUsers", err, "AccessDenied")
		wantCode(t, "AddUser", adm.AddUser(ctx, "intruder"+randHex(2), randHex(16)), "AccessDenied")
		wantCode(t, "AddCannedPolicy", adm.AddCannedPolicy(ctx, j.policy, []byte(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::*"]}]}`)), "AccessDenied")
		_, err = adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{"consoleAdmin"}, User: j.user})
		wantCode(t, "AttachPolicy", err, "AccessDenied")
		_, err = adm.ServerInfo(ctx)
		wantCode(t, "ServerInfo", err, "AccessDenied")
	})
}

// TestSetupRepairs: a changed secret takes effect, the old one stops
// working; a disabled user is enabled again, other policies are detached
// and an edited policy is put back.
func TestSetupRepairs(t *testing.T) {
	j := newJob(t)
	ctx := context.Background()
	j.mustRun()
	old := j.secret()
	if _, err := j.client(j.user, old).BucketExists(ctx, j.bucket); err != nil {
		t.Fatal(err)
	}

	fresh := j.setSecret(randHex(16))
	// The user has readwrite instead of its policy, and is disabled.
	// (MinIO attaches policies to enabled users only: attach, then disable.)
	if _, err := j.root.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{"readwrite"}, User: j.user}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.root.DetachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{j.policy}, User: j.user}); err != nil {
		t.Fatal(err)
	}
	if err := j.root.SetUserStatus(ctx, j.user, madmin.AccountDisabled); err != nil {
		t.Fatal(err)
	}
	wide := filesPolicy("*")
	doc, _ := json.Marshal(wide)
	if err := j.root.AddCannedPolicy(ctx, j.policy, doc); err != nil {
		t.Fatal(err)
	}

	out := j.mustRun()
	for _, want := range []string{
		"policy " + j.policy + " updated",
		"user " + j.user + " updated, detached readwrite, policy attached",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%q lacks %q", out, want)
		}
	}
	_, err := j.client(j.user, old).BucketExists(ctx, j.bucket)
	wantCode(t, "the old secret", err, "SignatureDoesNotMatch", "InvalidAccessKeyId")
	c := j.client(j.user, fresh)
	if ok, err := c.BucketExists(ctx, j.bucket); err != nil || !ok {
		t.Fatalf("the new secret: %v, %v", ok, err)
	}
	info, err := j.root.GetUserInfo(ctx, j.user)
	if err != nil {
		t.Fatal(err)
	}
	if info.PolicyName != j.policy || info.Status != madmin.AccountEnabled {
		t.Errorf("user: policies %q, status %q; want only %q, enabled", info.PolicyName, info.Status, j.policy)
	}
	stored, err := j.root.InfoCannedPolicyV2(ctx, j.policy)
	if err != nil {
		t.Fatal(err)
	}
	if !samePolicy(stored.Policy, filesPolicy(j.bucket)) {
		t.Errorf("policy after the run: %s", stored.Policy)
	}
	// The readwrite policy is gone: other buckets are closed again.
	other := j.s.Bucket(t)
	_, err = c.BucketExists(ctx, other)
	wantCode(t, "BucketExists on another bucket", err, "AccessDenied")
}

// TestSetupWaitsForMinIO: MinIO answers 503 (starting) for a while, then
// serves; the job waits for it.
func TestSetupWaitsForMinIO(t *testing.T) {
	j := newJob(t)
	target, _ := url.Parse("http://" + j.s.S3Endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target) // keeps the Host header, so signatures hold
	var refused atomic.Int32
	ready := time.Now().Add(1500 * time.Millisecond)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().Before(ready) {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>XMinioServerNotInitialized</Code><Message>Server not initialized yet, please try again.</Message></Error>`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	j.env["S3_ENDPOINT"] = strings.TrimPrefix(srv.URL, "http://")
	start := time.Now()
	out := j.mustRun()
	if refused.Load() < 2 || time.Since(start) < 1500*time.Millisecond {
		t.Errorf("finished after %s and %d refused requests: did not wait", time.Since(start), refused.Load())
	}
	if !strings.Contains(out, "bucket "+j.bucket+" created") {
		t.Errorf("output %q", out)
	}
}

// TestSetupGivesUp: no MinIO at all: a clear error after S3_SETUP_TIMEOUT.
func TestSetupGivesUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var out, errb bytes.Buffer
	env := map[string]string{
		"S3_ENDPOINT": addr, "S3_ROOT_USER": "root", "S3_ROOT_PASSWORD": "rootpassword",
		"S3_FILES_ACCESS_KEY": "files", "S3_FILES_SECRET_KEY": "filessecret", "S3_SETUP_TIMEOUT": "2s",
	}
	start := time.Now()
	code := cli(nil, func(k string) string { return env[k] }, &out, &errb)
	took := time.Since(start)
	if code != 1 || out.Len() != 0 || !strings.Contains(errb.String(), "did not answer within") ||
		!strings.Contains(errb.String(), "S3_SETUP_TIMEOUT") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out.String(), errb.String())
	}
	if took < 2*time.Second || took > 15*time.Second {
		t.Errorf("gave up after %s, want about 2s", took)
	}
	t.Log(strings.TrimSpace(errb.String()))
}

// TestSetupWrongRootCredentials fails at once, saying which setting.
func TestSetupWrongRootCredentials(t *testing.T) {
	j := newJob(t)
	j.env["S3_ROOT_PASSWORD_FILE"] = j.secretFile("root_password", "not-the-password")
	start := time.Now()
	code, out, errOut := j.run()
	if code != 1 || out != "" || !strings.Contains(errOut, "S3_ROOT_PASSWORD") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %s: a refused login is not worth waiting for", time.Since(start))
	}
	if strings.Contains(errOut, "not-the-password") {
		t.Errorf("stderr shows the password: %s", errOut)
	}
	t.Log(strings.TrimSpace(errOut))
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	base := func() map[string]string {
		return map[string]string{
			"S3_ENDPOINT": "minio:9000", "S3_ROOT_USER": "root", "S3_ROOT_PASSWORD": "rootpassword",
			"S3_FILES_ACCESS_KEY": "files", "S3_FILES_SECRET_KEY": "filessecret",
		}
	}
	for _, c := range []struct {
		name string
		edit func(map[string]string)
		want []string
	}{
		{"nothing set", func(e map[string]string) { clear(e) }, []string{
			"S3_ROOT_USER (or S3_ROOT_USER_FILE) is required", "S3_ROOT_PASSWORD (or S3_ROOT_PASSWORD_FILE) is required",
			"S3_FILES_ACCESS_KEY (or S3_FILES_ACCESS_KEY_FILE) is required", "S3_FILES_SECRET_KEY (or S3_FILES_SECRET_KEY_FILE) is required",
		}},
		{"root credentials for files", func(e map[string]string) { e["S3_FILES_ACCESS_KEY"] = "root" }, []string{"must differ from S3_ROOT_USER"}},
		{"short secret", func(e map[string]string) { e["S3_FILES_SECRET_KEY"] = "short" }, []string{"S3_FILES_SECRET_KEY must be at least 8 characters"}},
		{"reserved character", func(e map[string]string) { e["S3_FILES_ACCESS_KEY"] = "a=b" }, []string{"without '=' or ','"}},
		{"bad bucket", func(e map[string]string) { e["S3_BUCKET"] = "Files_Bucket" }, []string{`S3_BUCKET "Files_Bucket"`}},
		{"URL endpoint", func(e map[string]string) { e["S3_ENDPOINT"] = "http://minio:9000" }, []string{"must be host:port"}},
		{"bad bool", func(e map[string]string) { e["S3_USE_TLS"] = "sure" }, []string{"S3_USE_TLS"}},
		{"bad timeout", func(e map[string]string) { e["S3_SETUP_TIMEOUT"] = "-1s" }, []string{"S3_SETUP_TIMEOUT must be positive"}},
		{"missing secret file", func(e map[string]string) {
			delete(e, "S3_FILES_SECRET_KEY")
			e["S3_FILES_SECRET_KEY_FILE"] = filepath.Join(dir, "absent")
		}, []string{"S3_FILES_SECRET_KEY_FILE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := base()
			c.edit(env)
			var out, errb bytes.Buffer
			code := cli(nil, func(k string) string { return env[k] }, &out, &errb)
			if code != 1 || out.Len() != 0 {
				t.Fatalf("exit %d, stdout %q", code, out.String())
			}
			for _, w := range c.want {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr %q lacks %q", errb.String(), w)
				}
			}
			if strings.Contains(errb.String(), "rootpassword") || strings.Contains(errb.String(), "filessecret") {
				t.Errorf("stderr shows a secret: %s", errb.String())
			}
		})
	}
	t.Run("arguments", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := cli([]string{"server", "/data"}, envMap(base()).Get, &out, &errb); code != 2 || !strings.Contains(errb.String(), "takes no arguments") {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	})
}

func TestFilesPolicy(t *testing.T) {
	doc, err := json.Marshal(filesPolicy("acme-files"))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"Version":"2012-10-17","Statement":[` +
		`{"Sid":"FilesBucket","Effect":"Allow","Action":["s3:GetBucketLocation","s3:ListBucket"],"Resource":["arn:aws:s3:::acme-files"]},` +
		`{"Sid":"FilesObjects","Effect":"Allow","Action":["s3:AbortMultipartUpload","s3:DeleteObject","s3:GetObject","s3:PutObject"],"Resource":["arn:aws:s3:::acme-files/*"]}]}`
	if string(doc) != want {
		t.Errorf("policy\n%s\nwant\n%s", doc, want)
	}
	p := filesPolicy("b")
	if !samePolicy([]byte(`{"Version":"2012-10-17","Statement":[
		{"Sid":"FilesObjects","Effect":"Allow","Action":["s3:PutObject","s3:GetObject","s3:DeleteObject","s3:AbortMultipartUpload"],"Resource":["arn:aws:s3:::b/*"]},
		{"Sid":"FilesBucket","Effect":"Allow","Action":["s3:ListBucket","s3:GetBucketLocation"],"Resource":["arn:aws:s3:::b"]}]}`), p) {
		t.Error("the same policy in another order differs")
	}
	for _, other := range []string{
		`{"Version":"2012-10-17","Statement":[{"Sid":"FilesBucket","Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::b"]}]}`,
		`{"Version":"2012-10-17","Statement":[
			{"Sid":"FilesObjects","Effect":"Allow","Action":["s3:PutObject","s3:GetObject","s3:DeleteObject","s3:AbortMultipartUpload"],"Resource":["arn:aws:s3:::b/*"],"Condition":{"IpAddress":{"aws:SourceIp":["10.0.0.0/8"]}}},
			{"Sid":"FilesBucket","Effect":"Allow","Action":["s3:ListBucket","s3:GetBucketLocation"],"Resource":["arn:aws:s3:::b"]}]}`,
		`not json`,
	} {
		if samePolicy([]byte(other), p) {
			t.Errorf("%s counted as the same", other)
		}
	}
}

// Get lets a map serve as the environment.
type envMap map[string]string

func (e envMap) Get(k string) string { return e[k] }

// TestConfigurationReference fails when docs/configuration.md's s3setup
// table differs from Settings (go run ./scripts/configdoc rewrites it).
func TestConfigurationReference(t *testing.T) {
	if err := Settings.Check(); err != nil {
		t.Fatal(err)
	}
	err := config.SyncReference("../../docs/configuration.md", "s3setup", config.Reference("", Settings), config.WriteReference())
	if err != nil {
		t.Fatal(err)
	}
}
