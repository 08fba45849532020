package idptest

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// GitHubUser is an account at the GitHub fake.
type GitHubUser struct {
	ID     int64
	Login  string
	Name   string
	Emails []GitHubEmail
}

// GitHubEmail is one of its addresses, as GET /user/emails lists them.
type GitHubEmail struct {
	Email    string `json:"email"`
	Primary  bool   `json:"primary"`
	Verified bool   `json:"verified"`
}

// GitHub fakes GitHub's OAuth2 web flow (/login/oauth/authorize,
// /login/oauth/access_token) and the API calls a sign-in makes (GET /user,
// GET /user/emails), with the JSON GitHub documents. Its authorize page
// approves at once, as the person set with As (or denies with Deny).
type GitHub struct {
	URL          string // web and API (GitHub serves them from two hosts; the fake from one)
	ClientID     string
	ClientSecret string

	mu     sync.Mutex
	as     *GitHubUser
	deny   bool
	codes  map[string]grant  // pending authorization codes
	tokens map[string]string // access token -> login
	users  map[string]GitHubUser
}

type grant struct {
	login, redirect, challenge string
}

// StartGitHub starts the fake with one OAuth app until the test ends.
func StartGitHub(t testing.TB, clientID, clientSecret string, people ...GitHubUser) *GitHub {
	t.Helper()
	g := &GitHub{ClientID: clientID, ClientSecret: clientSecret, codes: map[string]grant{}, tokens: map[string]string{}, users: map[string]GitHubUser{}}
	for _, p := range people {
		g.users[p.Login] = p
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/oauth/authorize", g.authorize)
	mux.HandleFunc("POST /login/oauth/access_token", g.accessToken)
	mux.HandleFunc("GET /user", g.user)
	mux.HandleFunc("GET /user/emails", g.emails)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	g.URL = srv.URL
	return g
}

// As makes the authorize page sign in as login (it must be a known user).
func (g *GitHub) As(login string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.users[login]
	g.as, g.deny = &u, false
}

// Deny makes the authorize page answer access_denied.
func (g *GitHub) Deny() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deny = true
}

func secret() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (g *GitHub) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != g.ClientID {
		http.Error(w, "unknown client", http.StatusNotFound)
		return
	}
	back, err := url.Parse(q.Get("redirect_uri"))
	if err != nil || back.Host == "" {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	v := url.Values{"state": {q.Get("state")}}
	switch {
	case g.deny:
		v.Set("error", "access_denied")
		v.Set("error_description", "The user has denied your application access.")
	case g.as == nil:
		http.Error(w, "nobody is signed in at the fake", http.StatusUnauthorized)
		return
	default:
		code := secret()
		g.codes[code] = grant{login: g.as.Login, redirect: back.String(), challenge: q.Get("code_challenge")}
		v.Set("code", code)
	}
	back.RawQuery = v.Encode()
	http.Redirect(w, r, back.String(), http.StatusFound)
}

func (g *GitHub) accessToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id, sec, ok := r.BasicAuth()
	if !ok {
		id, sec = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	w.Header().Set("Content-Type", "application/json")
	fail := func(code, desc string) {
		// GitHub answers 200 with an error object.
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc,
			"error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/"})
	}
	if id != g.ClientID || sec != g.ClientSecret {
		fail("incorrect_client_credentials", "The client_id and/or client_secret passed are incorrect.")
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	code := r.PostForm.Get("code")
	gr, ok := g.codes[code]
	delete(g.codes, code) // a code is redeemed once
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	switch {
	case !ok:
		fail("bad_verification_code", "The code passed is incorrect or expired.")
		return
	case r.PostForm.Get("redirect_uri") != "" && r.PostForm.Get("redirect_uri") != gr.redirect:
		fail("redirect_uri_mismatch", "The redirect_uri MUST match the registered callback URL for this application.")
		return
	case gr.challenge != "" && base64.RawURLEncoding.EncodeToString(sum[:]) != gr.challenge:
		fail("bad_verification_code", "The code_verifier does not match the code_challenge.")
		return
	}
	tok := "gho_" + secret()
	g.tokens[tok] = gr.login
	_ = json.NewEncoder(w).Encode(map[string]string{"access_token": tok, "token_type": "bearer", "scope": "read:user,user:email"})
}

func (g *GitHub) caller(w http.ResponseWriter, r *http.Request) (GitHubUser, bool) {
	auth := r.Header.Get("Authorization")
	tok := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(auth, "Bearer "), "token "))
	g.mu.Lock()
	defer g.mu.Unlock()
	login, ok := g.tokens[tok]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
		return GitHubUser{}, false
	}
	return g.users[login], true
}

func (g *GitHub) user(w http.ResponseWriter, r *http.Request) {
	u, ok := g.caller(w, r)
	if !ok {
		return
	}
	var email any
	for _, e := range u.Emails {
		if e.Primary {
			email = e.Email
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"login": u.Login, "id": u.ID, "node_id": "U_fake", "type": "User",
		"name": u.Name, "email": email, "site_admin": false})
}

func (g *GitHub) emails(w http.ResponseWriter, r *http.Request) {
	u, ok := g.caller(w, r)
	if !ok {
		return
	}
	out := make([]map[string]any, 0, len(u.Emails))
	for _, e := range u.Emails {
		out = append(out, map[string]any{"email": e.Email, "primary": e.Primary, "verified": e.Verified, "visibility": "private"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
