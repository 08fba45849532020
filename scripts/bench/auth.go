package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/scripts/stack"
)

// benchAuth: sign-ins per second against the argon2id bound of the same
// cores, GET /me through the gateway against directly to auth, and auth's
// peak memory under 500 concurrent sign-ins.
func benchAuth(e *env) error {
	cpus := runtime.NumCPU()
	hb, err := startHashBound()
	if err != nil {
		return err
	}
	defer hb.Stop()
	boundCPU := func() cpuSample { return samplePid(hb.Pid(), "hash process") }
	hash := func(d time.Duration) func() (stats, error) {
		return func() (stats, error) { return hb.round(cpus, d) }
	}
	gw := e.p.GatewayURL
	creds := map[string]string{"email": e.sec.AdminEmail, "password": e.sec.AdminPassword}
	credsJSON, _ := json.Marshal(creds)
	c := httpClient(64)
	signinLoad, err := newRawHitter("POST", gw+"/signin", credsJSON, nil, 200, 2*cpus)
	if err != nil {
		return err
	}
	defer signinLoad.close()
	signin := signinLoad.hit
	// The bound is a process of its own that only hashes, from as many
	// goroutines as auth hashes at once (AUTH_HASH_CONCURRENCY, NumCPU by
	// default): auth as it would be if a sign-in cost nothing but its hash.
	// The bound and the sign-ins run in five alternating rounds each, after
	// a round of each that is not counted (a process's first hashes grow
	// its heap: page faults the later ones do not pay). Each sign-in round
	// is compared with the bound round just before it, and the median of
	// those five ratios is the measure: on shared cores a load taken at
	// another moment sees another machine, and the bound's own rounds
	// differ by a fifth from one to the next.
	var bound, signins, warm side
	if err := warm.measure(e.ctx, boundCPU, hash(2*time.Second)); err != nil {
		return err
	}
	if err := warm.run(e.ctx, 2*cpus, 2*time.Second, platformCPU(e, hb.Pid()), signin); err != nil {
		return err
	}
	for range 5 {
		if err := bound.measure(e.ctx, boundCPU, hash(e.seconds/5+time.Second)); err != nil {
			return err
		}
		if err := signins.run(e.ctx, 2*cpus, e.seconds/5+time.Second, platformCPU(e, hb.Pid()), signin); err != nil {
			return err
		}
	}
	hashCPU, _ := bound.perRequest(nil)
	signinCPU, _ := signins.perRequest([]string{"gateway", "auth", "ferretdb", "logs"})
	e.report("auth", "CPU per bare hash", hashCPU, "")
	e.report("auth", "CPU per sign-in", fmt.Sprintf("%s; bench process (load generator, NATS) %.0f µs", signinCPU, signins.selfPerRequest()), "")
	e.report("auth", fmt.Sprintf("argon2id bound (m=%dMiB,t=%d,p=%d) on all cores", boundMemoryKiB>>10, boundTime, boundThreads), fmt.Sprintf("%.1f hashes/s; rounds %s", bound.median().rps(), bound.rates()), "")
	e.report("auth", "sign-ins through the gateway", signins.String(), "")
	e.report("auth", "sign-ins/s ÷ argon2id hashes/s, median rounds", ratio(signins.median().rps(), bound.median().rps()), "")
	e.report("auth", "sign-ins/s ÷ argon2id hashes/s, paired rounds", pairedRatio(signins, bound), ">= 0.85")

	// One session for /me.
	_, h, err := call(c, "POST", gw+"/signin", creds, nil, 200)
	if err != nil {
		return err
	}
	cookie := ""
	for _, ck := range (&http.Response{Header: h}).Cookies() {
		if ck.Name == "sessionId" {
			cookie = ck.Value
		}
	}
	me, _, err := call(c, "GET", gw+"/me", nil, map[string]string{"Cookie": "sessionId=" + cookie}, 200)
	if err != nil {
		return err
	}
	uid, _ := me["user"].(map[string]any)["id"].(string)
	key, err := identity.ParsePrivateKey(e.sec.IdentityPrivatePEM)
	if err != nil {
		return err
	}
	signer := identity.NewSigner(key, time.Minute)
	var tokMu sync.RWMutex
	tok, _ := signer.Sign(identity.Claims{Role: "admin", ClientIP: "127.0.0.1", RegisteredClaims: subject(uid)}, "auth")
	stopRefresh := make(chan struct{})
	go func() { // a caller with a token would reuse it; refresh before expiry
		t := time.NewTicker(20 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				nt, _ := signer.Sign(identity.Claims{Role: "admin", ClientIP: "127.0.0.1", RegisteredClaims: subject(uid)}, "auth")
				tokMu.Lock()
				tok = nt
				tokMu.Unlock()
			case <-stopRefresh:
				return
			}
		}
	}()
	defer close(stopRefresh)

	// Directly to auth and through the gateway in three alternating rounds
	// each, compared round by round as the sign-ins are.
	const workers = 32
	meDirect := func(int) error {
		tokMu.RLock()
		t := tok
		tokMu.RUnlock()
		return hit(c, "GET", "http://"+e.p.Procs["auth"].Addr+"/me", nil, map[string]string{identity.Header: t}, 200)
	}
	meVia := func(int) error {
		return hit(c, "GET", gw+"/me", nil, map[string]string{"Cookie": "sessionId=" + cookie}, 200)
	}
	var direct, via side
	self := func() cpuSample { return samplePid(os.Getpid(), "bench") }
	for range 3 {
		if err := direct.run(e.ctx, workers, e.seconds/3+time.Second, self, meDirect); err != nil {
			return err
		}
		if err := via.run(e.ctx, workers, e.seconds/3+time.Second, self, meVia); err != nil {
			return err
		}
	}
	e.report("auth", "GET /me directly to auth", direct.String(), "")
	e.report("auth", "GET /me through the gateway", via.String(), "")
	e.report("auth", "GET /me/s gateway ÷ direct, paired rounds", pairedRatio(via, direct), ">= 0.85")
	e.report("auth", "GET /me p99 gateway vs direct (median rounds)", fmt.Sprintf("%s vs %s", via.median().pct(0.99).Round(10*time.Microsecond), direct.median().pct(0.99).Round(10*time.Microsecond)), "")

	// 500 concurrent sign-ins at once; auth's peak resident memory.
	burst := httpClient(600)
	var wg sync.WaitGroup
	var errs int
	var firstErr error
	var mu sync.Mutex
	start := time.Now()
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := call(burst, "POST", gw+"/signin", creds, nil, 200); err != nil {
				mu.Lock()
				errs++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	peak, err := stack.PeakRSS(e.p.Procs["auth"].Pid())
	if err != nil {
		return err
	}
	done := fmt.Sprintf("done in %s, %d errors", time.Since(start).Round(time.Millisecond), errs)
	if firstErr != nil {
		done += fmt.Sprintf(" (first: %.120s)", firstErr)
	}
	e.report("auth", "500 concurrent sign-ins", done, "")
	e.report("auth", "auth peak RSS (VmHWM) over the whole run", fmt.Sprintf("%.0f MiB", float64(peak)/(1<<20)), "< 256 MiB")
	return nil
}
