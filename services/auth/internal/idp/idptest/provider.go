// Package idptest runs real identity providers for tests: an OpenID
// Provider (zitadel/oidc's example server: discovery, a login page, signed
// ID tokens, userinfo) and a fake of GitHub's OAuth2 endpoints and API
// speaking its documented JSON. The OpenID Provider can be told to spoil
// the next ID tokens it issues (another audience, an expired token, another
// nonce, a key outside its key set), re-signed with a key its key set
// publishes, so that the refusals of a relying party can be tested against
// it.
package idptest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/text/language"
)

// User is a person who can sign in at the provider.
type User struct {
	ID            string // the subject
	Username      string
	Password      string
	Email         string
	EmailVerified bool
	FirstName     string
	LastName      string
}

// OP is a running OpenID Provider.
type OP struct {
	Issuer string // its URL, also the issuer of its tokens

	mu     sync.Mutex
	spoil  func(claims map[string]any)
	signer jose.Signer // re-signs spoiled tokens with the published extra key
	rogue  jose.Signer // signs with a key the key set does not publish
	useRog bool
	extra  jose.JSONWebKey // the published extra key (public)
}

type users map[string]*storage.User

func (u users) GetUserByID(id string) *storage.User { return u[id] }
func (u users) GetUserByUsername(name string) *storage.User {
	for _, v := range u {
		if v.Username == name {
			return v
		}
	}
	return nil
}
func (u users) ExampleClientID() string { return "service" }

// Client is a relying party registered at the provider.
type Client struct {
	ID, Secret   string
	RedirectURIs []string
}

// StartOP starts a provider with these clients and users until the test
// ends.
func StartOP(t testing.TB, clients []Client, people []User) *OP {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	op := &OP{Issuer: "http://" + l.Addr().String()}
	us := users{}
	for _, p := range people {
		us[p.ID] = &storage.User{ID: p.ID, Username: p.Username, Password: p.Password, Email: p.Email,
			EmailVerified: p.EmailVerified, FirstName: p.FirstName, LastName: p.LastName, PreferredLanguage: language.English}
	}
	cs := map[string]*storage.Client{}
	for _, c := range clients {
		cs[c.ID] = storage.WebClient(c.ID, c.Secret, c.RedirectURIs...)
	}
	op.keys(t)
	router := exampleop.SetupServer(op.Issuer, storage.NewStorageWithClients(us, cs), nil, false)
	srv := httptest.NewUnstartedServer(op.intercept(router))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return op
}

func (op *OP) keys(t testing.TB) {
	t.Helper()
	pub, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	const kid = "idptest-extra"
	op.extra = jose.JSONWebKey{Key: &pub.PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid)
	if op.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: pub}, opts); err != nil {
		t.Fatal(err)
	}
	if op.rogue, err = jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: rogue}, opts); err != nil {
		t.Fatal(err)
	}
}

// Spoil makes the provider change the claims of every ID token it issues
// from now on (nil: honest tokens again). The token stays validly signed.
func (op *OP) Spoil(f func(claims map[string]any)) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.spoil, op.useRog = f, false
}

// SignWithUnpublishedKey makes the provider sign ID tokens with a key its
// key set does not contain.
func (op *OP) SignWithUnpublishedKey() {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.spoil, op.useRog = func(map[string]any) {}, true
}

// intercept publishes the extra key in the key set and rewrites ID tokens
// in token responses when told to.
func (op *OP) intercept(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op.mu.Lock()
		spoil, rogue := op.spoil, op.useRog
		op.mu.Unlock()
		isKeys := r.URL.Path == "/keys"
		if !isKeys && (spoil == nil || r.URL.Path != "/oauth/token") {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if rec.Code == http.StatusOK {
			if isKeys {
				body = op.withExtraKey(body)
			} else {
				body = op.respoil(body, spoil, rogue)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	})
}

func (op *OP) withExtraKey(body []byte) []byte {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return body
	}
	set.Keys = append(set.Keys, op.extra)
	out, err := json.Marshal(set)
	if err != nil {
		return body
	}
	return out
}

func (op *OP) respoil(body []byte, spoil func(map[string]any), rogue bool) []byte {
	var resp map[string]any
	if err := json.Unmarshal(body, &resp); err != nil {
		return body
	}
	raw, _ := resp["id_token"].(string)
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return body
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return body
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return body
	}
	spoil(claims)
	payload, err = json.Marshal(claims)
	if err != nil {
		return body
	}
	signer := op.signer
	if rogue {
		signer = op.rogue
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return body
	}
	if resp["id_token"], err = jws.CompactSerialize(); err != nil {
		return body
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return body
	}
	return out
}

// SignIn fills in the provider's login page that resp (the page, reached by
// following the relying party's redirect) shows, with c, and returns the
// answer (a redirect back to the relying party, unless c does not follow
// redirects off the provider).
func (op *OP) SignIn(t testing.TB, c *http.Client, page *http.Response, username, password string) *http.Response {
	t.Helper()
	defer page.Body.Close()
	if _, err := io.Copy(io.Discard, page.Body); err != nil {
		t.Fatal(err)
	}
	id := page.Request.URL.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("not the provider's login page: %s %s", page.Status, page.Request.URL)
	}
	resp, err := c.PostForm(op.Issuer+"/login/username", map[string][]string{"id": {id}, "username": {username}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
