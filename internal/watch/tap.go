package watch

import (
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// TapItem is one message of the feed as the stream stores it. Raw and
// Header are shared with the feed's watchers: never modify them.
type TapItem struct {
	Seq     uint64
	Subject string
	Raw     []byte
	Header  nats.Header
	Stored  time.Time
}

// Tap receives every message the feed dispatches, in stream order, as
// stored: the replica's own store is filled from it instead of through a
// consumer of its own, so that each event crosses from the server to the
// gateway once. Its queue is bounded: when it fills up, the tap stops
// receiving and Overflow is closed, and its reader catches up from the
// stream (as a watcher that fell behind resumes).
type Tap struct {
	h        *Hub
	mu       sync.Mutex
	items    []TapItem
	spare    []TapItem
	max      int
	wakeAt   int // Ready gets a token once this many are queued
	notify   chan struct{}
	overflow chan struct{}
	dead     bool
}

// ErrFeedStopped is returned by Hub.Tap once the feed has stopped.
var ErrFeedStopped = errors.New("watch feed stopped")

// Tap starts a tap of at most buffer queued messages. It returns the last
// sequence the feed dispatched before the tap: the tap receives every
// message after it.
func (h *Hub) Tap(buffer int) (*Tap, uint64, error) {
	t := &Tap{h: h, max: max(buffer, 1), wakeAt: 1, notify: make(chan struct{}, 1), overflow: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return nil, 0, ErrFeedStopped
	default:
	}
	h.taps = append(h.taps, t)
	return t, h.last, nil
}

// Done is closed when the feed has stopped.
func (h *Hub) Done() <-chan struct{} { return h.done }

// push queues it; h.mu is held. A tap that overflows leaves the feed.
func (t *Tap) push(it TapItem) {
	if t.dead {
		return
	}
	t.mu.Lock()
	if len(t.items) >= t.max {
		t.mu.Unlock()
		t.dead = true
		close(t.overflow)
		t.h.metrics.slow.Inc()
		return
	}
	if t.items == nil {
		t.items, t.spare = t.spare, nil
	}
	t.items = append(t.items, it)
	wake := len(t.items) >= t.wakeAt
	t.mu.Unlock()
	if wake {
		t.wake()
	}
}

func (t *Tap) wake() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// Ready has a token once the queue holds as many messages as the last
// WakeAt asked for (one at first).
func (t *Tap) Ready() <-chan struct{} { return t.notify }

// WakeAt asks for a token on Ready once n messages are queued (now, if
// they already are): a reader that gathers batches is woken when one is
// full, not by every message.
func (t *Tap) WakeAt(n int) {
	t.mu.Lock()
	t.wakeAt = max(n, 1)
	wake := len(t.items) >= t.wakeAt
	t.mu.Unlock()
	if wake {
		t.wake()
	}
}

// Overflow is closed once the tap fell behind by more than its buffer and
// left the feed: what it queued before is still to be taken.
func (t *Tap) Overflow() <-chan struct{} { return t.overflow }

// Take returns everything queued, in order; give it back with Recycle.
func (t *Tap) Take() []TapItem {
	t.mu.Lock()
	defer t.mu.Unlock()
	items := t.items
	t.items = nil
	return items
}

// Recycle keeps a taken slice for the next messages.
func (t *Tap) Recycle(items []TapItem) {
	clear(items)
	t.mu.Lock()
	if t.spare == nil || cap(items) > cap(t.spare) {
		t.spare = items[:0]
	}
	t.mu.Unlock()
}

// Close removes the tap from the feed.
func (t *Tap) Close() {
	h := t.h
	h.mu.Lock()
	defer h.mu.Unlock()
	t.dead = true
	for i, o := range h.taps {
		if o == t {
			h.taps = append(h.taps[:i], h.taps[i+1:]...)
			break
		}
	}
}
