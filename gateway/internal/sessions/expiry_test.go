package sessions

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

type fixedUpstream string

func (u fixedUpstream) Next() string { return string(u) }

// A cached API key or session never outlives its own expiry: the entry
// expires with it, however long the cache's TTL, so the next request after
// the expiry asks auth (which refuses it).
func TestCachedIdentityExpiresWithTheKey(t *testing.T) {
	for _, keys := range []bool{true, false} {
		var asked atomic.Int32
		var expiresAt time.Time
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if asked.Add(1) > 1 && time.Now().After(expiresAt) {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"code":"invalid_api_key"}`))
				return
			}
			body := map[string]any{"message": "ok", "user": map[string]any{"id": "u1", "roleName": "user"}}
			if keys {
				body["apiKey"] = map[string]any{"id": "k1", "scopes": []string{"files:read"}, "expiresAt": expiresAt}
			} else {
				body["session"] = map[string]any{"id": "s1", "expiresAt": expiresAt}
			}
			_ = json.NewEncoder(w).Encode(body)
		}))
		secret := "acme_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		r := NewKeyResolver(fixedUpstream(srv.URL), "cred", srv.Client(), time.Minute)
		if !keys {
			secret = secret[len("acme_"):]
			r = NewResolver(fixedUpstream(srv.URL), "cred", srv.Client(), time.Minute)
		}
		expiresAt = time.Now().Add(300 * time.Millisecond).UTC()
		ctx := context.Background()
		if _, err := r.Resolve(ctx, secret); err != nil {
			t.Fatalf("keys=%v: first resolve: %v", keys, err)
		}
		if _, err := r.Resolve(ctx, secret); err != nil || asked.Load() != 1 {
			t.Fatalf("keys=%v: second resolve before expiry: %v, auth asked %d times (want 1: cached)", keys, err, asked.Load())
		}
		time.Sleep(time.Until(expiresAt) + 50*time.Millisecond)
		if _, err := r.Resolve(ctx, secret); err != ErrInvalid {
			t.Fatalf("keys=%v: resolve after the expiry: %v (auth asked %d times), want ErrInvalid", keys, err, asked.Load())
		}
		srv.Close()
	}
}
