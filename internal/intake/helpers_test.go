package intake

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

var (
	flagOccurrences = flag.Int("intake.occurrences", 2000, "occurrences per series in the replica tests (the issue's full run: 10000)")
	flagClusterOcc  = flag.Int("intake.cluster-occurrences", 500, "occurrences per series in the 3-node cluster test")
	flagLog         = flag.Bool("intake.log", false, "log the intakes' debug output")
)

// testLogger logs to stderr with -intake.log, and nowhere otherwise.
func testLogger(name string) *slog.Logger {
	if !*flagLog {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", name)
}

// startServer starts an embedded JetStream server on a fresh directory.
func startServer(t testing.TB) *server.Server {
	t.Helper()
	ns, err := ejs.Embedded(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// replica is one gateway replica's NATS connection and intake.
type replica struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	in   *Intake
}

// connect opens a connection: in process to ns, or to url.
func connect(t testing.TB, ns *server.Server, url, name string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := ejs.Connect(ejs.Config{URL: url}, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := ejs.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// ensureEvents creates the events stream.
func ensureEvents(t testing.TB, js jetstream.JetStream, replicas int) {
	t.Helper()
	ensureEventsWindow(t, js, replicas, 0)
}

// ensureEventsWindow creates the events stream with a duplicate window of
// window (0: the default).
func ensureEventsWindow(t testing.TB, js jetstream.JetStream, replicas int, window time.Duration) {
	t.Helper()
	cfg := ejs.DefaultConfig()
	cfg.Replicas = replicas
	if window > 0 {
		cfg.Duplicates = window
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ejs.EnsureStream(ctx, js, cfg, nil); err != nil {
		t.Fatal(err)
	}
}

// startReplica connects and starts an intake; it is stopped when the test
// ends (if it still runs).
func startReplica(t testing.TB, ns *server.Server, url, name string, cfg Config) *replica {
	t.Helper()
	return startReplicaChunked(t, ns, url, name, cfg, 0)
}

func startReplicaChunked(t testing.TB, ns *server.Server, url, name string, cfg Config, chunk int) *replica {
	t.Helper()
	return startReplicaWith(t, ns, url, name, cfg, replicaOptions{chunk: chunk})
}

// replicaOptions are the less common settings of a test replica.
type replicaOptions struct {
	// chunk forces the checkpoint chunk size (0: derived).
	chunk int
	// eventsWindow is the events stream's duplicate window (0: default).
	eventsWindow time.Duration
}

func startReplicaWith(t testing.TB, ns *server.Server, url, name string, cfg Config, o replicaOptions) *replica {
	t.Helper()
	nc, js := connect(t, ns, url, name)
	ensureEventsWindow(t, js, cfg.Replicas, o.eventsWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := start(ctx, nc, js, cfg, testLogger(name), nil, o.chunk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	})
	return &replica{name: name, nc: nc, js: js, in: in}
}

// stop stops r gracefully.
func (r *replica) stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.in.Stop(ctx); err != nil {
		t.Fatalf("stop %s: %v", r.name, err)
	}
}

// kill crashes r: its connection closes under it, nothing is checkpointed.
func (r *replica) kill() {
	r.nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = r.in.Stop(ctx) // ends the goroutines; every NATS operation fails
}

// testConfig is a config with quick timers for tests.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Partitions = 8
	cfg.PinnedTTL = 2 * time.Second
	cfg.CheckpointInterval = 500 * time.Millisecond
	cfg.DecisionTimeout = 5 * time.Second
	cfg.MaxAge = time.Hour
	return cfg
}

// occurrence is a normalized event of series key k (an object of its own
// per key); each call has a fresh uid.
func occurrence(k int, note string) *eventgatev1.Event {
	uid := uuid.NewString()
	name := "pod-" + strconv.Itoa(k)
	return &eventgatev1.Event{
		Uid:                 uid,
		Name:                name + "." + uid[:8],
		Namespace:           "default",
		EventTime:           timestamppb.Now(),
		ReportingController: "example.com/kubelet",
		ReportingInstance:   "node-1",
		Action:              "Restart",
		Reason:              "BackOff",
		Note:                note,
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "default", Name: name},
		Type:                event.TypeWarning,
		Tenant:              &eventgatev1.Tenant{Type: event.TenantProject, Name: "p1"},
	}
}

// stored is one message of the events stream.
type stored struct {
	seq uint64
	ev  *eventgatev1.Event
	hdr nats.Header
}

// readEvents returns every message of the events stream, by uid, in stream
// order.
func readEvents(t testing.TB, js jetstream.JetStream) map[string][]stored {
	t.Helper()
	var out map[string][]stored
	waitFor(t, 30*time.Second, "a read of the events stream", func() bool {
		var err error
		out, err = tryReadEvents(js)
		if err != nil {
			t.Logf("read events: %v (retrying)", err)
		}
		return err == nil
	})
	return out
}

func tryReadEvents(js jetstream.JetStream) (map[string][]stored, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]stored)
	last := info.State.LastSeq
	if last == 0 {
		return out, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			ev, err := event.Unmarshal(m.Data())
			if err != nil {
				return nil, err
			}
			out[ev.Uid] = append(out[ev.Uid], stored{seq: meta.Sequence.Stream, ev: ev, hdr: m.Headers()})
			if meta.Sequence.Stream >= last {
				return out, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// eventsCount is the number of messages in the events stream.
func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond) // polling an observable condition
	}
}

// minutesSum adds up the Minutes headers of versions, each message id once.
func minutesSum(t testing.TB, versions []stored) int64 {
	t.Helper()
	seen := make(map[string]bool)
	var n int64
	for _, v := range versions {
		id := v.hdr.Get(jetstream.MsgIDHeader)
		if seen[id] {
			continue
		}
		seen[id] = true
		ms, err := wire.ParseMinutes(v.hdr.Get(wire.HeaderSeriesMinutes))
		if err != nil {
			t.Fatalf("version %d: %v", v.seq, err)
		}
		for _, m := range ms {
			n += int64(m.Count)
		}
	}
	return n
}

// load is the outcome of a replica test's emission.
type load struct {
	series, perSeries int
	outcomes          map[eventgatev1.EmitOutcome]int
	seriesUID         map[int]map[string]bool // key → series uids in results
	retried           int                     // occurrences resubmitted after an error in flight
	retriedDuplicates int                     // of which the intake already had
	failedBatches     int                     // Submits that failed in flight (not refused by a stopped replica)
	elapsed           time.Duration
}

// emit submits nSeries × perSeries occurrences, interleaved (each batch is
// one occurrence of every series), spread round-robin over the replicas by
// batch, from workers goroutines. Before batch b is handed out, hook(b) runs
// (if hook is not nil) while earlier batches are being submitted. A batch whose Submit fails is retried
// with the same message ids on the next replica.
func emit(t testing.TB, replicas []*replica, nSeries, perSeries, workers int, hook func(b int)) *load {
	t.Helper()
	return emitWith(t, replicas, nSeries, perSeries, workers, hook, true)
}

// emitWith is emit; without ids, the occurrences have no message ids (a
// caller that sets no uid and no idempotency key): they are logged in
// batched entries, and a failed Submit is not retried (it would count
// again).
func emitWith(t testing.TB, replicas []*replica, nSeries, perSeries, workers int, hook func(b int), withIDs bool) *load {
	t.Helper()
	l := &load{series: nSeries, perSeries: perSeries, outcomes: make(map[eventgatev1.EmitOutcome]int), seriesUID: make(map[int]map[string]bool)}
	var mu sync.Mutex
	batches := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				evs := make([]*eventgatev1.Event, nSeries)
				ids := make([]string, nSeries)
				for k := range evs {
					evs[k] = occurrence(k, fmt.Sprintf("restart %d", b))
					ids[k] = fmt.Sprintf("k%d/o%d", k, b)
				}
				var res []Result
				inFlightErr := false
				for attempt := 0; ; attempt++ {
					i := (b + attempt) % len(replicas)
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					var r []Result
					var err error
					if withIDs {
						r, err = replicas[i].in.Submit(ctx, evs, ids)
					} else {
						r, err = replicas[i].in.Submit(ctx, evs, nil)
					}
					cancel()
					if errors.Is(err, ErrStopped) {
						continue
					}
					if err == nil {
						res = r
						if inFlightErr {
							mu.Lock()
							l.retried += len(evs)
							for _, x := range r {
								if x.Outcome == eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE {
									l.retriedDuplicates++
								}
							}
							mu.Unlock()
						}
						break
					}
					inFlightErr = true
					mu.Lock()
					l.failedBatches++
					mu.Unlock()
					if attempt > 50 || !withIDs {
						t.Errorf("batch %d: %v", b, err)
						return
					}
				}
				mu.Lock()
				for k, r := range res {
					l.outcomes[r.Outcome]++
					if r.SeriesUID != "" {
						if l.seriesUID[k] == nil {
							l.seriesUID[k] = make(map[string]bool)
						}
						l.seriesUID[k][r.SeriesUID] = true
					}
				}
				mu.Unlock()
			}
		}()
	}
	for b := 0; b < perSeries; b++ {
		if hook != nil {
			hook(b)
		}
		batches <- b
	}
	close(batches)
	wg.Wait()
	l.elapsed = time.Since(start)
	return l
}

// waitBalanced waits until every replica owns its share of the partitions.
func waitBalanced(t testing.TB, replicas []*replica, partitions int) {
	t.Helper()
	share := partitions / len(replicas)
	waitFor(t, 60*time.Second, "the partitions to spread over the replicas", func() bool {
		for _, r := range replicas {
			if r.in.Stats().OwnedPartitions < share {
				return false
			}
		}
		return true
	})
}

// checkSeries waits until every series is finished in the events stream and
// checks that each key holds one series whose final count is perSeries,
// whose Minutes add up to it, and whose uid the Submit results named. It
// returns the number of messages in the events stream.
func checkSeries(t testing.TB, js jetstream.JetStream, l *load, within time.Duration) uint64 {
	t.Helper()
	type keyState struct {
		uids     []string
		finished int
		count    int64
	}
	var byUID map[string][]stored
	var keys map[string]*keyState
	waitFor(t, within, "every series to finish", func() bool {
		byUID = readEvents(t, js)
		keys = make(map[string]*keyState)
		done := true
		for uid, vs := range byUID {
			last := vs[len(vs)-1].ev
			k := last.GetRegarding().GetName()
			ks := keys[k]
			if ks == nil {
				ks = &keyState{}
				keys[k] = ks
			}
			ks.uids = append(ks.uids, uid)
			if last.GetSeries() == nil {
				ks.count++
				continue
			}
			if last.GetSeries().GetState() != series.StateFinished {
				done = false
				continue
			}
			ks.finished++
			ks.count += int64(last.GetSeries().GetCount())
		}
		return done && len(keys) == l.series
	})
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ks := keys[k]
		if len(ks.uids) != 1 || ks.count != int64(l.perSeries) {
			t.Errorf("%s: %d uids, total count %d, want one series of %d", k, len(ks.uids), ks.count, l.perSeries)
			continue
		}
		vs := byUID[ks.uids[0]]
		if got := minutesSum(t, vs); got != int64(l.perSeries) {
			t.Errorf("%s: minutes add up to %d, want %d", k, got, l.perSeries)
		}
		key, _ := strconv.Atoi(k[len("pod-"):])
		for uid := range l.seriesUID[key] {
			if uid != ks.uids[0] {
				t.Errorf("%s: a Submit result names series %s, the stored series is %s", k, uid, ks.uids[0])
			}
		}
	}
	return streamMsgs(t, js, "EVENTS")
}

// waitFlushedCount waits until the last stored version of series uid counts
// n, and checks that its writes' minutes add up to n.
func waitFlushedCount(t *testing.T, js jetstream.JetStream, uid string, n int32) {
	t.Helper()
	var vs []stored
	waitFor(t, 20*time.Second, fmt.Sprintf("a flush of count %d", n), func() bool {
		vs = readEvents(t, js)[uid]
		return len(vs) > 0 && vs[len(vs)-1].ev.GetSeries().GetCount() == n
	})
	if got := minutesSum(t, vs); got != int64(n) {
		t.Errorf("minutes add up to %d, want %d", got, n)
	}
}

// waitCheckpointsCoverLog waits until the checkpoint of every partition
// with entries covers its last one: a replica that restores them then
// holds the partitions' state, not only the log after it.
func waitCheckpointsCoverLog(t *testing.T, r *replica, cfg Config) {
	t.Helper()
	ctx := context.Background()
	stream, err := r.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	for p := range cfg.Partitions {
		last, err := stream.GetLastMsgForSubject(ctx, cfg.subject(p))
		if err == jetstream.ErrMsgNotFound {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "a checkpoint of partition covering its entries", func() bool {
			return headOf(t, r, p).logSeq >= last.Sequence
		})
	}
}
