package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// DropReason says why the Recorder dropped an event.
type DropReason string

// Why events are dropped.
const (
	// DropQueueFull: the queue was full (the gateway away or slower than
	// the application); Eventf does not wait.
	DropQueueFull DropReason = "QueueFull"
	// DropRateLimited: the object's rate limit was spent (spam filter).
	DropRateLimited DropReason = "RateLimited"
	// DropInvalid: the gateway refused the event as invalid.
	DropInvalid DropReason = "Invalid"
	// DropRefused: the gateway refused the caller (authentication,
	// authorization); retrying would not help.
	DropRefused DropReason = "Refused"
	// DropClosed: Eventf after Close, or the event was still queued when
	// Close gave up waiting.
	DropClosed DropReason = "Closed"
)

// Metrics are hooks the Recorder calls; any may be nil. They are called
// from the Recorder's goroutine (OnDrop also from Eventf's caller) and must
// not block.
type Metrics struct {
	// OnDrop is called for every dropped event.
	OnDrop func(ev *Event, reason DropReason)
	// OnStored is called for every event the gateway acknowledged; the
	// result says what it became (created, duplicate of a retry, counted
	// into a series).
	OnStored func(ev *Event, result *EmitResult)
	// OnRetry is called before each reconnection with the error that
	// ended the stream and the backoff about to be waited.
	OnRetry func(err error, backoff time.Duration)
}

// RecorderOptions configure a Recorder. The zero value of each field is a
// sensible default.
type RecorderOptions struct {
	// ReportingController and ReportingInstance name the emitter, as in
	// Kubernetes ("example.com/payments", the pod name).
	ReportingController string
	ReportingInstance   string
	// Tenant for the events; empty: the caller's default tenant.
	Tenant *Tenant
	// QueueSize bounds the events waiting to be sent (default 10000).
	QueueSize int
	// BatchSize is the most events per batch (default 500).
	BatchSize int
	// BatchWait is how long a partial batch waits for more (default 50ms).
	BatchWait time.Duration
	// InFlight is how many batches may await their acknowledgement on the
	// stream (default 4).
	InFlight int
	// MinBackoff and MaxBackoff bound the wait between reconnections
	// (defaults 100ms and 10s); the wait doubles, with full jitter.
	MinBackoff, MaxBackoff time.Duration
	// PerObjectBurst and PerObjectInterval, when both set, rate-limit
	// events per regarding object like client-go's spam filter: a burst,
	// then one event per interval.
	PerObjectBurst    int
	PerObjectInterval time.Duration
	// Metrics are the hooks.
	Metrics Metrics
}

func (o *RecorderOptions) defaults() {
	if o.QueueSize <= 0 {
		o.QueueSize = 10000
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.BatchWait <= 0 {
		o.BatchWait = 50 * time.Millisecond
	}
	if o.InFlight <= 0 {
		o.InFlight = 4
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(10*time.Second, o.MinBackoff)
	}
}

// RecorderStats are a Recorder's counts so far.
type RecorderStats struct {
	// Queued events were taken by Eventf.
	Queued uint64
	// Stored events were acknowledged by the gateway.
	Stored uint64
	// Dropped events, by reason.
	Dropped map[DropReason]uint64
	// Retries are reconnections after a failure.
	Retries uint64
}

// Recorder records events for a service, as client-go's events recorder
// does for a controller. Create it with NewRecorder; Close it.
type Recorder struct {
	c     *Client
	opts  RecorderOptions
	queue chan *Event
	flush chan struct{}
	stop  chan struct{} // closed by Close: send what is queued, then end
	abort chan struct{} // closed by Close when its time is up: end now
	done  chan struct{} // closed when the sender has ended

	limiter *objectLimiter

	queued, stored, retries atomic.Uint64
	dropped                 sync.Map // DropReason → *atomic.Uint64

	// settled counts the queued events that are stored or dropped; Flush
	// waits for it.
	mu      sync.Mutex
	settled uint64
	changed chan struct{} // closed and replaced when settled changes

	// closing guards closed: Close takes it to stop Record from queueing,
	// so the sender's last drain sees every queued event.
	closing sync.RWMutex
	closed  bool
}

// NewRecorder starts a Recorder that emits on c.
func (c *Client) NewRecorder(opts RecorderOptions) *Recorder {
	opts.defaults()
	r := &Recorder{
		c:       c,
		opts:    opts,
		queue:   make(chan *Event, opts.QueueSize),
		flush:   make(chan struct{}, 1),
		stop:    make(chan struct{}),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	if opts.PerObjectBurst > 0 && opts.PerObjectInterval > 0 {
		r.limiter = newObjectLimiter(opts.PerObjectBurst, opts.PerObjectInterval)
	}
	go r.run()
	return r
}

// Eventf records an event about regarding (and related, which may be nil):
// eventtype is TypeNormal or TypeWarning, reason is UpperCamelCase
// ("ScaledUp"), action what was done or failed ("Scale"), and note a
// human-readable description formatted with args. It never blocks: when
// the queue is full the event is dropped and counted.
func (r *Recorder) Eventf(regarding, related *ObjectReference, eventtype, reason, action, note string, args ...any) {
	ev := &Event{
		Uid:                 uuid.NewString(),
		EventTime:           timestamppb.Now(),
		ReportingController: r.opts.ReportingController,
		ReportingInstance:   r.opts.ReportingInstance,
		Action:              action,
		Reason:              reason,
		Regarding:           regarding,
		Related:             related,
		Note:                note,
		Type:                eventtype,
		Namespace:           regarding.GetNamespace(),
	}
	if len(args) > 0 {
		ev.Note = fmt.Sprintf(note, args...)
	}
	r.Record(ev)
}

// Record records a prepared event; like Eventf it never blocks. An event
// without a uid gets one (the key that makes retries idempotent), and
// without a time, now.
func (r *Recorder) Record(ev *Event) {
	if ev.Uid == "" {
		ev.Uid = uuid.NewString()
	}
	if ev.EventTime == nil {
		ev.EventTime = timestamppb.Now()
	}
	if r.limiter != nil && !r.limiter.allow(ev.GetRegarding(), time.Now()) {
		r.drop(ev, DropRateLimited)
		return
	}
	r.closing.RLock()
	reason := DropReason("")
	switch {
	case r.closed:
		reason = DropClosed
	default:
		select {
		case r.queue <- ev:
			r.queued.Add(1)
		default:
			reason = DropQueueFull
		}
	}
	r.closing.RUnlock()
	if reason != "" {
		r.drop(ev, reason)
	}
}

func (r *Recorder) drop(ev *Event, reason DropReason) {
	v, _ := r.dropped.LoadOrStore(reason, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
	if f := r.opts.Metrics.OnDrop; f != nil {
		f(ev, reason)
	}
}

// Stats returns the counts so far.
func (r *Recorder) Stats() RecorderStats {
	s := RecorderStats{Queued: r.queued.Load(), Stored: r.stored.Load(), Retries: r.retries.Load(), Dropped: map[DropReason]uint64{}}
	r.dropped.Range(func(k, v any) bool {
		s.Dropped[k.(DropReason)] = v.(*atomic.Uint64).Load()
		return true
	})
	return s
}

// settle notes n queued events stored or dropped.
func (r *Recorder) settle(n int) {
	r.mu.Lock()
	r.settled += uint64(n)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Flush sends what is queued now and waits until the gateway has
// acknowledged it (or it was dropped), or ctx ends.
func (r *Recorder) Flush(ctx context.Context) error {
	target := r.queued.Load()
	select {
	case r.flush <- struct{}{}:
	default:
	}
	for {
		r.mu.Lock()
		settled, changed := r.settled, r.changed
		r.mu.Unlock()
		if settled >= target {
			return nil
		}
		select {
		case <-changed:
		case <-r.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("eventgate recorder: flush: %d events not yet acknowledged: %w", target-settled, ctx.Err())
		}
	}
}

// Close flushes within ctx, then stops the Recorder: events still
// unacknowledged are dropped (DropClosed). Eventf after Close drops.
func (r *Recorder) Close(ctx context.Context) error {
	r.closing.Lock()
	already := r.closed
	r.closed = true
	r.closing.Unlock()
	if already {
		<-r.done
		return nil
	}
	err := r.Flush(ctx)
	close(r.stop)
	if err != nil {
		close(r.abort)
	} else {
		select {
		case <-r.done:
		case <-ctx.Done():
			close(r.abort)
			err = ctx.Err()
		}
	}
	<-r.done
	return err
}

// batch is one EmitStream batch; its events keep their uids across
// retries, so a retry stores none of them twice.
type batch struct {
	id     string
	events []*Event
}

// ack is one acknowledgement read from the stream.
type ack struct {
	resp *eventgatev1.EmitStreamResponse
	err  error
}

// run sends the queue's events until Close: it owns the stream, the
// batches in flight and the ones to resend.
func (r *Recorder) run() {
	defer close(r.done)
	var (
		resend  []*batch // unacknowledged when a stream ended, oldest first
		backoff = r.opts.MinBackoff
		seq     uint64
	)
	defer func() {
		// Stopped: whatever is left was not stored.
		for _, b := range resend {
			for _, ev := range b.events {
				r.drop(ev, DropClosed)
			}
			r.settle(len(b.events))
		}
		for {
			select {
			case ev := <-r.queue:
				r.drop(ev, DropClosed)
				r.settle(1)
			default:
				return
			}
		}
	}()
	for {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := r.c.events.EmitStream(ctx)
		var inflight []*batch
		if err == nil {
			inflight, resend, err = r.serve(stream, resend, &seq, &backoff)
		}
		cancel()
		resend = append(inflight, resend...)
		if err == nil { // stopped
			return
		}
		wait := jitter(backoff)
		backoff = min(backoff*2, r.opts.MaxBackoff)
		if re := (*RefusedError)(nil); errors.As(err, &re) && re.RetryAfter > wait {
			wait = re.RetryAfter // a rate limit's own delay
		}
		r.retries.Add(1)
		if f := r.opts.Metrics.OnRetry; f != nil {
			f(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
			return
		case <-r.abort:
			t.Stop()
			return
		}
	}
}

// jitter is a random duration in [d/2, d]: reconnecting clients spread out.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// serve runs one stream: it resends resend, then batches the queue. It
// returns the batches still unacknowledged and the error that ended the
// stream, or a nil error once stopped with nothing left to send. It is one
// select loop on purpose: every case reads and changes the same state (the
// batch being filled, the resends, the window in flight, the batch timer),
// which split functions would have to pass around and hand back.
func (r *Recorder) serve(stream eventgatev1.EventService_EmitStreamClient, resend []*batch, seq *uint64, backoff *time.Duration) (inflight, rest []*batch, err error) {
	acks := make(chan ack, r.opts.InFlight+1)
	quit := make(chan struct{})
	defer close(quit)
	go receiveAcks(stream, acks, quit)
	var cur []*Event // the batch being filled
	defer func() {
		_ = stream.CloseSend()
		if err != nil && len(cur) > 0 {
			*seq++
			inflight = append(inflight, &batch{id: strconv.FormatUint(*seq, 10), events: cur})
		}
	}()
	send := func(b *batch) error {
		inflight = append(inflight, b)
		return stream.Send(&eventgatev1.EmitStreamRequest{BatchId: b.id, Events: b.events, Tenant: r.opts.Tenant})
	}
	newBatch := func(evs []*Event) *batch {
		*seq++
		return &batch{id: strconv.FormatUint(*seq, 10), events: evs}
	}
	var (
		due      bool // the batch timer fired or a flush asked: send cur
		timer    = time.NewTimer(time.Hour)
		timerOn  bool
		stopping bool
	)
	timer.Stop()
	defer timer.Stop()
	for {
		// Resend first, in order, as the window allows.
		for len(resend) > 0 && len(inflight) < r.opts.InFlight {
			b := resend[0]
			resend = resend[1:]
			if err := send(b); err != nil {
				return inflight, resend, err
			}
		}
		if len(cur) > 0 && (due || stopping || len(cur) >= r.opts.BatchSize) && len(resend) == 0 && len(inflight) < r.opts.InFlight {
			b := newBatch(cur)
			cur, due = nil, false
			if err := send(b); err != nil {
				return inflight, resend, err
			}
			continue
		}
		if stopping && len(cur) == 0 && len(resend) == 0 && len(inflight) == 0 && len(r.queue) == 0 {
			return nil, nil, nil
		}
		var queue <-chan *Event
		if len(cur) < r.opts.BatchSize && len(resend) == 0 {
			queue = r.queue
		}
		var stop <-chan struct{}
		if !stopping {
			stop = r.stop
		}
		select {
		case ev := <-queue:
			cur = append(cur, ev)
			if !timerOn {
				timer.Reset(r.opts.BatchWait)
				timerOn = true
			}
		case <-timer.C:
			timerOn, due = false, true
		case <-r.flush:
			due = true
		case <-stop:
			stopping = true
		case <-r.abort:
			return inflight, resend, nil
		case a := <-acks:
			if a.err != nil {
				return inflight, resend, a.err
			}
			if len(inflight) == 0 || inflight[0].id != a.resp.GetBatchId() {
				return inflight, resend, fmt.Errorf("eventgate recorder: acknowledgement for batch %q out of order", a.resp.GetBatchId())
			}
			b := inflight[0]
			inflight = inflight[1:]
			retry, err := r.acknowledged(b, a.resp)
			if retry != nil {
				resend = append([]*batch{retry}, resend...)
			}
			if err != nil {
				// The gateway could not take it now (draining, store
				// unavailable): reconnect after a backoff, not at once.
				return inflight, resend, err
			}
			*backoff = r.opts.MinBackoff
		}
	}
}

// receiveAcks passes what stream receives to acks, until an error (passed
// on too) or quit.
func receiveAcks(stream eventgatev1.EventService_EmitStreamClient, acks chan<- ack, quit <-chan struct{}) {
	for {
		resp, err := stream.Recv()
		select {
		case acks <- ack{resp, err}:
		case <-quit: // the caller cancels the stream's context
			return
		}
		if err != nil {
			return
		}
	}
}

// violationIndex finds the event a field violation names ("events[3].…").
var violationIndex = regexp.MustCompile(`^events\[(\d+)\]`)

// acknowledged settles a batch's acknowledgement; it returns what of the
// batch is to be sent again (the valid rest of a batch refused for some of
// its events; the whole batch, with the error, when the gateway may recover
// from it).
func (r *Recorder) acknowledged(b *batch, resp *eventgatev1.EmitStreamResponse) (*batch, error) {
	e := resp.GetError()
	if e == nil {
		for i, ev := range b.events {
			var res *EmitResult
			if i < len(resp.GetResults()) {
				res = resp.GetResults()[i]
			}
			r.stored.Add(1)
			if f := r.opts.Metrics.OnStored; f != nil {
				f(ev, res)
			}
		}
		r.settle(len(b.events))
		return nil, nil
	}
	switch e.GetCode() {
	case codes.InvalidArgument.String():
		bad := map[int]bool{}
		for _, v := range e.GetFieldViolations() {
			if m := violationIndex.FindStringSubmatch(v.GetField()); m != nil {
				i, _ := strconv.Atoi(m[1])
				bad[i] = true
			}
		}
		var keep []*Event
		for i, ev := range b.events {
			if bad[i] || len(bad) == 0 {
				r.drop(ev, DropInvalid)
			} else {
				keep = append(keep, ev)
			}
		}
		r.settle(len(b.events) - len(keep))
		if len(keep) == 0 {
			return nil, nil
		}
		return &batch{id: b.id + "r", events: keep}, nil
	case codes.Unauthenticated.String(), codes.PermissionDenied.String():
		for _, ev := range b.events {
			r.drop(ev, DropRefused)
		}
		r.settle(len(b.events))
		return nil, nil
	}
	// Unavailable, ResourceExhausted…: the same events again (their uids
	// make the retry idempotent), not before the gateway said.
	return b, &RefusedError{Code: e.GetCode(), Message: e.GetMessage(), RetryAfter: e.GetRetryAfter().AsDuration()}
}

// RefusedError is a batch the gateway refused for now (Metrics.OnRetry
// gets it); the recorder sends it again after the backoff, or after
// RetryAfter when the gateway said (a rate limit).
type RefusedError struct {
	// Code is the gRPC status code's name, e.g. "ResourceExhausted".
	Code, Message string
	// RetryAfter is when the gateway said to send the batch again (0: not
	// said).
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("eventgate recorder: batch refused: %s: %s", e.Code, e.Message)
}

// objectLimiter is a token bucket per regarding object.
type objectLimiter struct {
	mu       sync.Mutex
	burst    float64
	interval time.Duration
	buckets  map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newObjectLimiter(burst int, interval time.Duration) *objectLimiter {
	return &objectLimiter{burst: float64(burst), interval: interval, buckets: map[string]*bucket{}}
}

func (l *objectLimiter) allow(ref *ObjectReference, now time.Time) bool {
	key := ref.GetApiVersion() + "/" + ref.GetKind() + "/" + ref.GetNamespace() + "/" + ref.GetName() + "/" + ref.GetUid()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[key]
	if !ok {
		if len(l.buckets) >= 4096 {
			l.evict(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.interval))
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// evict forgets the buckets that are full again (they would allow a burst
// anyway), so the map stays bounded.
func (l *objectLimiter) evict(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+float64(now.Sub(b.at))/float64(l.interval) >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// IsRetryable reports whether a call that failed with err may succeed when
// retried as it is.
func IsRetryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		return true
	}
	return false
}
