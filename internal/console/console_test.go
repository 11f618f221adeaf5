package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestConsoleServedAtUIWithStrictCSP checks that the gateway serves the
// console's page at /ui/ with a Content-Security-Policy that allows no
// inline script, that the page has none, and that / sends a browser there.
func TestConsoleServedAtUIWithStrictCSP(t *testing.T) {
	gw := shared(t)
	resp, err := http.Get(gw.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /ui/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("Content-Security-Policy %q allows inline code", csp)
	}
	if inline := regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).FindString(string(body)); inline != "" || !strings.Contains(string(body), `src="js/app.js"`) {
		t.Errorf("the page has an inline script (%q) or lacks its module", inline)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(gw.url + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d Location %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = noRedirect.Get(gw.url + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 3 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d Location %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, c := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{http.MethodGet, "/ui/js/app.js", http.StatusOK, "text/javascript"},
		{http.MethodGet, "/ui/vendor/uPlot.min.css", http.StatusOK, "text/css"},
		{http.MethodHead, "/ui/", http.StatusOK, "text/html"},
		{http.MethodGet, "/ui/js/", http.StatusNotFound, ""},
		{http.MethodGet, "/ui/missing.js", http.StatusNotFound, ""},
		{http.MethodPost, "/ui/", http.StatusMethodNotAllowed, ""},
	} {
		req, _ := http.NewRequest(c.method, gw.url+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || !strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype) {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.code, c.ctype)
		}
	}
	// The API's own 404 for other paths is untouched.
	resp, err = http.Get(gw.url + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", resp.StatusCode)
	}
}

// TestVendoredUPlotMatchesLockfile checks that the embedded chart library is
// the version package-lock.json pins (vendor.sh copies it).
func TestVendoredUPlotMatchesLockfile(t *testing.T) {
	b, err := os.ReadFile("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct{ Version string } `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	want := lock.Packages["node_modules/uplot"].Version
	js, err := os.ReadFile("assets/vendor/uPlot.iife.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if want == "" || !strings.Contains(string(js[:min(len(js), 200)]), "(v"+want+")") {
		t.Errorf("assets/vendor/uPlot.iife.min.js is not uPlot %q from package-lock.json: run vendor.sh", want)
	}
}
