package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server/gsl"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// Errors of Watch.
var (
	// ErrTooOld: the stream no longer holds every event after the requested
	// resourceVersion; the client must list again.
	ErrTooOld = errors.New("resourceVersion is too old")
	// ErrFuture: the requested resourceVersion is ahead of the stream.
	ErrFuture = errors.New("resourceVersion is ahead of the stream")
	// ErrHubStopped: the gateway is shutting down.
	ErrHubStopped = errors.New("watch feed stopped")
)

// SlowWatcherError ends a watch whose buffer overflowed. Resuming from
// ResumeFrom misses nothing.
type SlowWatcherError struct {
	ResumeFrom uint64
}

func (e *SlowWatcherError) Error() string {
	return fmt.Sprintf("watcher too slow: buffer overflowed; resume from resourceVersion %d", e.ResumeFrom)
}

// Item is one thing a watcher receives: an event with its stream sequence,
// or a bookmark carrying the sequence up to which the watcher is complete.
type Item struct {
	Seq      uint64
	Event    *eventgatev1.Event // shared between watchers: never modify
	Bookmark bool
	// Trace is the span context of the emit that stored the event, if any.
	Trace trace.SpanContext
}

// WatchOptions select what a watch receives.
type WatchOptions struct {
	// Subjects are NATS filter subjects; they must not overlap.
	Subjects []string
	// Match, when set, is applied in process to events the subjects select.
	Match func(*eventgatev1.Event) bool
	// After, when set, resumes after this stream sequence; nil starts live.
	After *uint64
	// Bookmarks is the bookmark interval; 0 sends none.
	Bookmarks time.Duration
	// Buffer bounds the events queued for a slow watcher (default 4096).
	Buffer int
	// Ready, when set, is called once the watch is established: the
	// resourceVersion was accepted and live events are being collected.
	Ready func()
}

// HubMetrics are the watch feed's metrics.
type HubMetrics struct {
	watchers     prometheus.Gauge
	dispatched   prometheus.Counter
	delivered    prometheus.Counter
	slow         prometheus.Counter
	replays      prometheus.Counter
	decodeErrors prometheus.Counter
	feedLag      prometheus.Histogram
}

// NewHubMetrics registers the hub's metrics with reg.
func NewHubMetrics(reg prometheus.Registerer) *HubMetrics {
	m := &HubMetrics{
		watchers:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "eventgate_watchers", Help: "Active watchers on this gateway."}),
		dispatched:   prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_feed_messages_total", Help: "Messages read by this gateway's live feed."}),
		delivered:    prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_queued_total", Help: "Events queued to watchers by the live feed."}),
		slow:         prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_slow_total", Help: "Watches ended because their buffer overflowed."}),
		replays:      prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_replays_total", Help: "Catch-up replays from JetStream for resumed watches."}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "eventgate_watch_decode_errors_total", Help: "Stream messages the feed could not decode."}),
		feedLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "eventgate_watch_feed_lag_seconds",
			Help:    "Time from an event being stored in the stream to this gateway's live feed handing it to its watchers (clocks of the stream's server and the gateway).",
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 16), // 0.25 ms … 8 s
		}),
	}
	if reg != nil {
		reg.MustRegister(m.watchers, m.dispatched, m.delivered, m.slow, m.replays, m.decodeErrors, m.feedLag)
	}
	return m
}

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
	metrics *HubMetrics

	mu       sync.Mutex
	last     uint64 // last sequence dispatched
	subs     *gsl.GenericSublist[*watcher]
	watchers map[*watcher]struct{}
	matched  []*watcher // scratch for dispatch

	cc   jetstream.ConsumeContext
	done chan struct{}
	wg   sync.WaitGroup
}

type watcher struct {
	subjects   []string
	match      func(*eventgatev1.Event) bool
	q          queue
	overflow   chan struct{} // closed by the hub when q overflowed
	lastQueued uint64
	bookmarks  time.Duration
	nextMark   time.Time
	dead       bool
}

// queue is a watcher's bounded buffer. It holds only what is queued: a
// channel of the bound's capacity per watcher would keep bound × Item of
// pointer-holding memory for each (300 MB for 1,000 watchers at 4,096),
// which the collector scans on every cycle, however idle the watchers.
// The hub pushes under its lock; the watch takes everything queued at once.
type queue struct {
	mu     sync.Mutex
	items  []Item
	spare  []Item        // the previous batch's slice, emptied, for reuse
	max    int           // bound on len(items)
	notify chan struct{} // a token when items became non-empty
}

func newQueue(max int) queue {
	return queue{max: max, notify: make(chan struct{}, 1)}
}

// push queues it; false when the queue is full.
func (q *queue) push(it Item) bool {
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
func (q *queue) take() []Item {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// recycle keeps a taken batch's slice for the next one unless it grew large
// (a burst): an idle watcher keeps a small buffer, not the largest it had.
func (q *queue) recycle(items []Item) {
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

// StartHub starts the live feed at the end of the stream.
func StartHub(ctx context.Context, js jetstream.JetStream, streamName string, log *slog.Logger, m *HubMetrics) (*Hub, error) {
	s, err := js.Stream(ctx, streamName)
	if err != nil {
		return nil, fmt.Errorf("watch feed: stream %s: %w", streamName, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch feed: stream info: %w", err)
	}
	if m == nil {
		m = NewHubMetrics(nil)
	}
	h := &Hub{
		js:       js,
		stream:   s,
		log:      log,
		metrics:  m,
		last:     info.State.LastSeq,
		subs:     gsl.NewSublist[*watcher](),
		watchers: make(map[*watcher]struct{}),
		done:     make(chan struct{}),
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{SubjectsAll},
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

// Stop ends the feed; running watches end with ErrHubStopped.
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
	h.matched = h.matched[:0]
	h.subs.Match(msg.Subject(), func(w *watcher) { h.matched = append(h.matched, w) })
	if len(h.matched) == 0 {
		return
	}
	ev, err := event.Unmarshal(msg.Data())
	if err != nil {
		h.metrics.decodeErrors.Inc()
		h.log.Error("watch feed: undecodable message", "seq", seq, "subject", msg.Subject(), "err", err)
		return
	}
	ev.ResourceVersion = strconv.FormatUint(seq, 10)
	var sc trace.SpanContext
	if hc := propagation.HeaderCarrier(msg.Headers()); hc.Get("traceparent") != "" {
		sc = trace.SpanContextFromContext(propagator.Extract(context.Background(), hc))
	}
	it := Item{Seq: seq, Event: ev, Trace: sc}
	for _, w := range h.matched {
		if w.dead || seq <= w.lastQueued || (w.match != nil && !w.match(ev)) {
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
				w.q.push(Item{Seq: h.last, Bookmark: true})
			}
			h.mu.Unlock()
		}
	}
}

func newWatcher(o WatchOptions) *watcher {
	buf := o.Buffer
	if buf <= 0 {
		buf = 4096
	}
	return &watcher{
		subjects:  o.Subjects,
		match:     o.Match,
		q:         newQueue(buf),
		overflow:  make(chan struct{}),
		bookmarks: o.Bookmarks,
		nextMark:  time.Now().Add(o.Bookmarks),
	}
}

// Watch streams what o selects to send until ctx ends, send fails, the
// watcher falls too far behind (*SlowWatcherError) or the hub stops. Events
// arrive in stream order, each once.
func (h *Hub) Watch(ctx context.Context, o WatchOptions, send func(Item) error) error {
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
			return fmt.Errorf("%w: %d; the newest is %d", ErrFuture, after, info.State.LastSeq)
		}
		if after+1 < info.State.FirstSeq { // after <= LastSeq: no overflow
			return fmt.Errorf("%w: %d; the oldest kept is %d", ErrTooOld, after, info.State.FirstSeq)
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
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.done:
			return ErrHubStopped
		case <-w.q.notify:
			items := w.q.take()
			for _, it := range items {
				if it.Bookmark {
					it.Seq = max(it.Seq, cursor)
				} else if it.Seq <= cursor {
					continue
				}
				if err := send(it); err != nil {
					return err
				}
				cursor = it.Seq
			}
			w.q.recycle(items)
		case <-w.overflow:
			return &SlowWatcherError{ResumeFrom: cursor}
		}
	}
}

// replay sends what o selects in (from, to] from JetStream and returns the
// last sequence covered. It reads through a consumer of its own, which it
// deletes when it returns however it ends (one made for a request that was
// cancelled meanwhile included). If the server drops that consumer while
// send is blocked (a watcher that stopped reading for longer than the
// consumer's inactivity limit), it goes on from the cursor with a new one.
func (h *Hub) replay(ctx context.Context, o WatchOptions, from, to uint64, send func(Item) error) (uint64, error) {
	var cons jetstream.Consumer
	defer func() {
		if cons != nil {
			h.deleteConsumer(ctx, cons.CachedInfo().Name)
		}
	}()
	var pending uint64
	cursor, again := from, false
	for cursor < to {
		if cons == nil {
			// Watch checked that the stream holds what follows from; a
			// consumer made again must find it still held.
			c, err := h.replayConsumer(ctx, o, cursor, again)
			if err != nil {
				return cursor, err
			}
			cons, pending, again = c, c.CachedInfo().NumPending, true
		}
		if pending == 0 {
			break
		}
		select {
		case <-h.done:
			return cursor, ErrHubStopped
		default:
		}
		var err error
		cursor, pending, err = h.replayBatch(ctx, cons, o, cursor, pending, to, send)
		switch {
		case err == nil, errors.Is(err, nats.ErrTimeout):
		case consumerGone(err):
			// Dropped while the watcher did not read: go on from the cursor.
			h.deleteConsumer(ctx, cons.CachedInfo().Name)
			cons = nil
		default:
			return cursor, err
		}
	}
	// Everything in (cursor, to] that the subjects select was sent or did not match.
	return to, nil
}

// replayBatch fetches and sends one batch of a replay, from cursor with
// pending messages left, and returns the new cursor and pending count. An
// error of send is returned as it is; one of the consumer is wrapped.
func (h *Hub) replayBatch(ctx context.Context, cons jetstream.Consumer, o WatchOptions, cursor, pending, to uint64, send func(Item) error) (uint64, uint64, error) {
	batch, err := cons.Fetch(int(min(pending, 512)), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return cursor, pending, fmt.Errorf("watch replay: %w", err)
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		meta, err := msg.Metadata()
		if err != nil {
			continue
		}
		seq := meta.Sequence.Stream
		pending = meta.NumPending
		if seq > to {
			pending = 0
			continue
		}
		ev, err := event.Unmarshal(msg.Data())
		if err != nil {
			h.metrics.decodeErrors.Inc()
			continue
		}
		cursor = seq
		if o.Match != nil && !o.Match(ev) {
			continue
		}
		ev.ResourceVersion = strconv.FormatUint(seq, 10)
		if err := send(Item{Seq: seq, Event: ev}); err != nil {
			return cursor, pending, err
		}
	}
	if err := batch.Error(); err != nil {
		return cursor, pending, fmt.Errorf("watch replay: %w", err)
	}
	if got == 0 {
		info, err := cons.Info(ctx)
		if err != nil {
			return cursor, pending, fmt.Errorf("watch replay: %w", err)
		}
		pending = info.NumPending
	}
	return cursor, pending, nil
}

// replayConsumer makes a consumer of what o selects after sequence after;
// with check, it fails with ErrTooOld when the stream no longer holds all
// of them.
func (h *Hub) replayConsumer(ctx context.Context, o WatchOptions, after uint64, check bool) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		// Named here, so that it can be deleted even if the request that
		// made it is cancelled before the answer.
		Name:              "watch_" + nuid.Next(),
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       after + 1,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
		Replicas:          1,
	}
	if len(o.Subjects) == 1 {
		cfg.FilterSubject = o.Subjects[0]
	} else {
		cfg.FilterSubjects = o.Subjects
	}
	// Made whether or not the watch is cancelled meanwhile, then deleted
	// by the caller: a delete sent while the create is still under way
	// could be served first and leave the consumer behind.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	cons, err := h.stream.CreateConsumer(cctx, cfg)
	cancel()
	if err != nil {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("watch replay: %w", err)
	}
	if !check {
		return cons, nil
	}
	info, err := h.stream.Info(ctx)
	if err != nil {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("watch replay: stream info: %w", err)
	}
	if after+1 < info.State.FirstSeq {
		h.deleteConsumer(ctx, cfg.Name)
		return nil, fmt.Errorf("%w: %d; the oldest kept is %d", ErrTooOld, after, info.State.FirstSeq)
	}
	return cons, nil
}

// deleteConsumer deletes a replay consumer, whatever became of ctx.
func (h *Hub) deleteConsumer(ctx context.Context, name string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.stream.DeleteConsumer(dctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		h.log.Debug("watch replay: delete consumer", "consumer", name, "err", err)
	}
}

// consumerGone reports whether err says the replay consumer no longer
// exists (the server deleted it as inactive).
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders)
}
