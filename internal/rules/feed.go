package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// Feed is the replica's live feed of the events stream (watch.Hub): one
// consumer reads the stream and decodes each event once for every watch
// and every shard of this replica. A shard watches its rules' tenants
// (events.<type>.<name>.>): the feed routes each event to the one shard,
// if any, that has a rule of its tenant, already decoded, and a shard
// without rules reads nothing. When the tenants change, the shard watches
// again from the event after the last one handled (the feed replays from
// the stream up to where it stands): the rules already in the shard miss
// nothing and see nothing twice, and a rule just taken in skips what was
// stored before it.
//
// Each shard once read the stream through an ordered consumer of its own:
// at 15,000 events/s four shards took four deliveries and a decode of
// every event, fell seconds behind, and so did the notifications
// (`bench -scale small -only rules`: a shard's lag 2–3 s at p50).
type Feed interface {
	// Watch sends the events o selects until ctx ends or it fails (an
	// *event.SlowWatcherError when the receiver fell too far behind).
	Watch(ctx context.Context, o event.WatchOptions, send func(event.WatchItem) error) error
	// LastSeq is the last sequence the feed has dispatched.
	LastSeq() uint64
}

// feedBuffer bounds what the feed queues for a shard that falls behind (a
// burst of notifications to publish): past it the shard watches again
// from its position, the feed replaying from the stream.
const feedBuffer = 1 << 15

// feedCoalesce: a shard takes its events from the feed in batches, at most
// this often, not woken for each (two goroutine hand-offs an event: the
// feed's and the shard's). It adds at most this much to a notification's
// latency.
const feedCoalesce = 20 * time.Millisecond

// refeedDelay gathers the changes of a burst (an apply of many rules) into
// one new watch.
const refeedDelay = 100 * time.Millisecond

// syncDelay: a shard takes in its rules at most this often while they
// change (shard.run).
const syncDelay = 50 * time.Millisecond

// feed is a shard's watch of the live feed and the goroutine running it.
type feed struct {
	subjects []string
	in       inbox
	done     chan error // the watch's end, when not stopped
	stop     context.CancelFunc
	ended    chan struct{}
}

func (f *feed) subjectsOrNil() []string {
	if f == nil {
		return nil
	}
	return f.subjects
}

// subjects is the filter the shard's rules need, sorted; nil: none.
func (sh *shard) subjects() []string {
	if len(sh.byTen) == 0 {
		return nil
	}
	out := make([]string, 0, len(sh.byTen))
	for t := range sh.byTen {
		out = append(out, subject.Filter{TenantType: &t.Type, TenantName: &t.Name}.Subject())
	}
	slices.Sort(out)
	return out
}

// follow makes the shard watch the tenants of its rules, from the event
// after the last handled (or before, for rules just taken in: rewind). A
// new watch replaces the old one, and what the old one delivered unhandled
// is dropped: the new one delivers it again if it is still of interest.
func (sh *shard) follow(ctx context.Context) error {
	sh.refeed = nil
	if sh.halted {
		return nil
	}
	subjects := sh.subjects()
	if sh.feed != nil && len(sh.fresh) == 0 && slices.Equal(subjects, sh.feed.subjects) {
		return nil
	}
	sh.stopFeed()
	if err := sh.rewind(ctx); err != nil {
		return err
	}
	if len(subjects) == 0 {
		// Nothing to read: time alone drives the shard, and its position
		// follows the feed's (tick).
		sh.caughtUp = true
		sh.skipAhead()
		return nil
	}
	from := sh.state.Seq
	sh.caughtUp = from >= sh.e.feed.LastSeq()
	fctx, stop := context.WithCancel(ctx)
	f := &feed{subjects: subjects, in: newInbox(), done: make(chan error, 1), stop: stop, ended: make(chan struct{})}
	// Encoded: the shard decodes only the events a rule may match (decode).
	o := event.WatchOptions{Subjects: subjects, After: &from, Bookmarks: sh.e.cfg.Tick, Buffer: feedBuffer, Encoded: true, Coalesce: feedCoalesce}
	go func() {
		defer close(f.ended)
		err := sh.e.feed.Watch(fctx, o, func(it event.WatchItem) error { return f.in.put(fctx, it) })
		if fctx.Err() == nil {
			f.done <- err
		}
	}()
	sh.feed = f
	sh.log.Debug("rules: shard feed", "tenants", len(sh.byTen), "from", from)
	return nil
}

// refollow watches again after the shard's watch ended with err: from
// where the shard stands if it fell behind, from the oldest event kept if
// the stream no longer holds what follows its position.
func (sh *shard) refollow(ctx context.Context, err error) error {
	var slow *event.SlowWatcherError
	switch {
	case errors.Is(err, event.ErrWatchStopped):
		// The replica is shutting down, and stops the shard next (a
		// graceful handover, from the last event handled).
		sh.stopFeed()
		sh.halted = true
		return nil
	case errors.As(err, &slow):
		sh.log.Debug("rules: shard fell behind the feed; catching up", "seq", sh.state.Seq)
	case errors.Is(err, event.ErrTooOld):
		info, ierr := sh.e.events.Info(ctx)
		if ierr != nil {
			return fmt.Errorf("events stream info: %w", ierr)
		}
		sh.log.Warn("rules: events were removed from the stream before the shard evaluated them",
			"from", sh.state.Seq+1, "to", info.State.FirstSeq-1)
		sh.state.Seq, sh.dirty = max(sh.state.Seq, info.State.FirstSeq-1), true
	default:
		return fmt.Errorf("events feed: %w", err)
	}
	sh.stopFeed()
	return sh.follow(ctx)
}

// stopFeed ends the shard's watch.
func (sh *shard) stopFeed() {
	f := sh.feed
	if f == nil {
		return
	}
	sh.feed = nil
	f.stop()
	<-f.ended
}

// skipAhead moves the position of a shard that reads nothing to the
// feed's: otherwise its next watch (a rule taken in, a successor) would
// start where it last handled an event, and replay everything stored
// since.
func (sh *shard) skipAhead() {
	if last := sh.e.feed.LastSeq(); last > sh.state.Seq {
		sh.state.Seq, sh.dirty = last, true
	}
}

// rewind moves the shard's position back to the last event stored before
// the oldest Since of the rules it took in since it last followed, if it
// read past it: a rule is known to the shard some time after it was
// stored, and meanwhile the shard may have handled events of its tenant
// (or skipped them, watching other tenants) that the rule is to evaluate.
// The other rules have evaluated every event of their tenants up to the
// position, and skip them when they come again.
func (sh *shard) rewind(ctx context.Context) error {
	if len(sh.fresh) == 0 {
		return nil
	}
	var since time.Time
	for uid := range sh.fresh {
		if st := sh.state.Rules[uid]; st != nil && (since.IsZero() || st.Since.Before(since)) {
			since = st.Since
		}
	}
	if since.IsZero() {
		clear(sh.fresh)
		return nil
	}
	seq, err := sh.lastBefore(ctx, since)
	if err != nil {
		return err
	}
	if seq < sh.state.Seq {
		for uid, st := range sh.state.Rules {
			if !sh.fresh[uid] {
				st.Seq = max(st.Seq, sh.state.Seq)
			}
		}
		sh.log.Debug("rules: shard rewinds for rules taken in", "rules", len(sh.fresh), "from", sh.state.Seq, "to", seq)
		sh.state.Seq, sh.dirty = seq, true
	}
	clear(sh.fresh)
	return nil
}

// lastBefore is the sequence of the last event stored before t (0: none):
// the stream's answer, as a consumer starting at t is made at the event
// after it.
func (sh *shard) lastBefore(ctx context.Context, t time.Time) (uint64, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cons, err := sh.e.events.CreateConsumer(cctx, jetstream.ConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartTimePolicy,
		OptStartTime:      &t,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		return 0, fmt.Errorf("events stream: position at %s: %w", t.Format(time.RFC3339Nano), err)
	}
	info := cons.CachedInfo()
	if err := sh.e.events.DeleteConsumer(cctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		sh.log.Debug("rules: delete position consumer", "err", err)
	}
	return info.Delivered.Stream, nil
}

// inboxMax bounds what a shard's inbox holds: past it, the feed's goroutine
// waits (and the feed queues, up to feedBuffer).
const inboxMax = 4096

// inbox passes the feed's items to the shard in batches: the shard takes
// everything that arrived at once, where a channel cost a handoff (and a
// wake-up) per event.
type inbox struct {
	mu    sync.Mutex
	items []event.WatchItem
	spare []event.WatchItem // the previous batch's slice, emptied, for reuse
	ready chan struct{}     // a token when items became non-empty
	space chan struct{}     // a token when the shard took items
}

func newInbox() inbox {
	return inbox{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

// put queues it, waiting while the inbox is full.
func (b *inbox) put(ctx context.Context, it event.WatchItem) error {
	for {
		b.mu.Lock()
		if n := len(b.items); n < inboxMax {
			if b.items == nil {
				b.items, b.spare = b.spare, nil
			}
			b.items = append(b.items, it)
			b.mu.Unlock()
			if n == 0 {
				select {
				case b.ready <- struct{}{}:
				default:
				}
			}
			return nil
		}
		b.mu.Unlock()
		select {
		case <-b.space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take returns everything queued, in order; give it back with recycle.
func (b *inbox) take() []event.WatchItem {
	b.mu.Lock()
	items := b.items
	b.items = nil
	b.mu.Unlock()
	select {
	case b.space <- struct{}{}:
	default:
	}
	return items
}

// recycle keeps a taken batch's slice for the next one.
func (b *inbox) recycle(items []event.WatchItem) {
	clear(items)
	b.mu.Lock()
	if b.spare == nil {
		b.spare = items[:0]
	}
	b.mu.Unlock()
}
