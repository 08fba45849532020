package proxy

import (
	"net/http"
	"strings"
)

// Access says who may use a route.
type Access int

const (
	Public       Access = iota // anonymous token; the service decides
	Session                    // a valid session is required
	Admin                      // a valid session of an administrator (the service checks again)
	Service                    // service-to-service (/ms/me): no session, credential passed through
	ServiceOrKey               // a service credential passed through, or an API key (POST /v1/logs)
)

// Route maps a path prefix to a service.
type Route struct {
	Prefix  string // "/log" matches "/log" and "/log/..."
	Exact   bool   // match Prefix only
	Service string // audience: auth, files, logs
	Access  Access
	// Upstream names the balancer when it is not Service's: resumable
	// uploads ("tus") are served by the files service on a listener of
	// their own.
	Upstream string
}

// Routes is the public API's map, most specific first.
var Routes = []Route{
	{Prefix: "/ms/me", Exact: true, Service: "auth", Access: Service},
	{Prefix: "/signin", Exact: true, Service: "auth", Access: Public},
	{Prefix: "/signin/mfa", Exact: true, Service: "auth", Access: Public}, // the challenge id is the proof of the password
	{Prefix: "/signin/passkey", Service: "auth", Access: Public},          // begin, finish: the passkey's signature is the proof
	{Prefix: "/signin/oidc", Service: "auth", Access: Public},             // identity providers: the list, the redirect, the callback (the provider's signed answer is the proof)
	{Prefix: "/signin/email", Service: "auth", Access: Public},            // mailed codes: the settings, the request, the code or link (the mailbox is the proof)
	{Prefix: "/password", Service: "auth", Access: Public},                // forgot, reset: the mailed token is the proof
	{Prefix: "/email", Service: "auth", Access: Public},                   // verify: the mailed token is the proof
	{Prefix: "/signout", Exact: true, Service: "auth", Access: Session},
	{Prefix: "/me/usage", Exact: true, Service: "files", Access: Session},
	{Prefix: "/me", Service: "auth", Access: Session},
	{Prefix: "/users", Service: "auth", Access: Admin},
	{Prefix: "/images", Service: "files", Access: Public},
	{Prefix: "/uploads", Service: "files", Access: Session, Upstream: "tus"}, // tus resumable uploads
	{Prefix: "/upload", Service: "files", Access: Session},
	{Prefix: "/retrieve", Service: "files", Access: Session},
	{Prefix: "/download", Service: "files", Access: Session},
	{Prefix: "/files", Service: "files", Access: Session},
	{Prefix: "/s", Service: "files", Access: Public}, // share links: the token is the credential
	{Prefix: "/usage", Service: "files", Access: Admin},
	{Prefix: "/log", Service: "logs", Access: Admin},
	// OTLP/HTTP logs: no session; the service checks the caller's
	// credential (X-Service-Credential) itself.
	{Prefix: "/v1/logs", Exact: true, Service: "logs", Access: ServiceOrKey},
}

func match(path string) (Route, bool) {
	for _, r := range Routes {
		if path == r.Prefix || (!r.Exact && strings.HasPrefix(path, r.Prefix+"/")) {
			return r, true
		}
	}
	return Route{}, false
}

// APIScope is the scope an API key needs for a request to a service: read
// for GET and HEAD, write for anything else, on files and logs routes; ""
// for the other services, which refuse API keys (they manage accounts,
// sessions and keys themselves).
func APIScope(service, method string) string {
	if service != "files" && service != "logs" {
		return ""
	}
	if method == http.MethodGet || method == http.MethodHead {
		return service + ":read"
	}
	return service + ":write"
}

// apiKey resolves the API key of an Authorization header for route and
