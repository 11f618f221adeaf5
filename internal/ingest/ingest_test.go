package ingest

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

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
)

// checkExactlyOnce verifies that listing at rv returns each event once, at
// its stream sequence, equal to what was published.
func checkExactlyOnce(t testing.TB, s *clickhouse.Store, rv uint64, evs []*eventgatev1.Event, seqs []uint64) {
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
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		ctx := context.Background()
		n := startNATS(t)
		reg := prometheus.NewRegistry()
		in := startIngest(t, n, writer(t, s), testIngestConfig(), reg)

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
		if fams, err := reg.Gather(); err != nil || len(fams) != 8 {
			t.Errorf("metric families gathered: %d %v", len(fams), err)
		}
	})
}

// flakyWriter fails inserts while down is set, or the next failN ones.
type flakyWriter struct {
	Writer
	down    atomic.Bool
	failN   atomic.Int64
	commit  atomic.Bool // insert for real, then report a failure (ambiguous)
	inserts atomic.Int64
}

var errDown = errors.New("clickhouse is down (test)")

func (f *flakyWriter) Insert(ctx context.Context, b []event.Stored) error {
	f.inserts.Add(1)
	if f.down.Load() {
		return errDown
	}
	if f.failN.Add(-1) >= 0 {
		if f.commit.Load() {
			if err := f.Writer.Insert(ctx, b); err != nil {
				return err
			}
		}
		return errDown
	}
	return f.Writer.Insert(ctx, b)
}

func TestIngestSurvivesClickHouseOutage(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		ctx := context.Background()
		n := startNATS(t)
		flaky := &flakyWriter{Writer: writer(t, s)}
		flaky.down.Store(true)
		in := startIngest(t, n, flaky, testIngestConfig(), nil)

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
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		flaky := &flakyWriter{Writer: writer(t, s)}
		flaky.commit.Store(true)
		flaky.failN.Store(3)
		in := startIngest(t, n, flaky, testIngestConfig(), nil)
		evs := ingestEvents("amb", 200)
		seqs := n.publish(t, evs...)
		waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)
		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
	})
}

// blockingWriter commits inserts, then never returns once armed: a
// gateway that dies between the INSERT and the acks (kill -9).
type blockingWriter struct {
	Writer
	armed   atomic.Bool
	blocked chan struct{} // closed when an insert is stuck
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Insert(ctx context.Context, eb []event.Stored) error {
	if err := b.Writer.Insert(ctx, eb); err != nil {
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
	eachTransport(t, func(t *testing.T, open func() *clickhouse.Store) {
		s1, s2 := open(), open()
		n := startNATS(t)
		bt := &blockingWriter{Writer: writer(t, s1), blocked: make(chan struct{}), release: make(chan struct{})}
		bt.armed.Store(true)
		icfg := testIngestConfig()
		icfg.AckWait = time.Second
		in1 := startIngest(t, n, bt, icfg, nil)
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
		in2 := startIngest(t, n, writer(t, s2), icfg, nil)
		waitFloor(t, in2, seqs[len(seqs)-1], 60*time.Second)
		// Replica 1's batch is in the store as well as replica 2's copy of
		// it, and listed once.
		checkExactlyOnce(t, s2, seqs[len(seqs)-1], evs, seqs)
	})
}

func TestIngestReplicasShareConsumer(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func() *clickhouse.Store) {
		s1, s2 := open(), open()
		n := startNATS(t)
		in1 := startIngest(t, n, writer(t, s1), testIngestConfig(), nil)
		in2 := startIngest(t, n, writer(t, s2), testIngestConfig(), nil)
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

// closeWriter records that ingest closed its writer.
type closeWriter struct {
	Writer
	closed chan struct{}
}

func (c *closeWriter) Close() {
	c.Writer.Close()
	close(c.closed)
}

func TestIngestStopAndResume(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		ctx := context.Background()
		n := startNATS(t)
		w := &closeWriter{Writer: writer(t, s), closed: make(chan struct{})}
		in, err := Start(ctx, n.js, n.stream, w, testIngestConfig(), chtest.Logger(t), nil)
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
		select {
		case <-w.closed:
		default:
			t.Fatal("writer not closed after Stop")
		}
		// While stopped, events wait in JetStream.
		second := ingestEvents("two", 80)
		seqs2 := n.publish(t, second...)
		time.Sleep(200 * time.Millisecond)
		if p := listAll(t, s, seqs2[len(seqs2)-1]); len(p) != len(first) {
			t.Fatalf("%d events stored while stopped, want %d", len(p), len(first))
		}
		// A new ingester resumes from the ack floor.
		in2 := startIngest(t, n, writer(t, s), testIngestConfig(), nil)
		waitFloor(t, in2, seqs2[len(seqs2)-1], 30*time.Second)
		checkExactlyOnce(t, s, seqs2[len(seqs2)-1], append(first, second...), append(seqs, seqs2...))

		// Cancelling the start context aborts ingest.
		cctx, ccancel := context.WithCancel(ctx)
		in3, err := Start(cctx, n.js, n.stream, writer(t, s), testIngestConfig(), chtest.Logger(t), nil)
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
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		ctx := context.Background()
		n := startNATS(t)
		in := startIngest(t, n, writer(t, s), testIngestConfig(), nil)
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
