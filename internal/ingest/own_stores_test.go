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

// TestOwnStoresEachCopyEveryEventWhateverTheirReplicaIDs: two replicas
// with stores of their own, each filled from its own live feed, each hold
// every event, even when they were given the same replica id: no state on
// the server is shared between them (earlier versions split the stream
// between two stores whose replicas had the same id).
func TestOwnStoresEachCopyEveryEventWhateverTheirReplicaIDs(t *testing.T) {
	n := startNATS(t)
	evs, seqs := publishRounds(t, n, "before", 2)
	var feeds []*Feed
	var stores []*clickhouse.Store
	for _, store := range []string{"store-1", "store-2"} {
		s := ownStore(t)
		cfg := testFeedConfig(t.TempDir())
		cfg.Durable, cfg.StoreID = StoreConsumer("same"), store
		feeds = append(feeds, startFeed(t, n, startHub(t, n), writer(t, s), cfg, nil))
		stores = append(stores, s)
	}
	more, moreSeqs := publishRounds(t, n, "after", 3)
	evs, seqs = append(evs, more...), append(seqs, moreSeqs...)
	last := seqs[len(seqs)-1]
	for i, f := range feeds {
		waitFloor(t, f, last, 30*time.Second)
		checkExactlyOnce(t, stores[i], last, evs, seqs)
	}
}

// TestFeedAdoptsTheSharedConsumersFloor: a single replica that filled its
// store through the shared consumer (before stores had ingests of their
// own) does not copy the stream again: its feed starts at the shared
// consumer's ack floor, and the shared consumer is deleted.
func TestFeedAdoptsTheSharedConsumersFloor(t *testing.T) {
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

	cfg := testFeedConfig(t.TempDir())
	cfg.Durable, cfg.StoreID, cfg.AdoptFrom = StoreConsumer("r1"), "store-1", DefaultConsumer
	f := startFeed(t, n, startHub(t, n), writer(t, s), cfg, nil)
	if got, _ := f.AckFloor(ctx); got != floor {
		t.Fatalf("the feed starts at floor %d, want the shared consumer's %d", got, floor)
	}
	if _, err := n.js.Consumer(ctx, n.stream, DefaultConsumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the adopted shared consumer is still there: %v", err)
	}
	more, moreSeqs := publishRounds(t, n, "after", 2)
	evs, seqs = append(evs, more...), append(seqs, moreSeqs...)
	last := seqs[len(seqs)-1]
	waitFloor(t, f, last, 30*time.Second)
	checkExactlyOnce(t, s, last, evs, seqs)
	if got := metricValue(t, f.m.rows); got != 200 {
		t.Errorf("the feed inserted %v rows, want the 200 after the adopted floor", got)
	}
}
