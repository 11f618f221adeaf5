package watch

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A tap receives every message of the feed after the sequence it started
// at, in order, as stored (subject, bytes, headers), whether or not a
// watcher matches it; once it is behind by more than its buffer it leaves
// the feed (Overflow closes) and keeps what it queued before; a stopped
// feed refuses a new tap.
func TestATapGetsEveryMessageInOrderUntilItsBufferOverflows(t *testing.T) {
	ctx, js, h := startHub(t)
	publish := func(i int) uint64 {
		t.Helper()
		m := nats.NewMsg("events.project.p" + strconv.Itoa(i%3) + ".Pod.ns.p")
		m.Data = []byte("event " + strconv.Itoa(i))
		m.Header.Set("Eventgate-Test", strconv.Itoa(i))
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	first := publish(0) // before the tap
	for h.LastSeq() < first {
		select {
		case <-ctx.Done():
			t.Fatal("the feed did not dispatch the first message")
		case <-time.After(time.Millisecond):
		}
	}
	tap, head, err := h.Tap(5)
	if err != nil {
		t.Fatal(err)
	}
	if head != first {
		t.Fatalf("tap starts after %d, want the feed's last dispatched, %d", head, first)
	}
	var seqs []uint64
	for i := 1; i <= 8; i++ {
		seqs = append(seqs, publish(i))
	}
	select {
	case <-tap.Overflow():
	case <-ctx.Done():
		t.Fatal("a tap of 5 that is not read did not overflow after 8 messages")
	}
	items := tap.Take()
	if len(items) != 5 {
		t.Fatalf("took %d items, want the 5 queued before the overflow", len(items))
	}
	for k, it := range items {
		i := k + 1
		if it.Seq != seqs[k] || string(it.Raw) != "event "+strconv.Itoa(i) || it.Header.Get("Eventgate-Test") != strconv.Itoa(i) ||
			it.Subject != "events.project.p"+strconv.Itoa(i%3)+".Pod.ns.p" || it.Stored.IsZero() {
			t.Fatalf("item %d: %+v", k, it)
		}
	}
	tap.Recycle(items)
	tap.Close()

	h.Stop()
	if _, _, err := h.Tap(5); !errors.Is(err, ErrFeedStopped) {
		t.Fatalf("tap of a stopped feed: %v, want ErrFeedStopped", err)
	}
}

// A tap's reader that gathers batches is woken when as many messages as it
// asked for are queued, not by each one.
func TestATapWakesItsReaderOnceTheMessagesItAskedForAreQueued(t *testing.T) {
	ctx, js, h := startHub(t)
	t.Cleanup(h.Stop)
	tap, _, err := h.Tap(100)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	tap.WakeAt(3)
	var last uint64
	for i := range 3 {
		ack, err := js.Publish(ctx, "events.project.p.Pod.ns.p"+strconv.Itoa(i), []byte("event"))
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
		if i == 1 {
			for h.LastSeq() < last {
				select {
				case <-ctx.Done():
					t.Fatal("the feed did not dispatch the second message")
				case <-time.After(time.Millisecond):
				}
			}
			select {
			case <-tap.Ready():
				t.Fatal("woken with 2 messages queued, asked for 3")
			default:
			}
		}
	}
	select {
	case <-tap.Ready():
	case <-ctx.Done():
		t.Fatal("not woken with 3 messages queued")
	}
	if items := tap.Take(); len(items) != 3 || items[2].Seq != last {
		t.Fatalf("took %d items", len(items))
	}
	// Asking for fewer than are queued wakes at once.
	if _, err := js.Publish(ctx, "events.project.p.Pod.ns.p", []byte("event")); err != nil {
		t.Fatal(err)
	}
	for h.LastSeq() <= last {
		select {
		case <-ctx.Done():
			t.Fatal("the feed did not dispatch the fourth message")
		case <-time.After(time.Millisecond):
		}
	}
	tap.WakeAt(1)
	select {
	case <-tap.Ready():
	default:
		t.Fatal("not woken by WakeAt(1) with a message queued")
	}
}
