package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/limits"
)

const tokAdmin = "admin-token-0123456789ab"

// writeAdminTokens is writeTokens' principals (shop, platform, …) plus an
// administrator: a platform principal with the admin verb on the global
// tenant. The platform principal holds every other verb there, not admin.
func writeAdminTokens(t *testing.T) string {
	t.Helper()
	base, err := os.ReadFile(writeTokens(t))
	if err != nil {
		t.Fatal(err)
	}
	admin := fmt.Sprintf(`  - name: ops
    platform: true
    tokens: [%q]
    grants:
      - {tenantType: global, verbs: [admin]}
`, authz.HashToken(tokAdmin))
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, append(base, admin...), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTenantUsage: an administrator sees a tenant's usage over gRPC and
// REST — its configured limits, the events it emitted lately and its
// bucket, its open watches, the keys the series aggregation tracks for it
// and its stored events — and the figures follow what the tenant did;
// others are refused (PermissionDenied / 403), a bad tenant is
// InvalidArgument / 400 naming the field.
func TestTenantUsage(t *testing.T) {
	tokens := writeAdminTokens(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.MaxBatch = 10
		c.Limits.Tenants = map[string]limits.Override{"project/shop": {EmitRate: ptr(1.0), EmitBurst: ptr(100), Watches: ptr(7)}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tenants := eventgatev1.NewTenantServiceClient(tg.conn)
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}
	acme := &eventgatev1.Tenant{Type: "organization", Name: "acme"}
	usage := func(tn *eventgatev1.Tenant) *eventgatev1.TenantUsage {
		t.Helper()
		resp, err := tenants.GetUsage(withToken(ctx, tokAdmin), &eventgatev1.GetUsageRequest{Tenant: tn})
		if err != nil {
			t.Fatalf("GetUsage %v: %v", tn, err)
		}
		return resp.GetUsage()
	}

	// Before anything: the limits, nothing else.
	u := usage(shop)
	if l := u.GetLimits(); l.GetEmitRate() != 1 || l.GetEmitBurst() != 100 || l.GetWatches() != 7 || l.GetQueries() != 16 {
		t.Errorf("limits: %v", l)
	}
	if u.GetEmit().GetAccepted() != 0 || u.GetEmit().GetBurstAvailable() != 100 || u.GetStored().GetEvents() != 0 || u.GetTracking().GetKeys() != 0 {
		t.Errorf("usage before emitting: %v", u)
	}

	// The shop emits five distinct events; acme repeats one three times (a
	// series) and emits one more.
	var evs []*eventgatev1.Event
	for i := range 5 {
		ev := testEvent("UsageSingleton", "Pod", "default", fmt.Sprintf("pod-%d", i))
		ev.Tenant = shop
		evs = append(evs, ev)
	}
	if _, err := tg.client.Emit(withToken(ctx, tokShop), &eventgatev1.EmitRequest{Events: evs}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ev := testEvent("UsageRepeat", "Pod", "default", "flaky")
		ev.Tenant, ev.Note = acme, fmt.Sprintf("attempt %d", i)
		_, err := tg.client.Emit(withToken(ctx, tokOrg), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
	}
	other := testEvent("UsageOther", "Pod", "default", "steady")
	other.Tenant = acme
	if _, err := tg.client.Emit(withToken(ctx, tokOrg), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{other}}); err != nil {
		t.Fatal(err)
	}
	// Emit figures first: they cover the last RateWindow.
	u = usage(shop)
	e := u.GetEmit()
	if e.GetAccepted() != 5 || e.GetLimited() != 0 || e.GetRate() != 5/limits.RateWindow.Seconds() || e.GetWindow().AsDuration() != limits.RateWindow {
		t.Errorf("emit: %v, want 5 accepted over %s", e, limits.RateWindow)
	}
	// 5 of 100 taken, refilled at 1/s since.
	if b := e.GetBurstAvailable(); b < 95 || b > 100 {
		t.Errorf("burst available %v, want 95..100", b)
	}
	if tr := u.GetTracking(); tr.GetKeys() != 5 || tr.GetSeries() != 0 || tr.GetOwnedPartitions() < 1 {
		t.Errorf("shop tracking %v, want 5 keys, no series", tr)
	}

	queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"UsageSingleton"}}, 5)
	watch, err := tg.client.StreamWatch(withToken(ctx, tokShop), &eventgatev1.StreamWatchRequest{Tenant: shop})
	if err != nil {
		t.Fatal(err)
	}
	if md, err := watch.Header(); err != nil || len(md.Get(event.WatchEstablishedHeader)) == 0 {
		if _, err := watch.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	u = usage(shop)
	if u.GetActiveWatches() != 1 {
		t.Errorf("active watches %d, want 1", u.GetActiveWatches())
	}
	if s := u.GetStored(); s.GetEvents() != 5 || s.GetBytes() <= 0 {
		t.Errorf("shop stored %v, want 5 events and their bytes", s)
	}
	ua := usage(acme)
	if tr := ua.GetTracking(); tr.GetKeys() != 2 || tr.GetSeries() != 1 {
		t.Errorf("acme tracking %v, want 2 keys of which 1 series", tr)
	}
	if ua.GetLimits().GetEmitRate() != 50_000 {
		t.Errorf("acme limits %v, want the defaults", ua.GetLimits())
	}

	// REST answers the same usage, for the global tenant too ("_").
	code, body := k8sRaw(t, http.MethodGet, tg.httpURL+"/v1/tenants/project/shop/usage", tokAdmin, "", "")
	var rest eventgatev1.TenantUsage
	if code != http.StatusOK {
		t.Fatalf("REST: %d %s", code, body)
	}
	if err := protojson.Unmarshal(body, &rest); err != nil {
		t.Fatalf("REST body %s: %v", body, err)
	}
	if rest.GetTenant().GetName() != "shop" || rest.GetStored().GetEvents() != 5 || rest.GetTracking().GetKeys() != 5 || rest.GetLimits().GetEmitBurst() != 100 {
		t.Errorf("REST usage: %s", body)
	}
	if code, body := k8sRaw(t, http.MethodGet, tg.httpURL+"/v1/tenants/global/_/usage", tokAdmin, "", ""); code != http.StatusOK {
		t.Errorf("REST global: %d %s", code, body)
	}

	// Not an administrator: refused, the platform principal included.
	for _, tok := range []string{tokShop, tokPlatform} {
		_, err := tenants.GetUsage(withToken(ctx, tok), &eventgatev1.GetUsageRequest{Tenant: shop})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("gRPC as %s: %v, want PermissionDenied", tok, err)
		}
		if code, body := k8sRaw(t, http.MethodGet, tg.httpURL+"/v1/tenants/project/shop/usage", tok, "", ""); code != http.StatusForbidden {
			t.Errorf("REST as %s: %d %s, want 403", tok, code, body)
		}
	}
	if _, err := tenants.GetUsage(ctx, &eventgatev1.GetUsageRequest{Tenant: shop}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("without credentials: %v", err)
	}

	// A bad tenant names the field.
	for _, tc := range []struct {
		tenant *eventgatev1.Tenant
		path   string
		field  string
	}{
		{&eventgatev1.Tenant{Type: "team", Name: "x"}, "/v1/tenants/team/x/usage", "tenant.type"},
		{&eventgatev1.Tenant{Type: "project", Name: "*"}, "/v1/tenants/project/*/usage", "tenant.name"},
		{&eventgatev1.Tenant{Type: "global", Name: "x"}, "/v1/tenants/global/x/usage", "tenant.name"},
		{&eventgatev1.Tenant{Type: "project"}, "", "tenant.name"},
	} {
		_, err := tenants.GetUsage(withToken(ctx, tokAdmin), &eventgatev1.GetUsageRequest{Tenant: tc.tenant})
		if status.Code(err) != codes.InvalidArgument || !slices.Contains(statusViolations(err), tc.field) {
			t.Errorf("gRPC %v: %v, want InvalidArgument naming %s", tc.tenant, err, tc.field)
		}
		if tc.path == "" {
			continue
		}
		code, body := k8sRaw(t, http.MethodGet, tg.httpURL+tc.path, tokAdmin, "", "")
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		if code != http.StatusBadRequest || !slices.Contains(violationFields(m), tc.field) {
			t.Errorf("REST %s: %d %s, want 400 naming %s", tc.path, code, body, tc.field)
		}
	}
}

// TestTenantUsageLimited: events refused over the tenant's rate limit are
// counted as limited, not accepted, and its bucket is shown empty.
func TestTenantUsageLimited(t *testing.T) {
	tokens := writeAdminTokens(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.MaxBatch = 3
		c.Limits.Tenants = map[string]limits.Override{"project/shop": {EmitRate: ptr(0.01), EmitBurst: ptr(3)}}
	})
	ctx := context.Background()
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}
	send := func(name string) error {
		ev := testEvent("UsageLimited", "Pod", "default", name)
		ev.Tenant = shop
		_, err := tg.client.Emit(withToken(ctx, tokShop), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}})
		return err
	}
	for i := range 3 {
		if err := send(fmt.Sprintf("p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := send("over"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fourth event: %v, want ResourceExhausted", err)
	}
	resp, err := eventgatev1.NewTenantServiceClient(tg.conn).GetUsage(withToken(ctx, tokAdmin), &eventgatev1.GetUsageRequest{Tenant: shop})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetUsage().GetEmit(); e.GetAccepted() != 3 || e.GetLimited() != 1 || e.GetBurstAvailable() >= 1 {
		t.Errorf("emit usage %v, want 3 accepted, 1 limited, an empty bucket", e)
	}
}

// statusViolations are the fields a gRPC error's BadRequest names.
func statusViolations(err error) []string {
	var out []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField())
			}
		}
	}
	return out
}
