package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/rules"
)

// A rule's delivery queue lives in the server's memory. A gateway that
// restarts with its embedded server finds it gone, and makes it again from
// the delivery log: what was delivered is not sent again, what was not
// (a notification still being retried, one behind delivered ones) is.
func TestAQueueTheServerLostResumesWithoutLostOrDoubledNotifications(t *testing.T) {
	e := newEnv(t)
	a := e.start("a")
	rc := newReceiver(t, verifying)
	r := e.createRule(a, everyDeployed(rc), a)
	id := func(n int) string { return fmt.Sprintf("%s:ev-%d:firing", r.ID(), n) }
	ids := map[string]int{}
	for i := 1; i <= 3; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for range 3 {
		ids[rc.next(t, 10*time.Second).id]++
	}
	// The 4th is refused and retried; the 5th and 6th, queued after it,
	// are delivered: the queue's acknowledgement floor stays below them.
	refused := id(4)
	rc.refuse.Store(&refused)
	for i := 4; i <= 6; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for range 2 {
		ids[rc.next(t, 10*time.Second).id]++
	}
	ctx := context.Background()
	waitDeliveries(t, a, r.UID, 10, "the refused notification retried", func(ds []Delivery) bool {
		return slices.ContainsFunc(ds, func(d Delivery) bool {
			return d.NotificationID == refused && d.Status == StatusRetrying && len(d.Attempts) >= 2
		})
	})

	a.kill()
	restartServer(t)
	e.pub = connectJS(t)
	s, err := e.pub.Stream(ctx, rules.NotifyStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Consumer(ctx, consumerName(r.UID)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the rule's delivery consumer after the restart: %v, want it gone with the server's memory", err)
	}

	rc.refuse.Store(nil)
	b := e.start("b")
	for i := 7; i <= 8; i++ {
		e.emit(podEvent("Normal", "Deployed", fmt.Sprintf("app-%d", i)))
	}
	for range 3 { // the 4th, 7th and 8th
		ids[rc.next(t, 20*time.Second).id]++
	}
	rc.none(t, 2*time.Second)
	for n := 1; n <= 8; n++ {
		if ids[id(n)] != 1 {
			t.Errorf("notification %s delivered %d times, want once (all: %v)", id(n), ids[id(n)], ids)
		}
	}
	if len(ids) != 8 {
		t.Errorf("delivered %d distinct notifications, want 8: %v", len(ids), ids)
	}
	ds, err := b.disp.Deliveries(ctx, r.UID, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Status != StatusDelivered {
			t.Errorf("delivery log of %s: status %s, want delivered", d.NotificationID, d.Status)
		}
	}
}
