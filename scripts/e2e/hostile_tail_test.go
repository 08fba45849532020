package e2e

// Hostile-input suite, live tail (issue 43, row 6): one administrator's
// read-only API key opening live tails until the logs service refuses must
// not shut the other administrators out of theirs.

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodTails is how many tails the key opens at once: more than the logs
// replica's bound (LOGS_TAIL_MAX_OPEN, lowered to floodReplicaBound here so
// that the run stays quick: the attack only needs to reach past it).
const (
	floodTails        = 105
	floodReplicaBound = 20
	floodPerUser      = 5 // LOGS_TAIL_MAX_PER_USER's default
)

// floodAnswer is one of the flood's answers: a stream kept open, or a
// refusal's status, code and Retry-After.
type floodAnswer struct {
	status     int
	code       string
	retryAfter string
	err        error
}

func TestHostileTailFloodByOneKey(t *testing.T) {
	p, sec, _ := platform(t, map[string]string{"LOGS_TAIL_MAX_OPEN": strconv.Itoa(floodReplicaBound)})
	admin := signIn(t, p.GatewayURL, sec.AdminEmail, sec.AdminPassword)
	key := admin.mustStatus(201, "POST", "/me/api-keys", map[string]any{"name": "leaked", "scopes": []string{"logs:read"}})
	bearer := "Bearer " + key["secret"].(string)

	// The key opens floodTails tails at once, every answer checked
	// against the OpenAPI document; the streams it gets stay open.
	hc := &http.Client{Transport: checked(t, p.GatewayURL, nil)}
	answers := make([]floodAnswer, floodTails)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = floodOne(t, hc, p.GatewayURL, bearer)
		}()
	}
	close(start)
	wg.Wait()

	opened, byAnswer := 0, map[string]int{}
	for _, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("a tail request of the key failed: %v", a.err)
		case a.status == 200:
			opened++
		default:
			byAnswer[strconv.Itoa(a.status)+" "+a.code]++
			if a.status == 429 {
				if n, err := strconv.Atoi(a.retryAfter); err != nil || n < 1 {
					t.Errorf("429 with Retry-After %q, want seconds", a.retryAfter)
				}
			}
		}
	}
	t.Logf("%d tails by one key: %d streams, refused %v", floodTails, opened, byAnswer)
	if opened != floodPerUser {
		t.Errorf("the key opened %d tails, want %d (LOGS_TAIL_MAX_PER_USER)", opened, floodPerUser)
	}
	if got, want := byAnswer["429 too_many_tails"], floodTails-floodPerUser; got != want || len(byAnswer) != 1 {
		t.Errorf("refusals %v, want %d × 429 too_many_tails", byAnswer, want)
	}

	// Another administrator opens a tail: a stream that delivers.
	admin.mustStatus(201, "POST", "/users", map[string]any{
		"email": "second-admin@example.com", "password": "a long second admin password", "fullName": "Second", "edv": "S-2", "roleName": "admin",
	})
	second := signIn(t, p.GatewayURL, "second-admin@example.com", "a long second admin password")
	tail := openTail(t, p.GatewayURL, map[string]string{"Cookie": "sessionId=" + second.cookie()})
	m := marker(t, "flood")
	postLog(t, admin, m)
	if !waitFor(10*time.Second, func() bool { return tail.has(m) }) {
		t.Fatal("the other administrator's tail did not deliver a record")
	}

	// The key's owner is bounded as a whole: their own session is refused
	// as well until the key's streams end (revoking the key ends them).
	st, body, hdr := admin.do("GET", "/log/tail", nil)
	if st != 429 || body["code"] != "too_many_tails" || hdr.Get("Retry-After") == "" {
		t.Fatalf("the key owner's own session: %d %v, want 429 too_many_tails", st, body)
	}
}

// floodOne opens one tail with the API key: a 200 stream is read in the
// background until the test ends; a refusal is read whole.
func floodOne(t *testing.T, hc *http.Client, base, bearer string) floodAnswer {
	req, _ := http.NewRequest("GET", base+"/log/tail", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", bearer)
	resp, err := hc.Do(req)
	if err != nil {
		return floodAnswer{err: err}
	}
	if resp.StatusCode == 200 {
		t.Cleanup(func() { resp.Body.Close() })
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(resp.Body)
			once := sync.Once{}
			for sc.Scan() {
				if sc.Text() == "event: ready" {
					once.Do(func() { close(ready) })
				}
			}
		}()
		select {
		case <-ready:
		case <-time.After(15 * time.Second):
			return floodAnswer{err: io.ErrUnexpectedEOF}
		}
		return floodAnswer{status: 200}
	}
	defer resp.Body.Close()
	var b struct{ Code string }
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return floodAnswer{status: resp.StatusCode}
	}
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		return floodAnswer{err: err}
	}
	return floodAnswer{status: resp.StatusCode, code: b.Code, retryAfter: resp.Header.Get("Retry-After")}
}
