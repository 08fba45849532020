package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/acme/platform/pkg/identity"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/auth/internal/account"
	"github.com/acme/platform/services/auth/internal/password"
	"github.com/golang-jwt/jwt/v5"
)

// In-memory stores for the handler fuzz target (pure logic: the real
// stores have their own tests against FerretDB). They start from the same
// state for every input: one user, one admin, one session each.

type memUsers struct {
	mu    sync.Mutex
	users map[string]account.User
}

func (m *memUsers) Create(_ context.Context, u account.User) (account.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range m.users {
		if strings.EqualFold(x.Email, u.Email) {
			return account.User{}, account.ErrEmailTaken
		}
	}
	u.ID = "00000000000000000000000" + string(rune('a'+len(m.users)))
	m.users[u.ID] = u
	return u, nil
}

func (m *memUsers) ByID(_ context.Context, id string) (account.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.users[id]; ok {
		return u, nil
	}
	return account.User{}, account.ErrUserNotFound
}

func (m *memUsers) ByEmail(_ context.Context, email string) (account.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range m.users {
		if strings.EqualFold(u.Email, email) {
			return u, nil
		}
	}
	return account.User{}, account.ErrUserNotFound
}

func (m *memUsers) Update(_ context.Context, id string, p account.UserPatch, now time.Time) (account.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[id]
	if !ok {
		return account.User{}, account.ErrUserNotFound
	}
	if p.Email != nil {
		u.Email = *p.Email
	}
	if p.FullName != nil {
		u.FullName = *p.FullName
	}
	if p.Role != nil {
		u.Role = *p.Role
	}
	if p.PasswordHash != nil {
		u.PasswordHash = *p.PasswordHash
	}
	u.UpdatedAt = now
	m.users[id] = u
	return u, nil
}

func (m *memUsers) ReplaceHash(context.Context, string, string, string) error { return nil }

func (m *memUsers) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.users[id]; !ok {
		return account.ErrUserNotFound
	}
	delete(m.users, id)
	return nil
}

func (m *memUsers) LockMethods(context.Context, string, string, time.Time, time.Time) (bool, error) {
	return true, nil
}

func (m *memUsers) UnlockMethods(context.Context, string, string) error { return nil }

func (m *memUsers) List(_ context.Context, skip, limit int) ([]account.User, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []account.User
	for _, u := range m.users {
		out = append(out, u)
	}
	n := int64(len(out))
	if skip >= len(out) {
		return nil, n, nil
	}
	out = out[skip:]
	if len(out) > limit {
		out = out[:limit]
	}
	return out, n, nil
}

type memSessions struct {
	mu sync.Mutex
	m  map[string]account.Session
}

func (s *memSessions) Create(_ context.Context, x account.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[x.ID] = x
	return nil
}

func (s *memSessions) ByID(_ context.Context, id string) (account.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := s.m[id]; ok {
		return x, nil
	}
	return account.Session{}, account.ErrSessionNotFound
}

func (s *memSessions) ByPublicID(_ context.Context, userID, publicID string) (account.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.m {
		if x.UserID == userID && x.PublicID == publicID {
			return x, nil
		}
	}
	return account.Session{}, account.ErrSessionNotFound
}

func (s *memSessions) Touch(context.Context, string, time.Time, time.Time) error { return nil }

func (s *memSessions) Delete(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[id]; !ok {
		return account.ErrSessionNotFound
	}
	delete(s.m, id)
	return nil
}

func (s *memSessions) ListByUser(_ context.Context, userID string) ([]account.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []account.Session
	for _, x := range s.m {
		if x.UserID == userID {
			out = append(out, x)
		}
	}
	return out, nil
}

func (s *memSessions) DeleteByUser(_ context.Context, userID, except string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, x := range s.m {
		if x.UserID == userID && id != except {
			ids = append(ids, id)
			delete(s.m, id)
		}
	}
	return ids, nil
}

func (s *memSessions) DeleteExpired(context.Context, time.Time, time.Time) (int64, error) {
	return 0, nil
}
func (s *memSessions) CountLive(context.Context, time.Time, time.Time) (int64, error) { return 0, nil }

type memThrottle struct{}

func (memThrottle) Admit(_ context.Context, _ time.Time, reqs ...account.ThrottleRequest) ([]account.Ticket, error) {
	tks := make([]account.Ticket, len(reqs))
	for i, r := range reqs {
		tks[i] = account.Ticket{Key: r.Key}
	}
	return tks, nil
}
func (memThrottle) Release(context.Context, ...account.Ticket) error              { return nil }
func (memThrottle) Check(context.Context, []string) (map[string]time.Time, error) { return nil, nil }
func (memThrottle) Reset(context.Context, string, time.Time) error                { return nil }
func (memThrottle) Succeed(context.Context, string, ...account.Ticket) error      { return nil }
func (memThrottle) Forget(context.Context, time.Time, time.Time) error            { return nil }
func (nopPub) Revoked(context.Context, account.Revocation)                        {}

type nopPub struct{}

// fuzzRoutes are the auth service's routes with a sample path each.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/signin"}, {"DELETE", "/signout"}, {"GET", "/me"}, {"PATCH", "/me"}, {"GET", "/ms/me"},
	{"GET", "/me/sessions"}, {"DELETE", "/me/sessions"}, {"DELETE", "/me/sessions/"},
	{"POST", "/users"}, {"GET", "/users"}, {"GET", "/users/"}, {"PATCH", "/users/"}, {"DELETE", "/users/"},
}

// FuzzAuthHandlers sends arbitrary JSON bodies, content types, path ids,
// queries (page, limit) and cookies to every auth route as an anonymous
// caller, a user and an admin, through the real router and handlers with
// in-memory stores. No input may give a 5xx, an error without a JSON body,
// or a 2xx for a caller the route does not admit.
func FuzzAuthHandlers(f *testing.F) {
	pub, priv, err := identity.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	hasher, err := password.NewHasher(password.Params{MemoryKiB: 8, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}, 4)
	if err != nil {
		f.Fatal(err)
	}
	hash, _ := hasher.Hash(context.Background(), "correct horse battery")
	users := &memUsers{}
	sessions := &memSessions{}
	reset := func() {
		now := time.Now().UTC()
		users.users = map[string]account.User{
			"000000000000000000000001": {ID: "000000000000000000000001", Email: "ada@example.com", FullName: "Ada", EDV: "E-1", Role: "user", PasswordHash: hash, CreatedAt: now, UpdatedAt: now},
			"000000000000000000000002": {ID: "000000000000000000000002", Email: "root@example.com", FullName: "Root", EDV: "E-2", Role: "admin", PasswordHash: hash, CreatedAt: now, UpdatedAt: now},
		}
		sessions.m = map[string]account.Session{
			account.HashSecret("secret-user"): {ID: account.HashSecret("secret-user"), PublicID: "0123456789abcdef0123456789abcdef", UserID: "000000000000000000000001", CreatedAt: now, LastSeenAt: now, ExpiresAt: now.Add(time.Hour)},
		}
	}
	reset()
	svc := account.NewService(users, sessions, memThrottle{}, hasher, nopPub{}, account.Config{
		SessionTTL: time.Hour, SessionIdle: time.Hour,
		Account: account.ThrottleRule{Max: 5, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour},
		Address: account.ThrottleRule{Max: 50, Window: time.Minute, Lock: time.Minute, LockMax: time.Hour},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	app := web.NewApp(web.Options{Name: "auth", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), BodyLimit: 64 << 10})
	if err := Register(app, svc, identity.NewVerifier(pub, "auth"), Options{ServiceCredentials: []string{"cred"}}); err != nil {
		f.Fatal(err)
	}
	signer := identity.NewSigner(priv, time.Minute)
	tokens := []string{}
	for _, c := range []identity.Claims{
		{}, // anonymous
		{Role: "user", SessionID: "0123456789abcdef0123456789abcdef", RegisteredClaims: jwt.RegisteredClaims{Subject: "000000000000000000000001"}},
		{Role: "admin", SessionID: "fedcba9876543210fedcba9876543210", RegisteredClaims: jwt.RegisteredClaims{Subject: "000000000000000000000002"}},
	} {
		tok, err := signer.Sign(c, "auth")
		if err != nil {
			f.Fatal(err)
		}
		tokens = append(tokens, tok)
	}

	for i, body := range []string{
		`{"email":"ada@example.com","password":"correct horse battery"}`, `{"email":"x","password":1}`, ``, `{}`,
		`{"fullName":"A","password":{"old":"correct horse battery","new":"new secret phrase"}}`, `{"sessionId":"secret-user"}`,
		`{"password":{"old":null}}`, `{"email":"b@example.com","password":"12345678","fullName":"B","edv":"E","roleName":"root"}`,
		`{"avatarUrl":"javascript:alert(1)"}`, `{"sector":""}`, `{"roleName":"user"}`, `{"sessionId":7}`,
	} {
		f.Add(uint8(i), uint8(i%3), "application/json", "000000000000000000000001", "page=1&limit=50", "sessionId=secret-user", []byte(body))
	}
	// Control and bidirectional-override characters: PATCH /me as the
	// user (route 3), POST /users as the admin (route 8).
	for _, body := range []string{
		`{"fullName":"Ada\u202eevil"}`, `{"fullName":"Ada\n"}`, `{"fullName":"Ada\u0000x","sector":"\u2066"}`,
		`{"email":"ada\u202e@example.com","currentPassword":"correct horse battery"}`,
		`{"email":"root@example.com","currentPassword":"correct horse battery"}`,
	} {
		f.Add(uint8(3), uint8(1), "application/json", "", "", "", []byte(body))
	}
	f.Add(uint8(8), uint8(2), "application/json", "", "", "", []byte(`{"email":"b@example.com","password":"12345678","fullName":"B\u200b","edv":"E\u0085"}`))
	f.Add(uint8(8), uint8(2), "application/json", "", "", "", []byte(`{"email":"c@example.com","password":"12345678","fullName":"C","edv":"E\u2069"}`))
	// Invisible and format characters (issue 43, row 7).
	for _, body := range []string{
		`{"fullName":"Ada\u2060x"}`, `{"fullName":"\u3164"}`, `{"sector":"a\u00adb\u034f"}`,
		`{"fullName":"Ada\udb40\udc41"}`, `{"fullName":"A\u200dB\u200cC\u200fD"}`,
		`{"email":"ada\u2060@example.com","currentPassword":"correct horse battery"}`,
		`{"avatarUrl":"https://example.com/\ufff9"}`,
	} {
		f.Add(uint8(3), uint8(1), "application/json", "", "", "", []byte(body))
	}
	f.Add(uint8(8), uint8(2), "application/json", "", "", "", []byte(`{"email":"ro\u2060ot@example.com","password":"12345678","fullName":"R","edv":"E"}`))
	f.Add(uint8(8), uint8(2), "application/json", "", "", "", []byte(`{"email":"root@example.com\u00ad","password":"12345678","fullName":"R","edv":"E\u200d"}`))
	f.Add(uint8(9), uint8(2), "application/json", "x", "page=-1&limit=1e9", "", []byte(nil))
	f.Add(uint8(10), uint8(2), "application/json", "%00", "page=99999999999999999999", "", []byte(nil))
	f.Add(uint8(0), uint8(0), "text/plain", "", "", "", []byte("email=a"))
	f.Fuzz(func(t *testing.T, routeIdx, who uint8, ct, id, query, cookie string, body []byte) {
		rt := fuzzRoutes[int(routeIdx)%len(fuzzRoutes)]
		path := rt.path
		if strings.HasSuffix(path, "/") {
			if id == "" || strings.ContainsAny(id, "/?# \t\r\n\x00") {
				return
			}
			path += id
		}
		if query != "" {
			if strings.ContainsAny(query, "# \t\r\n\x00") {
				return
			}
			path += "?" + query
		}
		reset()
		req := httptest.NewRequest(rt.method, "http://auth.test/", bytes.NewReader(body))
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "", "", ""
		u, err := req.URL.Parse(path)
		if err != nil {
			return
		}
		req.URL = u
		req.RequestURI = u.RequestURI()
		req.Header.Set(identity.Header, tokens[int(who)%len(tokens)])
		if rt.path == "/ms/me" {
			req.Header.Set(ServiceCredentialHeader, "cred")
		}
		// A user agent that reverses what follows it and hides a
		// character: stored cleaned by a sign-in.
		req.Header.Set("User-Agent", "curl\u202e/8.0\u2060 \u200d")
		if validHeader(ct) {
			req.Header.Set("Content-Type", ct)
		}
		if cookie != "" && validHeader(cookie) {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := app.Test(req, -1)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %s as %d: %d %s", rt.method, path, who%3, resp.StatusCode, got)
		}
		if resp.StatusCode >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: %d without JSON", rt.method, path, resp.StatusCode)
		}
		// Whatever was accepted, no stored text holds a control,
		// bidirectional-override or invisible character (display text
		// may hold the joiners and direction marks, identifiers not), and
		// the user agent of a session is stored cleaned.
		for _, u := range users.users {
			for _, v := range []string{u.Email, u.EDV, deref(u.AvatarURL)} {
				if hasForbiddenRune(v, false) {
					t.Fatalf("%s %s: %d stored %q", rt.method, path, resp.StatusCode, v)
				}
			}
			for _, v := range []string{u.FullName, deref(u.Sector)} {
				if hasForbiddenRune(v, true) {
					t.Fatalf("%s %s: %d stored %q", rt.method, path, resp.StatusCode, v)
				}
			}
		}
		for _, sess := range sessions.m {
			if hasForbiddenRune(sess.UserAgent, false) {
				t.Fatalf("%s %s: %d stored the user agent %q", rt.method, path, resp.StatusCode, sess.UserAgent)
			}
		}
		if resp.StatusCode < 300 {
			anon, user := who%3 == 0, who%3 == 1
			switch {
			case rt.path == "/signin" || rt.path == "/ms/me":
			case strings.HasPrefix(rt.path, "/users") && (anon || user):
				t.Fatalf("%s %s: %d for a non-admin", rt.method, path, resp.StatusCode)
			case anon:
				t.Fatalf("%s %s: %d for an anonymous caller", rt.method, path, resp.StatusCode)
			}
		}
	})
}

// hasForbiddenRune is the fuzz target's own statement of what stored text
// may not hold (docs/auth.md, "Text fields refuse ..."): control and format
// characters (Cc, Cf), the line and paragraph separators, the combining
// grapheme joiner, the Mongolian vowel separator and the Hangul fillers;
// display text may hold the joiners U+200C, U+200D and the direction marks
// U+200E, U+200F, U+061C.
func hasForbiddenRune(s string, display bool) bool {
	for _, r := range s {
		if display && (r == 0x200C || r == 0x200D || r == 0x200E || r == 0x200F || r == 0x061C) {
			continue
		}
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) ||
			r == 0x034F || r == 0x180E || r == 0x115F || r == 0x1160 || r == 0x3164 || r == 0xFFA0 {
			return true
		}
	}
	return false
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func validHeader(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
