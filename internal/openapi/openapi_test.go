package openapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestDocuments: each document is served, carries the served kinds with
// their group-version-kind, and the v3 discovery points at both group
// versions.
func TestDocuments(t *testing.T) {
	h, err := New("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, accept string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var v2 struct {
		Paths       map[string]any            `json:"paths"`
		Definitions map[string]map[string]any `json:"definitions"`
	}
	w := get("/openapi/v2", "application/json")
	if err := json.Unmarshal(w.Body.Bytes(), &v2); err != nil {
		t.Fatalf("/openapi/v2: %v", err)
	}
	for name, want := range map[string]string{
		"io.k8s.api.events.v1.Event": `[{"group":"events.k8s.io","kind":"Event","version":"v1"}]`,
		"io.k8s.api.core.v1.Event":   `[{"group":"","kind":"Event","version":"v1"}]`,
	} {
		got, _ := json.Marshal(v2.Definitions[name]["x-kubernetes-group-version-kind"])
		if string(got) != want {
			t.Errorf("%s gvk %s, want %s", name, got, want)
		}
	}
	for _, p := range []string{"/apis/events.k8s.io/v1/namespaces/{namespace}/events", "/api/v1/namespaces/{namespace}/events/{name}"} {
		if _, ok := v2.Paths[p]; !ok {
			t.Errorf("/openapi/v2 has no path %s", p)
		}
	}
	if w := get("/openapi/v2", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"); w.Code != http.StatusOK || w.Body.Len() == 0 {
		t.Errorf("/openapi/v2 as protobuf: %d", w.Code)
	}
	var disc struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(get("/openapi/v3", "").Body.Bytes(), &disc); err != nil {
		t.Fatal(err)
	}
	for _, gv := range []string{"apis/events.k8s.io/v1", "api/v1"} {
		u := disc.Paths[gv].ServerRelativeURL
		if u == "" {
			t.Fatalf("/openapi/v3 lists no %s", gv)
		}
		w := get(u, "application/json")
		var doc struct {
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Components.Schemas) == 0 {
			t.Errorf("%s: %v, %d schemas", u, err, len(doc.Components.Schemas))
		}
	}
	if w := httptest.NewRecorder(); true {
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/openapi/v2", nil))
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST /openapi/v2: %d", w.Code)
		}
	}
}
