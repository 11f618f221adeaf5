package ingest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	egjs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/query"
)

func TestMain(m *testing.M) {
	os.Exit(chtest.Main(m, "eventgate-ingest-test-"))
}

// openStore opens a store on db over tr, dropped when the test ends.
func openStore(t testing.TB, tr chtest.Transport, db string) *clickhouse.Store {
	t.Helper()
	cfg := clickhouse.DefaultConfig()
	cfg.Database = db
	var s *clickhouse.Store
	var err error
	if tr.DSN == nil {
		s, err = clickhouse.OpenEngine(context.Background(), chtest.Engine(t), cfg, chtest.Logger(t))
	} else {
		cfg.DSN = tr.DSN(t)
		s, err = clickhouse.Open(context.Background(), cfg, chtest.Logger(t))
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		s.Close()
		chtest.Engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	})
	return s
}

// eachTransport runs f once per transport, with a database of its own that
// open opens stores on.
func eachTransport(t *testing.T, f func(t *testing.T, open func() *clickhouse.Store)) {
	for _, tr := range chtest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			db := chtest.Database(t)
			f(t, func() *clickhouse.Store { return openStore(t, tr, db) })
		})
	}
}

// eachStore runs f once per transport with a store on a fresh database.
func eachStore(t *testing.T, f func(t *testing.T, s *clickhouse.Store)) {
	eachTransport(t, func(t *testing.T, open func() *clickhouse.Store) { f(t, open()) })
}

// writer opens a writer into s; ingest closes it.
func writer(t testing.TB, s *clickhouse.Store) *clickhouse.Writer {
	t.Helper()
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// natsEnv is an embedded NATS server with the events stream.
type natsEnv struct {
	js     jetstream.JetStream
	stream string
}

func startNATS(t testing.TB) *natsEnv {
	t.Helper()
	ns, err := egjs.Embedded(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	cfg := egjs.DefaultConfig()
	nc, err := egjs.Connect(cfg, ns, "ingest-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := egjs.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := egjs.EnsureStream(context.Background(), js, cfg, nil); err != nil {
		t.Fatal(err)
	}
	return &natsEnv{js: js, stream: cfg.Stream}
}

// publish emits events as the service does and returns their sequences.
func (n *natsEnv) publish(t testing.TB, evs ...*eventgatev1.Event) []uint64 {
	t.Helper()
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		m, err := egjs.Msg(wire.Write{Event: ev})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = m
	}
	return n.publishMsgs(t, msgs...)
}

// publishMsgs sends msgs asynchronously, in order, and returns their
// sequences once all are stored.
func (n *natsEnv) publishMsgs(t testing.TB, msgs ...*nats.Msg) []uint64 {
	t.Helper()
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := n.js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futs[i] = f
	}
	seqs := make([]uint64, len(futs))
	for i, f := range futs {
		select {
		case a := <-f.Ok():
			seqs[i] = a.Sequence
		case err := <-f.Err():
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatal("publish not acknowledged")
		}
	}
	return seqs
}

func (n *natsEnv) publishRaw(t testing.TB, subject string, data []byte) uint64 {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	return n.publishMsgs(t, m)[0]
}

func testIngestConfig() Config {
	return Config{BatchSize: 50, BatchWait: 50 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, LagInterval: 50 * time.Millisecond}
}

func startIngest(t testing.TB, n *natsEnv, w Writer, cfg Config, reg prometheus.Registerer) *Consumer {
	t.Helper()
	in, err := Start(context.Background(), n.js, n.stream, w, cfg, chtest.Logger(t), reg)
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
func waitFloor(t testing.TB, in interface {
	AckFloor(context.Context) (uint64, error)
}, seq uint64, within time.Duration) {
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

// listAll pages through everything the store holds at rv.
func listAll(t testing.TB, s *clickhouse.Store, rv uint64) []*eventgatev1.Event {
	t.Helper()
	var out []*eventgatev1.Event
	q := query.List{Scope: query.Scope{All: true}, PageSize: query.MaxPageSize, OldestFirst: true}
	for {
		p, err := s.Query(context.Background(), q, rv)
		if err != nil {
			t.Fatalf("query %+v: %v", q, err)
		}
		out = append(out, p.Events...)
		if p.NextPageToken == "" {
			return out
		}
		q.PageToken = p.NextPageToken
	}
}

// base is the event time the test events are spread after.
var base = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)

func ingestEvents(prefix string, n int) []*eventgatev1.Event {
	evs := make([]*eventgatev1.Event, n)
	for i := range evs {
		uid, ns := fmt.Sprintf("%s-%04d", prefix, i), "ns"
		evs[i] = &eventgatev1.Event{
			Uid: uid, Name: "ev-" + uid, Namespace: ns,
			EventTime: timestamppb.New(base.Add(time.Duration(float64(i) / 100 * float64(time.Second))).Truncate(time.Microsecond)),
			Reason:    "R", Type: "Normal",
			Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: fmt.Sprintf("d%d", i%10)},
			Tenant:    &eventgatev1.Tenant{Type: "project", Name: fmt.Sprintf("t%d", i%3)},
		}
	}
	return evs
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
