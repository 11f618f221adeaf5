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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chdbhttp"
	"github.com/eventgate/eventgate/internal/ingest"
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
	nc, js := natstest.Connect(t, cl.URL())
	defer nc.Close()
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

// watchLog is what a watcher that fails over between replicas saw.
type watchLog struct {
	mu   sync.Mutex
	rvs  []uint64
	uids map[string]int
}

func (l *watchLog) seen() (rvs []uint64, uids map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	uids = make(map[string]int, len(l.uids))
	for k, v := range l.uids {
		uids[k] = v
	}
	return append([]uint64(nil), l.rvs...), uids
}

// watchAcross watches Pod events on first and, once that watch fails (its
// replica is killed), resumes on then from the last resourceVersion seen,
// as a client that fails over does. The watch on first is open when it
// returns.
func watchAcross(ctx context.Context, t *testing.T, first, then eventgatev1.EventServiceClient) *watchLog {
	t.Helper()
	l := &watchLog{uids: map[string]int{}}
	w, err := first.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Kind: "Pod"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	go func() {
		rv := ""
		for ctx.Err() == nil {
			for {
				r, err := w.Recv()
				if err != nil {
					break
				}
				if r.Type == "BOOKMARK" {
					continue
				}
				n, _ := strconv.ParseUint(r.Object.ResourceVersion, 10, 64)
				l.mu.Lock()
				l.rvs = append(l.rvs, n)
				l.uids[r.Object.Uid]++
				l.mu.Unlock()
				rv = r.Object.ResourceVersion
			}
			for ctx.Err() == nil {
				if w, err = then.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Kind: "Pod", ResourceVersion: rv}); err == nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond): // retrying the other replica
				}
			}
		}
	}()
	return l
}

// TestEmbeddedReplicasEachReturnEveryEvent runs three gateway processes,
// each on an embedded engine of its own, through the faults of
// replicaFaults. A Query to each replica returns every acknowledged event
// exactly once: each replica's store copies the whole stream from its live
// feed.
func TestEmbeddedReplicasEachReturnEveryEvent(t *testing.T) {
	replicaFaults(t, 3, nil, func(t *testing.T, rs []readyReplica) {
		ids := map[string]bool{}
		for _, r := range rs {
			if !r.OwnStore || r.IngestConsumer != ingest.FeedConsumer || ids[r.ID] {
				t.Fatalf("replicas %+v: want distinct ids, each with an own store filled from its live feed", rs)
			}
			ids[r.ID] = true
		}
	})
}

// TestSharedClickHouseReplicasEachReturnEveryEvent is the same with two
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
	replicaFaults(t, 2, shared, func(t *testing.T, rs []readyReplica) {
		if rs[0].ID == rs[1].ID {
			t.Fatalf("replicas %+v: want distinct ids", rs)
		}
		for _, r := range rs {
			if r.OwnStore || r.IngestConsumer != "clickhouse-ingest" {
				t.Fatalf("replicas %+v: want the store and consumer clickhouse-ingest shared", rs)
			}
		}
	})
}

// replicaFaults runs n gateway processes (with extra flags) on a 3-node
// NATS cluster with a replicated stream. While all take events, the
// stream's leader node is lost (and later restarted), then the first
// replica is killed with SIGKILL and restarted on its data directory.
// Afterwards a Query to each replica must return every acknowledged event
// exactly once, and a watch opened on the killed replica and resumed on
// another must have seen each of them once, in order. checkReplicas checks the replicas' identities on /readyz.
func replicaFaults(t *testing.T, n int, extra []string, checkReplicas func(t *testing.T, rs []readyReplica)) {
	cl := natstest.StartCluster(t, 3)
	bin := buildGateway(t)
	flags := append([]string{"--nats-url", cl.URL(), "--stream-replicas", "3", "--intake-decision-timeout", "1s", "--ready-max-ingest-lag", "2m"}, extra...)
	ps := make([]*replicaProcess, n)
	ids := make([]readyReplica, n)
	for i := range ps {
		ps[i] = startReplica(t, bin, t.TempDir(), flags...)
		ids[i] = replicaOf(t, ps[i].httpURL)
	}
	checkReplicas(t, ids)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watched := watchAcross(wctx, t, ps[0].client, ps[1].client)

	e := &emitter{acked: map[string]bool{}}
	phase := func(name string, batches int, replicas ...*replicaProcess) {
		t.Helper()
		for i := 0; i < batches; i++ {
			e.emit(replicas...)
		}
		t.Logf("%s: %d events acknowledged so far", name, len(e.ackedUIDs()))
	}
	phase("all replicas, whole cluster", 10, ps...)

	// Lose the stream's leader while the replicas take events.
	stop := make(chan struct{})
	done := e.emitWhile(stop, ps...)
	lost := streamLeader(t, cl)
	cl.Stop(lost)
	phase("leader node lost", 10, ps...)
	cl.Restart(t, lost)
	close(stop)
	<-done
	phase("node back", 5, ps...)

	// Kill the first replica while all take events; the others go on, then
	// it comes back on its data directory (same replica id, same consumer).
	stop = make(chan struct{})
	done = e.emitWhile(stop, ps...)
	phase("before the kill", 4, ps...)
	killed := ps[0]
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = killed.cmd.Wait()
	close(stop)
	<-done
	phase("first replica killed", 10, ps[1:]...)
	ps[0] = startReplica(t, bin, killed.dir, flags...)
	if got := replicaOf(t, ps[0].httpURL); got.ID != ids[0].ID || got.IngestConsumer != ids[0].IngestConsumer {
		t.Fatalf("the killed replica came back as %+v, was %+v", got, ids[0])
	}
	phase("first replica back", 6, ps...)

	acked := e.ackedUIDs()
	if len(acked) < 1000 {
		t.Fatalf("only %d events acknowledged", len(acked))
	}
	expectWatchSawEachOnce(t, watched, acked)
	expectEveryReplicaReturnsEachOnce(t, ps, ids, acked)
}

// expectWatchSawEachOnce waits until the watch has seen every acknowledged
// event exactly once, in resourceVersion order: without a gap or a
// duplicate, failed over or not.
func expectWatchSawEachOnce(t *testing.T, watched *watchLog, acked map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		rvs, uids := watched.seen()
		for i := 1; i < len(rvs); i++ {
			if rvs[i] <= rvs[i-1] {
				t.Fatalf("the watch went from resourceVersion %d to %d", rvs[i-1], rvs[i])
			}
		}
		var missing, repeated []string
		for uid := range acked {
			switch uids[uid] {
			case 0:
				missing = append(missing, uid)
			case 1:
			default:
				repeated = append(repeated, uid)
			}
		}
		if len(missing)+len(repeated) == 0 {
			t.Logf("the watch saw all %d acknowledged events once (%d in all)", len(acked), len(rvs))
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the watch missed %d and repeated %d of %d acknowledged events (missed e.g. %q; repeated e.g. %q); it saw %d events, resourceVersions %s",
				len(missing), len(repeated), len(acked), missing[:min(5, len(missing))], repeated[:min(5, len(repeated))], len(rvs), gaps(rvs))
		case <-time.After(200 * time.Millisecond): // the watch delivering
		}
	}
}

// gaps describes rvs as its first and last and the gaps between.
func gaps(rvs []uint64) string {
	if len(rvs) == 0 {
		return "none"
	}
	out := fmt.Sprintf("%d", rvs[0])
	for i := 1; i < len(rvs); i++ {
		if rvs[i] != rvs[i-1]+1 {
			out += fmt.Sprintf("..%d, %d", rvs[i-1], rvs[i])
		}
	}
	return out + fmt.Sprintf("..%d", rvs[len(rvs)-1])
}

// expectEveryReplicaReturnsEachOnce waits until a Query to each replica
// returns every acknowledged event, and fails if one returns any twice.
func expectEveryReplicaReturnsEachOnce(t *testing.T, ps []*replicaProcess, ids []readyReplica, acked map[string]bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, p := range ps {
		for {
			seen, rv, err := queryCounts(ctx, p.client, "Fault")
			if err != nil {
				t.Fatalf("query replica %s: %v", ids[i].ID, err)
			}
			for uid, c := range seen {
				if c != 1 {
					t.Fatalf("replica %s returned event %s %d times", ids[i].ID, uid, c)
				}
			}
			missing := 0
			for uid := range acked {
				if seen[uid] == 0 {
					missing++
				}
			}
			if missing == 0 {
				t.Logf("replica %s: all %d acknowledged events at resourceVersion %d, each once (%d returned)", ids[i].ID, len(acked), rv, len(seen))
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("replica %s: %d of %d acknowledged events missing at resourceVersion %d", ids[i].ID, missing, len(acked), rv)
			case <-time.After(200 * time.Millisecond): // the replica's ingest catching up
			}
		}
	}
}
