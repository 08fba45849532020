package app

import (
	"net/http"
	"time"

	"github.com/acme/platform/gateway/internal/apierror"
	"github.com/acme/platform/gateway/internal/proxy"
)

// guard protects the server from abusive clients before anything else
// runs: request headers larger than maxHeader bytes get 431 with a JSON body
// (net/http itself refuses still larger ones, in plain text), and a request
// body that makes no progress for bodyIdle is cut (proxy.WatchBody: the
// read fails, the proxy gives up on the upstream request, answers 408
// request_timeout and the connection closes), so a
// client trickling a body cannot hold a connection and an upstream request
// for ever, while a large upload that keeps moving is never limited in
// total time.
func guard(next http.Handler, maxHeader int, bodyIdle time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerSize(r) > maxHeader {
			apierror.WriteFields(w, apierror.HeadersTooLarge, map[string]any{"limit": maxHeader})
			return
		}
		r = proxy.WatchBody(w, r, bodyIdle)
		next.ServeHTTP(w, r)
	})
}

// headerSize approximates what the client sent as its request line and
// headers, as net/http counts them against MaxHeaderBytes.
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n + len(r.Host) + 8
}
