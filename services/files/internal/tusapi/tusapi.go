// Package tusapi serves resumable uploads with the tus 1.0 protocol (core,
// creation, termination, expiration) at /uploads/, on tusd and its S3
// store. It is a plain net/http handler on a listener of its own: Fiber's
// net/http adaptor would buffer every PATCH body in memory.
//
// Every request carries the identity token, checked here; an upload
// belongs to the user who created it (others get 404). A finished upload
// is read once, stored like POST /upload/file (type sniffed, SHA-256,
// size, compression) under its upload id, recorded, and its tus objects
// removed. Uploads not finished within the expiry are terminated by Sweep.
package tusapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/services/files/internal/files"
	"github.com/acme/platform/services/files/internal/httpapi"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/tus/tusd/v2/pkg/handler"
	"github.com/tus/tusd/v2/pkg/memorylocker"
	"github.com/tus/tusd/v2/pkg/s3store"
	xslog "golang.org/x/exp/slog"
)

// BasePath is where uploads are served.
const BasePath = "/uploads/"

// Prefix is the key prefix of upload objects in the bucket (outside the
// files/ and images/ prefixes the orphan sweep looks at).
const Prefix = "uploads/"

// Metadata keys the service sets itself (a client's values are dropped).
const (
	metaOwner   = "acme-owner"
	metaExpires = "acme-expires"
)

// Options configure the tus server.
type Options struct {
	Service  *files.Service
	Verifier *identity.Verifier
	Log      *slog.Logger
	// PublicBaseURL starts the upload URLs given in Location.
	PublicBaseURL string
	// S3 access to the files bucket.
	Endpoint, AccessKey, SecretKey, Bucket string
	UseTLS                                 bool
	MaxSize                                int64         // bytes of one upload (FILES_MAX_UPLOAD)
	MaxMeta                                int           // bytes of the meta value
	Expiry                                 time.Duration // an upload not finished by then is removed
	// PartSize is the S3 part size (at least 5 MiB); parts are buffered in
	// temporary files, not in memory.
	PartSize int64
}

// Server is the tus endpoint.
type Server struct {
	o     Options
	store s3store.S3Store
	tus   *handler.Handler
	now   func() time.Time
}

type ownerKey struct{}

// New builds the server.
func New(o Options) (*Server, error) {
	if o.Expiry <= 0 {
		o.Expiry = 24 * time.Hour
	}
	scheme := "http://"
	if o.UseTLS {
		scheme = "https://"
	}
	client := s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(scheme + o.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	store := s3store.New(o.Bucket, client)
	store.ObjectPrefix = Prefix
	if o.PartSize >= 5<<20 {
		store.PreferredPartSize = o.PartSize
	}
	store.MaxBufferedParts = 2
	store.SetConcurrentPartUploads(2)
	composer := handler.NewStoreComposer()
	composer.UseCore(store)
	composer.UseTerminater(store)
	composer.UseLocker(memorylocker.New())
	if o.Log == nil {
		o.Log = slog.Default()
	}
	s := &Server{o: o, store: store, now: time.Now}
	h, err := handler.NewHandler(handler.Config{
		StoreComposer:             composer,
		BasePath:                  strings.TrimRight(o.PublicBaseURL, "/") + BasePath,
		MaxSize:                   o.MaxSize,
		DisableDownload:           true,
		DisableConcatenation:      true,
		Cors:                      &handler.CorsConfig{Disable: true},
		Logger:                    xslog.New(xslog.NewTextHandler(io.Discard, nil)), // errors are logged by ServeHTTP
		PreUploadCreateCallback:   s.preCreate,
		PreFinishResponseCallback: s.finish,
	})
	if err != nil {
		return nil, err
	}
	s.tus = h
	return s, nil
}

// ServeHTTP checks the identity and the upload's owner and expiry, then
// hands the request to tusd; its plain-text errors are answered as the
// service's JSON errors.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	jw := &jsonErrors{ResponseWriter: w, log: s.o.Log, r: r}
	defer jw.finish()
	w = jw
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
		return
	}
	if r.URL.Path != strings.TrimSuffix(BasePath, "/") && !strings.HasPrefix(r.URL.Path, BasePath) {
		writeErr(w, http.StatusNotFound, "not_found", "no such route")
		return
	}
	claims, err := s.o.Verifier.Verify(r.Header.Get(identity.Header))
	if err != nil {
		writeErr(w, http.StatusUnauthorized, "identity_required", "requests must come through the gateway with a valid identity token")
		return
	}
	if !claims.Authenticated() {
		writeErr(w, http.StatusUnauthorized, "unauthenticated", "a valid session is required")
		return
	}
	owner := claims.UserID()
	if r.Method == http.MethodPost && r.Header.Get("Upload-Defer-Length") != "" {
		writeErr(w, http.StatusBadRequest, "invalid_upload_length", "Upload-Length is required: uploads of deferred length are not supported")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner))
	if id := strings.TrimPrefix(r.URL.Path, BasePath); id != "" && id != r.URL.Path && r.Method != http.MethodOptions {
		info, err := s.info(r.Context(), id)
		switch {
		case errors.Is(err, handler.ErrNotFound):
			writeErr(w, http.StatusNotFound, "not_found", "upload not found")
			return
		case err != nil:
			s.o.Log.ErrorContext(r.Context(), "tus upload info", "err", err)
			writeErr(w, http.StatusServiceUnavailable, "unavailable", "storage is unavailable, try again shortly")
			return
		case info.MetaData[metaOwner] != owner:
			writeErr(w, http.StatusNotFound, "not_found", "upload not found")
			return
		}
		exp, err := time.Parse(time.RFC3339, info.MetaData[metaExpires])
		if err != nil || !s.now().Before(exp) {
			writeErr(w, http.StatusGone, "upload_expired", "the upload has expired")
			return
		}
		w.Header().Set("Upload-Expires", exp.UTC().Format(http.TimeFormat))
	}
	// tusd expects the base path stripped.
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(BasePath, "/")), "/")
	r2.URL.RawPath = ""
	s.tus.ServeHTTP(w, r2)
}

// info reads an upload's state; handler.ErrNotFound when there is none.
// Only ids of the shape this server gives (a record id, "+", the object
// store's multipart id) are looked up.
func (s *Server) info(ctx context.Context, id string) (handler.FileInfo, error) {
	objectID, multipartID, ok := strings.Cut(id, "+")
	if !ok || !files.ValidID(objectID) || multipartID == "" || strings.ContainsAny(multipartID, "/+") {
		return handler.FileInfo{}, handler.ErrNotFound
	}
	up, err := s.store.GetUpload(ctx, id)
	if err != nil {
		return handler.FileInfo{}, err
	}
	return up.GetInfo(ctx)
}

// preCreate refuses uploads that would pass the owner's quota, gives the
// upload a record id, keeps only the filename and meta metadata, and
// stamps the owner and expiry.
func (s *Server) preCreate(ev handler.HookEvent) (handler.HTTPResponse, handler.FileInfoChanges, error) {
	owner, _ := ev.Context.Value(ownerKey{}).(string)
	if owner == "" {
		return handler.HTTPResponse{}, handler.FileInfoChanges{}, tusErr(http.StatusUnauthorized, "unauthenticated", "sign in first")
	}
	if ev.Upload.SizeIsDeferred {
		return handler.HTTPResponse{}, handler.FileInfoChanges{}, tusErr(http.StatusBadRequest, "missing_upload_length", "Upload-Length is required")
	}
	if ev.Upload.Size <= 0 {
		return handler.HTTPResponse{}, handler.FileInfoChanges{}, storeErr(files.ErrEmpty)
	}
	if err := s.o.Service.CheckSpace(ev.Context, owner, ev.Upload.Size); err != nil {
		return handler.HTTPResponse{}, handler.FileInfoChanges{}, storeErr(err)
	}
	meta := handler.MetaData{}
	if name, ok := ev.Upload.MetaData["filename"]; ok {
		meta["filename"] = name
	}
	if m, ok := ev.Upload.MetaData["meta"]; ok {
		if len(m) > s.o.MaxMeta {
			return handler.HTTPResponse{}, handler.FileInfoChanges{}, tusErr(http.StatusBadRequest, "meta_too_long", "meta is longer than the limit")
		}
		if !utf8.ValidString(m) {
			return handler.HTTPResponse{}, handler.FileInfoChanges{}, tusErr(http.StatusBadRequest, "invalid_meta", "meta must be UTF-8 text")
		}
		meta["meta"] = m
	}
	exp := s.now().Add(s.o.Expiry).UTC().Truncate(time.Second)
	meta[metaOwner] = owner
	meta[metaExpires] = exp.Format(time.RFC3339)
	return handler.HTTPResponse{Header: handler.HTTPHeader{"Upload-Expires": exp.Format(http.TimeFormat)}},
		handler.FileInfoChanges{ID: files.NewID(), MetaData: meta}, nil
}

// finish turns a complete upload into a file record like POST
// /upload/file, then removes the tus objects. A complete upload is not
// finished again later (tusd calls this once, on the completing PATCH), so
// it is removed on failure too: the client is told (413, 503) and uploads
// again.
func (s *Server) finish(ev handler.HookEvent) (handler.HTTPResponse, error) {
	ctx := ev.Context
	info := ev.Upload
	owner := info.MetaData[metaOwner]
	up, err := s.store.GetUpload(ctx, info.ID)
	if err != nil {
		return handler.HTTPResponse{}, err
	}
	body, err := up.GetReader(ctx)
	if err != nil {
		return handler.HTTPResponse{}, err
	}
	defer body.Close()
	id, _, _ := strings.Cut(info.ID, "+")
	pending, err := s.o.Service.StoreFileAs(ctx, owner, id, body)
	if err != nil {
		s.terminate(up)
		return handler.HTTPResponse{}, storeErr(err)
	}
	defer pending.Discard()
	var meta *string
	if m, ok := info.MetaData["meta"]; ok {
		meta = &m
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	f, err := pending.Commit(dctx, owner, info.MetaData["filename"], meta)
	if err != nil {
		s.terminate(up)
		return handler.HTTPResponse{}, storeErr(err)
	}
	s.terminate(up)
	return handler.HTTPResponse{Header: handler.HTTPHeader{"Upload-File-Id": f.ID}}, nil
}

func (s *Server) terminate(up handler.Upload) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.store.AsTerminatableUpload(up).Terminate(ctx); err != nil {
		s.o.Log.Warn("removing finished tus upload failed (the sweeper retries when it expires)", "err", err)
	}
}

// storeErr answers the files package's errors a client caused as the
// HTTP API does (httpapi.ClientError); any other error goes to tusd as it
// is, which answers 500 (logged by jsonErrors).
func storeErr(err error) error {
	if status, code, msg, ok := httpapi.ClientError(err); ok {
		return tusErr(status, code, msg)
	}
	return err
}

// Sweep terminates uploads past their expiry (their multipart upload, parts
// and info objects go) and returns how many.
func (s *Server) Sweep(ctx context.Context, objects files.ObjectStore) (int, error) {
	n := 0
	var errs []error
	for obj, err := range objects.List(ctx, Prefix) {
		if err != nil {
			return n, err
		}
		if !strings.HasSuffix(obj.Key, ".info") {
			continue
		}
		o, err := objects.Get(ctx, obj.Key, 0, -1)
		if err != nil {
			if !errors.Is(err, files.ErrNotFound) {
				errs = append(errs, err)
			}
			continue
		}
		var info handler.FileInfo
		err = json.NewDecoder(o.Body).Decode(&info)
		o.Body.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", obj.Key, err))
			continue
		}
		exp, err := time.Parse(time.RFC3339, info.MetaData[metaExpires])
		if err != nil {
			exp = obj.LastModified.Add(s.o.Expiry)
		}
		if s.now().Before(exp) {
			continue
		}
		up, err := s.store.GetUpload(ctx, info.ID)
		if err == nil {
			err = s.store.AsTerminatableUpload(up).Terminate(ctx)
		}
		if err != nil && !errors.Is(err, handler.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// tusErr is an error tusd answers with; jsonErrors turns its body into
// the service's {err, code}.
func tusErr(status int, code, msg string) error {
	return handler.NewError(code, msg, status)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]string{"err": msg, "code": code})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// tusCodes names some of tusd's error codes as the service's; the others
// become their name in lower case without ERR_ (ERR_MISMATCHED_OFFSET:
// mismatched_offset).
var tusCodes = map[string]string{
	"ERR_MAX_SIZE_EXCEEDED":           "file_too_large",
	"ERR_UPLOAD_NOT_FOUND":            "not_found",
	"ERR_UNSUPPORTED_VERSION":         "unsupported_tus_version",
	"ERR_INVALID_UPLOAD_LENGTH_DEFER": "invalid_upload_length",
	"ERR_AMBIGUOUS_UPLOAD_LENGTH":     "invalid_upload_length",
	"ERR_CONCATENATION_UNSUPPORTED":   "not_implemented",
}

// jsonErrors answers tusd's plain-text errors ("ERR_CODE: message") as
// {err, code} JSON; everything else passes through.
type jsonErrors struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
	done   bool
	log    *slog.Logger
	r      *http.Request
}

func (j *jsonErrors) WriteHeader(code int) {
	if j.done || j.status != 0 {
		return
	}
	h := j.Header()
	if code >= 400 && !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		j.status = code
		return
	}
	if code == http.StatusOK || code == http.StatusNoContent {
		if ext := h.Get("Tus-Extension"); ext != "" {
			h.Set("Tus-Extension", ext+",expiration")
		}
	}
	j.done = true
	j.ResponseWriter.WriteHeader(code)
}

func (j *jsonErrors) Write(p []byte) (int, error) {
	if j.status != 0 {
		if j.buf.Len() < 4096 {
			j.buf.Write(p)
		}
		return len(p), nil
	}
	if !j.done {
		j.WriteHeader(http.StatusOK)
	}
	return j.ResponseWriter.Write(p)
}

// Unwrap lets tusd's http.ResponseController reach the connection.
func (j *jsonErrors) Unwrap() http.ResponseWriter { return j.ResponseWriter }

func (j *jsonErrors) finish() {
	if j.status == 0 {
		return
	}
	status := j.status
	j.status = 0
	code, msg, ok := strings.Cut(strings.TrimSpace(j.buf.String()), ": ")
	if !ok {
		code, msg = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_"), http.StatusText(status)
	}
	if c, ok := tusCodes[code]; ok {
		code = c
	} else if strings.HasPrefix(code, "ERR_") {
		code = strings.ToLower(strings.TrimPrefix(code, "ERR_"))
	}
	if status == http.StatusInternalServerError {
		j.log.ErrorContext(j.r.Context(), "tus request failed", "method", j.r.Method, "path", j.r.URL.Path, "status", status, "err", msg)
		msg = "storage is unavailable, try again shortly"
	}
	j.Header().Del("Content-Length")
	writeErr(j, status, code, msg)
}
