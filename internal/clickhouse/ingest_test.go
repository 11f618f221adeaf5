package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	egjs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/query"
)

// natsEnv is an embedded NATS server with the events stream.
type natsEnv struct {
	js     jetstream.JetStream
	stream string
	pub    *egjs.Publisher
}

func startNATS(t testing.TB) *natsEnv {
	t.Helper()
	ns, err := egjs.Embedded(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	cfg := egjs.DefaultConfig()
	nc, err := egjs.Connect(cfg, ns, "clickhouse-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := egjs.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := egjs.EnsureStream(context.Background(), js, cfg); err != nil {
		t.Fatal(err)
	}
	return &natsEnv{js: js, stream: cfg.Stream, pub: egjs.NewPublisher(js, cfg.Stream)}
}

// publish emits events as the service does and returns their sequences.
func (n *natsEnv) publish(t testing.TB, evs ...*eventgatev1.Event) []uint64 {
	t.Helper()
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = nats.NewMsg(event.SubjectOf(ev))
		msgs[i].Data = b
	}
	acks, err := n.pub.Publish(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	seqs := make([]uint64, len(acks))
	for i, a := range acks {
		seqs[i] = a.Sequence
	}
	return seqs
}

func (n *natsEnv) publishRaw(t testing.TB, subject string, data []byte) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	acks, err := n.pub.Publish(context.Background(), []*nats.Msg{m})
	if err != nil {
		t.Fatal(err)
	}
	return acks[0].Sequence
}

func testIngestConfig() IngestConfig {
	return IngestConfig{BatchSize: 50, BatchWait: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, LagInterval: 50 * time.Millisecond}
}

func startIngest(t testing.TB, n *natsEnv, s *Store, cfg IngestConfig, reg prometheus.Registerer) *Ingester {
	t.Helper()
	in, err := StartIngest(context.Background(), n.js, n.stream, s, cfg, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		in.Stop(ctx)
	})
	return in
}

// waitFloor waits until the ack floor reaches seq.
func waitFloor(t testing.TB, in *Ingester, seq uint64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		f, err := in.AckFloor(context.Background())
		if err == nil && f >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack floor %d (%v), want %d within %v", f, err, seq, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listAll pages through everything in scope at rv.
func listAll(t testing.TB, s *Store, rv uint64) []*eventgatev1.Event {
	t.Helper()
	var out []*eventgatev1.Event
	q := query.List{Scope: all, PageSize: query.MaxPageSize, OldestFirst: true}
	for {
		p := listPage(t, s, q, rv)
		out = append(out, p.Events...)
		if p.NextPageToken == "" {
			return out
		}
		q.PageToken = p.NextPageToken
	}
}

func ingestEvents(prefix string, n int) []*eventgatev1.Event {
	evs := make([]*eventgatev1.Event, n)
	for i := range evs {
		evs[i] = mkEvent(fmt.Sprintf("%s-%04d", prefix, i), float64(i)/100,
			tenant("project", fmt.Sprintf("t%d", i%3)), regarding("apps/v1", "Deployment", "ns", fmt.Sprintf("d%d", i%10)))
	}
	return evs
}

// checkExactlyOnce verifies that listing at rv returns each event once, at
// its stream sequence, equal to what was published.
func checkExactlyOnce(t testing.TB, s *Store, rv uint64, evs []*eventgatev1.Event, seqs []uint64) {
	t.Helper()
	got := listAll(t, s, rv)
	if len(got) != len(evs) {
		t.Fatalf("listed %d events at rv %d, want %d", len(got), rv, len(evs))
	}
	bySeq := map[string]*eventgatev1.Event{}
	for _, e := range got {
		if bySeq[e.ResourceVersion] != nil {
			t.Fatalf("resourceVersion %s listed twice", e.ResourceVersion)
		}
		bySeq[e.ResourceVersion] = e
	}
	for i, ev := range evs {
		want := proto.Clone(ev).(*eventgatev1.Event)
		want.ResourceVersion = strconv.FormatUint(seqs[i], 10)
		if g := bySeq[want.ResourceVersion]; !proto.Equal(g, want) {
			t.Fatalf("seq %d:\n got %v\nwant %v", seqs[i], g, want)
		}
	}
}

func TestIngest(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		n := startNATS(t)
		reg := prometheus.NewRegistry()
		in := startIngest(t, n, s, testIngestConfig(), reg)

		evs := ingestEvents("a", 500)
		var seqs []uint64
		for i := 0; i < len(evs); i += 100 {
			seqs = append(seqs, n.publish(t, evs[i:i+100]...)...)
		}
		// An undecodable message is dropped (terminated), not retried
		// forever.
		bad := n.publishRaw(t, "events.project.t0.apps_Deployment.ns.d0", []byte{0xff, 0xff, 0xff, 0xff})
		// A series update: same uid, a later version.
		upd := proto.Clone(evs[0]).(*eventgatev1.Event)
		upd.Series = &eventgatev1.EventSeries{Count: 2, State: event.SeriesOngoing}
		updSeq := n.publish(t, upd)[0]
		waitFloor(t, in, updSeq, 30*time.Second)

		// At the floor before the update: every event once, at its version.
		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
		// At the floor: the update replaces the first version.
		evs[0], seqs[0] = upd, updSeq
		floor, err := in.AckFloor(ctx)
		if err != nil || floor != updSeq || bad >= updSeq {
			t.Fatalf("floor %d %v", floor, err)
		}
		checkExactlyOnce(t, s, floor, evs, seqs)

		if got := metricValue(t, in.m.rows); got != 501 {
			t.Errorf("rows_total = %v, want 501", got)
		}
		if got := metricValue(t, in.m.errors.WithLabelValues("decode")); got != 1 {
			t.Errorf("decode errors = %v, want 1", got)
		}
		if got := metricValue(t, in.m.batches); got < 1 {
			t.Errorf("batches = %v", got)
		}
		pending, age, err := in.Lag(ctx)
		if err != nil || pending != 0 || age != 0 {
			t.Errorf("lag after catch-up: %d %v %v", pending, age, err)
		}
		if fams, err := reg.Gather(); err != nil || len(fams) != 7 {
			t.Errorf("metric families gathered: %d %v", len(fams), err)
		}
	})
}

// metricValue reads a counter or gauge.
func metricValue(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", m.Desc())
	return 0
}

// flakyTransport fails inserts while down is set, or the next failN ones.
type flakyTransport struct {
	transport
	down    atomic.Bool
	failN   atomic.Int64
	commit  atomic.Bool // insert for real, then report a failure (ambiguous)
	inserts atomic.Int64
}

var errDown = errors.New("clickhouse is down (test)")

func (f *flakyTransport) insert(ctx context.Context, db, table string, b *eventBatch) error {
	f.inserts.Add(1)
	if f.down.Load() {
		return errDown
	}
	if f.failN.Add(-1) >= 0 {
		if f.commit.Load() {
			if err := f.transport.insert(ctx, db, table, b); err != nil {
				return err
			}
		}
		return errDown
	}
	return f.transport.insert(ctx, db, table, b)
}

func TestIngestSurvivesClickHouseOutage(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		n := startNATS(t)
		flaky := &flakyTransport{transport: s.t}
		s.t = flaky
		flaky.down.Store(true)
		in := startIngest(t, n, s, testIngestConfig(), nil)

		// Emits keep succeeding into JetStream while ClickHouse is down.
		evs := ingestEvents("down", 300)
		seqs := n.publish(t, evs...)
		deadline := time.Now().Add(10 * time.Second)
		for flaky.inserts.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if floor, err := in.AckFloor(ctx); err != nil || floor != 0 {
			t.Fatalf("ack floor while down: %d %v", floor, err)
		}
		pending, age, err := in.Lag(ctx)
		if err != nil || pending != 300 || age <= 0 {
			t.Fatalf("lag while down: %d %v %v", pending, age, err)
		}
		time.Sleep(100 * time.Millisecond) // the gauges refresh
		if got := metricValue(t, in.m.pending); got != 300 {
			t.Errorf("pending gauge %v, want 300", got)
		}
		if got := metricValue(t, in.m.oldestAge); got <= 0 {
			t.Errorf("oldest age gauge %v", got)
		}
		if got := metricValue(t, in.m.errors.WithLabelValues("insert")); got < 3 {
			t.Errorf("insert errors %v", got)
		}

		// ClickHouse is back: ingest catches up, nothing lost or doubled.
		flaky.down.Store(false)
		waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)
		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
	})
}

// TestIngestAmbiguousFailure: an insert commits but reports a failure (a
// timeout after the server wrote the part); the retry inserts the batch
// again. Queries return each event once.
func TestIngestAmbiguousFailure(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		n := startNATS(t)
		flaky := &flakyTransport{transport: s.t}
		flaky.commit.Store(true)
		flaky.failN.Store(3)
		s.t = flaky
		in := startIngest(t, n, s, testIngestConfig(), nil)
		evs := ingestEvents("amb", 200)
		seqs := n.publish(t, evs...)
		waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)
		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
	})
}

// blockingTransport commits inserts, then never returns once armed: a
// gateway that dies between the INSERT and the acks (kill -9).
type blockingTransport struct {
	transport
	armed   atomic.Bool
	blocked chan struct{} // closed when an insert is stuck
	release chan struct{}
	once    sync.Once
}

func (b *blockingTransport) insert(ctx context.Context, db, table string, eb *eventBatch) error {
	if err := b.transport.insert(ctx, db, table, eb); err != nil {
		return err
	}
	if b.armed.Load() {
		b.once.Do(func() { close(b.blocked) })
		<-b.release
		return errors.New("crashed (test)")
	}
	return nil
}

// TestIngestCrashBetweenInsertAndAck: replica 1 inserts a batch and "dies"
// before acknowledging it; the messages are redelivered to replica 2, which
// inserts them again. Every acknowledged event is returned exactly once.
func TestIngestCrashBetweenInsertAndAck(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = ""
		s1, s2 := open(cfg), open(cfg)
		n := startNATS(t)
		bt := &blockingTransport{transport: s1.t, blocked: make(chan struct{}), release: make(chan struct{})}
		bt.armed.Store(true)
		s1.t = bt
		icfg := testIngestConfig()
		icfg.AckWait = time.Second
		in1 := startIngest(t, n, s1, icfg, nil)
		defer func() { // replica 1 "restarts": its stale batch is acked late, harmlessly
			bt.armed.Store(false)
			close(bt.release)
		}()

		evs := ingestEvents("crash", 400)
		seqs := n.publish(t, evs...)
		select {
		case <-bt.blocked:
		case <-time.After(30 * time.Second):
			t.Fatal("replica 1 never inserted")
		}
		if f, _ := in1.AckFloor(context.Background()); f != 0 {
			t.Fatalf("floor %d before any ack", f)
		}
		in2 := startIngest(t, n, s2, icfg, nil)
		waitFloor(t, in2, seqs[len(seqs)-1], 60*time.Second)
		checkExactlyOnce(t, s2, seqs[len(seqs)-1], evs, seqs)
		// The first batch really was inserted twice.
		rs, err := s2.t.query(context.Background(), "SELECT toUInt64(count()) FROM "+s2.events(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows uint64
		for rs.Next() {
			rs.Scan(&rows)
		}
		rs.Close()
		t.Logf("%d rows stored for %d events (redelivered copies until merged)", rows, len(evs))
	})
}

func TestIngestReplicasShareConsumer(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = ""
		s1, s2 := open(cfg), open(cfg)
		n := startNATS(t)
		in1 := startIngest(t, n, s1, testIngestConfig(), nil)
		in2 := startIngest(t, n, s2, testIngestConfig(), nil)
		var evs []*eventgatev1.Event
		var seqs []uint64
		for i := 0; i < 10; i++ {
			b := ingestEvents(fmt.Sprintf("r%d", i), 100)
			evs = append(evs, b...)
			seqs = append(seqs, n.publish(t, b...)...)
		}
		waitFloor(t, in1, seqs[len(seqs)-1], 30*time.Second)
		checkExactlyOnce(t, s1, seqs[len(seqs)-1], evs, seqs)
		r1, r2 := metricValue(t, in1.m.rows), metricValue(t, in2.m.rows)
		if r1+r2 < float64(len(evs)) {
			t.Fatalf("replicas inserted %v + %v rows, want %d", r1, r2, len(evs))
		}
		t.Logf("replica 1 inserted %v rows, replica 2 %v", r1, r2)
	})
}

func TestIngestStopAndResume(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		n := startNATS(t)
		in, err := StartIngest(ctx, n.js, n.stream, s, testIngestConfig(), testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		first := ingestEvents("one", 120)
		seqs := n.publish(t, first...)
		waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := in.Stop(sctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		cancel()
		select {
		case <-in.Done():
		default:
			t.Fatal("not done after Stop")
		}
		// While stopped, events wait in JetStream.
		second := ingestEvents("two", 80)
		seqs2 := n.publish(t, second...)
		time.Sleep(200 * time.Millisecond)
		if p := listAll(t, s, seqs2[len(seqs2)-1]); len(p) != len(first) {
			t.Fatalf("%d events stored while stopped, want %d", len(p), len(first))
		}
		// A new ingester resumes from the ack floor.
		in2 := startIngest(t, n, s, testIngestConfig(), nil)
		waitFloor(t, in2, seqs2[len(seqs2)-1], 30*time.Second)
		checkExactlyOnce(t, s, seqs2[len(seqs2)-1], append(first, second...), append(seqs, seqs2...))

		// Cancelling the start context aborts ingest.
		cctx, ccancel := context.WithCancel(ctx)
		in3, err := StartIngest(cctx, n.js, n.stream, s, testIngestConfig(), testLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		ccancel()
		select {
		case <-in3.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("ingest did not stop when its context ended")
		}
	})
}

// TestListThenWatch: a listing at the ack floor plus the stream after it
// gives every event exactly once, while events keep arriving.
func TestListThenWatch(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		n := startNATS(t)
		in := startIngest(t, n, s, testIngestConfig(), nil)
		var (
			mu       sync.Mutex
			all      []uint64
			stopping = make(chan struct{})
			done     = make(chan struct{})
		)
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stopping:
					return
				default:
				}
				seqs := n.publish(t, ingestEvents(fmt.Sprintf("lw%d", i), 25)...)
				mu.Lock()
				all = append(all, seqs...)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		rv, err := in.AckFloor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		listed := listAll(t, s, rv)
		time.Sleep(300 * time.Millisecond)
		close(stopping)
		<-done
		mu.Lock()
		last := all[len(all)-1]
		mu.Unlock()
		// "Watch" from rv: the stream after rv.
		var watched []uint64
		cons, err := n.js.OrderedConsumer(ctx, n.stream, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: rv + 1})
		if err != nil {
			t.Fatal(err)
		}
		for len(watched) == 0 || watched[len(watched)-1] < last {
			m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			md, _ := m.Metadata()
			watched = append(watched, md.Sequence.Stream)
		}
		var got []uint64
		for _, e := range listed {
			v, _ := strconv.ParseUint(e.ResourceVersion, 10, 64)
			got = append(got, v)
		}
		got = append(got, watched...)
		slices.Sort(got)
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, all) {
			t.Fatalf("list(rv=%d: %d events) + watch (%d events) = %d sequences, want %d distinct", rv, len(listed), len(watched), len(got), len(all))
		}
		if rv == 0 || len(listed) == 0 || len(watched) == 0 {
			t.Fatalf("degenerate: rv %d, listed %d, watched %d", rv, len(listed), len(watched))
		}
	})
}
