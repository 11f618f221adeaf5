package watch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// The feed decodes an event only for the watchers that need it decoded: a
// watcher of Encoded items gets the stored bytes and no event, also beside
// a watcher that needs the event, which decodes it on its own goroutine;
// one that matches in process gets it decoded by the hub, and the bytes;
// an undecodable message reaches neither.
func TestTheFeedDecodesOnlyForWatchersThatNeedTheEvent(t *testing.T) {
	ctx, js, h := startHub(t)
	t.Cleanup(h.Stop)

	typ := "project"
	watch := func(tenant string, o event.WatchOptions) <-chan event.WatchItem {
		items := make(chan event.WatchItem, 16)
		o.Subjects = []string{subject.Filter{TenantType: &typ, TenantName: &tenant}.Subject()}
		ready := make(chan struct{})
		o.Ready = func() { close(ready) }
		go func() {
			_ = h.Watch(ctx, o, func(it event.WatchItem) error {
				items <- it
				return nil
			})
		}()
		select {
		case <-ready:
		case <-ctx.Done():
			t.Fatal("watch not established")
		}
		return items
	}
	emit := func(tenant, uid string) []byte {
		t.Helper()
		ev := &eventgatev1.Event{Uid: uid, Type: "Normal", Reason: "Tested", Labels: map[string]string{"a": "b"},
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"},
			Tenant:    &eventgatev1.Tenant{Type: typ, Name: tenant}}
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, event.SubjectOf(ev), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	next := func(items <-chan event.WatchItem) event.WatchItem { return receive(t, ctx, items) }

	alone := watch("a", event.WatchOptions{Encoded: true})
	raw := emit("a", "a-1")
	it := next(alone)
	if it.Event != nil || !bytes.Equal(it.Raw, raw) || it.Seq == 0 {
		t.Fatalf("encoded watcher alone: event %v, raw %d bytes (want the %d stored), seq %d", it.Event, len(it.Raw), len(raw), it.Seq)
	}

	encoded := watch("b", event.WatchOptions{Encoded: true})
	decoded := watch("b", event.WatchOptions{})
	matching := watch("c", event.WatchOptions{Encoded: true, Match: func(ev *eventgatev1.Event) bool { return ev.GetUid() != "c-skip" }})
	raw = emit("b", "b-1")
	// The watcher that needs the event decodes it itself; the encoded one
	// beside it still gets only the stored bytes.
	if it := next(decoded); it.Event.GetUid() != "b-1" || it.Event.GetResourceVersion() != strconv.FormatUint(it.Seq, 10) || !bytes.Equal(it.Raw, raw) {
		t.Fatalf("watcher that needs the event: event %v, seq %d, raw %d bytes", it.Event, it.Seq, len(it.Raw))
	}
	if it := next(encoded); it.Event != nil || !bytes.Equal(it.Raw, raw) {
		t.Fatalf("encoded watcher beside one that needs the event: event %v, raw %d bytes", it.Event, len(it.Raw))
	}
	emit("c", "c-skip")
	raw = emit("c", "c-1")
	if it := next(matching); it.Event.GetUid() != "c-1" || !bytes.Equal(it.Raw, raw) {
		t.Fatalf("encoded watcher that matches in process: event %v, raw %d bytes", it.Event, len(it.Raw))
	}

	// Not an event: neither kind of watcher gets it; the next one they do.
	onA := event.SubjectOf(&eventgatev1.Event{Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"},
		Tenant: &eventgatev1.Tenant{Type: typ, Name: "a"}})
	if _, err := js.Publish(ctx, onA, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	raw = emit("a", "a-2")
	if it := next(alone); it.Event != nil || !bytes.Equal(it.Raw, raw) {
		t.Fatalf("after an undecodable message: event %v, raw %d bytes; want a-2's bytes", it.Event, len(it.Raw))
	}
	onB := event.SubjectOf(&eventgatev1.Event{Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"},
		Tenant: &eventgatev1.Tenant{Type: typ, Name: "b"}})
	if _, err := js.Publish(ctx, onB, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	emit("b", "b-2")
	if it := next(decoded); it.Event.GetUid() != "b-2" {
		t.Fatalf("watcher that needs the event, after an undecodable message: event %v; want b-2", it.Event)
	}
}

// A stopped feed refuses a watch before it is established (Ready is not
// called), so that the client tries again instead of taking a watch that
// ends at once.
func TestAStoppedFeedRefusesAWatchBeforeItIsEstablished(t *testing.T) {
	ctx, _, h := startHub(t)
	h.Stop()
	typ, name := "project", "a"
	ready := false
	err := h.Watch(ctx, event.WatchOptions{Subjects: []string{subject.Filter{TenantType: &typ, TenantName: &name}.Subject()}, Ready: func() { ready = true }},
		func(event.WatchItem) error { return nil })
	if !errors.Is(err, event.ErrWatchStopped) || ready {
		t.Fatalf("watch of a stopped feed: %v, established %v; want ErrWatchStopped before it is established", err, ready)
	}
}

// startHub starts a live feed of an events stream on a server of its own,
// and a context for the test.
func startHub(t *testing.T) (context.Context, jetstream.JetStream, *Hub) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	js, cfg, _ := eventsStream(t)
	h, err := Start(ctx, js, cfg.Stream, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, h
}
