package watch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/natstest"
	"github.com/eventgate/eventgate/internal/subject"
)

// eventsStream starts a server with the events stream, as the gateway
// configures it.
func eventsStream(t *testing.T) (jetstream.JetStream, ejs.Config, jetstream.Stream) {
	t.Helper()
	ns := natstest.StartServer(t)
	nc, js := natstest.Connect(t, ns.ClientURL())
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := ejs.DefaultConfig()
	s, err := ejs.EnsureStream(ctx, js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return js, cfg, s
}

// A watch of more subjects than a replay's consumer filters by (the rules'
// shards watch hundreds of tenants) resumes with exactly its subjects'
// events, in order, each with the time it was stored, and then goes on
// live.
func TestAResumedWatchOfManySubjectsReplaysOnlyTheirEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, cfg, _ := eventsStream(t)

	emit := func(tenant string, i int) {
		t.Helper()
		ev := &eventgatev1.Event{Uid: fmt.Sprintf("%s-%d", tenant, i), Type: "Normal", Reason: "Tested",
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"},
			Tenant:    &eventgatev1.Tenant{Type: "project", Name: tenant}}
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, event.SubjectOf(ev), b); err != nil {
			t.Fatal(err)
		}
	}
	const watched, tenants = maxReplayFilters + 4, maxReplayFilters * 2
	var subjects, want []string
	for i := range tenants {
		name := fmt.Sprintf("t%d", i)
		if i < watched {
			typ := "project"
			subjects = append(subjects, subject.Filter{TenantType: &typ, TenantName: &name}.Subject())
		}
	}
	before := time.Now().Add(-time.Second)
	for round := range 2 {
		for i := range tenants {
			name := fmt.Sprintf("t%d", i)
			emit(name, round)
			if i < watched {
				want = append(want, fmt.Sprintf("%s-%d", name, round))
			}
		}
	}

	// Started after them: the feed begins at the stream's end, so what was
	// stored before comes from a replay.
	h, err := Start(ctx, js, cfg.Stream, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	items := make(chan event.WatchItem, 1)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	after := uint64(0)
	go func() {
		_ = h.Watch(wctx, event.WatchOptions{Subjects: subjects, After: &after}, func(it event.WatchItem) error {
			select {
			case items <- it:
				return nil
			case <-wctx.Done():
				return wctx.Err()
			}
		})
	}()
	next := func() event.WatchItem { return receive(t, ctx, items) }
	for _, uid := range want {
		it := next()
		if it.Event.GetUid() != uid {
			t.Fatalf("replayed %s, want %s", it.Event.GetUid(), uid)
		}
		if it.Live || it.Stored.Before(before) || it.Stored.After(time.Now()) {
			t.Errorf("replayed %s: live %v, stored %v; want a replayed item with the time it was stored", uid, it.Live, it.Stored)
		}
	}
	emit("t0", 9)
	emit(fmt.Sprintf("t%d", tenants-1), 9) // not watched
	emit("t1", 9)
	for _, uid := range []string{"t0-9", "t1-9"} {
		if it := next(); it.Event.GetUid() != uid || !it.Live {
			t.Fatalf("got %s (live %v), want %s live", it.Event.GetUid(), it.Live, uid)
		}
	}
}

// receive is the next item of a watch that sends to items.
func receive(t *testing.T, ctx context.Context, items <-chan event.WatchItem) event.WatchItem {
	t.Helper()
	select {
	case it := <-items:
		return it
	case <-ctx.Done():
		t.Fatal("no event within the test's time")
		return event.WatchItem{}
	}
}
