package notify

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/rules"
)

// A rule that never notified has no delivery queue: its worker and its
// consumer come with its first notification.
func TestARuleHasNoDeliveryConsumerUntilItsFirstNotification(t *testing.T) {
	e, a, rc := oneShard(t)
	quiet := e.createRule(a, &rules.Rule{Name: "quiet", Filter: reasonFilter("Never"), Condition: rules.Condition{Kind: rules.KindEvery},
		Destination: rules.Destination{Kind: rules.DestWebhook, URL: rc.srv.URL, Secret: secret}}, a)
	loud := e.createRule(a, deployedRule("loud", tenant, rc.srv.URL), a)
	ev := podEvent("Normal", "Deployed", "app-1")
	e.emit(ev)
	if got, want := rc.next(t, 10*time.Second).id, loud.ID()+":"+ev.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var names []string
	l := a.engine.Stream().ConsumerNames(ctx)
	for n := range l.Name() {
		names = append(names, n)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{consumerName(loud.UID)}) {
		t.Fatalf("delivery consumers %v, want %s's alone (not %s's, which never notified)", names, loud.ID(), quiet.ID())
	}
	waitServing(t, a.disp, 1)
	// Deleted, the rule is forgotten: the engine keeps no rule it no
	// longer evaluates, and its queue is no longer served.
	if queued, _ := a.engine.Queued(); !slices.Equal(queued, []string{loud.UID}) {
		t.Fatalf("queued for %v, want %s", queued, loud.UID)
	}
	if err := a.store.Delete(ctx, loud.Tenant, loud.Name); err != nil {
		t.Fatal(err)
	}
	waitTakenIn(t, a, loud, false)
	if queued, _ := a.engine.Queued(); len(queued) != 0 {
		t.Fatalf("queued for %v after the rule was deleted", queued)
	}
	waitServing(t, a.disp, 0)
}

// waitServing waits until d serves n delivery queues (it counts them at
// the end of each pass over the rules, on its own goroutine).
func waitServing(t *testing.T, d *Dispatcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.Serving() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("the dispatcher serves %d delivery queues, want %d", d.Serving(), n)
		}
		time.Sleep(10 * time.Millisecond) // polling the dispatcher's count
	}
}

// A notification queued by a replica that stopped before its worker
// started (its shard checkpointed past the event, so that the next owner
// does not queue it again) is found and delivered by the next owner.
func TestANotificationQueuedBeforeItsWorkerStartedIsDeliveredByTheNextOwner(t *testing.T) {
	e, a, rc := oneShard(t)
	r := e.createRule(a, deployedRule("deployed", tenant, rc.srv.URL), a)
	a.disp.Stop()
	ev := podEvent("Normal", "Deployed", "app-1")
	e.emit(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.pub.Stream(ctx, e.stream)
	if err != nil {
		t.Fatal(err)
	}
	last := info.CachedInfo().State.LastSeq
	for e.checkpointSeq() < last {
		if ctx.Err() != nil {
			t.Fatalf("the shard did not checkpoint past %d", last)
		}
		time.Sleep(20 * time.Millisecond) // polling the checkpoint
	}
	a.kill()
	e.start("b")
	if got, want := rc.next(t, 20*time.Second).id, r.ID()+":"+ev.Uid+":firing"; got != want {
		t.Fatalf("delivered %s, want %s", got, want)
	}
	rc.none(t, time.Second)
}
