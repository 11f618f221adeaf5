// Package console serves eventgate's web console: static pages, embedded in
// the binary, that read the gateway's own REST API from the browser (the
// NDJSON watch, Query, Get and the analytics endpoints) with the caller's
// bearer token. It adds no API of its own: a page can do nothing its token
// could not do with curl.
package console

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// contentSecurityPolicy keeps the console's pages to their own scripts,
// styles and origin: no inline script, no third-party host, no framing. The
// chart library sets element styles through the CSSOM, which style-src
// does not govern.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Register serves the console under Prefix on mux and sends a browser that
// opens the root of the gateway there.
func Register(mux *http.ServeMux) {
	mux.Handle(Prefix, http.StripPrefix(Prefix, Handler()))
	mux.Handle("GET /{$}", http.RedirectHandler(Prefix, http.StatusFound))
}

// Handler serves the console's files, rooted at its index page: a request
// for /x (after the prefix is stripped) is answered from assets/x.
func Handler() http.Handler {
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path != "" && strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// Embedded files carry no modification time to revalidate by; the
		// assets are small, and a new binary must not be shadowed by a
		// cached page.
		h.Set("Cache-Control", "no-cache")
		u := *r.URL
		u.Path = "/assets/" + strings.TrimPrefix(r.URL.Path, "/")
		u.RawPath = ""
		r2 := r.Clone(r.Context())
		r2.URL = &u
		files.ServeHTTP(w, r2)
	})
}
