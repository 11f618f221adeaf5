package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/natstest"
	"github.com/eventgate/eventgate/internal/rules"
)

// leaseOwners reads which replica holds each rules shard's lease, by shard.
func leaseOwners(ctx context.Context, t *testing.T, url string) map[string]string {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	defer nc.Close()
	out := map[string]string{}
	kv, err := js.KeyValue(ctx, "eventgate_rules_leases")
	if err != nil {
		return out
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return out
	}
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, "shard.") {
			continue // a member's announcement
		}
		if e, err := kv.Get(ctx, k); err == nil {
			out[k] = string(e.Value())
		}
	}
	return out
}

// received counts a receiver's notifications by id. Probes (events
// emitted until one is notified, to show that a rule is evaluated) are
// counted but never among the notifications a test waits for.
type received struct {
	t      *testing.T
	ctx    context.Context
	got    <-chan rules.Notification
	ids    map[string]int
	probes map[string]bool
}

func newReceived(ctx context.Context, t *testing.T, got <-chan rules.Notification) *received {
	return &received{t: t, ctx: ctx, got: got, ids: map[string]int{}, probes: map[string]bool{}}
}

// probe calls emit (which returns the id of the notification its event
// makes) until a notification arrives.
func (r *received) probe(emit func(name string) string) {
	r.t.Helper()
	for i := 0; len(r.ids) == 0; i++ {
		r.probes[emit(fmt.Sprintf("probe-%d", i))] = true
		select {
		case nt := <-r.got:
			r.ids[nt.ID]++
		case <-time.After(time.Second):
		}
	}
}

// wait waits for n notifications that are not probes'.
func (r *received) wait(n int) {
	r.t.Helper()
	for i := 0; i < n; {
		select {
		case nt := <-r.got:
			r.ids[nt.ID]++
			if !r.probes[nt.ID] {
				i++
			}
		case <-r.ctx.Done():
			r.t.Fatalf("%d of %d notifications received; ids so far %v", i, n, r.ids)
		}
	}
}

// quiet counts what arrives for d and returns the ids that are not
// probes' (the absence of a doubled notification can only be observed
// over some time).
func (r *received) quiet(d time.Duration) (unexpected []string) {
	for done := time.After(d); ; {
		select {
		case nt := <-r.got:
			r.ids[nt.ID]++
			if !r.probes[nt.ID] {
				unexpected = append(unexpected, nt.ID)
			}
		case <-done:
			return unexpected
		}
	}
}

// once reports every notification received other than once.
func (r *received) once() {
	r.t.Helper()
	for id, n := range r.ids {
		if n != 1 {
			r.t.Errorf("notification %s received %d times", id, n)
		}
	}
}

// TestRuleOwnerKilledIsTakenOverWithoutLostOrDoubledNotification runs two
// gateway processes on one NATS server; the one evaluating a rule is
// killed (SIGKILL) and the other takes the rule over: every matching event
// is notified exactly once by id, before and after.
func TestRuleOwnerKilledIsTakenOverWithoutLostOrDoubledNotification(t *testing.T) {
	// One shard: its fair share keeps it on replica a when b joins.
	const shards = 1
	ns := natstest.StartServer(t)
	bin := buildGateway(t)
	flags := []string{"--nats-url", ns.ClientURL(), "--rules-shards", fmt.Sprint(shards), "--rules-lease-ttl", "2s",
		"--notify-backoff", "100ms", "--notify-max-backoff", "500ms"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := startProcess(t, bin, t.TempDir(), append(flags, "--replica-id", "a")...)
	for {
		owners := leaseOwners(ctx, t, ns.ClientURL())
		if len(owners) == shards && !strings.Contains(fmt.Sprint(owners), ":b") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("replica a holds %v", owners)
		}
		time.Sleep(50 * time.Millisecond) // polling the leases
	}
	b := startProcess(t, bin, t.TempDir(), append(flags, "--replica-id", "b")...)

	srv, got := signedReceiver(t)
	code, m := restJSON(t, http.MethodPost, a.httpURL+"/v1/rules", `{"name":"deploys","tenant":{"type":"project","name":"shop"},
		"fieldSelector":"reason=Deployed","condition":{"every":{}},
		"destination":{"webhook":{"url":"`+srv.URL+`","secret":"`+ruleSecret+`"}}}`)
	if code != http.StatusOK {
		t.Fatalf("create rule: %d %v", code, m)
	}
	clients := map[*gatewayProcess]eventgatev1.EventServiceClient{}
	for _, p := range []*gatewayProcess{a, b} {
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[p] = eventgatev1.NewEventServiceClient(conn)
	}
	uids := map[string]bool{} // the events that must be notified once
	emitDeployed := func(p *gatewayProcess, name string) string {
		t.Helper()
		resp, err := clients[p].Emit(ctx, &eventgatev1.EmitRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "shop"},
			Events: []*eventgatev1.Event{{Reason: "Deployed", Type: "Normal", Note: "deployed " + name, ReportingController: "ci", Action: "Deploy",
				Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: name}}}})
		if err != nil {
			t.Fatalf("emit %s: %v", name, err)
		}
		return resp.Results[0].Uid
	}
	notified := func(uid string) string { return "project/shop/deploys:" + uid + ":firing" }
	rc := newReceived(ctx, t, got)
	// The rule reaches the owner's evaluation through the KV watch.
	rc.probe(func(name string) string { return notified(emitDeployed(a, name)) })
	for i := 0; i < 5; i++ {
		uids[emitDeployed(a, fmt.Sprintf("before-%d", i))] = true
	}
	rc.wait(5)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	for i := 0; i < 5; i++ {
		uids[emitDeployed(b, fmt.Sprintf("after-%d", i))] = true
	}
	rc.wait(5)
	// Nothing more: not a notification of the replayed events again.
	for _, id := range rc.quiet(3 * time.Second) {
		t.Errorf("unexpected notification %s", id)
	}
	rc.once()
	for uid := range uids {
		if rc.ids[notified(uid)] != 1 {
			t.Errorf("event %s was never notified (received %v)", uid, rc.ids)
		}
	}
	if owners := leaseOwners(ctx, t, ns.ClientURL()); len(owners) != shards || strings.Contains(fmt.Sprint(owners), ":a") {
		t.Errorf("leases after the kill: %v, want every shard held by b", owners)
	}
}

// TestGatewayKilledOnItsEmbeddedServerDeliversEveryNotificationOnce: a
// single gateway on its embedded NATS server keeps its rules' delivery
// queues in the server's memory. Killed (SIGKILL) and started again on its
// data directory, it makes them again from the delivery log: what was
// delivered before the kill is not sent again; what was being retried,
// and what is queued after the restart, arrives once each.
func TestGatewayKilledOnItsEmbeddedServerDeliversEveryNotificationOnce(t *testing.T) {
	bin := buildGateway(t)
	dir := t.TempDir()
	flags := []string{"--notify-backoff", "100ms", "--notify-max-backoff", "500ms"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, got, down := switchableReceiver(t)

	a := startProcess(t, bin, dir, flags...)
	code, m := restJSON(t, http.MethodPost, a.httpURL+"/v1/rules", `{"name":"deploys","tenant":{"type":"project","name":"shop"},
		"fieldSelector":"reason=Deployed","condition":{"every":{}},
		"destination":{"webhook":{"url":"`+srv.URL+`","secret":"`+ruleSecret+`"}}}`)
	if code != http.StatusOK {
		t.Fatalf("create rule: %d %v", code, m)
	}
	emit := func(p *gatewayProcess, name string) string {
		t.Helper()
		conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		resp, err := eventgatev1.NewEventServiceClient(conn).Emit(ctx, &eventgatev1.EmitRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "shop"},
			Events: []*eventgatev1.Event{{Reason: "Deployed", Type: "Normal", Note: "deployed " + name, ReportingController: "ci", Action: "Deploy",
				Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: name}}}})
		if err != nil {
			t.Fatalf("emit %s: %v", name, err)
		}
		return "project/shop/deploys:" + resp.Results[0].Uid + ":firing"
	}
	want := map[string]bool{}
	rc := newReceived(ctx, t, got)
	rc.probe(func(name string) string { return emit(a, name) })
	for i := 0; i < 3; i++ {
		want[emit(a, fmt.Sprintf("before-%d", i))] = true
	}
	rc.wait(3)
	down.Store(true)
	retried := map[string]bool{}
	for i := 0; i < 2; i++ {
		id := emit(a, fmt.Sprintf("retried-%d", i))
		want[id], retried[id] = true, true
	}
	// Killed once both were refused twice and every earlier one is
	// recorded as delivered: nothing is in flight to the receiver.
	for {
		_, _, m := restDo(t, http.MethodGet, a.httpURL+"/v1/rules/deploys/deliveries?tenant.type=project&tenant.name=shop&pageSize=100", "", nil)
		ds, _ := m["deliveries"].([]any)
		refused, delivered := 0, 0
		for _, d := range ds {
			d, _ := d.(map[string]any)
			attempts, _ := d["attempts"].([]any)
			switch id, _ := d["notificationId"].(string); {
			case retried[id] && d["status"] == "DELIVERY_STATUS_RETRYING" && len(attempts) >= 2:
				refused++
			case rc.ids[id] == 1 && d["status"] == "DELIVERY_STATUS_DELIVERED":
				delivered++
			}
		}
		if refused == len(retried) && delivered == len(rc.ids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("delivery log before the kill: %v", m)
		}
		time.Sleep(50 * time.Millisecond) // polling the delivery log
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()

	down.Store(false)
	b := startProcess(t, bin, dir, flags...)
	for i := 0; i < 2; i++ {
		want[emit(b, fmt.Sprintf("after-%d", i))] = true
	}
	rc.wait(4) // the two retried, the two after
	rc.quiet(3 * time.Second)
	rc.once()
	for id := range want {
		if rc.ids[id] != 1 {
			t.Errorf("notification %s received %d times, want once (received %v)", id, rc.ids[id], rc.ids)
		}
	}
}
