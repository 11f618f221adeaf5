package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chdbhttp"
	"github.com/eventgate/eventgate/internal/natstest"
)

// replicaProcess is a gateway process with a client of its own.
type replicaProcess struct {
	*gatewayProcess
	dir    string
	conn   *grpc.ClientConn
	client eventgatev1.EventServiceClient
}

func startReplica(t *testing.T, bin, dir string, flags ...string) *replicaProcess {
	t.Helper()
	p := startProcess(t, bin, dir, flags...)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &replicaProcess{gatewayProcess: p, dir: dir, conn: conn, client: eventgatev1.NewEventServiceClient(conn)}
}

// readyReplica is the replica section of /readyz.
type readyReplica struct {
	ID             string `json:"id"`
	Store          string `json:"store"`
	OwnStore       bool   `json:"ownStore"`
	IngestConsumer string `json:"ingestConsumer"`
}

func replicaOf(t *testing.T, httpURL string) readyReplica {
	t.Helper()
	resp, err := http.Get(httpURL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Replica readyReplica `json:"replica"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Replica
}

// queryCounts pages through every event of reason a replica returns and
// counts each uid; it also returns the first page's resourceVersion.
func queryCounts(ctx context.Context, c eventgatev1.EventServiceClient, reason string) (map[string]int, uint64, error) {
	seen := map[string]int{}
	req := &eventgatev1.QueryRequest{PageSize: 1000, Reason: []string{reason}}
	var rv uint64
	for {
		resp, err := c.Query(ctx, req)
		if err != nil {
			return nil, 0, err
		}
		if rv == 0 {
			rv, _ = strconv.ParseUint(resp.ResourceVersion, 10, 64)
		}
		for _, e := range resp.Events {
			seen[e.Uid]++
		}
		if resp.NextPageToken == "" {
			return seen, rv, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// streamLeader returns the index of the node leading the events stream.
func streamLeader(t *testing.T, cl *natstest.Cluster) int {
	t.Helper()
	nc, err := nats.Connect(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	for i, srv := range cl.Servers {
		if s.CachedInfo().Cluster != nil && srv.Name() == s.CachedInfo().Cluster.Leader {
			return i
		}
	}
	t.Fatalf("no leader for the events stream: %+v", s.CachedInfo().Cluster)
	return -1
}

// emitter sends batches of uniquely named events, alternating between the
// replicas that are up, and records the uids acknowledged.
type emitter struct {
	mu    sync.Mutex
	acked map[string]bool
	batch int
}

func (e *emitter) emit(replicas ...*replicaProcess) {
	e.mu.Lock()
	b := e.batch
	e.batch++
	e.mu.Unlock()
	target := replicas[b%len(replicas)]
	var evs []*eventgatev1.Event
	for i := 0; i < 50; i++ {
		evs = append(evs, testEvent("Fault", "Pod", "ns", fmt.Sprintf("p%d-%d", b, i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := target.client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs, IdempotencyKey: fmt.Sprintf("batch-%d", b)})
	if err != nil {
		return // not acknowledged: it may or may not be stored
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range resp.Results {
		e.acked[r.Uid] = true
	}
}

func (e *emitter) ackedUIDs() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]bool, len(e.acked))
	for k := range e.acked {
		out[k] = true
	}
	return out
}

// emitWhile emits through replicas until stop is closed.
func (e *emitter) emitWhile(stop <-chan struct{}, replicas ...*replicaProcess) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.emit(replicas...)
		}
	}()
	return done
}

// TestEmbeddedReplicasEachReturnEveryEvent runs two gateway processes,
// each on an embedded engine of its own, on a 3-node NATS cluster with a
// replicated stream, through the faults of replicaFaults. A Query to each
// replica returns every acknowledged event exactly once: each replica's
// store copies the whole stream through an ingest consumer of its own.
func TestEmbeddedReplicasEachReturnEveryEvent(t *testing.T) {
	replicaFaults(t, nil, func(t *testing.T, a, b readyReplica) {
		if !a.OwnStore || !b.OwnStore || a.ID == b.ID || a.IngestConsumer == b.IngestConsumer || a.IngestConsumer != "ingest-"+a.ID {
			t.Fatalf("replicas %+v and %+v: want distinct ids, each with an own store and consumer ingest-<id>", a, b)
		}
	})
}

// TestSharedClickHouseReplicasEachReturnEveryEvent is the same with both
// replicas on one ClickHouse over clickhouse-go (the engine served over
// ClickHouse's HTTP interface): they share one ingest consumer.
func TestSharedClickHouseReplicasEachReturnEveryEvent(t *testing.T) {
	e, err := chdb.Open(chdb.Options{DataDir: chDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	addr := chdbhttp.Start(t, e)
	shared := []string{"--clickhouse-dsn", "http://" + addr, "--clickhouse-database", databaseFor(t.TempDir())}
	replicaFaults(t, shared, func(t *testing.T, a, b readyReplica) {
		if a.OwnStore || b.OwnStore || a.ID == b.ID || a.IngestConsumer != "clickhouse-ingest" || b.IngestConsumer != "clickhouse-ingest" {
			t.Fatalf("replicas %+v and %+v: want distinct ids sharing the store and consumer clickhouse-ingest", a, b)
		}
	})
}

// replicaFaults runs two gateway processes (with extra flags) on a 3-node
// NATS cluster with a replicated stream. While both take events, the
// stream's leader node is lost (and later restarted), then one replica is
// killed with SIGKILL and restarted on its data directory. Afterwards a
// Query to each replica must return every acknowledged event exactly once.
// checkReplicas checks the two replicas' identities from /readyz.
func replicaFaults(t *testing.T, extra []string, checkReplicas func(t *testing.T, a, b readyReplica)) {
	cl := natstest.StartCluster(t, 3)
	bin := buildGateway(t)
	flags := append([]string{"--nats-url", cl.URL(), "--stream-replicas", "3", "--intake-decision-timeout", "1s", "--ready-max-ingest-lag", "2m"}, extra...)
	a := startReplica(t, bin, t.TempDir(), flags...)
	b := startReplica(t, bin, t.TempDir(), flags...)
	ra, rb := replicaOf(t, a.httpURL), replicaOf(t, b.httpURL)
	checkReplicas(t, ra, rb)

	e := &emitter{acked: map[string]bool{}}
	phase := func(name string, n int, replicas ...*replicaProcess) {
		t.Helper()
		for i := 0; i < n; i++ {
			e.emit(replicas...)
		}
		t.Logf("%s: %d events acknowledged so far", name, len(e.ackedUIDs()))
	}
	phase("both replicas, whole cluster", 10, a, b)

	// Lose the stream's leader while both replicas take events.
	stop := make(chan struct{})
	done := e.emitWhile(stop, a, b)
	lost := streamLeader(t, cl)
	cl.Stop(lost)
	phase("leader node lost", 10, a, b)
	cl.Restart(t, lost)
	close(stop)
	<-done
	phase("node back", 5, a, b)

	// Kill replica a while both take events; b goes on alone, then a comes
	// back on its data directory (same replica id, same consumer).
	stop = make(chan struct{})
	done = e.emitWhile(stop, a, b)
	phase("before the kill", 4, a, b)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	close(stop)
	<-done
	phase("replica a killed", 10, b)
	a = startReplica(t, bin, a.dir, flags...)
	if got := replicaOf(t, a.httpURL); got.ID != ra.ID || got.IngestConsumer != ra.IngestConsumer {
		t.Fatalf("replica a came back as %+v, was %+v", got, ra)
	}
	phase("replica a back", 6, a, b)

	acked := e.ackedUIDs()
	if len(acked) < 1000 {
		t.Fatalf("only %d events acknowledged", len(acked))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range []struct {
		name string
		p    *replicaProcess
	}{{"a", a}, {"b", b}} {
		for {
			seen, rv, err := queryCounts(ctx, r.p.client, "Fault")
			if err != nil {
				t.Fatalf("query replica %s: %v", r.name, err)
			}
			for uid, n := range seen {
				if n != 1 {
					t.Fatalf("replica %s returned event %s %d times", r.name, uid, n)
				}
			}
			missing := 0
			for uid := range acked {
				if seen[uid] == 0 {
					missing++
				}
			}
			if missing == 0 {
				t.Logf("replica %s: all %d acknowledged events at resourceVersion %d, each once (%d returned)", r.name, len(acked), rv, len(seen))
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("replica %s: %d of %d acknowledged events missing at resourceVersion %d", r.name, missing, len(acked), rv)
			case <-time.After(200 * time.Millisecond): // the replica's ingest catching up
			}
		}
	}
}
