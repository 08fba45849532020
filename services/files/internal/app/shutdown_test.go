package app

import (
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/metrics/metricstest"
	"github.com/acme/platform/pkg/testkit/apptest"
)

// On shutdown the listener closes at once (new connections are refused),
// while an upload already in progress is read to its end, stored and
// answered; then Run returns.
func TestShutdownFinishesInFlightUpload(t *testing.T) {
	h := start(t, map[string]string{"FILES_SHUTDOWN_GRACE": "30s"}, hooks{})
	addr := strings.TrimPrefix(h.base, "http://")

	// An upload whose body comes in two halves, the second after shutdown began.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	c := apptest.NewClient(t, h.base).With(identity.Header, h.user("u1"))
	c.HTTP = &http.Client{Transport: &http.Transport{}} // a connection of its own
	resc := c.Go(http.MethodPost, "/upload/file", pr, map[string]string{"Content-Type": mw.FormDataContentType()})
	fw, err := mw.CreateFormFile("file", "slow.txt")
	if err != nil {
		t.Fatal(err)
	}
	half := strings.Repeat("first half. ", 10_000)
	if _, err := io.WriteString(fw, half); err != nil {
		t.Fatal(err)
	}
	// The handler is reading the body once uploaded bytes are counted.
	apptest.Until(t, 10*time.Second, "upload in progress", func() bool {
		v, _ := metricstest.Scrape(t, h.base+"/metrics").Sum("acme_files_uploaded_bytes_total")
		return v > 0
	})

	h.svc.Cancel() // shutdown begins
	apptest.Until(t, 10*time.Second, "new connections refused", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	select {
	case <-h.svc.Done():
		t.Fatalf("run returned with an upload in flight: %v", h.svc.Err())
	default:
	}

	if _, err := io.WriteString(fw, strings.Repeat("second half. ", 10_000)); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	select {
	case r := <-resc:
		if r.Err != nil || r.Status != http.StatusCreated {
			t.Fatalf("in-flight upload: status %d, err %v, body %s", r.Status, r.Err, r.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("in-flight upload got no answer")
	}
	select {
	case <-h.svc.Done():
		if err := h.svc.Err(); err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after the upload finished")
	}
	if n := h.records(); n != 1 {
		t.Fatalf("%d records after shutdown, want the upload's 1", n)
	}
}
