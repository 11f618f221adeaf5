package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/eventgate/eventgate/client/signature"
	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/rules"
)

const ruleSecret = "a-signing-secret-of-32-bytes-xxx"

// signedReceiver is a webhook receiver that verifies every delivery as
// the README says, and passes the notifications on.
func signedReceiver(t *testing.T) (*httptest.Server, <-chan rules.Notification) {
	t.Helper()
	srv, got, _ := switchableReceiver(t)
	return srv, got
}

// switchableReceiver is signedReceiver with a switch: while down is set it
// answers 503 and records nothing.
func switchableReceiver(t *testing.T) (srv *httptest.Server, got <-chan rules.Notification, down *atomic.Bool) {
	t.Helper()
	ch := make(chan rules.Notification, 100)
	down = new(atomic.Bool)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if err := signature.Verify([]byte(ruleSecret), r.Header.Get(signature.HeaderTimestamp), r.Header.Get(signature.HeaderSignature), body, 5*time.Minute, time.Now()); err != nil {
			t.Errorf("delivery with a bad signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var n rules.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("delivery body: %v", err)
		}
		ch <- n
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, ch, down
}

func restJSON(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	code, _, m := restDo(t, method, url, "application/json", strings.NewReader(body))
	return code, m
}

// waitRuleEvaluated waits until the gateway evaluates the named rule.
func waitRuleEvaluated(t *testing.T, tg *testGateway, tenant rules.Tenant, name string) {
	t.Helper()
	r, err := tg.rules.store.Get(context.Background(), tenant, name)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); !tg.rules.engine.Evaluates(r.UID); {
		if time.Now().After(deadline) {
			t.Fatalf("rule %s not evaluated", name)
		}
		time.Sleep(10 * time.Millisecond) // polling the engine
	}
}

func TestRulesRESTFiresOnEmittedSeriesAndKeepsSecretsWriteOnly(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		// The 5 BackOff fold into a series: its count reaches the stream soon.
		c.Intake.Series.FlushInterval = 100 * time.Millisecond
	})
	srv, got := signedReceiver(t)
	base := tg.httpURL + "/v1/rules"
	q := "?tenant.type=project&tenant.name=shop"
	body := `{"name":"backoff","tenant":{"type":"project","name":"shop"},
		"fieldSelector":"reason=BackOff,regarding.kind=Pod",
		"condition":{"count":{"threshold":5,"window":"60s","groupBy":["regarding"],"resolveFieldSelector":"reason=Started"}},
		"destination":{"webhook":{"url":"` + srv.URL + `/hook?token=abc","secret":"` + ruleSecret + `"}}}`
	code, m := restJSON(t, http.MethodPost, base, body)
	if code != http.StatusOK {
		t.Fatalf("create: %d %v", code, m)
	}
	b, _ := json.Marshal(m)
	if strings.Contains(string(b), ruleSecret) || strings.Contains(string(b), "token=abc") {
		t.Errorf("create echoed a secret: %s", b)
	}
	rule, _ := m["rule"].(map[string]any)
	dest, _ := rule["destination"].(map[string]any)
	if wh, _ := dest["webhook"].(map[string]any); wh["secretSet"] != true || wh["url"] != srv.URL+"/hook?…" {
		t.Errorf("webhook as shown: %v", wh)
	}
	if code, m := restJSON(t, http.MethodPost, base, body); code != http.StatusConflict {
		t.Errorf("creating it twice: %d %v", code, m)
	}
	waitRuleEvaluated(t, tg, rules.Tenant{Type: "project", Name: "shop"}, "backoff")
	if metrics := metricsText(t, tg.httpURL); !strings.Contains(metrics, "\neventgate_rules_evaluated 1\n") {
		t.Errorf("/metrics does not count the one rule evaluated")
	}

	pod := func(reason, typ string) *eventgatev1.Event {
		return &eventgatev1.Event{Reason: reason, Type: typ, Note: "Back-off restarting failed container", ReportingController: "kubelet",
			Action: "Restart", Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "shop", Name: "web-1"}}
	}
	ctx := context.Background()
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}
	for i := 0; i < 5; i++ {
		if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Tenant: shop, Events: []*eventgatev1.Event{pod("BackOff", "Warning")}}); err != nil {
			t.Fatal(err)
		}
	}
	var n rules.Notification
	select {
	case n = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("no notification for 5 BackOff")
	}
	if n.State != rules.StateFiring || n.Rule != "project/shop/backoff" || n.Count != 5 {
		t.Errorf("notification: %+v", n)
	}
	// The rule's delivery queue, made with its first notification, is
	// served here, and /metrics says so.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(metricsText(t, tg.httpURL), "\neventgate_notify_queues_served 1\n"); {
		if time.Now().After(deadline) {
			t.Fatal("/metrics does not count the one delivery queue served")
		}
		time.Sleep(50 * time.Millisecond) // polling /metrics
	}

	// An update that leaves the secret out keeps it: the next delivery is
	// still signed with it.
	code, m = restJSON(t, http.MethodPut, base+"/backoff", `{"tenant":{"type":"project","name":"shop"},
		"fieldSelector":"reason=BackOff,regarding.kind=Pod",
		"condition":{"count":{"threshold":5,"window":"60s","groupBy":["regarding"],"resolveFieldSelector":"reason=Started"}},
		"destination":{"webhook":{"url":"`+srv.URL+`/hook?…"}}}`)
	if code != http.StatusOK {
		t.Fatalf("update: %d %v", code, m)
	}
	stored, err := tg.rules.store.Get(ctx, rules.Tenant{Type: "project", Name: "shop"}, "backoff")
	if err != nil || stored.Destination.Secret != ruleSecret || stored.Destination.URL != srv.URL+"/hook?token=abc" {
		t.Fatalf("stored after update: %+v %v", stored, err)
	}
	waitRuleEvaluated(t, tg, rules.Tenant{Type: "project", Name: "shop"}, "backoff")
	if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Tenant: shop, Events: []*eventgatev1.Event{pod("Started", "Normal")}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n = <-got:
		if n.State != rules.StateResolved {
			t.Errorf("after Started: %+v", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no resolve notification after Started")
	}

	code, m = restJSON(t, http.MethodGet, base+"/backoff/deliveries"+q, "")
	if code != http.StatusOK {
		t.Fatalf("deliveries: %d %v", code, m)
	}
	ds, _ := m["deliveries"].([]any)
	if len(ds) == 0 {
		t.Fatalf("no deliveries listed: %v", m)
	}
	if d := ds[len(ds)-1].(map[string]any); d["status"] != "DELIVERY_STATUS_DELIVERED" || d["state"] != "firing" {
		t.Errorf("oldest delivery: %v", d)
	}

	// Redelivery sends the firing notification again, under its id.
	firing := ds[len(ds)-1].(map[string]any)["notificationId"].(string)
	if code, m := restJSON(t, http.MethodPost, base+"/backoff:redeliver", `{"tenant":{"type":"project","name":"shop"},"notificationId":"`+firing+`"}`); code != http.StatusOK {
		t.Fatalf("redeliver: %d %v", code, m)
	}
	select {
	case n = <-got:
		if n.ID != firing {
			t.Errorf("redelivered %s, want %s", n.ID, firing)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no redelivery")
	}
	if code, m := restJSON(t, http.MethodPost, base+"/backoff:redeliver", `{"tenant":{"type":"project","name":"shop"},"notificationId":"nope"}`); code != http.StatusNotFound {
		t.Errorf("redeliver of an unknown notification: %d %v", code, m)
	}

	code, m = restJSON(t, http.MethodGet, base+q, "")
	if rs, _ := m["rules"].([]any); code != http.StatusOK || len(rs) != 1 {
		t.Errorf("list: %d %v", code, m)
	}
	if code, m := restJSON(t, http.MethodDelete, base+"/backoff"+q, ""); code != http.StatusOK {
		t.Errorf("delete: %d %v", code, m)
	}
	if code, m := restJSON(t, http.MethodGet, base+"/backoff"+q, ""); code != http.StatusNotFound {
		t.Errorf("get after delete: %d %v", code, m)
	}
}

func TestRulesRefuseInvalidRulesNamingTheField(t *testing.T) {
	tg := startGateway(t, nil)
	c := eventgatev1.NewRulesServiceClient(tg.conn)
	valid := func() *eventgatev1.Rule {
		return &eventgatev1.Rule{Name: "r", Tenant: &eventgatev1.Tenant{Type: "project", Name: "p"},
			Condition:   &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}},
			Destination: &eventgatev1.Destination{Kind: &eventgatev1.Destination_Webhook{Webhook: &eventgatev1.WebhookDestination{Url: "https://example.com/h", Secret: ruleSecret}}}}
	}
	for _, tc := range []struct {
		field  string
		mutate func(*eventgatev1.Rule)
	}{
		{"rule.name", func(r *eventgatev1.Rule) { r.Name = "Not A Label" }},
		{"tenant", func(r *eventgatev1.Rule) { r.Tenant = nil }},
		{"rule.fieldSelector", func(r *eventgatev1.Rule) { r.FieldSelector = "colour=red" }},
		{"rule.labelSelector", func(r *eventgatev1.Rule) { r.LabelSelector = "a in (" }},
		{"rule.condition", func(r *eventgatev1.Rule) { r.Condition = nil }},
		{"rule.condition.count.threshold", func(r *eventgatev1.Rule) {
			r.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Count{Count: &eventgatev1.CountCondition{Window: durationOf(time.Minute)}}}
		}},
		{"rule.condition.count.window", func(r *eventgatev1.Rule) {
			r.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Count{Count: &eventgatev1.CountCondition{Threshold: 5}}}
		}},
		{"rule.condition.absence.groupBy[0]", func(r *eventgatev1.Rule) {
			r.Condition = &eventgatev1.Condition{Kind: &eventgatev1.Condition_Absence{Absence: &eventgatev1.AbsenceCondition{Window: durationOf(time.Minute), GroupBy: []string{"colour"}}}}
		}},
		{"rule.destination.webhook.secret", func(r *eventgatev1.Rule) { r.GetDestination().GetWebhook().Secret = "short" }},
		{"rule.destination.webhook.url", func(r *eventgatev1.Rule) { r.GetDestination().GetWebhook().Url = "ftp://x" }},
		{"rule.destination.nats.subject", func(r *eventgatev1.Rule) {
			r.Destination = &eventgatev1.Destination{Kind: &eventgatev1.Destination_Nats{Nats: &eventgatev1.NatsDestination{Subject: "events.x"}}}
		}},
		{"rule.destination", func(r *eventgatev1.Rule) { r.Destination = nil }},
		{"rule.template", func(r *eventgatev1.Rule) { r.Template = "{{.Event" }},
		{"rule.suppression.renotifyInterval", func(r *eventgatev1.Rule) {
			r.Suppression = &eventgatev1.Suppression{RenotifyInterval: durationOf(time.Second)}
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			r := valid()
			tc.mutate(r)
			_, err := c.CreateRule(context.Background(), &eventgatev1.CreateRuleRequest{Rule: r})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("CreateRule: %v, want InvalidArgument", err)
			}
			if fields := badRequestFields(err); !slices.Contains(fields, tc.field) && !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, tc.field+".") }) {
				t.Errorf("violations %v, want %s (%v)", fields, tc.field, err)
			}
		})
	}
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// badRequestFields are the fields of a status's BadRequest details.
func badRequestFields(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

func TestRulesNeedTheRulesAndWatchVerbsOnTheTenant(t *testing.T) {
	const (
		tokOps    = "rules-ops-token-0123456789"
		tokNoWat  = "rules-nowatch-token-012345"
		tokDeploy = "rules-deploy-token-0123456"
	)
	h := authz.HashToken
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(`principals:
  - name: ops
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [watch, rules]}
  - name: nowatch
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [rules, emit]}
  - name: deploy
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, kinds: [{group: apps, kind: Deployment}], verbs: [watch, rules]}
`, h(tokOps), h(tokNoWat), h(tokDeploy))), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = p })
	c := eventgatev1.NewRulesServiceClient(tg.conn)
	rule := func(name, tenant string) *eventgatev1.CreateRuleRequest {
		return &eventgatev1.CreateRuleRequest{Rule: &eventgatev1.Rule{Name: name, Tenant: &eventgatev1.Tenant{Type: "project", Name: tenant},
			Condition:   &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}},
			Destination: &eventgatev1.Destination{Kind: &eventgatev1.Destination_Nats{Nats: &eventgatev1.NatsDestination{Subject: "ops.alerts"}}}}}
	}
	ctx := context.Background()
	if _, err := c.CreateRule(withToken(ctx, tokOps), rule("ok", "shop")); err != nil {
		t.Fatalf("ops creates a rule in its tenant: %v", err)
	}
	for _, tc := range []struct {
		name, tok, tenant string
	}{
		{"another tenant", tokOps, "blog"},
		{"without watch", tokNoWat, "shop"},
		{"anonymous", "", "shop"},
	} {
		_, err := c.CreateRule(withToken(ctx, tc.tok), rule("x", tc.tenant))
		if code := status.Code(err); code != codes.PermissionDenied && code != codes.Unauthenticated {
			t.Errorf("%s: %v, want PermissionDenied", tc.name, err)
		}
	}
	if _, err := c.ListRules(withToken(ctx, tokNoWat), &eventgatev1.ListRulesRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "shop"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("list without watch: %v, want PermissionDenied", err)
	}
	// A rule sees what its author may watch: the Deployment-only author's
	// rule keeps that restriction.
	if _, err := c.CreateRule(withToken(ctx, tokDeploy), rule("deploys", "shop")); err != nil {
		t.Fatal(err)
	}
	stored, err := tg.rules.store.Get(ctx, rules.Tenant{Type: "project", Name: "shop"}, "deploys")
	if err != nil {
		t.Fatal(err)
	}
	if want := []rules.GroupKind{{Group: "apps", Kind: "Deployment"}}; !slices.Equal(stored.Kinds, want) {
		t.Errorf("rule kinds %v, want %v", stored.Kinds, want)
	}
}

func TestRulePausedForAFailingDestinationIsToldAsAnEvent(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		c.Notify.Backoff, c.Notify.MaxBackoff = 50*time.Millisecond, 100*time.Millisecond
		c.Notify.PauseAfter = 300 * time.Millisecond
	})
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer down.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shop := &eventgatev1.Tenant{Type: "project", Name: "shop"}
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Tenant: shop, Reasons: []string{"RulePaused"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	c := eventgatev1.NewRulesServiceClient(tg.conn)
	if _, err := c.CreateRule(ctx, &eventgatev1.CreateRuleRequest{Rule: &eventgatev1.Rule{Name: "flaky", Tenant: shop,
		FieldSelector: "reason=Deployed",
		Condition:     &eventgatev1.Condition{Kind: &eventgatev1.Condition_Every{Every: &eventgatev1.EveryCondition{}}},
		Destination:   &eventgatev1.Destination{Kind: &eventgatev1.Destination_Slack{Slack: &eventgatev1.SlackDestination{Url: down.URL + "/services/x"}}}}}); err != nil {
		t.Fatal(err)
	}
	waitRuleEvaluated(t, tg, rules.Tenant{Type: "project", Name: "shop"}, "flaky")
	if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Tenant: shop, Events: []*eventgatev1.Event{{Reason: "Deployed", Action: "Deploy",
		ReportingController: "ci", Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev := resp.GetObject(); ev.GetType() != "Warning" || ev.GetRegarding().GetKind() != "Rule" || ev.GetRegarding().GetName() != "flaky" ||
		!strings.Contains(ev.GetNote(), "HTTP 502") {
		t.Errorf("event about the paused rule: %v", ev)
	}
	got, err := c.GetRule(ctx, &eventgatev1.GetRuleRequest{Tenant: shop, Name: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetRule().GetPaused() || got.GetRule().GetStatus().GetPausedReason() == "" {
		t.Errorf("rule after its destination failed: %v", got.GetRule())
	}
	if strings.Contains(got.GetRule().GetDestination().GetSlack().GetUrl(), "services") {
		t.Errorf("the Slack URL's path is shown: %v", got.GetRule().GetDestination())
	}
}
