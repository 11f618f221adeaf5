package watch

import (
	"sync"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// watcher is one watch as the hub knows it: its filter, its queue and its
// bookmark schedule.
type watcher struct {
	subjects   []string
	matchSubj  func(subject string) bool // before match, on the subject alone
	matchRaw   func(raw []byte) bool     // before match, on the encoding
	match      func(*eventgatev1.Event) bool
	encoded    bool // sends WatchItem.Raw on (WatchOptions.Encoded)
	q          queue
	overflow   chan struct{} // closed by the hub when q overflowed
	lastQueued uint64
	bookmarks  time.Duration
	nextMark   time.Time
	dead       bool
}

// needsEvent reports whether w needs the feed's events decoded: to match
// them, or to send them.
func (w *watcher) needsEvent() bool { return !w.encoded || w.match != nil }

// filters reports whether w matches the feed's events in process: the hub
// decodes them for it before queueing.
func (w *watcher) filters() bool { return w.match != nil }

// queue is a watcher's bounded buffer. It holds only what is queued: a
// channel of the bound's capacity per watcher would keep bound × Item of
// pointer-holding memory for each (300 MB for 1,000 watchers at 4,096),
// which the collector scans on every cycle, however idle the watchers.
// The hub pushes under its lock; the watch takes everything queued at once.
type queue struct {
	mu     sync.Mutex
	items  []event.WatchItem
	spare  []event.WatchItem // the previous batch's slice, emptied, for reuse
	max    int               // bound on len(items)
	notify chan struct{}     // a token when items became non-empty
}

func newQueue(max int) queue {
	return queue{max: max, notify: make(chan struct{}, 1)}
}

// push queues it; false when the queue is full.
func (q *queue) push(it event.WatchItem) bool {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.mu.Unlock()
		return false
	}
	if q.items == nil {
		q.items, q.spare = q.spare, nil
	}
	q.items = append(q.items, it)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return true
}

// take returns everything queued, in order; give it back with recycle.
func (q *queue) take() []event.WatchItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// recycle keeps a taken batch's slice for the next one unless it grew large
// (a burst): an idle watcher keeps a small buffer, not the largest it had.
func (q *queue) recycle(items []event.WatchItem) {
	if cap(items) > 256 {
		return
	}
	clear(items)
	q.mu.Lock()
	if q.spare == nil {
		q.spare = items[:0]
	}
	q.mu.Unlock()
}

func newWatcher(o event.WatchOptions) *watcher {
	buf := o.Buffer
	if buf <= 0 {
		buf = 4096
	}
	return &watcher{
		subjects:  o.Subjects,
		match:     o.Match,
		matchSubj: o.MatchSubject,
		matchRaw:  o.MatchEncoded,
		encoded:   o.Encoded,
		q:         newQueue(buf),
		overflow:  make(chan struct{}),
		bookmarks: o.Bookmarks,
		nextMark:  time.Now().Add(o.Bookmarks),
	}
}

// bookmarkLoop queues a bookmark to each watcher that asked for them, at
// its interval.
func (h *Hub) bookmarkLoop() {
	defer h.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case now := <-t.C:
			h.mu.Lock()
			for w := range h.watchers {
				if w.bookmarks <= 0 || now.Before(w.nextMark) {
					continue
				}
				w.nextMark = now.Add(w.bookmarks)
				// A full buffer will overflow on the next event.
				w.q.push(event.WatchItem{Seq: h.last, Bookmark: true, Live: true})
			}
			h.mu.Unlock()
		}
	}
}
