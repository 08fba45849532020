package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/acme/platform/gateway/internal/apierror"
)

// Origins is the gateway's own public address: the origins browsers use for
// it (GATEWAY_PUBLIC_URL), which decide which Host names it answers and which
// Origin is its own. A DNS-rebinding page (a name of the attacker's that
// resolves to the gateway's address) sends its own name as Host and as
// Origin; refusing names that are not the gateway's, and comparing Origin
// with scheme, host and port, keeps such a page from sending requests.
type Origins struct {
	origins map[string]bool // "https://app.example.com", "http://127.0.0.1:8080"
	hosts   map[string]bool // "app.example.com:443", "127.0.0.1:8080"
}

// ParseOrigins parses the public URLs (absolute http or https URLs without
// a path, query or user; a trailing "/" is allowed).
func ParseOrigins(urls []string) (*Origins, error) {
	o := &Origins{origins: map[string]bool{}, hosts: map[string]bool{}}
	for _, raw := range urls {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return nil, fmt.Errorf("%q is not an origin (http(s)://host[:port])", raw)
		}
		origin, host := normalize(u.Scheme, u.Hostname(), u.Port())
		o.origins[origin] = true
		o.hosts[host] = true
	}
	return o, nil
}

// normalize returns scheme://host[:port] (the port only when it is not the
// scheme's default) and host:port (always with the port).
func normalize(scheme, hostname, port string) (origin, host string) {
	scheme, hostname = strings.ToLower(scheme), strings.TrimSuffix(strings.ToLower(hostname), ".")
	def := map[string]string{"http": "80", "https": "443"}[scheme]
	if port == "" {
		port = def
	}
	origin = scheme + "://" + bracket(hostname)
	if port != def {
		origin += ":" + port
	}
	return origin, net.JoinHostPort(hostname, port)
}

func bracket(h string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]"
	}
	return h
}

// Configured reports whether public URLs are set.
func (o *Origins) Configured() bool { return o != nil && len(o.origins) > 0 }

// splitHost splits a Host header into its lower-case name (no brackets, no
// trailing dot) and port ("" when absent).
func splitHost(h string) (name, port string) {
	if host, p, err := net.SplitHostPort(h); err == nil {
		name, port = host, p
	} else {
		name = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	return strings.TrimSuffix(strings.ToLower(name), "."), port
}

// literal reports whether a host name needs no name resolution: an IP
// address or "localhost" (which browsers resolve to loopback themselves).
// No DNS answer can put an attacker's page behind such a Host.
func literal(name string) bool {
	return name == "localhost" || net.ParseIP(name) != nil
}

// HostAllowed reports whether the gateway answers requests for this Host
// header: one of the public URLs' host and port (a Host without a port
// matches a public URL on port 80 or 443), or an IP address or localhost
// with any port (how operators, probes and local tools reach it).
func (o *Origins) HostAllowed(h string) bool {
	name, port := splitHost(h)
	if name == "" {
		return false
	}
	if literal(name) {
		return true
	}
	if o == nil {
		return false
	}
	if port != "" {
		return o.hosts[net.JoinHostPort(name, port)]
	}
	return o.hosts[net.JoinHostPort(name, "80")] || o.hosts[net.JoinHostPort(name, "443")]
}

// Own reports whether origin is the gateway's own: one of the public URLs
// exactly (scheme, host and port), or, for a request to an IP address or
// localhost, that Host with the scheme the request came in over (http on
// the gateway's plain listener).
func (o *Origins) Own(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Hostname() == "" || u.Path != "" || u.User != nil {
		return false
	}
	norm, _ := normalize(u.Scheme, u.Hostname(), u.Port())
	if o != nil && o.origins[norm] {
		return true
	}
	name, port := splitHost(r.Host)
	if !literal(name) {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	own, _ := normalize(scheme, name, port)
	return norm == own
}

// Probe paths answer whatever the Host: container healthchecks and load
// balancers call them by address or by an internal name.
func probePath(p string) bool { return p == "/healthz" || p == "/readyz" }

// CarriesCredential reports whether r is sent to a route with a credential
// that is checked there, not a cookie: an API key (Authorization) on a route
// that takes keys (the gateway resolves it, 401 when it is not a key), or a
// service credential on a service route (the service checks it). A page of
// another name gains nothing with these: cookies are never what lets it in.
func CarriesCredential(r *http.Request) bool {
	route, ok := match(r.URL.Path)
	if !ok {
		return false
	}
	switch route.Access {
	case Session, Admin:
		return r.Header.Get("Authorization") != ""
	case Service:
		return r.Header.Get("X-Service-Credential") != ""
	case ServiceOrKey:
		return r.Header.Get("Authorization") != "" || r.Header.Get("X-Service-Credential") != ""
	}
	return false
}

// CheckHost refuses requests whose Host is not the gateway's (HostAllowed)
// with 421 misdirected_request, except probes (GET /healthz, /readyz) and
// requests carrying a credential (CarriesCredential).
func CheckHost(o *Origins, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.HostAllowed(r.Host) || probePath(r.URL.Path) || CarriesCredential(r) {
			next.ServeHTTP(w, r)
			return
		}
		apierror.Write(w, apierror.MisdirectedHost)
	})
}

// stripIdentityHeaders removes every header a client could use to pose as
// the gateway.
func stripIdentityHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, "X-Acme-") || k == "X-Forwarded-For" || k == "X-Real-Ip" || k == "Forwarded" {
			delete(h, k)
		}
	}
}

// admit applies the origin policy; false when it answered the request: a
// refusal, or a CORS preflight.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request) bool {
	if !h.originAllowed(w, r) {
		apierror.Write(w, apierror.OriginNotAllowed)
		return false
	}
	if h.crossSiteUnsafe(r) {
		apierror.Write(w, apierror.CrossSite)
		return false
	}
	if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" {
		w.WriteHeader(http.StatusNoContent) // preflight, headers set by originAllowed
		return false
	}
	return true
}

// originAllowed refuses unsafe cross-origin requests from origins that are
// neither the gateway's own (Config.Public) nor configured, and sets CORS
// headers for the configured ones.
func (h *Handler) originAllowed(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if h.origins[origin] {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		// Response headers a page of that origin may read: the file name of
		// a download, where a cut-short log listing reads on, the request id.
		w.Header().Set("Access-Control-Expose-Headers", "Content-Disposition, Logs-Resume-Before, X-Request-Id")
		w.Header().Add("Vary", "Origin")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, X-Request-Id")
			w.Header().Set("Access-Control-Max-Age", "600")
		}
		return true
	}
	if h.cfg.Public.Own(origin, r) {
		return true // scheme, host and port: https://host is not http://host's
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return true // no state change; the browser withholds the answer without CORS headers
	}
	return false
}

// crossSiteUnsafe reports an unsafe request (POST, PATCH, DELETE, ...) that
// a browser says comes from another site or origin while sending no Origin
// we checked. Browsers send Origin with every unsafe request today, so this
// is the second line behind originAllowed (and behind SameSite=Lax
// cookies): Sec-Fetch-Site is set by the browser alone and cannot be forged
// by a page. Requests without it (curl, server-side runtimes, older
// browsers that still send Origin) are judged by Origin only.
func (h *Handler) crossSiteUnsafe(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	origin := r.Header.Get("Origin")
	if origin != "" && h.origins[origin] {
		return false // a configured origin (CORS with credentials)
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return false
	}
	return true // cross-site, or same-site from another origin (a sibling subdomain)
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
