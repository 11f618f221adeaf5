package watch

import (
	"context"
	"strings"
	"testing"
	"time"
)

// An operator listing the events stream's consumers can tell which
// replica's watch feed and replays they are.
func TestConsumersAreNamedAfterTheReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, cfg, s := eventsStream(t)
	h, err := Start(ctx, js, cfg.Stream, nil, nil, OfReplica("pod-0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)

	var names []string
	for name := range s.ConsumerNames(ctx).Name() {
		names = append(names, name)
	}
	if len(names) != 1 || !strings.HasPrefix(names[0], "watch-feed-pod-0-") {
		t.Errorf("consumers %q, want the one feed named watch-feed-pod-0-<unique>_<n>", names)
	}
	// A replica restarted before the server dropped its last feed starts
	// a feed of its own beside it (from a later sequence).
	if _, err := js.Publish(ctx, "events.project.p._Pod.ns._", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	again, err := Start(ctx, js, cfg.Stream, nil, nil, OfReplica("pod-0"))
	if err != nil {
		t.Fatalf("a second start under the same replica id: %v", err)
	}
	again.Stop()
	if got := h.replayName(); !strings.HasPrefix(got, "watch_pod-0_") || got == h.replayName() {
		t.Errorf("replay consumer name %q, want watch_pod-0_<unique>", got)
	}
}
