package watch

import (
	"context"
	"errors"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// A coalescing watcher is not woken for each event: after a batch it waits
// out its interval while the feed queues what comes, and it still ends at
// once when it overflows or its context ends.
func TestACoalescingWatcherWaitsOutItsIntervalButNotAnEnd(t *testing.T) {
	ctx, js, h := startHub(t)
	t.Cleanup(h.Stop)
	typ, tenant := "project", "a"
	emit := func(uid string) uint64 {
		t.Helper()
		ev := &eventgatev1.Event{Uid: uid, Type: "Normal", Reason: "Tested",
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"},
			Tenant:    &eventgatev1.Tenant{Type: typ, Name: tenant}}
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := js.Publish(ctx, event.SubjectOf(ev), b)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	dispatched := func(seq uint64) {
		t.Helper()
		for h.LastSeq() < seq {
			select {
			case <-ctx.Done():
				t.Fatalf("the feed did not dispatch %d", seq)
			case <-time.After(5 * time.Millisecond): // polling the feed
			}
		}
	}
	watch := func(ctx context.Context, buffer int) (<-chan event.WatchItem, <-chan error) {
		items, done := make(chan event.WatchItem, 16), make(chan error, 1)
		ready := make(chan struct{})
		o := event.WatchOptions{Subjects: []string{subject.Filter{TenantType: &typ, TenantName: &tenant}.Subject()},
			Encoded: true, Coalesce: time.Hour, Buffer: buffer, Ready: func() { close(ready) }}
		go func() {
			done <- h.Watch(ctx, o, func(it event.WatchItem) error {
				items <- it
				return nil
			})
		}()
		<-ready
		return items, done
	}

	// Cancelled while it waits: it returns at once.
	wctx, cancel := context.WithCancel(ctx)
	items, done := watch(wctx, 0)
	first := emit("e-1")
	if it := receive(t, ctx, items); it.Seq != first {
		t.Fatalf("first batch: seq %d, want %d", it.Seq, first)
	}
	dispatched(emit("e-2"))
	select {
	case it := <-items:
		t.Fatalf("event %d delivered within the interval", it.Seq)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v", err)
	}

	// Overflowing while it waits: it ends at once, resuming after what it
	// sent.
	items, done = watch(ctx, 2)
	first = emit("f-1")
	if it := receive(t, ctx, items); it.Seq != first {
		t.Fatalf("first batch: seq %d, want %d", it.Seq, first)
	}
	for _, uid := range []string{"f-2", "f-3", "f-4"} {
		emit(uid)
	}
	var slow *event.SlowWatcherError
	if err := <-done; !errors.As(err, &slow) || slow.ResumeFrom != first {
		t.Fatalf("overflowed while waiting: %v, want a slow watcher resuming from %d", err, first)
	}
}
