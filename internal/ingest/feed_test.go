package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/watch"
)

// startHub starts the live feed the gateway's watches read.
func startHub(t testing.TB, n *natsEnv) *watch.Hub {
	t.Helper()
	h, err := watch.Start(context.Background(), n.js, n.stream, chtest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Stop)
	return h
}

func testFeedConfig(dir string) Config {
	cfg := testIngestConfig()
	cfg.FloorFile = filepath.Join(dir, FloorFileName)
	return cfg
}

func startFeed(t testing.TB, n *natsEnv, h *watch.Hub, w Writer, cfg Config, reg prometheus.Registerer) *Feed {
	t.Helper()
	f, err := StartFeed(context.Background(), n.js, n.stream, h, w, cfg, chtest.Logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopFeed(t, f) })
	return f
}

func stopFeed(t testing.TB, f *Feed) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// floorInFile reads the floor the feed keeps beside its store.
func floorInFile(t testing.TB, cfg Config) uint64 {
	t.Helper()
	b, err := os.ReadFile(cfg.FloorFile)
	if err != nil {
		t.Fatal(err)
	}
	floor, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		t.Fatalf("floor file %q: %v", b, err)
	}
	return floor
}

// TestFeedCopiesTheStreamThenItsLiveFeed: a store's ingest from the live
// feed first copies what the stream held before it started, then what the
// feed dispatches, each event once, and keeps its floor in its file.
func TestFeedCopiesTheStreamThenItsLiveFeed(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		evs := ingestEvents("f", 300)
		seqs := n.publish(t, evs[:120]...)
		h := startHub(t, n)
		cfg := testFeedConfig(t.TempDir())
		f := startFeed(t, n, h, writer(t, s), cfg, nil)
		seqs = append(seqs, n.publish(t, evs[120:]...)...)
		waitFloor(t, f, seqs[len(seqs)-1], 30*time.Second)

		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
		if got := floorInFile(t, cfg); got != seqs[len(seqs)-1] {
			t.Errorf("floor file %d, want %d", got, seqs[len(seqs)-1])
		}
		if got := metricValue(t, f.m.rows); got != 300 {
			t.Errorf("rows inserted %v, want 300", got)
		}
		pending, age, err := f.Lag(context.Background())
		if err != nil || pending != 0 || age != 0 {
			t.Errorf("lag when caught up: %d %v %v", pending, age, err)
		}
	})
}

// TestFeedRestartsFromTheFloorInItsFile: an ingest stopped (or killed) and
// started again on the same store goes on from the floor it kept: what the
// stream received meanwhile is copied, and nothing before it again.
func TestFeedRestartsFromTheFloorInItsFile(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		h := startHub(t, n)
		cfg := testFeedConfig(t.TempDir())
		evs := ingestEvents("r", 200)

		f := startFeed(t, n, h, writer(t, s), cfg, nil)
		seqs := n.publish(t, evs[:100]...)
		waitFloor(t, f, seqs[99], 30*time.Second)
		stopFeed(t, f)

		seqs = append(seqs, n.publish(t, evs[100:]...)...)
		pending, _, err := f.Lag(context.Background())
		if err != nil || pending != 100 {
			t.Fatalf("stopped: %d pending (%v), want 100", pending, err)
		}
		f = startFeed(t, n, h, writer(t, s), cfg, nil)
		waitFloor(t, f, seqs[199], 30*time.Second)
		checkExactlyOnce(t, s, seqs[199], evs, seqs)
		if got := metricValue(t, f.m.rows); got != 100 {
			t.Errorf("the restarted ingest inserted %v rows, want the 100 after its floor", got)
		}
	})
}

// TestFeedCatchesUpFromTheStreamWhenItFallsBehind: while the store does
// not take inserts, the tap's bounded buffer overflows and leaves the
// feed; once the store is back, the ingest reads what it missed from the
// stream and returns to the feed, every event once.
func TestFeedCatchesUpFromTheStreamWhenItFallsBehind(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		h := startHub(t, n)
		cfg := testFeedConfig(t.TempDir())
		cfg.TapBuffer = 20
		flaky := &flakyWriter{Writer: writer(t, s)}
		flaky.down.Store(true)
		f := startFeed(t, n, h, flaky, cfg, nil)
		catchUps := metricValue(t, f.catchUps)

		evs := ingestEvents("c", 400)
		var seqs []uint64
		for i := 0; i < len(evs); i += 50 {
			seqs = append(seqs, n.publish(t, evs[i:i+50]...)...)
		}
		// Down until it has refused a batch: the feed is behind by then.
		for flaky.inserts.Load() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		flaky.down.Store(false)
		seqs = append(seqs, n.publish(t, ingestEvents("d", 100)...)...)
		evs = append(evs, ingestEvents("d", 100)...)
		waitFloor(t, f, seqs[len(seqs)-1], 30*time.Second)

		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
		if got := metricValue(t, f.catchUps); got <= catchUps {
			t.Errorf("catch-ups %v, was %v: the tap of 20 should have overflowed", got, catchUps)
		}
	})
}

// TestFeedAdoptsTheAckFloorOfItsStoresConsumer: a store filled by its own
// consumer in an earlier version goes on from that consumer's ack floor,
// and the consumer is deleted; a consumer recording another store is left
// alone and not adopted.
func TestFeedAdoptsTheAckFloorOfItsStoresConsumer(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		ctx := context.Background()
		n := startNATS(t)
		evs := ingestEvents("a", 150)
		seqs := n.publish(t, evs...)
		for _, c := range []struct{ name, store string }{{StoreConsumer("r1"), "s1"}, {StoreConsumer("r2"), "another"}} {
			cons, err := n.js.CreateOrUpdateConsumer(ctx, n.stream, jetstream.ConsumerConfig{
				Durable: c.name, AckPolicy: jetstream.AckExplicitPolicy, Metadata: map[string]string{MetadataStore: c.store}})
			if err != nil {
				t.Fatal(err)
			}
			// The earlier version had copied the first 100 events.
			batch, err := cons.Fetch(100)
			if err != nil {
				t.Fatal(err)
			}
			for m := range batch.Messages() {
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The store holds what the consumer acknowledged.
		in := startIngest(t, n, writer(t, s), Config{Durable: "copy", BatchSize: 100, BatchWait: 50 * time.Millisecond}, nil)
		waitFloor(t, in, seqs[99], 30*time.Second)
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := in.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}

		h := startHub(t, n)
		for _, c := range []struct {
			replica, store string
			floor          uint64
		}{{"r2", "s2", 0}, {"r1", "s1", seqs[99]}} {
			cfg := testFeedConfig(t.TempDir())
			cfg.Durable, cfg.StoreID = StoreConsumer(c.replica), c.store
			w := &flakyWriter{Writer: writer(t, s)}
			f := startFeed(t, n, h, w, cfg, nil)
			if got, _ := f.AckFloor(ctx); got < c.floor {
				t.Fatalf("replica %s: floor %d, want at least %d", c.replica, got, c.floor)
			}
			waitFloor(t, f, seqs[149], 30*time.Second)
			stopFeed(t, f)
			want := 150.0 - float64(c.floor)
			if got := metricValue(t, f.m.rows); got != want {
				t.Errorf("replica %s inserted %v rows, want %v", c.replica, got, want)
			}
			_, err := n.js.Consumer(ctx, n.stream, StoreConsumer(c.replica))
			if adopted := c.floor > 0; adopted != errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("replica %s: consumer after start: %v (adopted %v)", c.replica, err, adopted)
			}
		}
		checkExactlyOnce(t, s, seqs[149], evs, seqs)
	})
}

// TestFeedDropsAMessageThatIsNotAnEvent: a message of the events stream
// that is not an event, read while catching up or from the live feed, is
// dropped and counted; the floor passes it and every event around it is
// inserted once.
func TestFeedDropsAMessageThatIsNotAnEvent(t *testing.T) {
	eachStore(t, func(t *testing.T, s *clickhouse.Store) {
		n := startNATS(t)
		evs := ingestEvents("g", 40)
		seqs := n.publish(t, evs[:20]...)
		n.publishRaw(t, "events.project.t0.apps_Deployment.ns.d0", []byte{0xff, 0xff, 0xff, 0xff})
		h := startHub(t, n)
		cfg := testFeedConfig(t.TempDir())
		f := startFeed(t, n, h, writer(t, s), cfg, nil)
		waitFloor(t, f, seqs[len(seqs)-1]+1, 30*time.Second)
		n.publishRaw(t, "events.project.t0.apps_Deployment.ns.d0", []byte{0xff, 0xff, 0xff, 0xff})
		seqs = append(seqs, n.publish(t, evs[20:]...)...)
		waitFloor(t, f, seqs[len(seqs)-1], 30*time.Second)

		checkExactlyOnce(t, s, seqs[len(seqs)-1], evs, seqs)
		if got := metricValue(t, f.m.rows); got != 40 {
			t.Errorf("rows inserted %v, want 40", got)
		}
		if got := metricValue(t, f.m.errors.WithLabelValues("decode")); got != 2 {
			t.Errorf("decode errors %v, want 2", got)
		}
	})
}
