package app

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/testkit"
)

// revoke makes fa refuse cookie and publishes auth's revocation of it.
func revoke(t *testing.T, fa *fakeAuth, prefix, cookie string) {
	t.Helper()
	fa.revoked.Store(cookie, true)
	msg, _ := json.Marshal(map[string]any{"sessions": []string{sha256hex(cookie)}})
	s := testkit.Get(t, testkit.NATS)
	if err := s.NATS.Publish(prefix+".auth.revoked", msg); err != nil {
		t.Fatal(err)
	}
	if err := s.NATS.Flush(); err != nil {
		t.Fatal(err)
	}
}

func randomPrefix(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "streams" + hex.EncodeToString(b)
}

// ended reports how long body took to end (read error or EOF), at most d.
func ended(body io.Reader, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, body); close(done) }()
	select {
	case <-done:
		return time.Since(start), true
	case <-time.After(d):
		return d, false
	}
}

// A live stream is re-checked whatever the request's Accept header: a tail
// asked for as JSON (or with no Accept) ends at its next write once its
// session is revoked, and no event written after the revocation arrives.
func TestStreamRecheckedWhateverAccept(t *testing.T) {
	for _, accept := range []string{"", "application/json"} {
		t.Run("accept="+accept, func(t *testing.T) {
			up := &sseUpstream{}
			fa := &fakeAuth{}
			prefix := randomPrefix(t)
			r := runGateway(t, map[string]http.Handler{"auth": fa, "logs": up}, io.Discard, map[string]string{"NATS_SUBJECT_PREFIX": prefix})
			req, _ := http.NewRequest("GET", r.url+"/log/tail", nil)
			req.AddCookie(&http.Cookie{Name: "sessionId", Value: adminCookie})
			if accept != "" {
				req.Header.Set("Accept", accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			rd := bufio.NewReader(resp.Body)
			if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "event: log") {
				t.Fatalf("first line %q %v", line, err)
			}
			revoke(t, fa, prefix, adminCookie)
			// Events the upstream wrote before the revocation may still be
			// in flight; the stream must end within the write interval.
			if took, ok := ended(rd, 3*time.Second); !ok {
				t.Fatalf("the stream of a revoked session was still open after %v", took)
			}
		})
	}
}

// slowDownload sends a long answer of known length (800 MB) 8 KiB at a
// time, every 50 ms.
func slowDownload(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/readyz" {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", "800000000")
	w.WriteHeader(200)
	chunk := make([]byte, 8000)
	for i := 0; i < 100000; i++ {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Any answer that runs long (here a download trickling for minutes) is
// re-checked every GATEWAY_STREAM_RECHECK and ends once its session is
// revoked.
func TestLongAnswerEndsOnRevocation(t *testing.T) {
	fa := &fakeAuth{}
	prefix := randomPrefix(t)
	r := runGateway(t, map[string]http.Handler{"auth": fa, "files": http.HandlerFunc(slowDownload)}, io.Discard,
		map[string]string{"NATS_SUBJECT_PREFIX": prefix, "GATEWAY_STREAM_RECHECK": "500ms"})
	req, _ := http.NewRequest("GET", r.url+"/download/file/abc", nil)
	req.AddCookie(&http.Cookie{Name: "sessionId", Value: userCookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 3)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the first re-check: a valid session keeps its download
	if _, err := io.ReadFull(resp.Body, make([]byte, 3)); err != nil {
		t.Fatalf("the download of a valid session was cut: %v", err)
	}
	revoke(t, fa, prefix, userCookie)
	if took, ok := ended(resp.Body, 3*time.Second); !ok {
		t.Fatalf("the download of a revoked session was still running after %v", took)
	}
}
