package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go"

	"github.com/eventgate/eventgate/client/signature"
	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/natstest"
	"github.com/eventgate/eventgate/internal/rules"
	"github.com/eventgate/eventgate/internal/watch"
)

const secret = "0123456789abcdef-secret"

// verifying is a webhook receiver's check, as the README tells receivers
// to do it.
func verifying(h http.Header, body []byte) error {
	return signature.Verify([]byte(secret), h.Get(signature.HeaderTimestamp), h.Get(signature.HeaderSignature), body, 5*time.Minute, time.Now())
}

func decodeNotification(t *testing.T, b []byte) rules.Notification {
	t.Helper()
	var n rules.Notification
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatalf("notification body %s: %v", b, err)
	}
	return n
}

func TestFiveBackOffForOnePodWithinAMinuteFiresOnceAndResolvesOnce(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	resolve := reasonFilter("Started")
	r := e.createRule(rep, &rules.Rule{
		Name: "backoff", Filter: reasonFilter("BackOff"), Resolve: &resolve, ResolveFieldSelector: "reason=Started",
		Condition:   rules.Condition{Kind: rules.KindCount, Threshold: 5, Window: time.Minute},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
	}, rep)

	for i := 0; i < 7; i++ {
		e.emit(podEvent("Warning", "BackOff", "web-1"))
	}
	e.emit(podEvent("Warning", "BackOff", "web-2")) // another pod: a group of its own, below 5
	fired := rc.next(t, 10*time.Second)
	n := decodeNotification(t, fired.body)
	if n.State != rules.StateFiring || n.Count != 5 || n.Group["regarding"] != "v1/Pod/default/web-1" {
		t.Fatalf("firing notification: %+v", n)
	}
	if fired.id != n.ID || n.ID != r.ID()+":ev-5:firing" {
		t.Errorf("ids: header %q, body %q; want %q", fired.id, n.ID, r.ID()+":ev-5:firing")
	}
	e.emit(podEvent("Normal", "Started", "web-1"))
	resolved := decodeNotification(t, rc.next(t, 10*time.Second).body)
	if resolved.State != rules.StateResolved || resolved.ID != r.ID()+":ev-5:resolved" {
		t.Fatalf("resolve notification: %+v", resolved)
	}
	rc.none(t, time.Second)
}

func TestAbsenceRuleFiresWhenTheHeartbeatStops(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	e.createRule(rep, &rules.Rule{
		Name: "heartbeat", Filter: reasonFilter("Heartbeat"),
		Condition:   rules.Condition{Kind: rules.KindAbsence, Window: time.Second},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
	}, rep)
	for i := 0; i < 3; i++ {
		e.emit(podEvent("Normal", "Heartbeat", "worker"))
	}
	last := time.Now()
	n := decodeNotification(t, rc.next(t, 10*time.Second).body)
	if n.State != rules.StateFiring || n.Condition != rules.KindAbsence {
		t.Fatalf("absence notification: %+v", n)
	}
	if waited := time.Since(last); waited < time.Second {
		t.Errorf("absence fired %s after the last heartbeat, before the 1s window", waited)
	}
	e.emit(podEvent("Normal", "Heartbeat", "worker"))
	if n := decodeNotification(t, rc.next(t, 10*time.Second).body); n.State != rules.StateResolved {
		t.Fatalf("after the heartbeat came back: %+v", n)
	}
}

func TestReceiverDownGetsEveryNotificationOnceItIsBack(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	rc.down.Store(true)
	r := e.createRule(rep, everyDeployed(rc), rep)
	for i := 0; i < 5; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	// Down until every notification failed at least twice.
	ctx := context.Background()
	waitDeliveries(t, rep, r.UID, 100, "every notification failed twice", func(ds []Delivery) bool {
		failedTwice := 0
		for _, d := range ds {
			if d.Status == StatusRetrying && len(d.Attempts) >= 2 {
				failedTwice++
			}
		}
		return failedTwice == 5
	})
	rc.down.Store(false)
	ids := map[string]int{}
	for i := 0; i < 5; i++ {
		ids[rc.next(t, 10*time.Second).id]++
	}
	rc.none(t, time.Second)
	for i := 1; i <= 5; i++ {
		if id := fmt.Sprintf("%s:ev-%d:firing", r.ID(), i); ids[id] != 1 {
			t.Errorf("notification %s delivered %d times, want once (all: %v)", id, ids[id], ids)
		}
	}
	ds, err := rep.disp.Deliveries(ctx, r.UID, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Status != StatusDelivered || len(d.Attempts) < 3 || d.Attempts[0].Code != http.StatusServiceUnavailable {
			t.Errorf("delivery log of %s: status %s, attempts %+v", d.NotificationID, d.Status, d.Attempts)
		}
	}
}

func TestOwnerKilledIsTakenOverWithoutLostOrDoubledNotifications(t *testing.T) {
	e := newEnv(t)
	// The owner checkpoints rarely: the replica taking over replays
	// everything since, and must not notify any of it again.
	e.rcfg.Checkpoint, e.rcfg.Duplicates = time.Hour, 2*time.Hour
	// One shard: its fair share keeps it on replica a when b joins.
	e.rcfg.Shards = 1
	a := e.start("a")
	for a.engine.OwnedShards() < e.rcfg.Shards {
		time.Sleep(20 * time.Millisecond) // polling ownership
	}
	e.rcfg.Checkpoint = 100 * time.Millisecond
	b := e.start("b")
	rc := newReceiver(t, verifying)
	every := e.createRule(a, everyDeployed(rc), a)
	count := e.createRule(a, &rules.Rule{
		Name: "backoff", Filter: reasonFilter("BackOff"),
		Condition:   rules.Condition{Kind: rules.KindCount, Threshold: 5, Window: time.Minute},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
	}, a)
	ids := map[string]int{}
	for i := 0; i < 5; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for i := 0; i < 3; i++ { // 3 of the 5 BackOff before the kill
		e.emit(podEvent("Warning", "BackOff", "web-1"))
	}
	for i := 0; i < 5; i++ {
		ids[rc.next(t, 10*time.Second).id]++
	}
	a.kill()
	for i := 0; i < 5; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for i := 0; i < 2; i++ { // the 4th and 5th: the window spans the takeover
		e.emit(podEvent("Warning", "BackOff", "web-1"))
	}
	for i := 0; i < 6; i++ {
		ids[rc.next(t, 20*time.Second).id]++
	}
	rc.none(t, 2*time.Second)
	if b.engine.OwnedShards() != e.rcfg.Shards {
		t.Errorf("replica b owns %d shards, want all %d", b.engine.OwnedShards(), e.rcfg.Shards)
	}
	var want []string
	for _, n := range []int{1, 2, 3, 4, 5, 9, 10, 11, 12, 13} {
		want = append(want, fmt.Sprintf("%s:ev-%d:firing", every.ID(), n))
	}
	want = append(want, count.ID()+":ev-15:firing")
	for _, id := range want {
		if ids[id] != 1 {
			t.Errorf("notification %s delivered %d times, want once", id, ids[id])
		}
	}
	if len(ids) != len(want) {
		t.Errorf("delivered %d distinct notifications, want %d: %v", len(ids), len(want), ids)
	}
}

func TestCloudEventsSinkReceivesStructuredAndBinaryEvents(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	type got struct {
		ev          cloudevents.Event
		contentType string
		ceID        string
	}
	seen := make(chan got, 10)
	p, err := cloudevents.NewHTTP()
	if err != nil {
		t.Fatal(err)
	}
	var current *http.Request
	h, err := cloudevents.NewHTTPReceiveHandler(context.Background(), p, func(ev cloudevents.Event) {
		seen <- got{ev: ev, contentType: current.Header.Get("Content-Type"), ceID: current.Header.Get("Ce-Id")}
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current = r // the SDK handles one request at a time here: a worker per rule, sequential
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	structured := e.createRule(rep, &rules.Rule{
		Name: "structured", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestCloudEvents, URL: srv.URL, Mode: "structured"},
	}, rep)
	e.emit(podEvent("Normal", "Deployed", "app"))
	s := <-seen
	if s.ev.ID() != structured.ID()+":ev-1:firing" || s.ev.Type() != CETypePrefix+"firing" ||
		s.ev.Source() != "/eventgate/rules/project/p1/structured" || s.ev.Subject() != "v1/Pod/default/app" {
		t.Errorf("structured cloudevent: %s", s.ev)
	}
	if s.contentType != "application/cloudevents+json" || s.ceID != "" {
		t.Errorf("structured mode: content type %q, ce-id header %q", s.contentType, s.ceID)
	}
	var n rules.Notification
	if err := s.ev.DataAs(&n); err != nil || n.ID != s.ev.ID() || n.EventUID() != "ev-1" {
		t.Errorf("cloudevent data: %+v, %v", n, err)
	}
	binary := e.createRule(rep, &rules.Rule{
		Name: "binary", Filter: reasonFilter("Scaled"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestCloudEvents, URL: srv.URL, Mode: "binary"},
	}, rep)
	e.emit(podEvent("Normal", "Scaled", "app"))
	b := <-seen
	if b.ev.ID() != binary.ID()+":ev-2:firing" || b.ceID != b.ev.ID() || b.contentType != "application/json" {
		t.Errorf("binary cloudevent: %s; ce-id %q, content type %q", b.ev, b.ceID, b.contentType)
	}
}

func TestSlackAndNATSDestinations(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	slack := newReceiver(t, nil)
	sub, err := rep.nc.SubscribeSync("team.alerts")
	if err != nil {
		t.Fatal(err)
	}
	e.createRule(rep, &rules.Rule{
		Name: "slack", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Template:    "{{.Event.Regarding.Name}} deployed ({{.State}})",
		Destination: rules.Destination{Kind: rules.DestSlack, URL: slack.srv.URL + "/services/T000/B000/XXXX"},
	}, rep)
	nr := e.createRule(rep, &rules.Rule{
		Name: "nats", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestNATS, Subject: "team.alerts"},
	}, rep)
	e.emit(podEvent("Normal", "Deployed", "shop"))
	var body map[string]string
	if err := json.Unmarshal(slack.next(t, 10*time.Second).body, &body); err != nil || body["text"] != "shop deployed (firing)" {
		t.Errorf("slack payload %v (%v), want text %q", body, err, "shop deployed (firing)")
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); id != nr.ID()+":ev-1:firing" {
		t.Errorf("NATS message id %q", id)
	}
	if n := decodeNotification(t, m.Data); n.Rule != nr.ID() {
		t.Errorf("NATS notification %+v", n)
	}
}

func TestDeadLetterIsRecordedAndRedeliverSendsItAgain(t *testing.T) {
	e := newEnv(t)
	e.ncfg.RetryFor = 300 * time.Millisecond
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	rc.down.Store(true)
	r := e.createRule(rep, everyDeployed(rc), rep)
	e.emit(podEvent("Normal", "Deployed", "app"))
	ctx := context.Background()
	ds := waitDeliveries(t, rep, r.UID, 10, "a dead letter", func(ds []Delivery) bool {
		return len(ds) == 1 && ds[0].Status == StatusDead
	})
	rc.down.Store(false)
	if err := rep.disp.Redeliver(ctx, r.UID, ds[0].NotificationID); err != nil {
		t.Fatal(err)
	}
	if got := rc.next(t, 10*time.Second); got.id != ds[0].NotificationID {
		t.Errorf("redelivered %q, want %q", got.id, ds[0].NotificationID)
	}
	ds = waitDeliveries(t, rep, r.UID, 10, "delivered after the redelivery", func(ds []Delivery) bool {
		return len(ds) == 1 && ds[0].Status == StatusDelivered
	})
	if !slices.ContainsFunc(ds[0].Attempts, func(a Attempt) bool { return a.Error != "" }) {
		t.Errorf("delivery log lost the failed attempts: %+v", ds[0].Attempts)
	}
}

func TestDenyPrivateNetworksRefusesALoopbackDestination(t *testing.T) {
	rc := newReceiver(t, nil)
	for _, deny := range []bool{false, true} {
		s, err := newSender(time.Second, deny, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := s.post(context.Background(), rc.srv.URL, []byte(`{}`), nil)
		if deny && !errors.Is(out.err, ErrPrivateAddress) {
			t.Errorf("denying private networks, a loopback receiver: %v", out.err)
		}
		if !deny && out.err != nil {
			t.Errorf("allowing private networks, a loopback receiver: %v", out.err)
		}
	}
}

func TestReplicasShareTheShardsWithoutLosingOrDoublingNotifications(t *testing.T) {
	e := newEnv(t)
	e.rcfg.Shards = 4
	a := e.start("a")
	for a.engine.OwnedShards() < e.rcfg.Shards {
		time.Sleep(20 * time.Millisecond) // polling ownership
	}
	rc := newReceiver(t, verifying)
	var rs []*rules.Rule
	for i := 0; i < 4; i++ {
		rs = append(rs, e.createRule(a, &rules.Rule{
			Name: fmt.Sprintf("every-%d", i), Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
			Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
		}, a))
	}
	b := e.start("b")
	ids := map[string]int{}
	// Events keep coming while b joins and a hands half the shards over.
	n := 0
	for deadline := time.Now().Add(20 * time.Second); b.engine.OwnedShards() < 2 || a.engine.OwnedShards() > 2; {
		n++
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", n)))
		for range rs {
			ids[rc.next(t, 10*time.Second).id]++
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d events, a owns %d shards and b %d; want 2 each", n, a.engine.OwnedShards(), b.engine.OwnedShards())
		}
		time.Sleep(20 * time.Millisecond) // a steady trickle of events during the handover
	}
	for i := 0; i < 3; i++ {
		n++
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", n)))
		for range rs {
			ids[rc.next(t, 10*time.Second).id]++
		}
	}
	rc.none(t, time.Second)
	for _, r := range rs {
		for i := 1; i <= n; i++ {
			if id := fmt.Sprintf("%s:ev-%d:firing", r.ID(), i); ids[id] != 1 {
				t.Errorf("notification %s delivered %d times, want once", id, ids[id])
			}
		}
	}
}

// TestRulesOnAReplicatedCluster runs the rules on a three-node JetStream
// cluster with every stream and bucket replicated three times, where the
// KV compare-and-set conflicts carry other error codes.
func TestRulesOnAReplicatedCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc, js := natstest.Connect(t, c.URL())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	scfg := ejs.DefaultConfig()
	scfg.Replicas = 3
	if _, err := ejs.EnsureStream(ctx, js, scfg, nil); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	store, err := rules.OpenStore(ctx, js, "eventgate_rules", 3, log)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rcfg := rules.DefaultConfig()
	rcfg.Shards, rcfg.LeaseTTL, rcfg.Replicas, rcfg.ReplicaID = 2, 2*time.Second, 3, "a"
	hub, err := watch.Start(ctx, js, rcfg.EventsStream, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Stop()
	engine, err := rules.Start(ctx, js, hub, store, rcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Stop()
	ncfg := DefaultConfig()
	ncfg.Replicas = 3
	disp, err := Start(ctx, js, nc, engine, store, ncfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer disp.Stop()

	rc := newReceiver(t, verifying)
	r := &rules.Rule{UID: "cluster-rule", Name: "backoff", Tenant: tenant, Filter: reasonFilter("BackOff"),
		Condition:   rules.Condition{Kind: rules.KindCount, Threshold: 3, Window: time.Minute},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret}}
	stored, err := store.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(ctx, r); !errors.Is(err, rules.ErrExists) {
		t.Errorf("a second rule of the same name: %v, want ErrExists", err)
	}
	if _, err := store.Update(ctx, stored, stored.Revision+10); !errors.Is(err, rules.ErrConflict) {
		t.Errorf("an update at a stale revision: %v, want ErrConflict", err)
	}
	for !engine.Evaluates(r.UID) {
		if ctx.Err() != nil {
			t.Fatal("the rule is not evaluated")
		}
		time.Sleep(10 * time.Millisecond) // polling the engine
	}
	for i := 0; i < 3; i++ {
		b, _ := event.Marshal(&eventgatev1.Event{Uid: fmt.Sprintf("c-%d", i), Reason: "BackOff", Type: "Warning",
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "p"}, Tenant: &eventgatev1.Tenant{Type: "project", Name: "p1"}})
		ev, _ := event.Unmarshal(b)
		if _, err := js.Publish(ctx, event.SubjectOf(ev), b); err != nil {
			t.Fatal(err)
		}
	}
	if got := rc.next(t, 20*time.Second); got.id != r.ID()+":c-2:firing" {
		t.Errorf("notification %q", got.id)
	}
}

func TestASlowDestinationDelaysNoOtherRule(t *testing.T) {
	e := newEnv(t)
	e.ncfg.Timeout = 30 * time.Second
	rep := e.start("a")
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // hangs until the test ends
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	fast := newReceiver(t, verifying)
	e.createRule(rep, &rules.Rule{
		Name: "slow", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: slow.URL, Secret: secret},
	}, rep)
	fr := e.createRule(rep, &rules.Rule{
		Name: "fast", Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: fast.srv.URL, Secret: secret},
	}, rep)
	start := time.Now()
	for i := 0; i < 10; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for i := 1; i <= 10; i++ {
		if got := fast.next(t, 5*time.Second); got.id != fmt.Sprintf("%s:ev-%d:firing", fr.ID(), i) {
			t.Errorf("fast destination got %s", got.id)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the fast destination got its 10 notifications in %s, behind the hung one", d)
	}
}

func TestFailingDestinationPausesItsRuleUntilResumed(t *testing.T) {
	e := newEnv(t)
	e.ncfg.PauseAfter = 200 * time.Millisecond
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	rc.down.Store(true)
	r := e.createRule(rep, everyDeployed(rc), rep)
	e.emit(podEvent("Normal", "Deployed", "app"))
	ctx := context.Background()
	var stored *rules.Rule
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if stored, err = rep.store.Get(ctx, tenant, r.Name); err != nil {
			t.Fatal(err)
		}
		if stored.Paused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rule was not paused")
		}
		time.Sleep(50 * time.Millisecond) // polling the rule
	}
	if !strings.Contains(stored.PausedReason, "HTTP 503") {
		t.Errorf("paused reason %q", stored.PausedReason)
	}
	// Back up, then resumed: the notification waited in the queue.
	rc.down.Store(false)
	rc.none(t, 500*time.Millisecond)
	stored.Paused, stored.PausedReason = false, ""
	if _, err := rep.store.Update(ctx, stored, stored.Revision); err != nil {
		t.Fatal(err)
	}
	if got := rc.next(t, 10*time.Second); got.id != r.ID()+":ev-1:firing" {
		t.Errorf("after resuming: %s", got.id)
	}
}

// A worker waits for notifications with a pull request that stands for
// the idle wait (2 minutes by default); stopping the dispatcher withdraws
// every request at once: Stop returns without waiting for them to
// expire, and a notification queued after it is delivered to no one (it
// would otherwise wait out the ack wait before going to the next worker).
func TestStoppingWithdrawsThePullRequestsAtOnce(t *testing.T) {
	e := newEnv(t)
	rep := e.start("a")
	rc := newReceiver(t, verifying)
	r := e.createRule(rep, everyDeployed(rc), rep)
	e.emit(podEvent("Normal", "Deployed", "app-1"))
	rc.next(t, 10*time.Second)
	e.waitDeliveriesSettled(r)

	start := time.Now()
	rep.disp.Stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %s with an idle wait of %s", d, e.ncfg.IdleWait)
	}
	e.emit(podEvent("Normal", "Deployed", "app-2"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := e.pub.Consumer(ctx, rules.NotifyStream, consumerName(r.UID))
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending != 0 {
			t.Fatalf("a notification queued after Stop was delivered to a withdrawn pull request: %+v", info)
		}
		if info.NumPending == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the server's consumer until the notification is queued
	}
	// Delivery resumes where it was, at once: well within the ack wait.
	rep.disp, err = Start(ctx, rep.js, rep.nc, rep.engine, rep.store, e.ncfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rc.next(t, 5*time.Second).id, r.ID()+":ev-2:firing"; got != want {
		t.Errorf("after the restart, delivered %s, want %s", got, want)
	}
}
