package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestK8sOpenAPIKubectl runs the installed kubectl with client-side
// validation on (its default): create and apply download /openapi/v2 (or
// v3) and validate against it, and explain reads /openapi/v3.
func TestK8sOpenAPIKubectl(t *testing.T) {
	tokens := writeTokens(t)
	cert, key := selfSignedCert(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.TLS.CertFile, c.TLS.KeyFile = cert, key
	})
	k := newKubectl(t, strings.Replace(tg.httpURL, "http://", "https://", 1), tokShop)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	event := `apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: api-0.created
  namespace: web
eventTime: "2026-01-02T03:04:05.000000Z"
reportingController: example.com/kubectl-test
reportingInstance: kubectl-test-1
action: Create
reason: Created
type: Normal
note: created by kubectl create -f
regarding:
  apiVersion: apps/v1
  kind: Deployment
  namespace: web
  name: api
`
	created := write("created.yaml", event)
	if out := k.run(t, ctx, "create", "-f", created); !strings.Contains(out, "api-0.created created") {
		t.Errorf("kubectl create -f: %s", out)
	}
	applied := write("applied.yaml", `apiVersion: v1
kind: Event
metadata:
  name: api-0.applied
  namespace: web
involvedObject:
  apiVersion: apps/v1
  kind: Deployment
  namespace: web
  name: api
reason: Applied
message: applied by kubectl apply -f
type: Normal
source:
  component: kubectl-test
`)
	if out := k.run(t, ctx, "apply", "-f", applied); !strings.Contains(out, "api-0.applied created") {
		t.Errorf("kubectl apply -f: %s", out)
	}
	// kubectl apply reads the object first: the stored event must be
	// queryable (the ingest is asynchronous), as it is once a get finds it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := k.cmd(ctx, "get", "event", "-n", "web", "api-0.applied").CombinedOutput(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the applied event was not queryable within 30s")
		}
		time.Sleep(100 * time.Millisecond) // polling an observable condition
	}
	// Applied again with a change: a patch, validated the same way.
	reapplied := write("reapplied.yaml", strings.Replace(readFile(t, applied), "applied by kubectl apply -f", "applied again", 1))
	if out := k.run(t, ctx, "apply", "-f", reapplied); !strings.Contains(out, "api-0.applied configured") {
		t.Errorf("kubectl apply -f, again: %s", out)
	}

	// Validation is real: a field no Event has is refused before it is sent.
	bad := write("bad.yaml", strings.Replace(event, "reason: Created", "reason: Created\nnotAField: 1", 1))
	out, err := k.cmd(ctx, "create", "-f", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "notAField") {
		t.Errorf("kubectl create -f with an unknown field: err %v\n%s", err, out)
	}

	// kubectl picks the first resource whose group-qualified name prefixes
	// its argument, and core's "events" prefixes "events.events.k8s.io"
	// (an API server answers the same): --api-version names the group.
	out = []byte(k.run(t, ctx, "explain", "events", "--api-version=events.k8s.io/v1"))
	for _, want := range []string{"GROUP:      events.k8s.io", "KIND:       Event", "VERSION:    v1", "regarding", "reportingController"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl explain events --api-version=events.k8s.io/v1 lacks %q:\n%s", want, out)
		}
	}
	out = []byte(k.run(t, ctx, "explain", "events.regarding.fieldPath", "--api-version=events.k8s.io/v1"))
	if !strings.Contains(string(out), "FIELD: fieldPath <string>") {
		t.Errorf("kubectl explain events.regarding.fieldPath:\n%s", out)
	}
	out = []byte(k.run(t, ctx, "explain", "events.involvedObject"))
	if !strings.Contains(string(out), "FIELD: involvedObject <ObjectReference>") {
		t.Errorf("kubectl explain events.involvedObject:\n%s", out)
	}
}

// TestK8sOpenAPIDocuments checks the documents' shape under the root and a
// tenant prefix: the v3 discovery lists both group versions, and each
// carries the Event schema with its group-version-kind.
func TestK8sOpenAPIDocuments(t *testing.T) {
	tg := startGateway(t, nil)
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(tg.httpURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	for _, prefix := range []string{"", "/tenants/project/shop"} {
		var v2 struct {
			Definitions map[string]map[string]any `json:"definitions"`
		}
		get(prefix+"/openapi/v2", &v2)
		for _, name := range []string{"io.k8s.api.events.v1.Event", "io.k8s.api.core.v1.Event", "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"} {
			if _, ok := v2.Definitions[name]; !ok {
				t.Errorf("%s/openapi/v2 has no %s", prefix, name)
			}
		}
		if gvk, _ := json.Marshal(v2.Definitions["io.k8s.api.events.v1.Event"]["x-kubernetes-group-version-kind"]); string(gvk) != `[{"group":"events.k8s.io","kind":"Event","version":"v1"}]` {
			t.Errorf("%s/openapi/v2 events.k8s.io/v1 Event gvk = %s", prefix, gvk)
		}
		var disc struct {
			Paths map[string]struct {
				ServerRelativeURL string `json:"serverRelativeURL"`
			} `json:"paths"`
		}
		get(prefix+"/openapi/v3", &disc)
		for _, gv := range []string{"apis/events.k8s.io/v1", "api/v1"} {
			p, ok := disc.Paths[gv]
			if !ok {
				t.Fatalf("%s/openapi/v3 does not list %s: %+v", prefix, gv, disc)
			}
			var doc struct {
				Components struct {
					Schemas map[string]any `json:"schemas"`
				} `json:"components"`
			}
			get(p.ServerRelativeURL, &doc)
			if len(doc.Components.Schemas) == 0 {
				t.Errorf("%s has no schemas", p.ServerRelativeURL)
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
