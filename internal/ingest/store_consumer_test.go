package ingest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

// ownStore opens a store on a database of its own (the embedded engine, in
// process), as each replica on an embedded engine has.
func ownStore(t *testing.T) *clickhouse.Store {
	t.Helper()
	return openStore(t, chtest.Transports[0], chtest.Database(t))
}

func storeConfig(replica, store string) Config {
	cfg := testIngestConfig()
	cfg.Durable = StoreConsumer(replica)
	cfg.StoreID = store
	return cfg
}

// publishRounds publishes rounds × 100 events and returns them with their
// sequences.
func publishRounds(t *testing.T, n *natsEnv, prefix string, rounds int) ([]*eventgatev1.Event, []uint64) {
	t.Helper()
	var evs []*eventgatev1.Event
	var seqs []uint64
	for i := 0; i < rounds; i++ {
		b := ingestEvents(fmt.Sprintf("%s%d", prefix, i), 100)
		evs = append(evs, b...)
		seqs = append(seqs, n.publish(t, b...)...)
	}
	return evs, seqs
}

// TestIngestStoreConsumersEachSeeEveryEvent: two replicas with stores of
// their own each copy the whole stream, through consumers of their own.
func TestIngestStoreConsumersEachSeeEveryEvent(t *testing.T) {
	n := startNATS(t)
	s1, s2 := ownStore(t), ownStore(t)
	in1 := startIngest(t, n, writer(t, s1), storeConfig("r1", "store-1"), nil)
	in2 := startIngest(t, n, writer(t, s2), storeConfig("r2", "store-2"), nil)
	evs, seqs := publishRounds(t, n, "all", 5)
	last := seqs[len(seqs)-1]
	for _, c := range []struct {
		in *Consumer
		s  *clickhouse.Store
	}{{in1, s1}, {in2, s2}} {
		waitFloor(t, c.in, last, 30*time.Second)
		checkExactlyOnce(t, c.s, last, evs, seqs)
	}
	for _, name := range []string{"ingest-r1", "ingest-r2"} {
		c, err := n.js.Consumer(context.Background(), n.stream, name)
		if err != nil {
			t.Fatalf("consumer %s: %v", name, err)
		}
		cfg := c.CachedInfo().Config
		if cfg.InactiveThreshold != DefaultConsumerTTL || cfg.Metadata[MetadataStore] == "" {
			t.Errorf("consumer %s: inactive threshold %v, store %q; want %v and the store id", name, cfg.InactiveThreshold, cfg.Metadata[MetadataStore], DefaultConsumerTTL)
		}
	}
}

// TestIngestStoreConsumerOfAnotherStoreRecreated: a replica id reused on a
// new (empty) store does not inherit the old store's ack floor: the
// consumer is recreated and the new store gets every event.
func TestIngestStoreConsumerOfAnotherStoreRecreated(t *testing.T) {
	ctx := context.Background()
	n := startNATS(t)
	evs, seqs := publishRounds(t, n, "old", 3)
	last := seqs[len(seqs)-1]
	in, err := Start(ctx, n.js, n.stream, writer(t, ownStore(t)), storeConfig("r1", "store-old"), chtest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFloor(t, in, last, 30*time.Second)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	fresh := ownStore(t)
	in2 := startIngest(t, n, writer(t, fresh), storeConfig("r1", "store-new"), nil)
	if f, err := in2.AckFloor(ctx); err != nil || f >= last {
		t.Fatalf("the new store's consumer starts at ack floor %d (%v), want below %d", f, err, last)
	}
	waitFloor(t, in2, last, 30*time.Second)
	checkExactlyOnce(t, fresh, last, evs, seqs)
}

// TestIngestStoreConsumerDeletedIsRecreated: when the server deletes a
// store's consumer (its replica was gone longer than ConsumerTTL, or an
// operator removed it), ingest recreates it and the store still ends up
// with every event exactly once.
func TestIngestStoreConsumerDeletedIsRecreated(t *testing.T) {
	ctx := context.Background()
	n := startNATS(t)
	s := ownStore(t)
	cfg := storeConfig("r1", "store-1")
	// Deliveries in flight when the consumer goes are redelivered by the
	// new one after AckWait.
	cfg.AckWait = 2 * time.Second
	in := startIngest(t, n, writer(t, s), cfg, nil)
	evs, seqs := publishRounds(t, n, "before", 2)
	waitFloor(t, in, seqs[len(seqs)-1], 30*time.Second)
	if err := n.js.DeleteConsumer(ctx, n.stream, cfg.Durable); err != nil {
		t.Fatal(err)
	}
	more, moreSeqs := publishRounds(t, n, "after", 2)
	evs, seqs = append(evs, more...), append(seqs, moreSeqs...)
	last := seqs[len(seqs)-1]
	waitFloor(t, in, last, 30*time.Second)
	checkExactlyOnce(t, s, last, evs, seqs)
}

// TestIngestStoreConsumerExpiresAfterTTL: the consumer of a replica that
// is gone is deleted by the server after ConsumerTTL; the shared consumer
// has no such limit.
func TestIngestStoreConsumerExpiresAfterTTL(t *testing.T) {
	ctx := context.Background()
	n := startNATS(t)
	cfg := storeConfig("gone", "store-gone")
	cfg.ConsumerTTL = time.Second
	in, err := Start(ctx, n.js, n.stream, writer(t, ownStore(t)), cfg, chtest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	shared := startIngest(t, n, writer(t, ownStore(t)), testIngestConfig(), nil)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for {
		_, err := n.js.Consumer(ctx, n.stream, cfg.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			break
		}
		if time.Since(stopped) > 20*time.Second {
			t.Fatalf("consumer of the stopped replica still there 20s after it stopped (ttl 1s): %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the server's view
	}
	info, err := shared.consumer().Info(ctx)
	if err != nil {
		t.Fatalf("shared consumer: %v", err)
	}
	if info.Config.InactiveThreshold != 0 {
		t.Fatalf("shared consumer has inactive threshold %v, want none", info.Config.InactiveThreshold)
	}
}

// TestIngestStoreConsumerAdoptsSharedFloor: a single replica upgraded from
// the shared consumer to one of its own does not copy the stream again:
// its consumer starts at the shared one's ack floor, which is deleted.
func TestIngestStoreConsumerAdoptsSharedFloor(t *testing.T) {
	ctx := context.Background()
	n := startNATS(t)
	s := ownStore(t)
	evs, seqs := publishRounds(t, n, "before", 3)
	in, err := Start(ctx, n.js, n.stream, writer(t, s), testIngestConfig(), chtest.Logger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	floor := seqs[len(seqs)-1]
	waitFloor(t, in, floor, 30*time.Second)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := in.Stop(sctx); err != nil {
		t.Fatal(err)
	}

	cfg := storeConfig("r1", "store-1")
	cfg.AdoptFrom = DefaultConsumer
	own := startIngest(t, n, writer(t, s), cfg, nil)
	info, err := own.consumer().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != floor || info.NumPending != 0 {
		t.Fatalf("the store's own consumer starts at ack floor %d with %d pending, want %d and none", info.AckFloor.Stream, info.NumPending, floor)
	}
	if _, err := n.js.Consumer(ctx, n.stream, DefaultConsumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the adopted shared consumer is still there: %v", err)
	}
	more, moreSeqs := publishRounds(t, n, "after", 2)
	evs, seqs = append(evs, more...), append(seqs, moreSeqs...)
	last := seqs[len(seqs)-1]
	waitFloor(t, own, last, 30*time.Second)
	checkExactlyOnce(t, s, last, evs, seqs)
}

// TestIngestReplicaIDUsedTwice: two stores given the same replica id do
// not silently share a consumer (splitting the stream between them): the
// one whose consumer was taken over answers neither an ack floor nor a lag.
func TestIngestReplicaIDUsedTwice(t *testing.T) {
	ctx := context.Background()
	n := startNATS(t)
	cfg := storeConfig("same", "store-1")
	// The first retries a failed fetch after 1s: by then the second has
	// replaced its consumer (a start takes milliseconds).
	cfg.MinBackoff, cfg.MaxBackoff = time.Second, time.Second
	first := startIngest(t, n, writer(t, ownStore(t)), cfg, nil)
	s2 := ownStore(t)
	if _, err := first.AckFloor(ctx); err != nil {
		t.Fatal(err)
	}
	second := startIngest(t, n, writer(t, s2), storeConfig("same", "store-2"), nil)
	if _, err := second.AckFloor(ctx); err != nil {
		t.Fatalf("the second store's consumer: %v", err)
	}
	if _, err := first.AckFloor(ctx); !errors.Is(err, ErrConsumerTaken) {
		t.Fatalf("AckFloor of the store whose consumer was taken: %v, want ErrConsumerTaken", err)
	}
	if _, _, err := first.Lag(ctx); !errors.Is(err, ErrConsumerTaken) {
		t.Fatalf("Lag of the store whose consumer was taken: %v, want ErrConsumerTaken", err)
	}
	// Once it knows, the first no longer fetches: the second store gets
	// every event.
	evs, seqs := publishRounds(t, n, "after", 3)
	last := seqs[len(seqs)-1]
	waitFloor(t, second, last, 30*time.Second)
	checkExactlyOnce(t, s2, last, evs, seqs)
}
