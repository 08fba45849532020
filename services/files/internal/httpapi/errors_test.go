package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/acme/platform/pkg/testkit/errortable"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/files/internal/files"
)

// Every exported error of the files package (an Err* variable or a type
// with an Error method) has a row in errorMap: a new error without one
// fails here instead of reaching clients as a 500.
func TestErrorMapCoversFilesErrors(t *testing.T) {
	inTable := errortable.NamesInTable(t, "errors.go", "errorMap", "files")
	for _, name := range errortable.ExportedErrors(t, "../files") {
		if !inTable[name] {
			t.Errorf("files.%s has no row in errorMap (errors.go)", name)
		}
	}
}

// No row is shadowed by an earlier one: each row answers its own error,
// also when wrapped.
func TestErrorMapRowsAnswerTheirOwnErrors(t *testing.T) {
	for i, row := range errorMap {
		err := fmt.Errorf("wrapped: %w", row.Sample)
		if _, ok := row.Answer(errScope{}, err); !ok {
			t.Errorf("row %d does not match its own error %v", i, row.Sample)
		}
		for j := range i {
			if _, ok := errorMap[j].Answer(errScope{}, err); ok {
				t.Errorf("row %d (%v) is shadowed by row %d", i, row.Sample, j)
			}
		}
	}
}

// What fail answers: the file endpoints' bodies, with what the scope names.
func TestFail(t *testing.T) {
	scope := errScope{fileID: "f1", linkID: "l1", maxFile: 10, maxPixels: 20, maxMemory: 30, maxScans: 16}
	for _, tc := range []struct {
		name   string
		err    error
		scope  errScope
		status int
		body   map[string]any
	}{
		{"fileNotFound404", files.ErrNotFound, scope, 404, map[string]any{"err": "no file with this id", "code": "file_not_found", "sentId": "f1"}},
		{"linkNotFound404", files.ErrLinkNotFound, scope, 404, map[string]any{"err": "no share link with this id", "code": "link_not_found", "sentId": "l1"}},
		{"tokenNotFound404", files.ErrLinkNotFound, errScope{}, 404, map[string]any{"err": "no share link with this token", "code": "link_not_found"}},
		{"tooLarge413", &files.SourceError{Err: files.ErrTooLarge}, scope, 413, map[string]any{"err": "the upload exceeds the maximum size", "code": "file_too_large", "limit": int64(10)}},
		{"malformed400", &files.SourceError{Err: errors.New("eof")}, scope, 400, map[string]any{"err": "the multipart body is malformed or incomplete", "code": "invalid_multipart"}},
		{"pixels422", files.ErrImageTooLarge, scope, 422, map[string]any{"err": "the image dimensions exceed the limit", "code": "image_too_many_pixels", "limit": int64(20)}},
		{"complex422", fmt.Errorf("%w: 401 scans", files.ErrImageTooComplex), scope, 422, map[string]any{"err": "decoding the image would take more work than one image may (a JPEG whose scans walk its blocks more times than the limit)", "code": "image_too_complex", "limit": int64(16)}},
		{"timeout422", fmt.Errorf("%w (20s)", files.ErrImageTimeout), scope, 422, map[string]any{"err": "processing the image took longer than one image may take", "code": "image_timeout"}},
		{"clientGone499", files.ErrClientGone, scope, 499, map[string]any{"err": "the client closed the connection before the answer", "code": "client_closed_request"}},
		{"badLink400", &files.BadLinkError{Field: "maxDownloads", Msg: "must be positive"}, scope, 400, map[string]any{"err": "maxDownloads must be positive", "code": "invalid_max_downloads", "field": "maxDownloads"}},
		{"outage503", os.ErrDeadlineExceeded, scope, 503, map[string]any{"err": "storage is unavailable, try again shortly", "code": "unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var we *web.Error
			if got := fail(tc.err, tc.scope); !errors.As(got, &we) {
				t.Fatalf("got %v, want a *web.Error", got)
			}
			body := map[string]any{"code": we.Code}
			for k, v := range we.Body {
				body[k] = v
			}
			if we.Status != tc.status || fmt.Sprint(body) != fmt.Sprint(tc.body) {
				t.Errorf("got %d %v, want %d %v", we.Status, body, tc.status, tc.body)
			}
		})
	}
	for _, err := range []error{files.ErrConflict, errors.New("bug")} {
		if got := fail(err, scope); got != err {
			t.Errorf("%v: got %v, want it passed through to the error handler", err, got)
		}
	}
}

// The tus server answers the errors a client caused with the same status,
// code and message; the others are tusd's (500).
func TestClientError(t *testing.T) {
	status, code, msg, ok := ClientError(fmt.Errorf("x: %w", files.ErrQuotaExceeded))
	if !ok || status != http.StatusRequestEntityTooLarge || code != "quota_exceeded" || msg != "the upload would exceed your storage quota" {
		t.Errorf("quota: got %d %s %q %v", status, code, msg, ok)
	}
	for _, err := range []error{files.ErrUnavailable, files.ErrBusy, &files.SourceError{Err: errors.New("eof")}, errors.New("bug")} {
		if _, _, _, ok := ClientError(err); ok {
			t.Errorf("%v: ClientError says a client caused it", err)
		}
	}
}
