package gateway

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/gateway/config"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// fanout sizes; EVENTGATE_BENCH_SECONDS shortens or lengthens each phase,
// EVENTGATE_BENCH_RATE sets another emit rate (events/s) for both phases.
const (
	fanoutWatchers = 1000
	fanoutSlow     = 10 // watchers that never read: they must not slow the others
	fanoutRate     = 20000
	fanoutTick     = 10 * time.Millisecond
)

func benchSeconds() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("EVENTGATE_BENCH_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 10 * time.Second
}

// latencies collects durations. Goroutines that measure concurrently each
// record into their own recorder: a shared lock would add its own waits to
// the tail it measures.
type latencies struct {
	mu   sync.Mutex
	d    []time.Duration
	recs []*recorder
	n    atomic.Int64
}

// recorder collects one goroutine's durations.
type recorder struct {
	l *latencies
	d []time.Duration
}

func (l *latencies) recorder() *recorder {
	r := &recorder{l: l, d: make([]time.Duration, 0, 1024)}
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
	return r
}

func (r *recorder) add(d time.Duration) {
	r.d = append(r.d, d)
	r.l.n.Add(1)
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
	l.n.Add(1)
}

// count is the number of durations recorded so far.
func (l *latencies) count() int { return int(l.n.Load()) }

// pct is the p-quantile; call it once every recorder is done.
func (l *latencies) pct(p float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		l.d = append(l.d, r.d...)
	}
	l.recs = nil
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[min(len(l.d)-1, int(float64(len(l.d))*p))]
}

// benchConns is the number of client connections the watchers (and the
// plain-NATS subscriptions) share: EVENTGATE_BENCH_CONNS, default 10.
func benchConns() int {
	if n, err := strconv.Atoi(os.Getenv("EVENTGATE_BENCH_CONNS")); err == nil && n > 0 {
		return n
	}
	return 10
}

func benchRate() int {
	if r, err := strconv.Atoi(os.Getenv("EVENTGATE_BENCH_RATE")); err == nil && r > 0 {
		return r
	}
	return fanoutRate
}

// heapAllocs is the number of bytes allocated on the heap so far.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// usage is what the process (the gateway or the floor's parts, the
// embedded server and engine, and the bench's clients) has used so far:
// CPU time, the collector's share of it and of that its mark assists (the
// runtime's estimates, brought up to date at each collection), and minor
// page faults (on this machine each costs ~14 µs of CPU: a fresh page of
// heap is not free).
type usage struct {
	at                 time.Time
	cpu, gc, assist    time.Duration
	faults, collection uint64
}

func readUsage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []metrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	sec := func(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
	return usage{
		at:         time.Now(),
		cpu:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		gc:         sec(s[0].Value.Float64()),
		assist:     sec(s[1].Value.Float64()),
		faults:     uint64(ru.Minflt),
		collection: s[2].Value.Uint64(),
	}
}

// used is what the process used from u to now.
type used struct {
	cpuPct      float64 // of one core
	gcPct       float64 // the collector's share of cpu
	assist      time.Duration
	faultsPerS  float64
	collections uint64
}

func (u usage) since() used {
	n := readUsage()
	wall := n.at.Sub(u.at).Seconds()
	cpu := (n.cpu - u.cpu).Seconds()
	return used{
		cpuPct:      100 * cpu / wall,
		gcPct:       100 * (n.gc - u.gc).Seconds() / max(cpu, 1e-9),
		assist:      n.assist - u.assist,
		faultsPerS:  float64(n.faults-u.faults) / wall,
		collections: n.collection - u.collection,
	}
}

func (d used) String() string {
	return fmt.Sprintf("cpu %.0f%%, %d collections, collector %.1f%% of it (assists %v), %.0f page faults/s",
		d.cpuPct, d.collections, d.gcPct, d.assist.Round(time.Millisecond), d.faultsPerS)
}

// pace calls fn(batch) every fanoutTick with the events due at the bench
// rate, for d.
func pace(d time.Duration, fn func(n int)) int {
	per := benchRate() * int(fanoutTick) / int(time.Second)
	t := time.NewTicker(fanoutTick)
	defer t.Stop()
	end := time.Now().Add(d)
	sent := 0
	for now := range t.C {
		if now.After(end) {
			return sent
		}
		fn(per)
		sent += per
	}
	return sent
}

// BenchmarkWatchFanout measures emit→watch delivery latency with 1,000
// concurrent gRPC watchers with distinct filters while 20,000 events/s are
// emitted, against plain NATS fan-out to 1,000 subscriptions at the same rate
// on the same server, in the same run. 10 more watchers never read: the
// others must still receive every event. The gateway's figures are of its
// second pass at the rate (the first warms its heap); each pass reports
// the process's CPU, the collector's share and page faults.
func BenchmarkWatchFanout(b *testing.B) {
	dur := benchSeconds()
	tg := startGateway(b, func(c *config.Config) {
		c.WatchBuffer = 4096
		// The embedded default, not the tests' short wait (which would
		// make ClickHouse insert 50 small batches a second).
		c.ClickHouse.BatchWait = clickhouse.DefaultBatchWait
		// EVENTGATE_BENCH_SERIES=false measures the fan-out without the
		// series intake on the emit path.
		if os.Getenv("EVENTGATE_BENCH_SERIES") == "false" {
			c.Series = false
		}
	})
	// The collector as the binary sets it (Run calls TuneRuntime).
	TuneRuntime(tg.cfg, slog.New(slog.DiscardHandler))
	payload := make([]byte, 600)

	// Baseline: plain NATS subscriptions on the gateway's own embedded server.
	var base latencies
	{
		pub, err := ejs.Connect(config.Default().NATS, tg.ns, "bench-pub")
		if err != nil {
			b.Fatal(err)
		}
		defer pub.Close()
		var subs []*nats.Conn
		for c := 0; c < benchConns(); c++ {
			nc, err := ejs.Connect(config.Default().NATS, tg.ns, "bench-sub")
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			subs = append(subs, nc)
		}
		for i := 0; i < fanoutWatchers; i++ {
			rec := base.recorder()
			_, err := subs[i%benchConns()].Subscribe("bench."+strconv.Itoa(i), func(m *nats.Msg) {
				rec.add(time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(m.Data)))))
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		for _, nc := range subs {
			if err := nc.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		i := 0
		pace(dur, func(n int) {
			for k := 0; k < n; k++ {
				binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
				_ = pub.Publish("bench."+strconv.Itoa(i%fanoutWatchers), payload)
				i++
			}
		})
		for _, nc := range subs {
			_ = nc.Flush()
		}
	}

	// eventgate: 1,000 watchers, each on its own namespace, over 10 connections.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var conns []*grpc.ClientConn
	for c := 0; c < benchConns(); c++ {
		conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	// Each phase records its own deliveries; the watchers switch to the
	// phase current when an event arrives.
	var cur atomic.Pointer[fanoutPhase]
	var wg sync.WaitGroup
	for i := 0; i < fanoutWatchers+fanoutSlow; i++ {
		client := eventgatev1.NewEventServiceClient(conns[i%benchConns()])
		req := &eventgatev1.StreamWatchRequest{
			Tenant:    &eventgatev1.Tenant{Type: "project", Name: "bench"},
			Kind:      "Pod",
			Namespace: "ns-" + strconv.Itoa(i%fanoutWatchers),
		}
		s, err := client.StreamWatch(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Header(); err != nil {
			b.Fatal(err)
		}
		if i >= fanoutWatchers {
			continue // never reads: it must not hold up anyone else
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				ph   *fanoutPhase
				rec  *recorder
				mine []arrival
			)
			defer func() { ph.addArrivals(mine) }()
			for {
				r, err := s.Recv()
				if err != nil {
					return
				}
				now := time.Now()
				p := cur.Load()
				if p == nil {
					continue // between phases or after them
				}
				if p != ph {
					ph.addArrivals(mine)
					ph, rec, mine = p, p.lat.recorder(), nil
				}
				rec.add(now.Sub(r.Object.EventTime.AsTime()))
				if n := ph.received.Add(1); n%10 == 0 {
					seq, _ := strconv.ParseUint(r.Object.ResourceVersion, 10, 64)
					mine = append(mine, arrival{seq, now, r.Object.EventTime.AsTime()})
				}
			}
		}()
	}
	note := strings.Repeat("n", 400)
	j := 0
	// runPhase emits at the bench rate for dur on a stream of its own and
	// waits until every fast watcher has every event.
	runPhase := func(ph *fanoutPhase) {
		cur.Store(ph)
		stream, err := tg.client.EmitStream(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var acked atomic.Int64
		ackDone := make(chan struct{})
		go func() {
			defer close(ackDone)
			for {
				r, err := stream.Recv()
				if err != nil {
					return
				}
				if r.Error != nil {
					b.Errorf("batch refused: %v", r.Error)
				}
				acked.Add(int64(len(r.Results)))
			}
		}()
		ph.u0, ph.alloc0 = readUsage(), heapAllocs()
		ph.t0 = ph.u0.at
		ph.sent = pace(dur, func(n int) {
			req := &eventgatev1.EmitStreamRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "bench"}}
			now := timestamppb.Now()
			for k := 0; k < n; k++ {
				ns := "ns-" + strconv.Itoa(j%fanoutWatchers)
				req.Events = append(req.Events, &eventgatev1.Event{
					Reason: "Tick", Note: note, EventTime: now, Type: "Normal",
					ReportingController: "bench", ReportingInstance: "bench-0", Action: "Bench",
					Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: "pod-" + strconv.Itoa(j)},
				})
				j++
			}
			if err := stream.Send(req); err != nil {
				_, rerr := stream.Recv()
				cancel()
				b.Fatalf("send: %v (stream: %v)", err, rerr)
			}
		})
		_ = stream.CloseSend()
		<-ackDone
		// Every fast watcher gets every event meant for it.
		deadline := time.Now().Add(30 * time.Second)
		for ph.received.Load() < acked.Load() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		// The whole process: gateway, embedded NATS and chDB, and the
		// bench's clients; of 100% × GOMAXPROCS.
		ph.use = ph.u0.since()
		ph.allocs = heapAllocs() - ph.alloc0
		if got := ph.received.Load(); got != int64(ph.sent) || acked.Load() != int64(ph.sent) {
			b.Errorf("sent %d, acked %d, delivered to fast watchers %d", ph.sent, acked.Load(), got)
		}
	}
	// One pass unmeasured first: a fresh process grows its heap to the size
	// the collector's target allows (GOGC 400 of a growing live heap) while
	// it runs, and here every fresh page costs a fault of ~14 µs. In the
	// first pass that was 28-30k faults a second and a watch p99 of 122-249
	// ms; in the next, 11-14k and 90-135 ms (three of each, alternated).
	// A gateway serves watches for long; the floor's phases also run after
	// others in their process.
	warm := &fanoutPhase{}
	runPhase(warm)
	b.Logf("warm-up pass: %v", warm.use)
	// EVENTGATE_BENCH_CPUPROFILE=file profiles the gateway phase alone
	// (-cpuprofile would include the plain-NATS baseline).
	if f := os.Getenv("EVENTGATE_BENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			b.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	b.ResetTimer()
	gw := &fanoutPhase{}
	runPhase(gw)
	b.StopTimer()
	// EVENTGATE_BENCH_MEMPROFILE=file writes a heap profile here, with
	// everything the gateway holds after the load.
	if f := os.Getenv("EVENTGATE_BENCH_MEMPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		if err := pprof.WriteHeapProfile(out); err != nil {
			b.Fatal(err)
		}
		out.Close()
	}
	// The same again with the collector off: what of the tail above the
	// floor the collector's cycles make (their marks share the two CPUs
	// with the delivery path and make allocating goroutines assist).
	quiet := &fanoutPhase{}
	{
		gcPercent, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(math.MaxInt64)
		runPhase(quiet)
		debug.SetGCPercent(gcPercent)
		debug.SetMemoryLimit(limit)
		runtime.GC()
	}
	cur.Store(nil)
	cancel()
	wg.Wait()
	// Stored → watcher, from the stream's own timestamp of each sampled
	// event (the same clock: one process).
	var fromStream latencies
	// EVENTGATE_BENCH_TIMELINE=1 logs, for every 100 ms of the run with a
	// sampled delivery over 20 ms, the worst of each part: where a tail
	// comes from (the emit and series path, or the feed to the watcher).
	var timeline *tailTimeline
	if os.Getenv("EVENTGATE_BENCH_TIMELINE") != "" {
		timeline = &tailTimeline{start: gw.t0, windows: map[int64]*tailWindow{}}
	}
	{
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := tg.js.Stream(ctx, tg.cfg.NATS.Stream)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range gw.arrivals {
			m, err := st.GetMsg(ctx, a.seq)
			if err != nil {
				b.Fatalf("stored event %d: %v", a.seq, err)
			}
			fromStream.add(a.at.Sub(m.Time))
			if timeline != nil {
				timeline.add(a.at, a.at.Sub(a.emitted), m.Time.Sub(a.emitted), a.at.Sub(m.Time))
			}
		}
	}
	if timeline != nil {
		timeline.log()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	ratio := func(d time.Duration) float64 { return ms(d) / max(ms(base.pct(0.99)), 0.001) }
	perEvent := float64(gw.allocs) / float64(max(gw.sent, 1))
	b.ReportMetric(float64(gw.sent)/dur.Seconds(), "events/s")
	b.ReportMetric(ms(base.pct(0.5)), "nats_p50_ms")
	b.ReportMetric(ms(base.pct(0.99)), "nats_p99_ms")
	b.ReportMetric(ms(gw.lat.pct(0.5)), "watch_p50_ms")
	b.ReportMetric(ms(gw.lat.pct(0.99)), "watch_p99_ms")
	b.ReportMetric(ratio(gw.lat.pct(0.99)), "p99_ratio")
	b.ReportMetric(ms(fromStream.pct(0.99)), "stored_watch_p99_ms")
	b.ReportMetric(ratio(fromStream.pct(0.99)), "stored_p99_ratio")
	b.ReportMetric(ms(quiet.lat.pct(0.99)), "gcoff_watch_p99_ms")
	b.ReportMetric(gw.use.cpuPct, "cpu_%")
	b.ReportMetric(float64(gw.use.collections), "gc_cycles")
	b.ReportMetric(gw.use.gcPct, "gc_cpu_%")
	b.ReportMetric(gw.use.faultsPerS, "faults/s")
	b.ReportMetric(perEvent, "alloc_B/event")
	b.Logf("%d watchers (+%d never reading), %s at %d events/s: plain NATS p50 %v p99 %v; eventgate watch p50 %v p99 %v (%.1fx); stored→watch (every 10th) p50 %v p99 %v (%.1fx); fast watchers got %d/%d; the process (gateway and clients, GOMAXPROCS %d): %v, %.0f bytes allocated an event; with the collector off: watch p50 %v p99 %v, %v",
		fanoutWatchers, fanoutSlow, dur, benchRate(), base.pct(0.5), base.pct(0.99), gw.lat.pct(0.5), gw.lat.pct(0.99),
		ratio(gw.lat.pct(0.99)), fromStream.pct(0.5), fromStream.pct(0.99),
		ratio(fromStream.pct(0.99)), gw.received.Load(), gw.sent, runtime.GOMAXPROCS(0), gw.use, perEvent,
		quiet.lat.pct(0.5), quiet.lat.pct(0.99), quiet.use)
}

// arrival is a sampled delivery: its resourceVersion (the stream
// sequence), when it arrived, and its eventTime (when its batch was built),
// to measure delivery from the stream (stored → watcher) apart from the
// emit and the series path.
type arrival struct {
	seq     uint64
	at      time.Time
	emitted time.Time
}

// fanoutPhase is one emit phase of BenchmarkWatchFanout.
type fanoutPhase struct {
	lat      latencies
	received atomic.Int64

	mu       sync.Mutex
	arrivals []arrival // every 10th delivery

	sent           int
	t0             time.Time
	u0             usage
	use            used
	alloc0, allocs uint64
}

// addArrivals keeps a watcher's sampled deliveries; ph may be nil.
func (ph *fanoutPhase) addArrivals(a []arrival) {
	if ph == nil || len(a) == 0 {
		return
	}
	ph.mu.Lock()
	ph.arrivals = append(ph.arrivals, a...)
	ph.mu.Unlock()
}

// BenchmarkEmitToQueryable measures how long an acknowledged event takes to
// become queryable (ClickHouse holds it and Query's resourceVersion covers
// it), with events emitted in batches of 50 every 10 ms (5,000 events/s) on
// the embedded defaults.
func BenchmarkEmitToQueryable(b *testing.B) {
	dur := benchSeconds()
	tg := startGateway(b, func(c *config.Config) { c.ClickHouse.BatchWait = clickhouse.DefaultBatchWait })
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	type emitted struct {
		rv uint64
		at time.Time
	}
	pending := make(chan emitted, 1<<16)
	var lat latencies
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		var floor uint64
		var queue []emitted
		for {
			for drained := false; !drained; {
				select {
				case e, ok := <-pending:
					if !ok {
						pending = nil
						drained = true
						break
					}
					queue = append(queue, e)
				default:
					drained = true
				}
			}
			if pending == nil && len(queue) == 0 {
				return
			}
			f, err := tg.ingest.AckFloor(ctx)
			if err != nil {
				b.Errorf("ack floor: %v", err)
				return
			}
			floor = max(floor, f)
			now := time.Now()
			for len(queue) > 0 && queue[0].rv <= floor {
				lat.add(now.Sub(queue[0].at))
				queue = queue[1:]
			}
			time.Sleep(2 * time.Millisecond) // the poll interval bounds the resolution
		}
	}()
	i := 0
	b.ResetTimer()
	sent := 0
	t := time.NewTicker(fanoutTick)
	end := time.Now().Add(dur)
	for now := range t.C {
		if now.After(end) {
			break
		}
		var evs []*eventgatev1.Event
		for k := 0; k < 50; k++ {
			evs = append(evs, testEvent("Tick", "Pod", "ns", "p"+strconv.Itoa(i)))
			i++
		}
		resp, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs})
		if err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		last, _ := strconv.ParseUint(maxRV(resp.Results), 10, 64)
		pending <- emitted{rv: last, at: acked}
		sent += len(evs)
	}
	t.Stop()
	close(pending)
	<-pollDone
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(sent)/dur.Seconds(), "events/s")
	b.ReportMetric(ms(lat.pct(0.5)), "queryable_p50_ms")
	b.ReportMetric(ms(lat.pct(0.99)), "queryable_p99_ms")
}

// tailTimeline is the worst sampled delivery per 100 ms window of a run,
// split into emit → stored and stored → watcher.
type tailTimeline struct {
	start   time.Time
	windows map[int64]*tailWindow
}

type tailWindow struct {
	n                        int
	total, toStream, toWatch time.Duration
}

func (t *tailTimeline) add(at time.Time, total, toStream, toWatch time.Duration) {
	k := int64(at.Sub(t.start) / (100 * time.Millisecond))
	w := t.windows[k]
	if w == nil {
		w = &tailWindow{}
		t.windows[k] = w
	}
	w.n++
	w.total, w.toStream, w.toWatch = max(w.total, total), max(w.toStream, toStream), max(w.toWatch, toWatch)
}

func (t *tailTimeline) log() {
	keys := slices.Sorted(maps.Keys(t.windows))
	var lines []string
	for _, k := range keys {
		if w := t.windows[k]; w.total > 20*time.Millisecond {
			lines = append(lines, fmt.Sprintf("%6.1fs n=%-4d worst %-8v emit→stored %-8v stored→watch %v", float64(k)/10, w.n,
				w.total.Round(time.Millisecond), w.toStream.Round(time.Millisecond), w.toWatch.Round(time.Millisecond)))
		}
	}
	// On stderr: a benchmark's log keeps 10 lines.
	fmt.Fprintf(os.Stderr, "windows of 100 ms with a sampled delivery over 20 ms: %d of %d\n%s\n", len(lines), len(keys), strings.Join(lines, "\n"))
}
