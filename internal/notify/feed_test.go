package notify

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
	"github.com/eventgate/eventgate/internal/rules"
)

var tenant2 = rules.Tenant{Type: "project", Name: "p2"}

// inTenant moves ev to tenant t.
func inTenant(ev *eventgatev1.Event, t rules.Tenant) *eventgatev1.Event {
	ev.Tenant = &eventgatev1.Tenant{Type: t.Type, Name: t.Name}
	return ev
}

func deployedRule(name string, t rules.Tenant, url string) *rules.Rule {
	return &rules.Rule{
		Name: name, Tenant: t, Filter: reasonFilter("Deployed"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: url, Secret: secret},
	}
}

// reads lists the filters of the events stream's consumers: what the
// shards read.
func (e *testEnv) reads() [][]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.pub.Stream(ctx, e.stream)
	if err != nil {
		e.t.Fatal(err)
	}
	var out [][]string
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		f := slices.Clone(ci.Config.FilterSubjects)
		if ci.Config.FilterSubject != "" {
			f = append(f, ci.Config.FilterSubject)
		}
		slices.Sort(f)
		out = append(out, f)
	}
	if err := l.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitFeedOnly waits until the events stream's one consumer is the live
// feed's, which reads everything: the shards add none of their own.
func (e *testEnv) waitFeedOnly() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.reads()
		if len(got) == 1 && slices.Equal(got[0], []string{ejs.SubjectsAll}) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the events stream's consumers read %v, want the live feed's alone (%s)", got, ejs.SubjectsAll)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's consumers
	}
}

// oneShard starts replica a, the owner of the one shard, and a receiver
// verifying signatures.
func oneShard(t *testing.T) (*testEnv, *replica, *receiver) {
	t.Helper()
	e := newEnv(t)
	e.rcfg.Shards = 1
	return e, e.start("a"), newReceiver(t, verifying)
}

// waitTakenIn waits until a shard of r evaluates it (or, evaluating,
// false: no longer does).
func waitTakenIn(t *testing.T, r *replica, rule *rules.Rule, evaluating bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.engine.Evaluates(rule.UID) != evaluating {
		if time.Now().After(deadline) {
			t.Fatalf("rule %s: evaluated %v, want %v", rule.ID(), !evaluating, evaluating)
		}
		time.Sleep(20 * time.Millisecond) // polling the engine's take-in
	}
}

// The shards read the replica's live feed, which reads the stream once
// for the watches and the shards alike: however many tenants the rules
// have, the events stream has no consumer but the feed's.
func TestShardsReadTheLiveFeedAndAddNoConsumer(t *testing.T) {
	e := newEnv(t)
	e.rcfg.Shards = 2
	a := e.start("a")
	for a.engine.OwnedShards() < e.rcfg.Shards {
		time.Sleep(20 * time.Millisecond) // polling ownership
	}
	rc := newReceiver(t, verifying)
	var created []*rules.Rule
	for i := range 20 {
		created = append(created, e.createRule(a, deployedRule(fmt.Sprintf("deployed-%d", i), rules.Tenant{Type: "project", Name: fmt.Sprintf("t%d", i)}, rc.srv.URL), a))
	}
	for _, r := range created {
		waitTakenIn(t, a, r, true)
	}
	e.waitFeedOnly()
	ev := inTenant(podEvent("Normal", "Deployed", "app-1"), created[7].Tenant)
	e.emit(ev)
	if got, want := rc.next(t, 10*time.Second).id, created[7].ID()+":"+ev.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	e.waitFeedOnly()
}

// A shard with rules of many tenants notifies for its rules' tenants
// alone: an event of another tenant that matches every rule's filter
// fires none.
func TestAShardOfManyTenantsFiresForItsOwnAlone(t *testing.T) {
	e, a, rc := oneShard(t)
	var last *rules.Rule
	var lastTenant rules.Tenant
	for i := range 40 {
		lastTenant = rules.Tenant{Type: "project", Name: fmt.Sprintf("many-%d", i)}
		last = e.createRule(a, deployedRule(fmt.Sprintf("deployed-%d", i), lastTenant, rc.srv.URL), a)
	}
	stranger := inTenant(podEvent("Normal", "Deployed", "app-1"), rules.Tenant{Type: "project", Name: "stranger"})
	own := inTenant(podEvent("Normal", "Deployed", "app-2"), lastTenant)
	e.emit(stranger, own)
	if got, want := rc.next(t, 10*time.Second).id, last.ID()+":"+own.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s (the other tenant's event %s must not fire)", got, want, stranger.Uid)
	}
	rc.none(t, time.Second)
}

// The feed sends a shard its tenants' events undecoded, and the shard
// decodes only those of a type one of its rules may match: a rule on
// Warnings that resolves on a Normal event still sees the Normal one, and
// fires for no Normal one.
func TestARuleOnWarningsSeesTheNormalEventItsResolveAsksFor(t *testing.T) {
	e, a, rc := oneShard(t)
	resolve := query.Filter{Type: query.StringSet{In: []string{"Normal"}}, Reason: query.StringSet{In: []string{"Started"}}}
	r := e.createRule(a, &rules.Rule{
		Name: "warnings", Filter: query.Filter{Type: query.StringSet{In: []string{"Warning"}}}, Resolve: &resolve,
		ResolveFieldSelector: "type=Normal,reason=Started",
		Condition:            rules.Condition{Kind: rules.KindCount, Threshold: 1, Window: time.Minute},
		Destination:          rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret},
	}, a)
	e.emit(podEvent("Normal", "Pulled", "web-1"))
	warning := podEvent("Warning", "BackOff", "web-1")
	e.emit(warning)
	if got, want := rc.next(t, 10*time.Second).id, r.ID()+":"+warning.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	e.emit(podEvent("Normal", "Pulled", "web-1"), podEvent("Normal", "Started", "web-1"))
	if got, want := rc.next(t, 10*time.Second).id, r.ID()+":"+warning.Uid+":resolved"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	rc.none(t, time.Second)
}

// A rule is in force from its creation: an event of its tenant emitted as
// soon as the create returns fires it, though the shard takes the rule in
// later and meanwhile reads past that event (another tenant's rule keeps
// it reading).
func TestARuleFiresOnAnEventEmittedAsSoonAsItIsCreated(t *testing.T) {
	e, a, rc := oneShard(t)
	busy := e.createRule(a, deployedRule("busy", tenant, rc.srv.URL), a)
	waitTakenIn(t, a, busy, true)
	for i := range 5 {
		tn := rules.Tenant{Type: "project", Name: fmt.Sprintf("quick-%d", i)}
		r := e.createRule(a, deployedRule(fmt.Sprintf("quick-%d", i), tn, rc.srv.URL))
		quick := inTenant(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)), tn)
		other := podEvent("Normal", "Deployed", fmt.Sprintf("busy-%d", i))
		e.emit(quick, other)
		got := map[string]bool{rc.next(t, 10*time.Second).id: true, rc.next(t, 10*time.Second).id: true}
		for _, want := range []string{r.ID() + ":" + quick.Uid + ":firing", busy.ID() + ":" + other.Uid + ":firing"} {
			if !got[want] {
				t.Fatalf("round %d: delivered %v, want %s among them", i, got, want)
			}
		}
	}
}

// A rule taken in by a running shard evaluates the events stored after it,
// not older ones the shard had yet to read: here an event of the rule's
// tenant stored while the shard read only another tenant's, which the
// shard reads once it follows the new tenant too.
func TestARuleCreatedOnARunningShardDoesNotFireOnOlderEvents(t *testing.T) {
	e, a, rc := oneShard(t)
	r1 := e.createRule(a, deployedRule("p1-deployed", tenant, rc.srv.URL), a)
	d1 := podEvent("Normal", "Deployed", "app-1")
	e.emit(d1)
	if got, want := rc.next(t, 10*time.Second).id, r1.ID()+":"+d1.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	// After the last event the shard read, and not read: not its tenant's.
	old := inTenant(podEvent("Normal", "Deployed", "app-2"), tenant2)
	e.emit(old)
	r2 := e.createRule(a, deployedRule("p2-deployed", tenant2, rc.srv.URL), a)
	fresh := inTenant(podEvent("Normal", "Deployed", "app-3"), tenant2)
	e.emit(fresh)
	// One rule's notifications are delivered in order: had the older
	// event fired, it would arrive first.
	if got, want := rc.next(t, 10*time.Second).id, r2.ID()+":"+fresh.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s (the older event %s must not fire)", got, want, old.Uid)
	}
}

// A rule of another tenant added and removed changes the filter of the
// shard's feed; the shard's other rule misses none of its events and gets
// none twice, whether the owner checkpoints after each change or is killed
// and its successor replays across both changes.
func TestATenantsRuleAddedAndRemovedLosesNoEventOfAnotherRule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkpoint time.Duration
	}{{"checkpointed", 100 * time.Millisecond}, {"replayed after a takeover", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.rcfg.Checkpoint, e.rcfg.Duplicates = tc.checkpoint, 2*time.Hour
			e.rcfg.Shards = 1 // its fair share keeps it on a when b joins
			a := e.start("a")
			for a.engine.OwnedShards() < e.rcfg.Shards {
				time.Sleep(20 * time.Millisecond) // polling ownership
			}
			e.rcfg.Checkpoint = 100 * time.Millisecond
			b := e.start("b")
			rc := newReceiver(t, verifying)
			ids := map[string]int{}
			var want []string
			expect := func(r *rules.Rule, evs ...*eventgatev1.Event) {
				t.Helper()
				for _, ev := range evs {
					want = append(want, r.ID()+":"+ev.Uid+":firing")
				}
				for range evs {
					ids[rc.next(t, 20*time.Second).id]++
				}
			}
			deployed := func(pod string, t rules.Tenant) *eventgatev1.Event {
				return inTenant(podEvent("Normal", "Deployed", pod), t)
			}

			r1 := e.createRule(a, deployedRule("p1-deployed", tenant, rc.srv.URL), a)
			d1 := deployed("app-1", tenant)
			e.emit(d1)
			expect(r1, d1)

			// Emitted as soon as the rule is taken in, while the shard may
			// still read p1 alone: d2 read then must not carry the shard
			// past e1 before it reads p2.
			r2 := e.createRule(a, deployedRule("p2-deployed", tenant2, rc.srv.URL), a)
			e1, d2 := deployed("other-1", tenant2), deployed("app-2", tenant)
			e.emit(e1, d2)
			expect(r2, e1)
			expect(r1, d2)

			// d3 is emitted just before r2's deletion, so the old feed or
			// the one without p2 reads it: once, either way. A deletion,
			// like a creation, takes effect when the shard takes it in
			// (the filter shows it): e2, emitted after that, fires nothing.
			d3 := deployed("app-3", tenant)
			e.emit(d3)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.store.Delete(ctx, r2.Tenant, r2.Name); err != nil {
				t.Fatal(err)
			}
			waitTakenIn(t, a, r2, false)
			e.emit(deployed("other-2", tenant2))
			expect(r1, d3)
			// Delivery is at least once: a notification the receiver got
			// but a killed replica had not yet acknowledged is sent again
			// (receivers deduplicate by id). This test is about what the
			// shards evaluate, so a is killed with its deliveries settled.
			e.waitDeliveriesSettled(r1)

			a.kill()
			d4 := deployed("app-4", tenant)
			e.emit(d4)
			expect(r1, d4)
			rc.none(t, 2*time.Second)
			if b.engine.OwnedShards() != e.rcfg.Shards {
				t.Errorf("replica b owns %d shards, want all %d", b.engine.OwnedShards(), e.rcfg.Shards)
			}
			for _, id := range want {
				if ids[id] != 1 {
					t.Errorf("notification %s delivered %d times, want once", id, ids[id])
				}
			}
			if len(ids) != len(want) {
				t.Errorf("delivered %d distinct notifications, want %d: %v", len(ids), len(want), ids)
			}
		})
	}
}

// waitDeliveriesSettled waits until every notification queued for r has
// been delivered and acknowledged.
func (e *testEnv) waitDeliveriesSettled(r *rules.Rule) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		c, err := e.pub.Consumer(ctx, rules.NotifyStream, consumerName(r.UID))
		if err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				return
			}
		}
		if ctx.Err() != nil {
			e.t.Fatalf("deliveries of %s not settled: %v", r.ID(), err)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's consumer
	}
}

// checkpointSeq reads the position of shard 0's checkpoint.
func (e *testEnv) checkpointSeq() uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := e.pub.KeyValue(ctx, e.rcfg.StateBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	ent, err := kv.Get(ctx, "shard.0")
	if err != nil {
		e.t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(ent.Value()))
	if err != nil {
		e.t.Fatal(err)
	}
	var c struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.NewDecoder(zr).Decode(&c); err != nil {
		e.t.Fatal(err)
	}
	return c.Seq
}

// A shard whose feed skips other tenants' events still moves its
// checkpoint to the stream's end once it has read all of its own: its next
// feed, or its successor's, does not start back where it last handled one.
func TestAShardCheckpointsPastTheEventsItsFilterSkips(t *testing.T) {
	e, a, rc := oneShard(t)
	r1 := e.createRule(a, deployedRule("p1-deployed", tenant, rc.srv.URL), a)
	d1 := podEvent("Normal", "Deployed", "app-1")
	e.emit(d1)
	if got, want := rc.next(t, 10*time.Second).id, r1.ID()+":"+d1.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	for i := 0; i < 20; i++ {
		e.emit(inTenant(podEvent("Normal", "Deployed", "other"), tenant2))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.pub.Stream(ctx, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	deadline := time.Now().Add(10 * time.Second)
	for e.checkpointSeq() < last {
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint stands at %d, want the stream's last event %d", e.checkpointSeq(), last)
		}
		time.Sleep(20 * time.Millisecond) // polling the checkpoint
	}
}
