// Package watch serves live watches from one feed per gateway, the way
// kube-apiserver's watch cache does: watch.go registers watchers and
// dispatches the feed to them, watcher.go holds one watcher's bounded
// queue and its bookmarks, replay.go catches a resumed watch up from
// JetStream until it reaches the feed.
package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server/gsl"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// Hub serves live watches the way kube-apiserver's watch cache does: one
// ordered consumer per gateway reads the whole stream, and every message is
// fanned out in process to the watchers whose subject filters match it (a
// subject-indexed sublist, so the cost grows with the matches, not with the
// number of watchers). A watch that resumes from an older resourceVersion
// replays from JetStream until it reaches the feed, then switches to it.
type Hub struct {
	js      jetstream.JetStream
	stream  jetstream.Stream
	log     *slog.Logger
	metrics *Metrics
	replica string // names its consumers (OfReplica)
	// replayIdle is how long the server keeps a catch-up's consumer that
	// nobody pulls from (ReplayIdle).
	replayIdle time.Duration

	mu       sync.Mutex
	last     uint64 // last sequence dispatched
	subs     *gsl.GenericSublist[*watcher]
	watchers map[*watcher]struct{}
	matched  []*watcher // scratch for dispatch
	taps     []*Tap

	cc   jetstream.ConsumeContext
	done chan struct{}
	wg   sync.WaitGroup
}

// Option configures a Hub.
type Option func(*Hub)

// OfReplica names the consumers the hub makes on the server after the
// replica id: its feed "watch-feed-<id>-<unique>_<n>" and each replay
// "watch_<id>_<unique>", so that an operator can tell whose they are. The
// id must be a valid consumer name token (letters, digits, '-', '_').
func OfReplica(id string) Option { return func(h *Hub) { h.replica = id } }

// DefaultReplayIdle is how long the server keeps a catch-up's consumer
// while its watcher does not read, unless ReplayIdle says otherwise.
const DefaultReplayIdle = time.Minute

// ReplayIdle sets how long the server keeps the consumer of a catch-up
// (a watch from a past resourceVersion) while its watcher does not read:
// after that the server deletes it, and the catch-up makes a new one from
// where it was when the watcher reads again. Zero or less keeps
// DefaultReplayIdle.
func ReplayIdle(d time.Duration) Option {
	return func(h *Hub) {
		if d > 0 {
			h.replayIdle = d
		}
	}
}

// Start starts the live feed at the end of the stream.
func Start(ctx context.Context, js jetstream.JetStream, streamName string, log *slog.Logger, m *Metrics, opts ...Option) (*Hub, error) {
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("watch feed: stream %s: %w", streamName, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch feed: stream info: %w", err)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	h := &Hub{
		js:         js,
		stream:     s,
		log:        log,
		metrics:    m,
		last:       info.State.LastSeq,
		subs:       gsl.NewSublist[*watcher](),
		watchers:   make(map[*watcher]struct{}),
		done:       make(chan struct{}),
		replayIdle: DefaultReplayIdle,
	}
	for _, o := range opts {
		o(h)
	}
	feed := ""
	if h.replica != "" {
		// Unique to this start: a replica killed and restarted on its data
		// directory finds its last feed still on the server until the
		// server drops it, and may not take over its name.
		feed = "watch-feed-" + h.replica + "-" + nuid.Next()
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		NamePrefix:     feed,
		FilterSubjects: []string{ejs.SubjectsAll},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("watch feed: ordered consumer: %w", err)
	}
	h.cc, err = cons.Consume(h.dispatch,
		jetstream.PullMaxMessages(2048),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			log.Warn("watch feed consumer", "err", err)
		}))
	if err != nil {
		return nil, fmt.Errorf("watch feed: consume: %w", err)
	}
	h.wg.Add(1)
	go h.bookmarkLoop()
	return h, nil
}

// Stop ends the feed; running watches end with event.ErrWatchStopped.
func (h *Hub) Stop() {
	select {
	case <-h.done:
		return
	default:
	}
	h.cc.Stop()
	close(h.done)
	h.wg.Wait()
}

// LastSeq is the last sequence the feed dispatched.
func (h *Hub) LastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

var propagator = propagation.TraceContext{}

func (h *Hub) dispatch(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		h.log.Error("watch feed: message without metadata", "err", err)
		return
	}
	seq := meta.Sequence.Stream
	h.metrics.dispatched.Inc()
	h.metrics.feedLag.Observe(max(time.Since(meta.Timestamp), 0).Seconds())

	h.mu.Lock()
	defer h.mu.Unlock()
	h.last = seq
	for _, t := range h.taps {
		t.push(TapItem{Seq: seq, Subject: msg.Subject(), Raw: msg.Data(), Header: msg.Headers(), Stored: meta.Timestamp})
	}
	h.matched = h.matched[:0]
	subj := msg.Subject()
	h.subs.Match(subj, func(w *watcher) {
		if w.matchSubj == nil || w.matchSubj(subj) {
			h.matched = append(h.matched, w)
		}
	})
	if len(h.matched) == 0 {
		return
	}
	// Decoded here, once for all, only when a watcher filters in process;
	// otherwise only checked, and a watcher that needs the event decodes
	// it on its own goroutine (Watch), not under the hub's lock and ahead
	// of every other watcher's delivery.
	raw := msg.Data()
	var ev *eventgatev1.Event
	if slices.ContainsFunc(h.matched, (*watcher).filters) {
		if ev, err = event.Unmarshal(raw); err != nil {
			h.metrics.decodeErrors.Inc()
			h.log.Error("watch feed: undecodable message", "seq", seq, "subject", msg.Subject(), "err", err)
			return
		}
		ev.ResourceVersion = strconv.FormatUint(seq, 10)
	} else if !event.EncodedWellFormed(raw) {
		h.metrics.decodeErrors.Inc()
		h.log.Error("watch feed: undecodable message", "seq", seq, "subject", msg.Subject())
		return
	}
	var sc trace.SpanContext
	if hc := propagation.HeaderCarrier(msg.Headers()); hc.Get("traceparent") != "" {
		sc = trace.SpanContextFromContext(propagator.Extract(context.Background(), hc))
	}
	it := event.WatchItem{Seq: seq, Event: ev, Raw: raw, Trace: sc, Stored: meta.Timestamp, Live: true}
	for _, w := range h.matched {
		if w.dead || seq <= w.lastQueued || (w.matchRaw != nil && !w.matchRaw(raw)) || (w.match != nil && !w.match(ev)) {
			continue
		}
		w.lastQueued = seq
		if w.q.push(it) {
			h.metrics.delivered.Inc()
		} else {
			h.kill(w)
		}
	}
}

// kill ends a watcher whose buffer overflowed. h.mu is held.
func (h *Hub) kill(w *watcher) {
	w.dead = true
	close(w.overflow)
	h.removeLocked(w)
	h.metrics.slow.Inc()
}

func (h *Hub) removeLocked(w *watcher) {
	if _, ok := h.watchers[w]; !ok {
		return
	}
	delete(h.watchers, w)
	for _, s := range w.subjects {
		_ = h.subs.Remove(s, w)
	}
	h.metrics.watchers.Dec()
}

func (h *Hub) register(w *watcher) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range w.subjects {
		if err := h.subs.Insert(s, w); err != nil {
			for _, r := range w.subjects[:i] {
				_ = h.subs.Remove(r, w)
			}
			return 0, fmt.Errorf("watch subject %q: %w", s, err)
		}
	}
	h.watchers[w] = struct{}{}
	h.metrics.watchers.Inc()
	return h.last, nil
}

func (h *Hub) unregister(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(w)
}

// Watch streams what o selects to send until ctx ends, send fails, the
// watcher falls too far behind (*event.SlowWatcherError) or the hub stops. Events
// arrive in stream order, each once.
func (h *Hub) Watch(ctx context.Context, o event.WatchOptions, send func(event.WatchItem) error) error {
	if len(o.Subjects) == 0 {
		return errors.New("watch: no subjects")
	}
	var cursor uint64 // every selected event up to cursor has been sent
	resumed := o.After != nil
	if resumed {
		info, err := h.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("watch: stream info: %w", err)
		}
		after := *o.After
		if after > info.State.LastSeq {
			return fmt.Errorf("%w: %d; the newest is %d", event.ErrFuture, after, info.State.LastSeq)
		}
		if after+1 < info.State.FirstSeq { // after <= LastSeq: no overflow
			return fmt.Errorf("%w: %d; the oldest kept is %d", event.ErrTooOld, after, info.State.FirstSeq)
		}
		cursor = after
	}
	var w *watcher
	for {
		w = newWatcher(o)
		head, err := h.register(w)
		if err != nil {
			return err
		}
		select {
		case <-h.done:
			// A stopped feed refuses the watch before it is established,
			// so that a client tries again elsewhere instead of taking a
			// watch that ends at once for one that ended on its own.
			h.unregister(w)
			return event.ErrWatchStopped
		default:
		}
		if !resumed {
			cursor, resumed = head, true
		}
		if o.Ready != nil {
			o.Ready()
			o.Ready = nil
		}
		if cursor < head {
			h.metrics.replays.Inc()
			cursor, err = h.replay(ctx, o, cursor, head, send)
			if err != nil {
				h.unregister(w)
				return err
			}
		}
		select {
		case <-w.overflow:
			// The live buffer filled up while we replayed: catch up again.
			continue
		default:
		}
		break
	}
	defer h.unregister(w)
	var coalesce *time.Timer
	if o.Coalesce > 0 {
		coalesce = time.NewTimer(o.Coalesce)
		defer coalesce.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return event.ErrWatchStopped
		case <-w.q.notify:
			items := w.q.take()
			for _, it := range items {
				if it.Bookmark {
					it.Seq = max(it.Seq, cursor)
				} else if it.Seq <= cursor {
					continue
				} else if it.Event == nil && w.needsEvent() {
					ev, err := event.Unmarshal(it.Raw)
					if err != nil {
						h.metrics.decodeErrors.Inc()
						h.log.Error("watch feed: undecodable message", "seq", it.Seq, "err", err)
						cursor = it.Seq
						continue
					}
					ev.ResourceVersion = strconv.FormatUint(it.Seq, 10)
					it.Event = ev
				}
				if it.Live && !it.Bookmark && coalesce == nil {
					h.metrics.sendLag.Observe(max(time.Since(it.Stored), 0).Seconds())
				}
				if err := send(it); err != nil {
					return err
				}
				cursor = it.Seq
			}
			w.q.recycle(items)
			if coalesce != nil {
				// What arrives meanwhile waits in the queue (its notify
				// token stays) for the next batch.
				coalesce.Reset(o.Coalesce)
				select {
				case <-coalesce.C:
				case <-ctx.Done():
					return ctx.Err()
				case <-h.done:
					return event.ErrWatchStopped
				case <-w.overflow:
					return &event.SlowWatcherError{ResumeFrom: cursor}
				}
			}
		case <-w.overflow:
			return &event.SlowWatcherError{ResumeFrom: cursor}
		}
	}
}
