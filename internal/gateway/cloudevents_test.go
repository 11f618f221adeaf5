package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/webhook"
)

var ceTime = time.Date(2026, 11, 20, 10, 30, 0, 123456000, time.UTC)

// orderEvent is a CloudEvent about an order of the shop.
func orderEvent(t *testing.T, id, typ, subject string, data any) cloudevents.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("https://shop.example/orders")
	e.SetType(typ)
	e.SetSubject(subject)
	e.SetTime(ceTime)
	e.SetExtension(webhook.ExtRegardingKind, "Order")
	if data != nil {
		ct := cloudevents.ApplicationJSON
		if _, ok := data.(string); ok {
			ct = cloudevents.TextPlain
		}
		if err := e.SetData(ct, data); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// ceClient is the CloudEvents SDK's HTTP client posting to url as the
// bearer of token.
func ceClient(t *testing.T, url, token string) cloudevents.Client {
	t.Helper()
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(url), cehttp.WithHeader("Authorization", "Bearer "+token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ceStatus is the HTTP status of an SDK client's send.
func ceStatus(t *testing.T, res error) int {
	t.Helper()
	var hr *cehttp.Result
	if !cloudevents.ResultAs(res, &hr) {
		t.Fatalf("send did not reach the gateway: %v", res)
	}
	return hr.StatusCode
}

// doCE sends a request built by the SDK and decodes the JSON answer.
func doCE(t *testing.T, req *http.Request, token string) (int, map[string]any) {
	t.Helper()
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("response body: %v", err)
	}
	return resp.StatusCode, m
}

// TestWebhookCloudEvents sends CloudEvents with the CloudEvents SDK in
// structured, binary and batched mode: each is stored by the documented
// mapping in the tenant the request names, a redelivered CloudEvent (same
// source and id) is stored once, and a batch answers per event.
func TestWebhookCloudEvents(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens })
	url := tg.httpURL + webhook.CloudEventsPath + "?tenant.type=project&tenant.name=shop"
	ctx := context.Background()
	c := ceClient(t, url, tokShop)

	created := orderEvent(t, "ord-1", "com.example.order.created", "orders/42", map[string]any{"total": 12, "currency": "EUR"})
	created.SetExtension(webhook.ExtEventType, "Warning")
	created.SetExtension("region", "eu-1")
	created.SetExtension("priority", 3)
	if code := ceStatus(t, c.Send(binding.WithForceStructured(ctx), created)); code != http.StatusOK {
		t.Fatalf("structured: status %d", code)
	}
	paid := orderEvent(t, "ord-2", "com.example.order.paid", "orders/42", "paid by card")
	if code := ceStatus(t, c.Send(binding.WithForceBinary(ctx), paid)); code != http.StatusOK {
		t.Fatalf("binary: status %d", code)
	}

	// Redelivered, in the other mode: the same event, stored once.
	req, err := cehttp.NewHTTPRequestFromEvent(ctx, url, created)
	if err != nil {
		t.Fatal(err)
	}
	code, m := doCE(t, req, tokShop)
	if code != http.StatusOK || m["outcome"] != "EMIT_OUTCOME_DUPLICATE" || m["uid"] != webhook.CloudEventUID(&eventgatev1.Tenant{Type: "project", Name: "shop"}, created.Source(), "ord-1") {
		t.Fatalf("redelivery: %d %v", code, m)
	}

	// A batch: two new events (one without a subject: about its source),
	// a redelivery, and one of the new events twice.
	shipped := orderEvent(t, "ord-3", "com.example.order.shipped", "orders/42", nil)
	tick := cloudevents.NewEvent()
	tick.SetID("tick-1")
	tick.SetSource("//scheduler/nightly")
	tick.SetType("com.example.scheduler.tick")
	req, err = cehttp.NewHTTPRequestFromEvents(ctx, url, []cloudevents.Event{shipped, tick, paid, shipped})
	if err != nil {
		t.Fatal(err)
	}
	code, m = doCE(t, req, tokShop)
	items := resultItems(t, m)
	if code != http.StatusOK || m["accepted"].(float64) != 4 {
		t.Fatalf("batch: %d %v", code, m)
	}
	var outcomes []string
	for _, it := range items {
		outcomes = append(outcomes, it["outcome"].(string))
	}
	if d := cmp.Diff([]string{"EMIT_OUTCOME_CREATED", "EMIT_OUTCOME_CREATED", "EMIT_OUTCOME_DUPLICATE", "EMIT_OUTCOME_DUPLICATE"}, outcomes); d != "" {
		t.Errorf("batch outcomes (-want +got):\n%s", d)
	}

	markerIngested(t, tg, "CloudEventsMarker")
	evs := queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Regarding: &eventgatev1.ObjectSelector{Kind: "Order"}}, 3)
	byReason := map[string]*eventgatev1.Event{}
	for _, e := range evs {
		byReason[e.Reason] = e
		if tenantKey(e.Tenant) != "project/shop" {
			t.Errorf("%s stored in %v", e.Reason, e.Tenant)
		}
	}
	ev := byReason["com.example.order.created"]
	if ev == nil {
		t.Fatalf("order.created not stored: %v", evs)
	}
	want := &eventgatev1.Event{
		Type: "Warning", Reason: "com.example.order.created", ReportingController: "https://shop.example/orders",
		Regarding: &eventgatev1.ObjectReference{Kind: "Order", Name: "orders/42"},
		Note:      `{"currency":"EUR","total":12}`,
		Metadata:  map[string]string{"region": "eu-1", "priority": "3"},
		Annotations: map[string]string{
			webhook.CEIDAnnotation: "ord-1", webhook.CESourceAnnotation: "https://shop.example/orders", webhook.CETypeAnnotation: "com.example.order.created",
			webhook.CESpecVersionAnnotation: "1.0", webhook.CESubjectAnnotation: "orders/42", webhook.CEDataContentTypeAnnotation: "application/json",
		},
	}
	got := &eventgatev1.Event{Type: ev.Type, Reason: ev.Reason, ReportingController: ev.ReportingController, Regarding: ev.Regarding, Note: ev.Note, Metadata: ev.Metadata, Annotations: ev.Annotations}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("stored order.created (-want +got):\n%s", d)
	}
	if !ev.EventTime.AsTime().Equal(ceTime) {
		t.Errorf("eventTime %v, want %v", ev.EventTime.AsTime(), ceTime)
	}
	if e := byReason["com.example.order.paid"]; e == nil || e.Note != "paid by card" || e.Type != "Normal" {
		t.Errorf("binary event: %v", e)
	}
	if e := byReason["com.example.order.shipped"]; e == nil || e.Note != "" {
		t.Errorf("event without data: %v", e)
	}
	ticks := queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"com.example.scheduler.tick"}}, 1)
	if r := ticks[0].Regarding; r.GetKind() != webhook.DefaultKind || r.GetName() != "//scheduler/nightly" {
		t.Errorf("event without subject regards %v, want %s %q", r, webhook.DefaultKind, "//scheduler/nightly")
	}
}

// TestWebhookCloudEventsBadInput: a request that is not a CloudEvent, or a
// CloudEvent the gateway cannot store, is a 400 naming the attribute; a
// batch answers each element, invalid or not allowed (kind grants), alone;
// a caller without the grant gets 403 and an unauthenticated one 401.
func TestWebhookCloudEventsBadInput(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens; c.MaxBatch = 4; c.MaxRequestBytes = 64 << 10 })
	base := tg.httpURL + webhook.CloudEventsPath
	url := base + "?tenant.type=project&tenant.name=shop"
	post := func(url, token, ct, body string, hdr ...string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return doCE(t, req, token)
	}
	const structured, batch = "application/cloudevents+json", "application/cloudevents-batch+json"
	good := `{"specversion":"1.0","id":"b-1","source":"/bad","type":"CloudEventsBad","subject":"x"}`
	long := strings.Repeat("t", 129)

	for _, tc := range []struct {
		name, url, ct, body string
		hdr                 []string
		field               string
	}{
		{"plain JSON", url, "application/json", good, nil, "header Content-Type"},
		{"no source", url, structured, `{"specversion":"1.0","id":"1","type":"CloudEventsBad"}`, nil, "source"},
		{"unknown specversion", url, structured, `{"specversion":"9.9","id":"1","source":"/s","type":"CloudEventsBad"}`, nil, "specversion"},
		{"not JSON", url, structured, `{`, nil, "body"},
		{"binary without id", url, "text/plain", "x", []string{"ce-specversion", "1.0", "ce-source", "/s", "ce-type", "CloudEventsBad"}, "id"},
		{"binary bad time", url, "text/plain", "x", []string{"ce-specversion", "1.0", "ce-id", "1", "ce-source", "/s", "ce-type", "CloudEventsBad", "ce-time", "yesterday"}, "headers"},
		{"type too long for a reason", url, structured, `{"specversion":"1.0","id":"1","source":"/s","type":"` + long + `"}`, nil, "type"},
		{"bad event type", url, structured, `{"specversion":"1.0","id":"1","source":"/s","type":"CloudEventsBad","eventtype":"Error"}`, nil, "eventtype"},
		{"time out of range", url, structured, `{"specversion":"1.0","id":"1","source":"/s","type":"CloudEventsBad","time":"2200-01-01T00:00:00Z"}`, nil, "time"},
		{"bad tenant", base + "?tenant.type=team&tenant.name=x", structured, good, nil, "tenant.type"},
		{"batch not an array", url, batch, good, nil, "body"},
		{"empty batch", url, batch, `[]`, nil, "body"},
		{"batch over the limit", url, batch, "[" + strings.Repeat(good+",", 4) + good + "]", nil, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, m := post(tc.url, tokShop, tc.ct, tc.body, tc.hdr...)
			if code != http.StatusBadRequest || !slices.Contains(statusFields(m), tc.field) {
				t.Errorf("%d %v, want 400 naming %q", code, m, tc.field)
			}
		})
	}

	// One bad element does not stop the others: 207, each answered.
	code, m := post(url, tokShop, batch, `[`+good+`,{"specversion":"1.0","source":"/s","type":"CloudEventsBad"},{"specversion":"1.0","id":"2","source":"/s","type":"`+long+`"}]`)
	items := resultItems(t, m)
	if code != http.StatusMultiStatus || len(items) != 3 || itemCode(items[0]) != "OK" {
		t.Fatalf("mixed batch: %d %v", code, m)
	}
	for i, field := range map[int]string{1: "[1].id", 2: "[2].type"} {
		if itemCode(items[i]) != "InvalidArgument" || !slices.Contains(itemFields(items[i]), field) {
			t.Errorf("item %d: %v, want InvalidArgument naming %q", i, items[i], field)
		}
	}

	// Authorization per element: the blog deployer may emit Deployments
	// only, so its CloudEvent of the default kind is refused alone.
	deploy := `{"specversion":"1.0","id":"d-1","source":"/ci","type":"Rollout","subject":"web","regardingkind":"Deployment","regardingapiversion":"apps/v1"}`
	other := `{"specversion":"1.0","id":"d-2","source":"/ci","type":"CloudEventsBad","subject":"web"}`
	code, m = post(base+"?tenant.type=project&tenant.name=blog", tokDeployer, batch, "["+deploy+","+other+"]")
	items = resultItems(t, m)
	if code != http.StatusMultiStatus || len(items) != 2 || itemCode(items[0]) != "OK" || itemCode(items[1]) != "PermissionDenied" {
		t.Fatalf("batch of two kinds: %d %v", code, m)
	}

	// Over the body limit: 413.
	code, m = post(url, tokShop, structured, `{"specversion":"1.0","id":"1","source":"/s","type":"CloudEventsBad","data":"`+strings.Repeat("x", 65<<10)+`"}`)
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("over the body limit: %d %v", code, m)
	}
	// Authorization is Emit's.
	if code, m := post(base+"?tenant.type=project&tenant.name=blog", tokShop, structured, good); code != http.StatusForbidden || m["code"].(float64) != 7 {
		t.Errorf("without the grant: %d %v", code, m)
	}
	if code, m := post(url, "", structured, good); code != http.StatusUnauthorized {
		t.Errorf("without credentials: %d %v", code, m)
	}
	markerIngested(t, tg, "CloudEventsBadMarker")
	queryUntil(t, tg, tokShop, &eventgatev1.QueryRequest{Reason: []string{"CloudEventsBad"}}, 1)
}
