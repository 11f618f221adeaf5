package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/webhook"
)

// postWebhook posts body to url as the bearer of token ("" for none) with
// extra headers and decodes the JSON answer.
func postWebhook(t *testing.T, url, token, body string, hdr ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("response body: %v", err)
	}
	return resp.StatusCode, m
}

// queryUntil polls Query as token until it returns want events (ingest into
// ClickHouse is asynchronous), then returns them.
func queryUntil(t *testing.T, tg *testGateway, token string, req *eventgatev1.QueryRequest, want int) []*eventgatev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req.PageSize = 1000
	for {
		resp, err := tg.client.Query(withToken(ctx, token), req)
		if err == nil && len(resp.Events) >= want {
			if len(resp.Events) > want {
				t.Fatalf("Query found %d events, want %d: %v", len(resp.Events), want, resp.Events)
			}
			return resp.Events
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Query did not find %d events: %v, %v", want, resp, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// webhookItem is an events.k8s.io/v1 Event of the list, as JSON.
func webhookItem(uid, reason, kind, name string, ann map[string]string) string {
	m := map[string]any{
		"apiVersion": "events.k8s.io/v1", "kind": "Event",
		"metadata":            map[string]any{"namespace": "default", "uid": uid, "annotations": ann},
		"eventTime":           "2026-11-20T10:30:00.123456Z",
		"reportingController": "example.com/ctl", "reportingInstance": "ctl-1",
		"action": "Sync", "reason": reason, "note": "note of " + name, "type": "Normal",
		"regarding": map[string]any{"apiVersion": apiVersionOf(kind), "kind": kind, "namespace": "default", "name": name},
	}
	if uid == "" {
		delete(m["metadata"].(map[string]any), "uid")
	}
	if reason == "" {
		delete(m, "reason")
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func apiVersionOf(kind string) string {
	if kind == "Deployment" {
		return "apps/v1"
	}
	return "v1"
}

func eventList(items ...string) string {
	return `{"apiVersion":"events.k8s.io/v1","kind":"EventList","items":[` + strings.Join(items, ",") + `]}`
}

func scope(typ, name string) map[string]string {
	return map[string]string{webhook.ScopeTypeAnnotation: typ, webhook.ScopeNameAnnotation: name}
}

// resultItems returns the items of a list answer.
func resultItems(t *testing.T, m map[string]any) []map[string]any {
	t.Helper()
	raw, ok := m["items"].([]any)
	if !ok {
		t.Fatalf("answer has no items: %v", m)
	}
	out := make([]map[string]any, len(raw))
	for i, r := range raw {
		out[i] = r.(map[string]any)
		if int(out[i]["index"].(float64)) != i {
			t.Fatalf("item %d has index %v", i, out[i]["index"])
		}
	}
	return out
}

func itemCode(it map[string]any) string {
	if e, ok := it["error"].(map[string]any); ok {
		return e["code"].(string)
	}
	return "OK"
}

// statusFields returns the fields a google.rpc.Status body's BadRequest names.
func statusFields(m map[string]any) []string {
	var out []string
	ds, _ := m["details"].([]any)
	for _, d := range ds {
		vs, _ := d.(map[string]any)["fieldViolations"].([]any)
		for _, v := range vs {
			out = append(out, v.(map[string]any)["field"].(string))
		}
	}
	return out
}

// markerIngested emits a marker event and waits until Query sees it, so
// that anything stored before it is queryable too.
func markerIngested(t *testing.T, tg *testGateway, reason string) {
	t.Helper()
	ctx := withToken(context.Background(), tokPlatform)
	resp, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{{
		Tenant: &eventgatev1.Tenant{Type: "project", Name: "marker"}, Reason: reason,
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Name: "marker"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if rv := resp.Results[0].ResourceVersion; rv != "" {
		waitIngested(t, tg, rv)
	}
	queryUntil(t, tg, tokPlatform, &eventgatev1.QueryRequest{Reason: []string{reason}}, 1)
}

func itemFields(it map[string]any) []string {
	var out []string
	if e, ok := it["error"].(map[string]any); ok {
		vs, _ := e["fieldViolations"].([]any)
		for _, v := range vs {
			out = append(out, v.(map[string]any)["field"].(string))
		}
	}
	return out
}

// TestWebhookEventList posts a batched EventList mixing good items, an item
// of a tenant the caller may not emit to and invalid items: the good ones
// are stored in the tenant their annotations name (or the caller's default),
// every item has its result, a retry is idempotent, and a caller without
// the grant is refused with 403.
func TestWebhookEventList(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens; c.MaxBatch = 20 })
	url := tg.httpURL + webhook.EventsPath
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}

	const (
		uid0 = "11111111-0000-4000-8000-000000000000"
		uid4 = "11111111-0000-4000-8000-000000000004"
	)
	items := []string{
		0: webhookItem(uid0, "WebhookScoped", "Pod", "p0", scope("project", "shop")),
		1: webhookItem("", "WebhookDefault", "Pod", "p1", nil),
		2: webhookItem("", "WebhookOtherTenant", "Pod", "p2", scope("project", "blog")),
		3: webhookItem("", "", "Pod", "p3", scope("project", "shop")),
		4: webhookItem(uid4, "WebhookOwnAnnotation", "Deployment", "d4", map[string]string{webhook.TenantTypeAnnotation: "project", webhook.TenantNameAnnotation: "shop", "keep": "me"}),
		5: `{"metadata":{"name":"x"},"eventTime":12,"reason":"Bad"}`,
		6: webhookItem("", "WebhookBadScope", "Pod", "p6", scope("team", "shop")),
	}
	code, m := postWebhook(t, url, tokShop, eventList(items...))
	if code != http.StatusMultiStatus {
		t.Fatalf("status %d, want 207: %v", code, m)
	}
	res := resultItems(t, m)
	wantCodes := []string{"OK", "OK", "PermissionDenied", "InvalidArgument", "OK", "InvalidArgument", "InvalidArgument"}
	var gotCodes []string
	for _, it := range res {
		gotCodes = append(gotCodes, itemCode(it))
	}
	if d := cmp.Diff(wantCodes, gotCodes); d != "" {
		t.Fatalf("item codes (-want +got):\n%s\n%v", d, m)
	}
	if m["accepted"].(float64) != 3 || m["failed"].(float64) != 4 {
		t.Errorf("accepted %v failed %v, want 3 and 4", m["accepted"], m["failed"])
	}
	for i, want := range map[int][]string{
		3: {"items[3].reason"},
		5: {"items[5].eventTime"},
		6: {"items[6].metadata.annotations[" + webhook.ScopeTypeAnnotation + "]"},
	} {
		if d := cmp.Diff(want, itemFields(res[i])); d != "" {
			t.Errorf("item %d fields (-want +got):\n%s", i, d)
		}
	}
	if e := res[2]["error"].(map[string]any); e["httpStatus"].(float64) != http.StatusForbidden {
		t.Errorf("denied item: %v", e)
	}
	if res[0]["uid"] != uid0 || res[4]["uid"] != uid4 || res[0]["resourceVersion"] == nil {
		t.Errorf("stored items answer uid/resourceVersion: %v, %v", res[0], res[4])
	}
	if tn := res[0]["tenant"].(map[string]any); tn["type"] != "project" || tn["name"] != "shop" {
		t.Errorf("item 0 tenant %v", tn)
	}

	// Stored: exactly the good items, each in project/shop.
	evs := queryUntil(t, tg, tokPlatform, &eventgatev1.QueryRequest{ReportingController: []string{"example.com/ctl"}}, 3)
	got := map[string]*eventgatev1.Event{}
	for _, e := range evs {
		if tenantKey(e.Tenant) != tenantKey(shop) {
			t.Errorf("%s stored in tenant %v, want project/shop", e.Reason, e.Tenant)
		}
		got[e.Reason] = e
	}
	if len(got) != 3 || got["WebhookScoped"] == nil || got["WebhookDefault"] == nil || got["WebhookOwnAnnotation"] == nil {
		t.Fatalf("stored %v", evs)
	}
	if e := got["WebhookOwnAnnotation"]; e.Uid != uid4 || e.Annotations["keep"] != "me" || e.Annotations[webhook.TenantTypeAnnotation] != "" ||
		e.Note != "note of d4" || e.Action != "Sync" || e.ReportingInstance != "ctl-1" || e.Regarding.GetKind() != "Deployment" ||
		!e.EventTime.AsTime().Equal(time.Date(2026, 11, 20, 10, 30, 0, 123456000, time.UTC)) {
		t.Errorf("stored item 4: %v", e)
	}

	// A retry of the list: the items with uids are duplicates, stored once.
	code, m = postWebhook(t, url, tokShop, eventList(items[0], items[4]))
	if code != http.StatusOK {
		t.Fatalf("retry: status %d: %v", code, m)
	}
	for _, it := range resultItems(t, m) {
		if it["outcome"] != "EMIT_OUTCOME_DUPLICATE" {
			t.Errorf("retried item %v: want EMIT_OUTCOME_DUPLICATE", it)
		}
	}

	// A series update of item 0 (same uid, series set), as an API server
	// forwards it, is a new version, not a retry; its own retry is.
	var upd map[string]any
	if err := json.Unmarshal([]byte(items[0]), &upd); err != nil {
		t.Fatal(err)
	}
	upd["series"] = map[string]any{"count": 2, "lastObservedTime": "2026-11-20T10:31:00.000000Z"}
	updJSON, _ := json.Marshal(upd)
	for i, want := range []string{"EMIT_OUTCOME_CREATED", "EMIT_OUTCOME_DUPLICATE"} {
		code, m = postWebhook(t, url, tokShop, eventList(string(updJSON)))
		if it := resultItems(t, m)[0]; code != http.StatusOK || it["outcome"] != want || it["uid"] != uid0 {
			t.Fatalf("series update, post %d: %d %v, want %s", i, code, m, want)
		}
	}
	evs = queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"WebhookScoped"}}, 1)
	for deadline := time.Now().Add(30 * time.Second); evs[0].GetSeries().GetCount() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("series update not stored: %v", evs[0])
		}
		evs = queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"WebhookScoped"}}, 1)
	}

	// Items without uid and an Idempotency-Key: a retry is a duplicate too.
	keyed := eventList(webhookItem("", "WebhookKeyed", "Pod", "k0", nil), webhookItem("", "WebhookKeyed", "Pod", "k1", nil))
	code, m = postWebhook(t, url, tokShop, keyed, webhook.IdempotencyKeyHeader, "batch-7")
	if code != http.StatusOK {
		t.Fatalf("keyed: status %d: %v", code, m)
	}
	first := resultItems(t, m)
	code, m = postWebhook(t, url, tokShop, keyed, webhook.IdempotencyKeyHeader, "batch-7")
	if code != http.StatusOK {
		t.Fatalf("keyed retry: status %d: %v", code, m)
	}
	for i, it := range resultItems(t, m) {
		if it["outcome"] != "EMIT_OUTCOME_DUPLICATE" || it["uid"] != first[i]["uid"] {
			t.Errorf("keyed retry item %d: %v, first %v", i, it, first[i])
		}
	}
	queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"WebhookKeyed"}}, 2)

	// Authorization per kind: the blog deployer may emit Deployments only.
	code, m = postWebhook(t, url, tokDeployer, eventList(
		webhookItem("", "WebhookKinds", "Deployment", "d", nil),
		webhookItem("", "WebhookKinds", "Pod", "p", nil)))
	if code != http.StatusMultiStatus {
		t.Fatalf("deployer: status %d: %v", code, m)
	}
	if res := resultItems(t, m); itemCode(res[0]) != "OK" || itemCode(res[1]) != "PermissionDenied" {
		t.Fatalf("deployer results: %v", res)
	}
	if evs := queryUntil(t, tg, tokPlatform, &eventgatev1.QueryRequest{Reason: []string{"WebhookKinds"}}, 1); evs[0].Regarding.Kind != "Deployment" || tenantKey(evs[0].Tenant) != "project/blog" {
		t.Fatalf("deployer stored %v", evs[0])
	}

	// Without the grant: 403, nothing stored.
	for _, tc := range []struct{ tok, body string }{
		{tokDots, eventList(webhookItem("", "WebhookDenied", "Pod", "x", scope("project", "a.b")))},
		{tokShop, eventList(webhookItem("", "WebhookDenied", "Pod", "x", scope("project", "blog")), webhookItem("", "WebhookDenied", "Pod", "y", scope("global", "_")))},
	} {
		code, m := postWebhook(t, url, tc.tok, tc.body)
		if code != http.StatusForbidden || m["code"].(float64) != 7 {
			t.Fatalf("without the grant: status %d: %v", code, m)
		}
		for _, it := range resultItems(t, m) {
			if itemCode(it) != "PermissionDenied" {
				t.Errorf("item %v", it)
			}
		}
	}
	code, _ = postWebhook(t, url, "wrong-token", eventList(items[0]))
	if code != http.StatusUnauthorized {
		t.Fatalf("wrong token: status %d, want 401", code)
	}

	// Whole-request errors: 400 with a google.rpc.Status naming the field.
	for _, tc := range []struct{ body, field string }{
		{`not json`, "body"},
		{`{"kind":"PodList","items":[{}]}`, "kind"},
		{`{"apiVersion":"v1","items":[{}]}`, "apiVersion"},
		{`{"items":[]}`, "items"},
		{`{"items":"x"}`, "items"},
		{eventList(slices.Repeat([]string{items[0]}, 21)...), "items"},
	} {
		code, m := postWebhook(t, url, tokShop, tc.body)
		if code != http.StatusBadRequest || !slices.Contains(statusFields(m), tc.field) {
			t.Errorf("body %.40q: status %d %v, want 400 naming %q", tc.body, code, m, tc.field)
		}
	}
	markerIngested(t, tg, "WebhookMarker")
	queryUntil(t, tg, tokPlatform, &eventgatev1.QueryRequest{Reason: []string{"WebhookDenied", "WebhookOtherTenant", "WebhookBadScope"}}, 0)
}

// fluxPayload is a notification-controller event about a Kustomization.
func fluxPayload(severity, reason string, metadata map[string]string) string {
	m := map[string]any{
		"involvedObject":      map[string]any{"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization", "namespace": "flux-system", "name": "apps", "uid": "7d0cdc51-ddcf-4743-b223-83ca5c699632"},
		"severity":            severity,
		"timestamp":           "2026-11-20T10:30:00Z",
		"message":             "Health check failed after 30s",
		"reason":              reason,
		"metadata":            metadata,
		"reportingController": "kustomize-controller",
		"reportingInstance":   "kustomize-controller-7f5c",
	}
	if reason == "" {
		delete(m, "reason")
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestWebhookFlux posts Flux events: severity becomes type, RFC-0008
// metadata precedence (annotations < tenant metadata < controller) with a
// Warning event naming the conflicts, a retried post stored once, the
// caller's default tenant, and refusals (403 without the grant, 400 naming
// the field).
func TestWebhookFlux(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.Flux.TenantMetadata = map[string]map[string]string{"project/shop": {"cluster": "prod-eu", "revision": "from-tenant"}}
	})
	url := tg.httpURL + webhook.FluxPath
	shopURL := url + "?tenant.type=project&tenant.name=shop"
	payload := fluxPayload("error", "HealthCheckFailed", map[string]string{
		"event.toolkit.fluxcd.io/deploymentID": "e076e315",
		"event.toolkit.fluxcd.io/cluster":      "from-annotation",
		"kustomize.toolkit.fluxcd.io/revision": "main@sha1:731f7ead",
		"kustomize.toolkit.fluxcd.io/token":    "secret",
		"helm.toolkit.fluxcd.io/revision":      "other group",
		"unprefixed":                           "dropped",
	})
	wantMeta := map[string]string{"deploymentID": "e076e315", "cluster": "prod-eu", "revision": "main@sha1:731f7ead"}

	code, m := postWebhook(t, shopURL, tokShop, payload)
	if code != http.StatusOK {
		t.Fatalf("status %d: %v", code, m)
	}
	b, _ := json.Marshal(m)
	var res webhook.FluxResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantMeta, res.Metadata); d != "" {
		t.Errorf("answered metadata (-want +got):\n%s", d)
	}
	wantConflicts := []webhook.Conflict{
		{Key: "cluster", Sources: []string{webhook.SourceObjectAnnotations, webhook.SourceTenantMetadata}},
		{Key: "revision", Sources: []string{webhook.SourceTenantMetadata, webhook.SourceControllerMetadata}},
	}
	if d := cmp.Diff(wantConflicts, res.Conflicts); d != "" {
		t.Errorf("conflicts (-want +got):\n%s", d)
	}
	if res.Event.Outcome == "" || res.ConflictEvent == nil || res.ConflictEvent.Error != nil {
		t.Fatalf("results: %+v", res)
	}

	evs := queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Regarding: &eventgatev1.ObjectSelector{Kind: "Kustomization"}}, 2)
	byReason := map[string]*eventgatev1.Event{}
	for _, e := range evs {
		byReason[e.Reason] = e
		if tenantKey(e.Tenant) != "project/shop" {
			t.Errorf("%s stored in %v", e.Reason, e.Tenant)
		}
	}
	ev := byReason["HealthCheckFailed"]
	if ev == nil || ev.Type != "Warning" || ev.Note != "Health check failed after 30s" || ev.ReportingController != "kustomize-controller" ||
		ev.ReportingInstance != "kustomize-controller-7f5c" || ev.Regarding.GetApiVersion() != "kustomize.toolkit.fluxcd.io/v1" ||
		ev.Regarding.GetNamespace() != "flux-system" || ev.Namespace != "flux-system" || ev.Annotations[webhook.SeverityAnnotation] != "error" ||
		!ev.EventTime.AsTime().Equal(time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC)) {
		t.Fatalf("stored event: %v", ev)
	}
	if d := cmp.Diff(wantMeta, ev.Metadata); d != "" {
		t.Errorf("stored metadata (-want +got):\n%s", d)
	}
	warn := byReason[webhook.ConflictReason]
	if warn == nil || warn.Type != "Warning" || warn.Regarding.GetName() != "apps" || !strings.Contains(warn.Note, "cluster") || !strings.Contains(warn.Note, "revision") ||
		warn.Annotations["revision"] != webhook.SourceTenantMetadata+", "+webhook.SourceControllerMetadata {
		t.Fatalf("conflict event: %v", warn)
	}

	// A retried post is stored once.
	code, m = postWebhook(t, shopURL, tokShop, payload)
	if code != http.StatusOK || m["event"].(map[string]any)["outcome"] != "EMIT_OUTCOME_DUPLICATE" {
		t.Fatalf("retry: %d %v", code, m)
	}

	// Info becomes Normal; no tenant named: the caller's default tenant, and
	// no tenant metadata (it is keyed by the tenant the request names).
	code, m = postWebhook(t, url, tokShop, fluxPayload("info", "ReconciliationSucceeded", map[string]string{"kustomize.toolkit.fluxcd.io/revision": "main@sha1:1"}))
	if code != http.StatusOK || m["conflicts"] != nil {
		t.Fatalf("default tenant: %d %v", code, m)
	}
	evs = queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"ReconciliationSucceeded"}}, 1)
	if e := evs[0]; e.Type != "Normal" || tenantKey(e.Tenant) != "project/shop" || !cmp.Equal(e.Metadata, map[string]string{"revision": "main@sha1:1"}) {
		t.Fatalf("info event: %v", e)
	}

	// Without the grant: 403 with a JSON status, nothing stored.
	for _, tc := range []struct{ tok, url string }{
		{tokDots, url + "?tenant.type=project&tenant.name=a.b"},
		{tokShop, url + "?tenant.type=project&tenant.name=blog"},
		{tokOrg, url + "?tenant.type=project&tenant.name=acme"},
	} {
		code, m := postWebhook(t, tc.url, tc.tok, fluxPayload("info", "FluxDenied", nil))
		if code != http.StatusForbidden || m["code"].(float64) != 7 {
			t.Fatalf("without the grant: %d %v", code, m)
		}
	}
	// Bad input: 400 naming the field.
	for _, tc := range []struct{ url, body, field string }{
		{shopURL, fluxPayload("warn", "FluxBad", nil), "severity"},
		{shopURL, fluxPayload("info", "", nil), "reason"},
		{shopURL, `{"involvedObject":"x"}`, "involvedObject"},
		{shopURL, `{`, "body"},
		{url + "?tenant.type=team&tenant.name=x", fluxPayload("info", "FluxBad", nil), "tenant.type"},
		{shopURL, strings.Replace(fluxPayload("info", "FluxBad", nil), `"Kustomization"`, `""`, 1), "involvedObject.kind"},
	} {
		code, m := postWebhook(t, tc.url, tokShop, tc.body)
		if code != http.StatusBadRequest || !slices.Contains(statusFields(m), tc.field) {
			t.Errorf("%.50q: %d %v, want 400 naming %q", tc.body, code, m, tc.field)
		}
	}
	markerIngested(t, tg, "FluxMarker")
	queryUntil(t, tg, tokPlatform, &eventgatev1.QueryRequest{Reason: []string{"FluxDenied", "FluxBad"}}, 0)
}
