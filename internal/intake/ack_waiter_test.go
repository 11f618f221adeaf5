package intake

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// future is a PubAckFuture resolved by the test.
type future struct {
	ok  chan *jetstream.PubAck
	err chan error
}

func newFuture() *future {
	return &future{ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
}

func (f *future) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *future) Err() <-chan error            { return f.err }
func (f *future) Msg() *nats.Msg               { return nil }

// An ackWaiter returns each acknowledgement or error in turn, runs idle
// only when it has to wait, and waits on the timer it already has: one
// wait after another allocates nothing.
func TestAckWaiterWaitsOneAfterAnotherOnOneTimer(t *testing.T) {
	var w ackWaiter
	idles := 0
	f := newFuture()
	f.ok <- &jetstream.PubAck{Sequence: 1}
	if ack, err := w.await(f, func() { idles++ }); err != nil || ack.Sequence != 1 || idles != 0 {
		t.Fatalf("an acknowledgement already there: %v %v, idle ran %d times", ack, err, idles)
	}
	f = newFuture()
	if _, err := w.await(f, func() { idles++; f.err <- errors.New("no stream") }); err == nil || idles != 1 {
		t.Fatalf("an error while waiting: %v, idle ran %d times", err, idles)
	}
	seq := uint64(1)
	allocs := testing.AllocsPerRun(100, func() {
		seq++
		if ack, err := w.await(f, func() { f.ok <- &jetstream.PubAck{Sequence: seq} }); err != nil || ack.Sequence != seq {
			t.Fatalf("wait %d: %v %v", seq, ack, err)
		}
	})
	// The acknowledgement the test sends is its own allocation.
	if allocs > 1 {
		t.Fatalf("%.1f allocations per wait, want at most the test's own one", allocs)
	}
}
