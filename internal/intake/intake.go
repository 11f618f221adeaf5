package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/protobuf/encoding/protowire"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/series"
)

// upToHalfPayload is n, or half the connection's maximum payload if that is
// less: room for a message's headers.
func upToHalfPayload(nc *nats.Conn, n int) int {
	if mp := int(nc.MaxPayload()); mp > 0 {
		return min(n, mp/2)
	}
	return n
}

// Errors of Submit.
var (
	// ErrNotDurable: some occurrences of the batch may not be in the intake
	// log. Retry the batch with the same message ids: those already logged
	// are deduplicated (Outcome DUPLICATE).
	ErrNotDurable = errors.New("occurrences not durably logged")
	// ErrStopped: the intake is stopping.
	ErrStopped = errors.New("intake stopped")
)

// Result says what became of one submitted occurrence (event.Emitted).
type Result = event.Emitted

// Stats are the intake's counters: gauges over the partitions this replica
// owns now, counters since Start (entries replayed after a takeover are
// counted again).
type Stats struct {
	OwnedPartitions int
	// ActiveSeries: ongoing series; TrackedKeys adds singletons that may
	// still start one.
	ActiveSeries int
	TrackedKeys  int
	// TrackedBytes: the memory the tracked keys account for.
	TrackedBytes int64
	// Occurrences aggregated (duplicates excluded).
	Occurrences uint64
	// Folded: occurrences counted into a series without a write of their
	// own — the writes saved.
	Folded uint64
	// Duplicates: log entries an owner skipped as already folded.
	Duplicates uint64
	// ReplayedStored: writes a new owner replayed and found already in the
	// events stream, so did not publish again.
	ReplayedStored uint64
	// EvictedSingletons: singletons forgotten early at the memory budget.
	EvictedSingletons uint64
	// FirstReads: first occurrences read back from the log to start a
	// series.
	FirstReads uint64
	// Writes to the events stream by the aggregation, by reason;
	// ClientWrites: events stored as their emitter aggregated them.
	Writes       [series.NumReasons]uint64
	ClientWrites uint64
	// Takeovers: partitions restored from their checkpoint by this replica.
	Takeovers uint64
	// Salvaged: damaged checkpoints among them, taken over with what they
	// still held.
	Salvaged uint64
	// Resyncs: consumer rewinds and checkpoint restores after a gap, a
	// failed write or a lost compare-and-set.
	Resyncs     uint64
	Checkpoints uint64
	Ticks       uint64
}

// WritesSaved is the number of writes the aggregation saved.
func (s Stats) WritesSaved() uint64 { return s.Folded }

// TotalWrites is the number of writes to the events stream.
func (s Stats) TotalWrites() uint64 {
	n := s.ClientWrites
	for _, w := range s.Writes {
		n += w
	}
	return n
}

// Intake logs occurrences durably by series key and aggregates each
// partition of the log in the one replica that owns it. See the package
// documentation.
type Intake struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	// callJS publishes Start's entries (js unless StartOptions say).
	callJS jetstream.JetStream
	pub    *ejs.Publisher // the events stream's
	log    *slog.Logger
	m      *metrics
	store  *store
	// batchBytes bounds a batched entry's data: maxBatchBytes, or half the
	// connection's maximum payload if that is less.
	batchBytes int
	stream     jetstream.Stream
	events     jetstream.Stream
	// eventsSeq is the highest events-stream sequence this replica knows
	// stored (acknowledged, or the stream's last at a takeover).
	eventsSeq atomic.Uint64
	parts     []*partition
	commits   []*committer // each partition's publisher of entries
	inbox     string
	sub       *nats.Subscription
	msub      *nats.Subscription
	members   *members
	waitMax   time.Duration // longest pull request
	// beforeSave, when set (tests), runs in a checkpoint's writer before
	// it stores the checkpoint of partition p.
	beforeSave atomic.Pointer[func(p int)]

	mu       sync.Mutex
	calls    map[uint64]*call
	nextCall uint64
	// pending are the occurrences with a message id whose call still
	// waits, by message id: a retry logged as a duplicate while its first
	// occurrence is undecided answers what that one became.
	pending map[string]pendingOcc
	// recent answers a later retry of an occurrence stored as an event.
	recent *recentCreated

	statsMu sync.Mutex
	stats   Stats

	ctx      context.Context
	cancel   context.CancelFunc
	stopped  chan struct{}
	stopOnce sync.Once
	stopCtx  atomic.Pointer[context.Context]
	wg       sync.WaitGroup
	errMu    sync.Mutex
	stopErrs []error
}

// Start ensures the intake stream, the partitions' consumers and the
// checkpoint bucket, and starts competing for every partition. The events
// stream must exist. reg may be nil.
// Everything goes over nc and js unless opts name other connections.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config, log *slog.Logger, reg prometheus.Registerer, opts ...StartOption) (*Intake, error) {
	return start(ctx, nc, js, cfg, log, reg, 0, opts...)
}

// StartOption chooses a connection for one of the intake's data paths.
type StartOption func(*Intake)

// CallVia publishes the entries of Start (the emit path) through js, so
// that they do not wait behind the owners' traffic on one connection.
func CallVia(js jetstream.JetStream) StartOption { return func(in *Intake) { in.callJS = js } }

// WriteVia publishes the owners' writes to the events stream through js,
// so that their acknowledgements do not wait behind the owners' fetches.
func WriteVia(js jetstream.JetStream) StartOption {
	return func(in *Intake) { in.pub = ejs.NewPublisher(js) }
}

// AsMember announces this intake to the others under id (the replica id)
// instead of an id of its own start: a replica restarted on its data
// directory is the same member, not a new one beside a stale one.
func AsMember(id string) StartOption { return func(in *Intake) { in.members.id = id } }

// start is Start with the checkpoint chunk size forced (tests), or derived
// from the connection's maximum payload when 0.
func start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config, log *slog.Logger, reg prometheus.Registerer, chunk int, opts ...StartOption) (*Intake, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "intake")
	st, es, kv, err := ensureStreams(ctx, js, cfg, log)
	if err != nil {
		return nil, err
	}
	if chunk <= 0 {
		chunk = upToHalfPayload(nc, 512<<10)
	}
	in := &Intake{
		batchBytes: upToHalfPayload(nc, maxBatchBytes),
		cfg:        cfg,
		nc:         nc,
		js:         js,
		callJS:     js,
		pub:        ejs.NewPublisher(js),
		log:        log,
		m:          newMetrics(reg),
		store:      &store{kv: kv, js: js, bucket: cfg.Bucket, chunkSize: chunk},
		stream:     st,
		events:     es,
		inbox:      nc.NewInbox(),
		calls:      make(map[uint64]*call),
		pending:    make(map[string]pendingOcc),
		recent:     newRecentCreated(recentCreatedSize),
		stopped:    make(chan struct{}),
		waitMax:    min(time.Second, cfg.PinnedTTL/4),
		members:    newMembers(cfg.Stream, min(time.Second, cfg.PinnedTTL/4)),
	}
	for _, o := range opts {
		o(in)
	}
	if err := in.store.checkMeta(ctx, cfg.Partitions); err != nil {
		return nil, err
	}
	if err := in.openPartitions(ctx); err != nil {
		return nil, err
	}
	if err := in.serve(); err != nil {
		return nil, err
	}
	log.Info("intake started", "stream", cfg.Stream, "partitions", cfg.Partitions, "bucket", cfg.Bucket)
	return in, nil
}

// ensureStreams creates or updates the intake stream and the checkpoint
// bucket, and looks up the events stream the owners write.
func ensureStreams(ctx context.Context, js jetstream.JetStream, cfg Config, log *slog.Logger) (st, es jetstream.Stream, kv jetstream.KeyValue, err error) {
	st, err = ejs.CreateOrUpdateStream(ctx, js, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "eventgate intake: every accepted occurrence, partitioned by series key, until its partition's owner checkpoints",
		Subjects:    []string{cfg.SubjectPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		Storage:     jetstream.FileStorage,
		MaxAge:      cfg.MaxAge,
		Duplicates:  cfg.Duplicates,
		Replicas:    cfg.Replicas,
		AllowDirect: true,
	}, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ensure intake stream %s: %w", cfg.Stream, err)
	}
	es, err = js.Stream(ctx, cfg.EventsStream)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("events stream %s: %w", cfg.EventsStream, err)
	}
	if need := cfg.ReplayWindow(); es.CachedInfo().Config.Duplicates < need {
		log.Warn("the events stream's duplicate window is shorter than a takeover: the writes a deposed owner still has in flight may be stored twice",
			"stream", cfg.EventsStream, "duplicates", es.CachedInfo().Config.Duplicates, "want", need)
	}
	kv, err = ejs.CreateOrUpdateKeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "eventgate series: one checkpoint per intake partition",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
	}, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ensure checkpoint bucket %s: %w", cfg.Bucket, err)
	}
	return st, es, kv, nil
}

// openPartitions creates or updates each partition's consumer, its owner
// pinned by the stream.
func (in *Intake) openPartitions(ctx context.Context) error {
	for p := 0; p < in.cfg.Partitions; p++ {
		cons, err := in.ensureConsumer(ctx, p)
		if err != nil {
			return err
		}
		in.parts = append(in.parts, newPartition(in, p, cons))
		in.commits = append(in.commits, newCommitter(in))
	}
	return nil
}

// serve subscribes to the decisions and the members' announcements and
// starts the announcer and every partition's loop.
func (in *Intake) serve() error {
	var err error
	in.sub, err = in.nc.Subscribe(in.inbox+".*", in.onDecisions)
	if err != nil {
		return fmt.Errorf("subscribe decisions: %w", err)
	}
	in.msub, err = in.nc.Subscribe(in.members.subject, in.members.onAnnounce)
	if err != nil {
		_ = in.sub.Unsubscribe()
		return fmt.Errorf("subscribe members: %w", err)
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		in.members.announce(in.ctx, in.nc)
	}()
	for _, pt := range in.parts {
		in.wg.Add(1)
		go func() {
			defer in.wg.Done()
			pt.run(in.ctx)
		}()
	}
	return nil
}

// consumerConfig is partition p's consumer: deliver all, acknowledge
// nothing, one pinned replica in the owners' group.
//
// It is kept in memory: its position is worth nothing durable, since an
// owner resumes from its checkpoint and rewinds the consumer there (see
// Ownership), and a file-backed consumer rewrote its state file ten times
// a second under load, each a new file and a rename: a sixth of the CPU
// of the whole fold in a profile of the emit phase. A consumer lost with
// its server is created again (ensureConsumer) and taken over like a new one.
func (cfg Config) consumerConfig(p int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        consumerName(p),
		Description:    "series aggregation of intake partition " + strconv.Itoa(p) + ": one pinned replica owns it",
		FilterSubject:  cfg.subject(p),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckNonePolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{ownerGroup},
		PinnedTTL:      cfg.PinnedTTL,
		MemoryStorage:  true,
	}
}

// ensureConsumer creates or updates partition p's consumer. One of an
// earlier version, kept in a file, is replaced: the server cannot change a
// consumer's storage, and a new consumer is only a takeover from the
// checkpoint for whichever replica is pinned next.
func (in *Intake) ensureConsumer(ctx context.Context, p int) (jetstream.Consumer, error) {
	want := in.cfg.consumerConfig(p)
	if old, err := in.stream.Consumer(ctx, want.Durable); err == nil && !old.CachedInfo().Config.MemoryStorage {
		if err := in.stream.DeleteConsumer(ctx, want.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("replace file-backed intake consumer %d: %w", p, err)
		}
		in.log.Info("intake consumer moved to memory storage", "partition", p)
	}
	cons, err := in.stream.CreateOrUpdateConsumer(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("ensure intake consumer %d: %w", p, err)
	}
	return cons, nil
}

// Stop checkpoints the partitions this replica owns, releases them to the
// other replicas and stops. Submits still waiting for decisions return what
// they have. Stop does not close the NATS connection.
func (in *Intake) Stop(ctx context.Context) error {
	var errs []error
	in.stopOnce.Do(func() {
		in.stopCtx.Store(&ctx)
		close(in.stopped)
		in.cancel()
		if !in.nc.IsClosed() {
			in.members.leave(in.nc)
		}
		done := make(chan struct{})
		go func() {
			in.wg.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("intake stop: %w", ctx.Err()))
		}
		in.errMu.Lock()
		errs = append(errs, in.stopErrs...)
		in.errMu.Unlock()
		for _, sub := range []*nats.Subscription{in.sub, in.msub} {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				errs = append(errs, err)
			}
		}
		in.log.Info("intake stopped")
	})
	return errors.Join(errs...)
}

func (in *Intake) stopFailed(err error) {
	in.errMu.Lock()
	in.stopErrs = append(in.stopErrs, err)
	in.errMu.Unlock()
}

// Stats returns the counters.
func (in *Intake) Stats() Stats {
	in.statsMu.Lock()
	s := in.stats
	in.statsMu.Unlock()
	for _, pt := range in.parts {
		if pt.owned.Load() {
			s.OwnedPartitions++
		}
		s.ActiveSeries += int(pt.nseries.Load())
		s.TrackedKeys += int(pt.nkeys.Load())
		s.TrackedBytes += pt.nbytes.Load()
	}
	return s
}

func (in *Intake) addStats(f func(*Stats)) {
	in.statsMu.Lock()
	f(&in.stats)
	in.statsMu.Unlock()
}

// Config returns the configuration in use, defaults filled in.
func (in *Intake) Config() Config { return in.cfg }

// Partition returns the intake partition of ev's series key.
func (in *Intake) Partition(ev *eventgatev1.Event) int {
	return int(series.HashOf(ev) % uint64(in.cfg.Partitions))
}

// pendingOcc is the i-th occurrence of a waiting call.
type pendingOcc struct {
	c *call
	i int
}

// call is one Submit waiting for its decisions.
type call struct {
	mu        sync.Mutex
	results   []Result
	got       []bool
	remaining int
	done      chan struct{}
}

func (c *call) set(i int, r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.got) || c.got[i] {
		return // a replayed decision, or garbage
	}
	c.got[i] = true
	c.results[i] = r
	c.remaining--
	if c.remaining == 0 {
		close(c.done)
	}
}

var propagator = propagation.TraceContext{}

// Submit logs evs durably in the intake, then waits (at most
// DecisionTimeout) for their owners' decisions. evs must be validated and
// normalized (uid and eventTime set); Submit does not modify them. msgIDs
// is nil or parallel to evs: msgIDs[i], when not empty, deduplicates a retry
// of evs[i] within the intake's duplicate window. The trace context of ctx
// travels with each occurrence to the write it causes.
//
// An error means some occurrences may not be logged: retry with the same
// message ids. Without an error every occurrence is durable and will be
// aggregated exactly once, whatever its Outcome says.
func (in *Intake) Submit(ctx context.Context, evs []*eventgatev1.Event, msgIDs []string) ([]Result, error) {
	wait, err := in.Start(ctx, evs, msgIDs, false)
	if err != nil {
		return nil, err
	}
	return wait()
}

// SubmitAsIs is Submit for an emitter that counts its own series (a
// Kubernetes client): each event is stored as it is, in its partition's log
// order, and never aggregated (Outcome CREATED).
func (in *Intake) SubmitAsIs(ctx context.Context, evs []*eventgatev1.Event, msgIDs []string) ([]Result, error) {
	wait, err := in.Start(ctx, evs, msgIDs, true)
	if err != nil {
		return nil, err
	}
	return wait()
}

// Start is Submit (SubmitAsIs when asIs) in two halves. Start itself hands
// the occurrences' entries to their partitions' committers (commit.go),
// which log them in that order: the occurrences of calls started one after
// another are logged in that order (one emit stream's batches keep their
// order in every partition). wait, called once, waits for their
// acknowledgements and their decisions and returns what Submit returns.
func (in *Intake) Start(ctx context.Context, evs []*eventgatev1.Event, msgIDs []string, asIs bool) (wait func() ([]Result, error), err error) {
	if msgIDs != nil && len(msgIDs) != len(evs) {
		return nil, fmt.Errorf("submit: %d message ids for %d events", len(msgIDs), len(evs))
	}
	select {
	case <-in.stopped:
		return nil, ErrStopped
	default:
	}
	if len(evs) == 0 {
		return func() ([]Result, error) { return nil, nil }, nil
	}
	for i, ev := range evs {
		if ev == nil {
			return nil, fmt.Errorf("submit: events[%d] is nil", i)
		}
	}
	c, id, forget := in.register(evs, msgIDs)
	reply := in.inbox + "." + strconv.FormatUint(id, 36)
	entries, err := in.logEntries(ctx, evs, msgIDs, reply, asIs)
	if err != nil {
		forget()
		return nil, err
	}
	start := time.Now()
	pend := make([]*pendingEntry, len(entries))
	for k, e := range entries {
		pend[k] = &pendingEntry{e: e, done: make(chan struct{}), asIs: asIs,
			mergeable: e.batched && propagation.HeaderCarrier(e.m.Header).Get("traceparent") == ""}
	}
	// Each partition's entries to its committer, in order.
	if len(pend) == 1 {
		in.commits[entries[0].p].submit(pend)
	} else {
		byPart := make([][]*pendingEntry, len(in.commits))
		for k, e := range entries {
			byPart[e.p] = append(byPart[e.p], pend[k])
		}
		for p, es := range byPart {
			if len(es) > 0 {
				in.commits[p].submit(es)
			}
		}
	}
	return func() ([]Result, error) {
		defer forget()
		return in.await(ctx, c, evs, msgIDs, pend, start)
	}, nil
}

// register records a call of evs, so that its decisions find it; forget
// removes it.
func (in *Intake) register(evs []*eventgatev1.Event, msgIDs []string) (c *call, id uint64, forget func()) {
	c = &call{results: make([]Result, len(evs)), got: make([]bool, len(evs)), remaining: len(evs), done: make(chan struct{})}
	in.mu.Lock()
	in.nextCall++
	id = in.nextCall
	in.calls[id] = c
	for i, mid := range msgIDs {
		if _, ok := in.pending[mid]; mid != "" && !ok {
			in.pending[mid] = pendingOcc{c, i}
		}
	}
	in.mu.Unlock()
	return c, id, func() {
		in.mu.Lock()
		delete(in.calls, id)
		for _, mid := range msgIDs {
			if o, ok := in.pending[mid]; ok && o.c == c {
				delete(in.pending, mid)
			}
		}
		in.mu.Unlock()
	}
}

// logEntry is an intake entry to publish: one occurrence under its message
// id, or a batch of occurrences (HeaderBatch lists idxs).
type logEntry struct {
	m       *nats.Msg
	idxs    []int
	batched bool
	p       int // partition
}

// logEntries are the intake entries of a call's occurrences, in order,
// their decisions due at reply.
//
// An occurrence with a message id is an entry of its own: the stream's
// duplicate window deduplicates a retry of it, however the retry is
// batched. The others share one entry per partition (up to maxBatch
// occurrences or in.batchBytes): a batch costs the log, its owner and the
// connection one message instead of one per occurrence.
func (in *Intake) logEntries(ctx context.Context, evs []*eventgatev1.Event, msgIDs []string, reply string, asIs bool) ([]logEntry, error) {
	var entries []logEntry
	open := make(map[int]int) // partition → index in entries of its open batch
	newMsg := func(p int) *nats.Msg {
		m := nats.NewMsg(in.cfg.subject(p))
		m.Header.Set(HeaderReply, reply)
		if asIs {
			m.Header.Set(HeaderAsIs, "1")
		}
		propagator.Inject(ctx, propagation.HeaderCarrier(m.Header))
		return m
	}
	// Sized first, so that each batch's data is allocated once, at the size
	// of what goes into it, and each event is encoded into it in place.
	sizes := make([]int, len(evs))
	parts := make([]int, len(evs))
	left := make(map[int]int) // partition → bytes of its batched occurrences not yet placed
	for i, ev := range evs {
		sizes[i], parts[i] = event.Size(ev), in.Partition(ev)
		if msgIDs == nil || msgIDs[i] == "" {
			left[parts[i]] += framed(sizes[i])
		}
	}
	for i, ev := range evs {
		size, p := sizes[i], parts[i]
		if msgIDs != nil && msgIDs[i] != "" {
			m := newMsg(p)
			data, err := event.AppendMarshal(make([]byte, 0, size), ev)
			if err != nil {
				return nil, fmt.Errorf("submit: events[%d]: %w", i, err)
			}
			m.Data = data
			m.Header.Set(HeaderIndex, strconv.Itoa(i))
			m.Header.Set(jetstream.MsgIDHeader, msgIDs[i])
			entries = append(entries, logEntry{m: m, idxs: []int{i}, p: p})
			// The partition's later occurrences go after it: its log keeps
			// the batch's order.
			delete(open, p)
			continue
		}
		j, ok := open[p]
		if ok && (len(entries[j].idxs) >= maxBatch || len(entries[j].m.Data)+framed(size) > in.batchBytes) {
			ok = false
		}
		if !ok {
			j = len(entries)
			open[p] = j
			m := newMsg(p)
			m.Data = getEntryBuf(min(left[p], in.batchBytes+framed(size)))
			entries = append(entries, logEntry{m: m, batched: true, p: p})
		}
		left[p] -= framed(size)
		e := &entries[j]
		before := len(e.m.Data)
		data, err := event.AppendMarshal(protowire.AppendVarint(e.m.Data, uint64(size)), ev)
		if err != nil {
			return nil, fmt.Errorf("submit: events[%d]: %w", i, err)
		}
		if len(data)-before != framed(size) {
			// Size and AppendMarshal disagree: the batch would not split.
			return nil, fmt.Errorf("submit: events[%d]: encoded %d bytes, sized %d", i, len(data)-before, framed(size))
		}
		e.m.Data = data
		e.idxs = append(e.idxs, i)
	}
	return entries, nil
}

// framed is the size of an occurrence of size bytes in a batch: its length
// as a varint, then its bytes (protowire.AppendBytes).
func framed(size int) int { return protowire.SizeBytes(size) }

// await waits for the acknowledgements of a call's entries, then for the
// call's decisions.
func (in *Intake) await(ctx context.Context, c *call, evs []*eventgatev1.Event, msgIDs []string, pend []*pendingEntry, start time.Time) ([]Result, error) {
	for _, p := range pend {
		i := p.e.idxs[0]
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNotDurable, ctx.Err())
		}
		if p.err != nil {
			return nil, fmt.Errorf("%w: events[%d]: %w", ErrNotDurable, i, p.err)
		}
		if p.ack.Duplicate && !p.e.batched {
			// Only an entry with a message id can be a duplicate.
			c.set(i, in.duplicate(ctx, c, evs[i], msgIDs[i]))
		}
	}
	logged := time.Now()
	in.m.stage.WithLabelValues("log").Observe(logged.Sub(start).Seconds())
	t := decisionTimers.Get().(*time.Timer)
	t.Reset(in.cfg.DecisionTimeout)
	defer func() {
		t.Stop() // and no stale tick left in the channel (Go 1.23 timers)
		decisionTimers.Put(t)
	}()
	select {
	case <-c.done:
		in.m.stage.WithLabelValues("decide").Observe(time.Since(logged).Seconds())
	case <-t.C:
	case <-ctx.Done():
	case <-in.stopped:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Result, len(evs))
	for i := range out {
		if c.got[i] {
			out[i] = c.results[i]
		} else {
			out[i] = Result{Outcome: eventgatev1.EmitOutcome_EMIT_OUTCOME_UNSPECIFIED, UID: evs[i].GetUid()}
		}
		in.m.submitted.WithLabelValues(out[i].Outcome.String()).Inc()
		if out[i].Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED && out[i].ResourceVersion != 0 && msgIDs != nil && msgIDs[i] != "" {
			in.recent.put(msgIDs[i], out[i].ResourceVersion)
		}
	}
	return out, nil
}

// decisionTimers are stopped timers for Submits waiting for decisions: one
// per call was an allocation of every Emit.
var decisionTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// recentCreatedSize is how many stored occurrences with a message id a
// replica remembers for retries (about 2.5 MB).
const recentCreatedSize = 1 << 16

// duplicate is the result of an occurrence the intake already logged under
// its message id (of call c). While the first occurrence's call waits here,
// it is what that one became, once decided. Otherwise, if it was stored as
// an event of its own, the result carries its resourceVersion (folded into a
// series, it has none of its own): remembered by this replica, or else the
// last version on its subject when that one has its uid.
func (in *Intake) duplicate(ctx context.Context, c *call, ev *eventgatev1.Event, msgID string) Result {
	r := Result{Outcome: eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE, UID: ev.GetUid()}
	in.mu.Lock()
	first, ok := in.pending[msgID]
	in.mu.Unlock()
	if ok && first.c != c {
		t := time.NewTimer(in.cfg.DecisionTimeout)
		defer t.Stop()
		select {
		case <-first.c.done:
		case <-t.C:
		case <-ctx.Done():
		case <-in.stopped:
		}
		first.c.mu.Lock()
		decided, fr := first.c.got[first.i], first.c.results[first.i]
		first.c.mu.Unlock()
		if decided {
			if fr.Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
				r.ResourceVersion = fr.ResourceVersion
			}
			return r
		}
	}
	if rv, ok := in.recent.get(msgID); ok {
		r.ResourceVersion = rv
		return r
	}
	// From the leader: a replica that lags would not have it yet, or
	// would answer with an older event on the subject.
	m, err := ejs.LeaderGet(ctx, in.js, in.cfg.EventsStream, ejs.MsgQuery{LastBySubject: event.SubjectOf(ev)})
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			in.log.Debug("duplicate: read its stored version", "uid", ev.GetUid(), "err", err)
		}
		return r
	}
	if stored, err := event.Unmarshal(m.Data); err == nil && stored.GetUid() == ev.GetUid() {
		r.ResourceVersion = m.Sequence
	}
	return r
}

// onDecisions delivers an owner's decisions to the Submit waiting for them.
func (in *Intake) onDecisions(m *nats.Msg) { in.decide(m.Subject, m.Data) }

// deliverLocal delivers decisions for a Submit of this replica in process,
// without the round trip through the server; false when reply is another
// replica's.
func (in *Intake) deliverLocal(reply string, data []byte) bool {
	if len(reply) <= len(in.inbox) || reply[len(in.inbox)] != '.' || reply[:len(in.inbox)] != in.inbox {
		return false
	}
	in.decide(reply, data)
	return true
}

// decide hands the decisions data, sent to reply, to its Submit.
func (in *Intake) decide(reply string, data []byte) {
	i := strings.LastIndexByte(reply, '.')
	id, err := strconv.ParseUint(reply[i+1:], 36, 64)
	if err != nil {
		return
	}
	in.mu.Lock()
	c := in.calls[id]
	in.mu.Unlock()
	if c == nil {
		return // a replayed decision, or the Submit gave up
	}
	if err := parseDecisions(data, func(d decision) {
		r := Result{UID: d.uid, ResourceVersion: d.rv}
		switch d.outcome {
		case series.Created:
			r.Outcome = eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED
		case series.SeriesStarted:
			r.Outcome = eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED
			r.SeriesUID = d.uid
		case series.Counted:
			r.Outcome = eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED
			r.SeriesUID = d.uid
		default:
			return
		}
		c.set(int(d.index), r)
	}); err != nil {
		in.log.Warn("malformed decisions", "subject", reply, "err", err)
	}
}
