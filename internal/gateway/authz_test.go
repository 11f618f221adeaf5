package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// Principals of the matrix, by token.
const (
	tokShop     = "shop-token-0123456789"
	tokDeployer = "blog-deployer-token-0123"
	tokOrg      = "org-acme-token-01234567"
	tokDots     = "dots-reader-token-012345"
	tokPlatform = "platform-token-01234567"
)

func writeTokens(t *testing.T) string {
	t.Helper()
	h := authz.HashToken
	yaml := fmt.Sprintf(`principals:
  - name: shop
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [emit, watch, query, analytics]}
  - name: blog-deployer
    tokens: [%q]
    defaultTenant: {type: project, name: blog}
    grants:
      - {tenantType: project, tenantName: blog, kinds: [{group: apps, kind: Deployment}], verbs: [emit, watch, query]}
  - name: org-acme
    tokens: [%q]
    grants:
      - {tenantType: organization, tenantName: acme, verbs: [emit, watch, query, analytics]}
  - name: dots
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: "a.b", verbs: [watch, query]}
  - name: platform
    platform: true
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: "*", verbs: [emit, watch, query, analytics]}
      - {tenantType: organization, tenantName: "*", verbs: [emit, watch, query, analytics]}
      - {tenantType: global, verbs: [emit, watch, query, analytics]}
`, h(tokShop), h(tokDeployer), h(tokOrg), h(tokDots), h(tokPlatform))
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func tenantKey(t *eventgatev1.Tenant) string { return t.GetType() + "/" + t.GetName() }

// TestAuthorizationMatrix checks principals × tenants × verbs on every path,
// over gRPC and REST: what each may emit, watch, query and get, and that no
// other tenant's event is ever returned or streamed.
func TestAuthorizationMatrix(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tenants := []*eventgatev1.Tenant{
		{Type: "project", Name: "shop"}, {Type: "project", Name: "blog"}, {Type: "project", Name: "acme"},
		{Type: "organization", Name: "acme"}, {Type: "project", Name: "a.b"}, {Type: "project", Name: "a_b"},
		{Type: "project", Name: "~2A"}, {Type: "project", Name: "x' OR '1'='1"}, {Type: "global"},
	}
	// The platform principal seeds one Pod and one Deployment event per tenant.
	var seed []*eventgatev1.Event
	for _, tn := range tenants {
		seed = append(seed,
			&eventgatev1.Event{Tenant: tn, Reason: "Seed", Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "ns", Name: "p"}},
			&eventgatev1.Event{Tenant: tn, Reason: "Seed", Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "d"}})
	}
	resp, err := tg.client.Emit(withToken(ctx, tokPlatform), &eventgatev1.EmitRequest{Events: seed})
	if err != nil {
		t.Fatal(err)
	}
	uidTenant := map[string]string{}
	for i, r := range resp.Results {
		uidTenant[r.Uid] = tenantKey(seed[i].Tenant)
	}
	lastRV := maxRV(resp.Results)
	waitIngested(t, tg, lastRV)

	t.Run("unauthenticated", func(t *testing.T) {
		for _, tok := range []string{"", "wrong-token", tokShop + "x"} {
			_, err := tg.client.Query(withToken(ctx, tok), &eventgatev1.QueryRequest{})
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("Query with token %q: %v, want Unauthenticated", tok, err)
			}
			if code := restStatus(t, http.MethodGet, tg.httpURL+"/v1/events", tok, ""); code != http.StatusUnauthorized {
				t.Errorf("REST with token %q: %d, want 401", tok, code)
			}
		}
	})

	pod := &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Name: "p"}
	dep := &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Name: "d"}
	emits := []struct {
		tok    string
		tenant *eventgatev1.Tenant // nil: the principal's default
		obj    *eventgatev1.ObjectReference
		want   codes.Code
	}{
		{tokShop, &eventgatev1.Tenant{Type: "project", Name: "shop"}, pod, codes.OK},
		{tokShop, nil, pod, codes.OK}, // single grant: its tenant is the default
		{tokShop, &eventgatev1.Tenant{Type: "project", Name: "blog"}, pod, codes.PermissionDenied},
		{tokShop, &eventgatev1.Tenant{Type: "global"}, pod, codes.PermissionDenied},
		{tokDeployer, nil, dep, codes.OK},
		{tokDeployer, nil, pod, codes.PermissionDenied}, // kind not granted for emit
		{tokOrg, &eventgatev1.Tenant{Type: "organization", Name: "acme"}, pod, codes.OK},
		{tokOrg, &eventgatev1.Tenant{Type: "project", Name: "acme"}, pod, codes.PermissionDenied}, // flat: no inheritance
		{tokDots, &eventgatev1.Tenant{Type: "project", Name: "a.b"}, pod, codes.PermissionDenied}, // read-only
		{tokPlatform, &eventgatev1.Tenant{Type: "project", Name: "anything"}, pod, codes.OK},
	}
	for i, e := range emits {
		ev := &eventgatev1.Event{Tenant: e.tenant, Reason: "Matrix", Regarding: e.obj}
		_, err := tg.client.Emit(withToken(ctx, e.tok), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}})
		if status.Code(err) != e.want {
			t.Errorf("emit %d (%s into %v %s): %v, want %v", i, e.tok, e.tenant, e.obj.Kind, err, e.want)
		}
		body := fmt.Sprintf(`{"events":[%s]}`, mustJSON(t, ev))
		if code, want := restStatus(t, http.MethodPost, tg.httpURL+"/v1/events", e.tok, body), httpStatus(e.want); code != want {
			t.Errorf("REST emit %d: %d, want %d", i, code, want)
		}
	}

	// Reads: what each principal sees of the seed when it names no tenant.
	visible := map[string][]string{
		tokShop:     {"project/shop"},
		tokDeployer: {"project/blog"}, // Deployments only
		tokOrg:      {"organization/acme"},
		tokDots:     {"project/a.b"},
		tokPlatform: {"global/", "organization/acme", "project/a.b", "project/a_b", "project/acme", "project/blog", "project/shop", "project/x' OR '1'='1", "project/~2A"},
	}
	for tok, want := range visible {
		t.Run("query/"+tok[:8], func(t *testing.T) {
			resp, err := tg.client.Query(withToken(ctx, tok), &eventgatev1.QueryRequest{Reason: []string{"Seed"}, PageSize: 1000})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, e := range resp.Events {
				got[tenantKey(e.Tenant)] = true
				if tok == tokDeployer && e.Regarding.Kind != "Deployment" {
					t.Errorf("deployer sees a %s event", e.Regarding.Kind)
				}
			}
			if keys := sortedKeys(got); !slices.Equal(keys, want) {
				t.Fatalf("sees tenants %q, want %q", keys, want)
			}
			// Get of every seed uid: found exactly when visible.
			for uid, tenant := range uidTenant {
				_, err := tg.client.Get(withToken(ctx, tok), &eventgatev1.GetRequest{Uid: uid})
				code := status.Code(err)
				if slices.Contains(want, tenant) && code == codes.NotFound && tok == tokDeployer {
					continue // the deployer sees Deployments only
				}
				if slices.Contains(want, tenant) != (code == codes.OK) || (code != codes.OK && code != codes.NotFound) {
					t.Errorf("Get %s of tenant %s: %v", uid, tenant, err)
				}
			}
		})
	}
	denied := []struct {
		tok    string
		tenant *eventgatev1.Tenant
	}{
		{tokShop, &eventgatev1.Tenant{Type: "project", Name: "blog"}},
		{tokOrg, &eventgatev1.Tenant{Type: "project", Name: "acme"}}, // its "own" project: no inheritance
		{tokOrg, &eventgatev1.Tenant{Type: "project"}},
		{tokDots, &eventgatev1.Tenant{Type: "project", Name: "a_b"}},
		{tokShop, &eventgatev1.Tenant{Type: "global"}},
	}
	for _, d := range denied {
		if _, err := tg.client.Query(withToken(ctx, d.tok), &eventgatev1.QueryRequest{Tenant: d.tenant}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("Query of %v by %s: %v, want PermissionDenied", d.tenant, d.tok[:8], err)
		}
		w, err := tg.client.StreamWatch(withToken(ctx, d.tok), &eventgatev1.StreamWatchRequest{Tenant: d.tenant})
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("Watch of %v by %s: %v, want PermissionDenied", d.tenant, d.tok[:8], err)
		}
	}
	// SQL metacharacters in every filter value find nothing and leak nothing.
	for _, v := range []string{"' OR '1'='1", "shop') OR (1=1", `\' OR 1=1 --`, "*", ">", "%"} {
		resp, err := tg.client.Query(withToken(ctx, tokShop), &eventgatev1.QueryRequest{
			Reason: []string{v}, Namespace: v, Regarding: &eventgatev1.ObjectSelector{Name: v}, FieldSelector: "action!=" + v,
		})
		if err != nil || len(resp.Events) != 0 {
			t.Errorf("hostile value %q: %v events, %v", v, len(resp.GetEvents()), err)
		}
	}

	// Watches replay the seed: each sees exactly its tenants, then a bookmark
	// past the seed proves nothing else was queued.
	for tok, want := range visible {
		t.Run("watch/"+tok[:8], func(t *testing.T) {
			w, err := tg.client.StreamWatch(withToken(ctx, tok), &eventgatev1.StreamWatchRequest{ResourceVersion: "0", BookmarkInterval: durationpb.New(time.Second), Reasons: []string{"Seed"}})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for {
				r, err := w.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if r.Type == "BOOKMARK" {
					break
				}
				got[tenantKey(r.Object.Tenant)] = true
				if tok == tokDeployer && r.Object.Regarding.Kind != "Deployment" {
					t.Errorf("deployer watched a %s event", r.Object.Regarding.Kind)
				}
			}
			if keys := sortedKeys(got); !slices.Equal(keys, want) {
				t.Fatalf("watch sees tenants %q, want %q", keys, want)
			}
		})
	}
}
