package app_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/services/auth/internal/password"
)

// BenchmarkArgon2Hash measures the argon2id bound: hashes per second with
// the default (OWASP) parameters on all cores, as many at once as the
// service allows by default (one per CPU). Compare signins/s of
// BenchmarkSignin with hashes/s of this one.
func BenchmarkArgon2Hash(b *testing.B) {
	h, err := password.NewHasher(password.OWASP, runtime.NumCPU())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := h.Hash(ctx, "benchmark-password"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "hashes/s")
}

// BenchmarkSignin measures successful sign-ins per second through the real
// HTTP server, MongoDB-wire server and default argon2id parameters, with
// more concurrent clients than cores so that the hash slots stay busy.
func BenchmarkSignin(b *testing.B) {
	h := newHarness(b, map[string]string{
		"AUTH_ARGON2_MEMORY_KIB": "19456",
		"AUTH_ARGON2_TIME":       "2",
		"AUTH_HASH_CONCURRENCY":  "",
	})
	h.createUser(h.adminToken(), "bench@example.com", "bench-password")
	body := []byte(`{"email":"bench@example.com","password":"bench-password"}`)
	tok := h.id.Token(b, identity.Claims{ClientIP: "127.0.0.1"}, "auth")
	tr := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	// Identity tokens live 30 s; refresh them for long runs.
	tokens := make(chan string, 1)
	tokens <- tok
	fresh := func() string {
		t := <-tokens
		tokens <- t
		return t
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Second):
				<-tokens
				tokens <- h.id.Token(b, identity.Claims{ClientIP: "127.0.0.1"}, "auth")
			}
		}
	}()

	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", h.base+"/signin", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(identity.Header, fresh())
			res, err := c.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				b.Errorf("sign-in: status %d", res.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signins/s")
}
