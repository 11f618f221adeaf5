package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// corsDo sends method url from a page of origin, with the preflight
// headers of a request of preflightFor when it is not empty.
func corsDo(t *testing.T, ctx context.Context, method, url, origin, preflightFor, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	if preflightFor != "" {
		req.Header.Set("Access-Control-Request-Method", preflightFor)
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// A dashboard page of an allowed origin may emit, list and watch over REST
// (its browser's preflight is answered); a page of any other origin gets
// no permission to read the answers.
func TestCORS(t *testing.T) {
	const dash = "https://dash.example.com"
	tg := startGateway(t, func(c *config.Config) { c.CORSAllowedOrigins = []string{dash} })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, tc := range []struct{ path, method string }{
		{"/v1/events", http.MethodPost},
		{"/v1/events:watch", http.MethodGet},
	} {
		resp := corsDo(t, ctx, http.MethodOptions, tg.httpURL+tc.path, dash, tc.method, "")
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("preflight %s %s: %d", tc.method, tc.path, resp.StatusCode)
		}
		h := resp.Header
		if h.Get("Access-Control-Allow-Origin") != dash || !strings.Contains(h.Get("Access-Control-Allow-Methods"), tc.method) ||
			!strings.Contains(strings.ToLower(h.Get("Access-Control-Allow-Headers")), "authorization") ||
			h.Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("preflight %s %s: headers %v", tc.method, tc.path, h)
		}
	}

	watch := corsDo(t, ctx, http.MethodGet, tg.httpURL+"/v1/events:watch?namespace=cors", dash, "", "")
	defer watch.Body.Close()
	if watch.StatusCode != http.StatusOK || watch.Header.Get("Access-Control-Allow-Origin") != dash {
		t.Fatalf("watch: %d, headers %v", watch.StatusCode, watch.Header)
	}
	emit := corsDo(t, ctx, http.MethodPost, tg.httpURL+"/v1/events", dash, "",
		`{"events":[{"reason":"Opened","note":"from a dashboard","type":"Normal","reportingController":"dash","reportingInstance":"dash-0","action":"Open","regarding":{"kind":"Page","namespace":"cors","name":"home"}}]}`)
	defer emit.Body.Close()
	if emit.StatusCode != http.StatusOK || emit.Header.Get("Access-Control-Allow-Origin") != dash {
		t.Fatalf("emit: %d, headers %v", emit.StatusCode, emit.Header)
	}
	sc := bufio.NewScanner(watch.Body)
	watched := false
	for !watched && sc.Scan() {
		var line struct {
			Type   string `json:"type"`
			Object struct {
				Reason string `json:"reason"`
			} `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("watch line %q: %v", sc.Text(), err)
		}
		if line.Type == "ADDED" {
			if line.Object.Reason != "Opened" {
				t.Fatalf("watched %q", sc.Text())
			}
			watched = true
		}
	}
	if !watched {
		t.Fatalf("the watch ended without the event: %v", sc.Err())
	}

	other := corsDo(t, ctx, http.MethodGet, tg.httpURL+"/v1/events?namespace=cors", "https://evil.example.com", "", "")
	other.Body.Close()
	if got := other.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("other origin allowed: %q", got)
	}
	pre := corsDo(t, ctx, http.MethodOptions, tg.httpURL+"/v1/events", "https://evil.example.com", http.MethodPost, "")
	pre.Body.Close()
	if got := pre.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Fatalf("preflight of other origin allowed: %q", got)
	}
}

// Without allowed origins (the default) no answer carries a CORS header
// and a preflight is an OPTIONS request like any other.
func TestCORSOffByDefault(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, method := range []string{http.MethodGet, http.MethodOptions} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, "/v1/events", nil)
		req.Header.Set("Origin", "https://dash.example.com")
		req.Header.Set("Access-Control-Request-Method", http.MethodPost)
		withCORS(next, nil).ServeHTTP(rec, req)
		if rec.Code != http.StatusTeapot || rec.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("%s: %d, headers %v", method, rec.Code, rec.Header())
		}
	}
}
