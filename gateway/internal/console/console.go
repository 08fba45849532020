// Package console serves the web console: static pages (plain HTML, CSS and
// JavaScript modules, no build step, embedded in the gateway binary) that
// use the public API only, with the same cookie session as any client.
//
// Every console response carries a Content-Security-Policy that allows
// scripts, styles, images and connections from the gateway's own origin
// only: no inline scripts or styles, no other host, no framing.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// CSP is the console's Content-Security-Policy. Images may also be data:
// URLs: the TOTP enrolment's QR code comes in the API's JSON as one.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

type file struct {
	body  []byte
	ctype string
	etag  string
}

// Register mounts GET /console/ (the page), /console/assets/* and a
// redirect from / and /console to /console/.
func Register(mux *http.ServeMux) {
	files := map[string]file{}
	_ = fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if strings.HasSuffix(p, ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		files[strings.TrimPrefix(p, "assets/")] = file{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	toConsole := func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/console/", http.StatusFound)
	}
	mux.HandleFunc("GET /{$}", toConsole)
	mux.HandleFunc("GET /console", toConsole)
	mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, files["index.html"])
	})
	mux.HandleFunc("GET /console/assets/{name...}", func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.PathValue("name")]
		if !ok || r.PathValue("name") == "index.html" {
			headers(w)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("not found\n"))
			return
		}
		serve(w, r, f)
	})
}

func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

func serve(w http.ResponseWriter, r *http.Request, f file) {
	headers(w)
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache") // revalidate: assets are not fingerprinted
	h.Set("ETag", f.etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && strings.Contains(inm, f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(f.body)
}
