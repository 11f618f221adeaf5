package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// Scale sizes a run.
type Scale struct {
	Name            string
	Runs            int           // runs per figure (the table shows their median)
	EmitDuration    time.Duration // each sustained throughput run
	LatencyDuration time.Duration // each paced latency run
	StoreEvents     int           // events in the generated store
	QueryCalls      int           // calls per query kind per run
	StormSeries     int
	StormRepeats    int // occurrences per series
	Watchers        int
	PublishTotal    int // messages per JetStream baseline run
	InsertBatches   int // batches per ClickHouse baseline run
}

// Scales are the sizes `make bench BENCH_SCALE=…` knows.
var Scales = map[string]Scale{
	"full": {Name: "full", Runs: 3, EmitDuration: 30 * time.Second, LatencyDuration: 20 * time.Second, StoreEvents: 10_000_000,
		QueryCalls: 200, StormSeries: 100, StormRepeats: 10_000, Watchers: 1000, PublishTotal: 200_000, InsertBatches: 10},
	"small": {Name: "small", Runs: 3, EmitDuration: 5 * time.Second, LatencyDuration: 5 * time.Second, StoreEvents: 300_000,
		QueryCalls: 40, StormSeries: 100, StormRepeats: 1000, Watchers: 1000, PublishTotal: 50_000, InsertBatches: 4},
}

// Config says what to run where.
type Config struct {
	Scale Scale
	// GatewayBin is the gateway binary; Self the bench binary, run again
	// for the steps that load the embedded ClickHouse engine.
	GatewayBin, Self string
	// WorkDir holds the data directories (emptied first) and the gateway log.
	WorkDir string
	ChDBLib string
	// Only, when not empty, runs only these sections (baselines are always
	// measured): query, emit, latency, storm, noisy.
	Only map[string]bool
	// Commit names what was measured (default: git in the current directory).
	Commit string
	// Profile samples the gateway with perf during the emit and latency
	// phases (WorkDir/perf.data and its reports), and with pprof during
	// every window of the rules section (WorkDir/cpu.<kind>.<i>.pb.gz,
	// kind norules, rules or spinner; `go tool pprof` merges those of a
	// kind).
	Profile bool
	// PGO, when not empty, is where the CPU profile of the gateway over the
	// write and latency phases goes (back-to-back pprof profiles, merged):
	// the profile a profile-guided build of the gateway reads
	// (cmd/gateway/default.pgo, `make pgo`).
	PGO string
	// LatencyRate, when above 0, is the latency phase's offered rate (else
	// half the EmitStream rate measured): with it, the latency phase runs
	// without the throughput phase unless emit is selected.
	LatencyRate int
	// RulesWindows, when above 0, is the number of the rules section's
	// windows with rules and with the control together (else 8 × Runs):
	// more resolve a smaller effect of the rules, in proportion to the
	// square root of their number.
	RulesWindows int
	Log          io.Writer
}

// Section names.
const (
	SecBaseline = "1 baseline"
	SecEmit     = "2 emit"
	SecLatency  = "3 latency @50%"
	SecQuery    = "4 query (store)"
	SecStorm    = "5 series storm"
	SecMemory   = "6 memory"
	SecNoisy    = "7 noisy neighbour"
	SecRules    = "8 rules"
)

type runner struct {
	cfg     Config
	start   time.Time
	rep     *Report
	maxHeap float64 // MiB, the most seen after a phase
	peak    *peakWatch
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.cfg.Log, "[%4.0fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// logMem logs the gateway's resident set after a phase.
func (r *runner) logMem(ctx context.Context, g *Gateway, phase string) {
	peak, now, err := g.Memory()
	if err != nil {
		return
	}
	heap, err := g.Metric(ctx, "go_memstats_heap_inuse_bytes")
	if err != nil {
		r.logf("gateway memory after %s: RSS %.0f MiB, peak %.0f MiB", phase, now, peak)
		return
	}
	heap /= 1 << 20
	r.maxHeap = max(r.maxHeap, heap)
	prof := filepath.Join(r.cfg.WorkDir, "heap."+phase+".pb.gz")
	if err := g.SaveHeapProfile(ctx, prof); err != nil {
		prof = err.Error()
	}
	engine, err := g.Metric(ctx, "eventgate_clickhouse_engine_memory_bytes")
	if err != nil {
		engine = math.NaN()
	}
	r.logf("gateway memory after %s: RSS %.0f MiB, peak %.0f MiB, Go heap in use %.0f MiB, engine in use %.0f MiB (profile: %s); %s",
		phase, now, peak, heap, engine/(1<<20), prof, r.peak.highest())
}

// runHeap describes the gateway's heap after a throughput run: what the
// last collection found live against the heap in use, and a heap profile
// of it saved as name in the work directory (what grows from run to run).
func (r *runner) runHeap(ctx context.Context, g *Gateway, name string) string {
	v, err := g.Metrics(ctx, "go_gc_heap_live_bytes", "go_memstats_heap_inuse_bytes")
	if err != nil {
		return "heap: " + err.Error()
	}
	prof := filepath.Join(r.cfg.WorkDir, name)
	if err := g.SaveHeapProfile(ctx, prof); err != nil {
		prof = err.Error()
	}
	return fmt.Sprintf("Go heap live %.0f MiB at the last collection, in use %.0f MiB (profile: %s)", v[0]/(1<<20), v[1]/(1<<20), prof)
}

// intakeStages are the stages of eventgate_intake_stage_seconds, in the
// order an Emit goes through them.
var intakeStages = []string{"log", "consumer", "write", "decide"}

// stages reads the sum and count of each intake stage's histogram.
func stages(ctx context.Context, g *Gateway) map[string][2]float64 {
	out := make(map[string][2]float64)
	names := make([]string, 0, 2*len(intakeStages))
	for _, st := range intakeStages {
		names = append(names, `eventgate_intake_stage_seconds_sum{stage="`+st+`"}`, `eventgate_intake_stage_seconds_count{stage="`+st+`"}`)
	}
	v, err := g.Metrics(ctx, names...)
	if err != nil {
		return out
	}
	for i, st := range intakeStages {
		out[st] = [2]float64{v[2*i], v[2*i+1]}
	}
	return out
}

// logStages logs where an Emit's time went between two readings of
// stages: the mean of each stage (see eventgate_intake_stage_seconds).
func (r *runner) logStages(before, after map[string][2]float64) {
	var parts []string
	for _, st := range intakeStages {
		a, b := after[st], before[st]
		if n := a[1] - b[1]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f ms", st, (a[0]-b[0])/n*1000))
		}
	}
	if len(parts) > 0 {
		r.logf("latency phase, mean per stage of an emit: %s", strings.Join(parts, ", "))
	}
}

func (r *runner) want(section string) bool { return len(r.cfg.Only) == 0 || r.cfg.Only[section] }

// collectorNote explains the "Go collector" rows of the emit and latency
// sections.
const collectorNote = "the Go runtime's estimate of its garbage collector's processor time over the run (go_cpu_classes_gc_total_cpu_seconds_total), part of the Go row"

// Run runs the whole suite and returns the report. It is the suite's table
// of contents, kept in one piece: the sections in the order they must run
// (the store before the gateway starts, the capacity before the latency,
// the limits on a gateway of their own).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r := &runner{cfg: cfg, start: time.Now()}
	r.rep = &Report{Scale: cfg.Scale.Name, Commit: cfg.Commit, Machine: machine(), Started: r.start}
	if r.rep.Commit == "" {
		r.rep.Commit = commit()
	}
	sc := cfg.Scale
	if err := os.RemoveAll(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("clean work dir: %w", err)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	dataDir := filepath.Join(cfg.WorkDir, "gateway")
	size, err := EventSize()
	if err != nil {
		return nil, err
	}
	r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("workload: events of %.0f bytes encoded (as stored), 1,000 tenants, 20 kinds, 50 reasons, "+
		"200 controller instances; 20%% repeat one of 1,000 isomorphic series keys, the others regard a new object each", size))

	// 4 (store first: the gateway must be stopped while it is generated).
	var info *StoreInfo
	if r.want("query") {
		r.logf("generating the store: %d events into %s (gateway stopped)", sc.StoreEvents, dataDir)
		info = &StoreInfo{}
		if err := r.child(ctx, info, "gen-store", "-dir", filepath.Join(dataDir, "clickhouse"), "-events", strconv.Itoa(sc.StoreEvents)); err != nil {
			return nil, fmt.Errorf("generate store: %w", err)
		}
		r.logf("store: %d events, %d rows in %v (%.0f events/s), merges %v, %.0f bytes/row", info.Events, info.Rows,
			info.Elapsed.Round(time.Millisecond), float64(info.Events)/info.Elapsed.Seconds(), info.Merge.Round(time.Second), info.BytesRow)
	}

	// 1. Raw ingest baselines, before the gateway runs (the throughput
	// phase's yardsticks: without it, the latency phase has its own floor).
	var base baselines
	if r.want("emit") || cfg.LatencyRate <= 0 {
		if base, err = r.baselines(ctx); err != nil {
			return nil, err
		}
	}

	r.logf("starting %s on %s", cfg.GatewayBin, dataDir)
	// Sections 2-5 measure the gateway's capacity: no emit rate limits
	// (section 7 measures them on a gateway of its own).
	g, err := StartGateway(ctx, cfg.GatewayBin, dataDir, filepath.Join(cfg.WorkDir, "gateway.log"), "--tenant-emit-rate=0", "--principal-emit-rate=0")
	if err != nil {
		return nil, err
	}
	defer g.Stop()
	r.logf("gateway pid %d ready: gRPC %s, HTTP %s", g.Pid(), g.GRPCAddr, g.HTTPURL)
	r.peak = watchPeak(ctx, g)
	defer r.peak.stop()

	r.logMem(ctx, g, "start")
	if info != nil {
		r.peak.setPhase("query")
		r.queries(ctx, g, info)
		r.logMem(ctx, g, "queries")
	}
	var prof *Profiler
	if cfg.Profile {
		if prof, err = StartProfile(g.Pid(), filepath.Join(cfg.WorkDir, "perf.data")); err != nil {
			r.logf("no profile: %v", err)
		}
	}
	var pgo *pgoRecorder
	if cfg.PGO != "" {
		pgo = startPGO(ctx, g, cfg.WorkDir, pgoChunk)
	}
	var streamRate float64
	if r.want("emit") || ((r.want("latency") || r.want("rules")) && cfg.LatencyRate <= 0) {
		r.peak.setPhase("throughput")
		streamRate = r.throughput(ctx, g, base)
		r.logMem(ctx, g, "throughput")
		if r.want("emit") {
			r.peak.setPhase("post-write reads")
			r.afterWrites(ctx, g)
		}
	}
	if cfg.LatencyRate > 0 {
		streamRate = 2 * float64(cfg.LatencyRate)
	}
	if r.want("latency") && streamRate > 0 {
		before := stages(ctx, g)
		r.peak.setPhase("latency")
		r.latency(ctx, g, int(streamRate/2))
		r.logStages(before, stages(ctx, g))
		r.logMem(ctx, g, "latency")
	}
	if pgo != nil {
		if n, err := pgo.stop(ctx, cfg.PGO); err != nil {
			r.logf("PGO profile: %v", err)
		} else {
			r.logf("PGO profile: %d CPU profiles of %s merged into %s", n, pgoChunk, cfg.PGO)
		}
	}
	if prof != nil {
		if _, err := prof.Stop(); err != nil {
			r.logf("profile: %v", err)
		} else {
			r.logf("profile of the emit and latency phases: %s.flat.txt, %s.cum.txt", prof.out, prof.out)
		}
	}
	if r.want("rules") && streamRate > 0 {
		r.peak.setPhase("rules")
		r.rules(ctx, g, int(streamRate/2))
		r.logMem(ctx, g, "rules")
	}
	if r.want("storm") {
		r.peak.setPhase("storm")
		r.storm(ctx, g)
		r.logMem(ctx, g, "storm")
	}
	peak, _, err := g.Memory()
	if err != nil {
		r.rep.Failed(SecMemory, "gateway peak RSS (VmHWM)", "MiB", nil, err)
	} else {
		r.rep.Add(SecMemory, "gateway peak RSS (VmHWM)", "MiB", []float64{peak}, Below(1536), "one gateway process for the whole run, read from /proc/<pid>/status; "+r.peak.highest().String())
	}
	if r.maxHeap > 0 {
		r.rep.Add(SecMemory, "gateway Go heap in use, most after a phase", "MiB", []float64{r.maxHeap}, Below(512),
			"go_memstats_heap_inuse_bytes from /metrics after each phase (the rest of the RSS is mostly the chDB engine)")
	}
	if base.floorRSS > 0 {
		note := fmt.Sprintf("the write path floor's process (section 1) at %s events/s, with the gateway's GC settings: the embedded server's caches and duplicate ids and the engine, with none of the gateway's logic", formatValue(base.floor))
		r.rep.Add(SecMemory, "write path floor: peak RSS", "MiB", []float64{base.floorRSS}, nil, note)
		r.rep.Add(SecMemory, "write path floor: Go heap in use when the last event was stored", "MiB", []float64{base.floorHeap}, nil, "")
	}
	r.logf("stopping the gateway (peak RSS %.0f MiB)", peak)
	if err := g.Stop(); err != nil {
		r.rep.Notes = append(r.rep.Notes, "gateway stop: "+err.Error())
	}
	if r.want("noisy") {
		r.noisy(ctx)
	}
	r.rep.Elapsed = time.Since(r.start).Round(time.Second).String()
	r.rep.Sort()
	return r.rep, nil
}

// child runs the bench binary again with args and decodes its JSON output
// into out.
func (r *runner) child(ctx context.Context, out any, args ...string) error {
	if r.cfg.ChDBLib != "" {
		args = append(args, "-chdb-lib", r.cfg.ChDBLib)
	}
	cmd := exec.CommandContext(ctx, r.cfg.Self, append([]string{"child"}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, r.cfg.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s child %s: %w", r.cfg.Self, strings.Join(args, " "), err)
	}
	if err := jsonDecode(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("child %s output: %w", args[0], err)
	}
	return nil
}

type baselines struct {
	publish, insert, floor float64
	// floorMem is the median floor run's memory (FloorRun).
	floorHeap, floorRSS float64
}

func (r *runner) baselines(ctx context.Context) (baselines, error) {
	sc := r.cfg.Scale
	var b baselines
	var pubs []float64
	for i := 0; i < sc.Runs; i++ {
		dir, err := TempDir(r.cfg.WorkDir, "js-baseline-")
		if err != nil {
			return b, err
		}
		rate, err := JetStreamPublish(ctx, dir, sc.PublishTotal)
		os.RemoveAll(dir)
		if err != nil {
			return b, fmt.Errorf("jetstream baseline: %w", err)
		}
		pubs = append(pubs, rate)
		r.logf("baseline JetStream PublishAsync run %d: %.0f msgs/s", i+1, rate)
	}
	r.rep.Add(SecBaseline, "JetStream PublishAsync (embedded, file storage)", "events/s", pubs, nil,
		fmt.Sprintf("%d workload events per run into a stream configured as EVENTS", sc.PublishTotal))
	var ins []float64
	dir := filepath.Join(r.cfg.WorkDir, "chdb-baseline")
	if err := r.child(ctx, &ins, "chdb-insert", "-dir", dir, "-batches", strconv.Itoa(sc.InsertBatches), "-runs", strconv.Itoa(sc.Runs)); err != nil {
		return b, fmt.Errorf("clickhouse baseline: %w", err)
	}
	os.RemoveAll(dir)
	r.logf("baseline ClickHouse insert: %v rows/s", fmtRuns(ins))
	batch := config.Default().ClickHouse.BatchSize
	r.rep.Add(SecBaseline, fmt.Sprintf("ClickHouse (chDB) insert, batches of %d", batch), "rows/s", ins, nil,
		fmt.Sprintf("Store.Insert into the real events table (+ analytics views), %d batches per run, fresh engine in a child process", sc.InsertBatches))
	var floors, heaps, rsss []float64
	for i := 0; i < sc.Runs; i++ {
		var run FloorRun
		dir := filepath.Join(r.cfg.WorkDir, "pipeline-floor")
		err := r.child(ctx, &run, "pipeline-floor", "-dir", dir, "-total", strconv.Itoa(sc.PublishTotal))
		os.RemoveAll(dir)
		if err != nil {
			return b, fmt.Errorf("write path floor: %w", err)
		}
		floors, heaps, rsss = append(floors, run.Rate), append(heaps, run.HeapInuseMiB), append(rsss, run.PeakRSSMiB)
		r.logf("baseline write path floor run %d: %.0f events/s, Go heap in use %.0f MiB, peak RSS %.0f MiB", i+1, run.Rate, run.HeapInuseMiB, run.PeakRSSMiB)
	}
	b.floorHeap, b.floorRSS = Median(heaps), Median(rsss)
	r.rep.Add(SecBaseline, "Write path floor: the parts composed", "events/s", floors, nil,
		fmt.Sprintf("%d distinct events per run: intake stream → owner decode + events stream → watch-feed decode and ClickHouse ingest, in one process (bench.PipelineFloor)", sc.PublishTotal))
	if len(floors) > 1 {
		// The floor of issue 16's spread target: how far the parts alone
		// move from one run to the next on this machine, in the same run.
		r.rep.Add(SecBaseline, "Write path floor: spread of the runs", "%", []float64{spread(floors)}, nil,
			"(highest − lowest) ÷ lowest of the floor's runs: what the machine alone moves a throughput figure by (the end-to-end spreads' floor)")
	}
	b.publish, b.insert, b.floor = Median(pubs), Median(ins), Median(floors)
	return b, nil
}

func fmtRuns(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = formatValue(x)
	}
	return strings.Join(parts, " / ")
}

func (r *runner) queries(ctx context.Context, g *Gateway, info *StoreInfo) {
	sc := r.cfg.Scale
	note := fmt.Sprintf("%s events (%s rows with series versions) generated by INSERT … SELECT FROM numbers in %v, gateway stopped; half of them one large tenant's, the rest 500 small tenants'; the first reads take a small tenant per call, the dashboard reads the large tenant or every tenant; %d calls per run",
		thousands(int64(info.Events)), thousands(int64(info.Rows)), info.Elapsed.Round(time.Second), sc.QueryCalls)
	// The generated rows are versions 1..3: wait until Query reads at
	// least that.
	if err := r.warmup(ctx, g, info.MaxSeq); err != nil {
		for _, k := range append(slices.Clone(QueryKinds), DashboardKinds...) {
			r.rep.Failed(SecQuery, k.Name+" p50", "ms", nil, err)
		}
		return
	}
	for ki, k := range append(slices.Clone(QueryKinds), DashboardKinds...) {
		if r.measureQuery(ctx, g, info, k, ki, k.Name, sc.QueryCalls, 5, k.Cold, note) {
			note = ""
		}
	}
}

// measureQuery reports the p50 and p99 of k (as name) over the scale's
// runs of calls each (after warm calls), and its first call when cold. It
// reports whether the rows were added.
func (r *runner) measureQuery(ctx context.Context, g *Gateway, info *StoreInfo, k QueryKind, ki int, name string, calls, warm int, cold bool, note string) bool {
	goal := Below(50)
	if k.Analytics {
		goal = Below(100)
	}
	if k.GoalMS > 0 {
		goal = Below(k.GoalMS)
	}
	var p50, p99, first []float64
	var failed error
	if cold {
		// The first call of its kind in this gateway process.
		lat, err := RunQueries(ctx, g, info, k, 1, uint64(2000+ki))
		if err != nil {
			failed = err
		} else {
			first = lat
		}
	}
	for i := 0; i < r.cfg.Scale.Runs && failed == nil; i++ {
		if _, err := RunQueries(ctx, g, info, k, warm, uint64(1000+i)); err != nil {
			failed = err
			break
		}
		lat, err := RunQueries(ctx, g, info, k, calls, uint64(ki*100+i))
		if err != nil {
			failed = err
			break
		}
		p50 = append(p50, Percentile(lat, 0.5))
		p99 = append(p99, Percentile(lat, 0.99))
	}
	r.logf("query %s: p50 %s ms, p99 %s ms, cold %s ms (%v)", name, fmtRuns(p50), fmtRuns(p99), fmtRuns(first), failed)
	switch {
	case errors.Is(failed, ErrNotBuilt):
		r.rep.NotBuilt(SecQuery, name+" p50", "ms", goal, "")
		r.rep.NotBuilt(SecQuery, name+" p99", "ms", nil, "")
		return false
	case failed != nil:
		r.rep.Failed(SecQuery, name+" p50", "ms", goal, failed)
		return false
	}
	r.rep.Add(SecQuery, name+" p50", "ms", p50, goal, note)
	r.rep.Add(SecQuery, name+" p99", "ms", p99, nil, "")
	if first != nil {
		r.rep.Add(SecQuery, name+" cold", "ms", first, Below(500), "first call of its kind in the gateway process")
	}
	return true
}

// afterWrites measures the every-tenant dashboard reads of DashboardKinds
// on the store the throughput phase has just written: its millions of
// events sit in the store's newest minutes, which the query section,
// reading the generated store before any write, does not see (newest
// first over every tenant took 240 ms there in session 19, 84 ms in the
// query section). Windows end within the last ten minutes. Not the top
// objects: the phase's events each regard a new object, more in an hour
// than the group limit lets one answer hold (the gateway refuses it,
// InvalidArgument, as it should).
func (r *runner) afterWrites(ctx context.Context, g *Gateway) {
	info := &StoreInfo{End: time.Now()}
	const calls, warm = 20, 2
	note := fmt.Sprintf("right after the throughput phase, on the store it wrote (with the generated store when the query section ran); %d calls per run", calls)
	for ki, k := range DashboardKinds {
		if !strings.HasSuffix(k.Name, ", every tenant") || strings.HasPrefix(k.Name, "Top 10 objects") {
			continue
		}
		before := readState(ctx, g)
		if r.measureQuery(ctx, g, info, k, ki, k.Name+" after the write phase", calls, warm, false, note) {
			note = ""
		}
		r.logReadState(ctx, g, k.Name, before)
	}
}

// gatewayState is what the reads after the write phase log beside their
// times: what else the gateway was doing then.
type gatewayState struct {
	at  time.Time
	cpu CPU
	gc  time.Duration
}

func readState(ctx context.Context, g *Gateway) gatewayState {
	st := gatewayState{at: time.Now()}
	st.cpu, _ = g.CPU()
	st.gc, _ = g.GCCPU(ctx)
	return st
}

// logReadState logs, for the reads of kind since before, the gateway's CPU
// (its Go threads, the collector's part of them, the engine's threads) and
// the active parts of the tables the reads use: a collector running back to
// back or parts the engine has not merged yet would slow every read.
func (r *runner) logReadState(ctx context.Context, g *Gateway, kind string, before gatewayState) {
	now := readState(ctx, g)
	wall := now.at.Sub(before.at).Seconds()
	cpu := now.cpu.Sub(before.cpu)
	var parts []string
	for _, table := range []string{"events", "analytics_events", "event_minutes", "series_minute_totals"} {
		if n, err := g.Metric(ctx, `eventgate_clickhouse_active_parts{table="`+table+`"}`); err == nil {
			parts = append(parts, fmt.Sprintf("%s %.0f", table, n))
		}
	}
	r.logf("during %s after the write phase (%.1f s): gateway Go %.2f cores (collector %.2f), engine %.2f cores; active parts: %s",
		kind, wall, cpu.Go.Seconds()/wall, (now.gc-before.gc).Seconds()/wall, cpu.Engine.Seconds()/wall, strings.Join(parts, ", "))
}

// warmup emits a few events and waits until Query's resourceVersion is at
// least floor and covers them.
func (r *runner) warmup(ctx context.Context, g *Gateway, floor uint64) error {
	w := NewWorkload("warmup")
	resp, err := g.Events.Emit(ctx, &eventgatev1.EmitRequest{Events: w.Batch(newRand(1), 10)})
	if err != nil {
		return fmt.Errorf("warm-up emit: %w", err)
	}
	rv := max(maxRV(resp.Results), floor)
	if _, err := g.WaitQueryable(ctx, rv, 2*time.Minute); err != nil {
		return fmt.Errorf("warm-up: resourceVersion %d: %w", rv, err)
	}
	return nil
}

// throughput runs the sustained emit runs and returns the median end-to-end
// EmitStream rate: what the gateway sustains, the latency phase's 100%.
// (The accepted rate is higher by the backlog the ingest drains after the
// last acknowledgement.)
func (r *runner) throughput(ctx context.Context, g *Gateway, base baselines) float64 {
	sc := r.cfg.Scale
	lower := min(base.publish, base.insert)
	var streamRate float64
	for _, mode := range []Mode{ModeStream, ModeUnary, ModeREST} {
		if mode != ModeStream && !r.want("emit") {
			continue
		}
		var acc, e2e, eff, ofFloor, drain, cpuGo, cpuEngine, cpuGC []float64
		var failed error
		var outcomes map[string]int
		for i := 0; i < sc.Runs; i++ {
			cpu0, cpuErr := g.CPU()
			gc0, gcErr := g.GCCPU(ctx)
			// With -profile, each EmitStream run is sampled (pprof): what
			// costs more per event from one run to the next.
			var profiled chan error
			path := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("cpu.emit%d.pb.gz", i+1))
			if r.cfg.Profile && mode == ModeStream {
				profiled = make(chan error, 1)
				go func() { profiled <- g.SaveCPUProfile(ctx, sc.EmitDuration, path) }()
			}
			t, err := RunThroughput(ctx, g, mode, NewWorkload(fmt.Sprintf("tp%s%d", strings.ToLower(string(mode)), i)), sc.EmitDuration)
			if profiled != nil {
				if perr := <-profiled; perr != nil {
					r.logf("%s run %d: CPU profile: %v", mode, i+1, perr)
				} else {
					r.logf("%s run %d: CPU profile: %s", mode, i+1, path)
				}
			}
			if err != nil {
				failed = err
				break
			}
			if cpu1, err := g.CPU(); err == nil && cpuErr == nil && t.Accepted > 0 {
				// Over the run and its drain: what each event cost, and
				// whether that cost grows from run to run.
				used, k := cpu1.Sub(cpu0), float64(t.Accepted)/1000
				cpuGo, cpuEngine = append(cpuGo, used.Go.Seconds()*1000/k), append(cpuEngine, used.Engine.Seconds()*1000/k)
				if gc1, err := g.GCCPU(ctx); err == nil && gcErr == nil {
					cpuGC = append(cpuGC, (gc1-gc0).Seconds()*1000/k)
				}
			}
			acc = append(acc, t.Accept)
			e2e = append(e2e, t.EndToEnd)
			eff = append(eff, t.EndToEnd/lower)
			if base.floor > 0 {
				ofFloor = append(ofFloor, t.EndToEnd/base.floor)
			}
			drain = append(drain, t.Drain.Seconds())
			outcomes = t.Outcomes
			r.logf("%s run %d: %d accepted, %.0f/s accepted, %.0f/s end to end (drain %v), outcomes %v; %s", mode, i+1, t.Accepted, t.Accept, t.EndToEnd,
				t.Drain.Round(time.Millisecond), t.Outcomes, r.runHeap(ctx, g, fmt.Sprintf("heap.%s%d.pb.gz", strings.ToLower(string(mode)), i+1)))
		}
		name := string(mode)
		switch {
		case errors.Is(failed, ErrNotBuilt):
			r.rep.NotBuilt(SecEmit, name+" accepted", "events/s", nil, "")
			continue
		case failed != nil:
			r.rep.Failed(SecEmit, name+" accepted", "events/s", nil, failed)
			continue
		}
		shape := fmt.Sprintf("batches of %d, %d in flight", StreamBatch, StreamInFlight)
		if mode != ModeStream {
			shape = fmt.Sprintf("%d concurrent callers, %d events per call", UnaryCallers, UnaryBatch)
		}
		r.rep.Add(SecEmit, name+" accepted", "events/s", acc, nil, fmt.Sprintf("%v closed loop, %s; last run's outcomes %v", sc.EmitDuration, shape, outcomes))
		r.rep.Add(SecEmit, name+" end to end (queryable)", "events/s", e2e, nil,
			fmt.Sprintf("accepted ÷ time until Query's resourceVersion covered the last; drain after the last ack %s s", fmtRuns(drain)))
		// Issue 16: the three runs of each throughput figure within 15% of
		// each other (a rate that falls run after run misses it).
		if len(e2e) > 1 {
			r.rep.Add(SecEmit, name+" end to end: spread of the runs", "%", []float64{spread(e2e)}, Below(15),
				"(highest − lowest) ÷ lowest of the runs above")
		}
		if len(cpuGo) == len(acc) {
			r.rep.Add(SecEmit, name+" gateway CPU per 1,000 events: Go", "ms", cpuGo, nil, "user + system time of the gateway's Go threads over the run and its drain ÷ events accepted")
			r.rep.Add(SecEmit, name+" gateway CPU per 1,000 events: engine", "ms", cpuEngine, nil, "the same for the embedded ClickHouse's threads (inserts, merges, materialized views)")
		}
		if len(cpuGC) == len(acc) {
			r.rep.Add(SecEmit, name+" gateway CPU per 1,000 events: Go collector", "ms", cpuGC, nil, collectorNote)
		}
		var goal *Goal
		if mode == ModeStream {
			goal = AtLeast(0.5) // issue 16
			streamRate = Median(e2e)
		}
		r.rep.Add(SecEmit, name+" efficiency", "ratio", eff, goal, fmt.Sprintf("end to end ÷ lower raw ingest baseline (%s/s)", formatValue(lower)))
		if len(ofFloor) > 0 {
			r.rep.Add(SecEmit, name+" share of the write path floor", "ratio", ofFloor, nil, fmt.Sprintf("end to end ÷ the parts composed (%s/s)", formatValue(base.floor)))
		}
	}
	return streamRate
}

// latency runs the latency section at rate: Runs runs of the NATS fan-out
// floor and of the gateway, then the report of their percentiles and
// ratios. It is kept whole: the runs' samples are a dozen slices the report
// reads.
func (r *runner) latency(ctx context.Context, g *Gateway, rate int) {
	sc := r.cfg.Scale
	r.logf("latency: %d watchers, %d events/s offered", sc.Watchers, rate)
	ws, err := StartWatchers(ctx, g, sc.Watchers, 10)
	if err != nil {
		if errors.Is(err, ErrNotBuilt) {
			r.rep.NotBuilt(SecLatency, "emit→watch p99", "ms", Below(50), "")
		} else {
			r.rep.Failed(SecLatency, "emit→watch p99", "ms", Below(50), err)
		}
		return
	}
	defer ws.Stop()
	var nats50, nats99, sa50, sa99, ua50, ua99, w50, w99, q50, q99, ratio []float64
	var fa99, fw99, saFloor, uaFloor, wFloor, cpuGo, cpuEngine []float64
	var fq99, qFloor []float64
	var busyCores, floorCPU, cpuOfFloor, cpuGC []float64
	var notes []string
	for i := 0; i < sc.Runs; i++ {
		nl, err := NATSFanout(ctx, g.NATSURL, sc.Watchers, 10, rate, 600, sc.LatencyDuration)
		if err != nil {
			r.rep.Failed(SecBaseline, "plain NATS fan-out p99", "ms", nil, err)
			return
		}
		nats50, nats99 = append(nats50, Percentile(nl, 0.5)), append(nats99, Percentile(nl, 0.99))
		cpu0, cpuErr := g.CPU()
		gc0, gcErr := g.GCCPU(ctx)
		busy0, busyErr := MachineBusy()
		start := time.Now()
		l, err := RunLatency(ctx, g, ws, NewWorkload("lat"+strconv.Itoa(i)), rate, sc.LatencyDuration)
		if err != nil {
			r.rep.Failed(SecLatency, "emit→watch p99", "ms", Below(50), err)
			return
		}
		gwCPU := -1.0
		if cpu1, err := g.CPU(); err == nil && cpuErr == nil {
			// CPU time per event is what the machine's load changes least:
			// the gateway's own cost, beside the latencies it leads to.
			used, k := cpu1.Sub(cpu0), float64(rate)*sc.LatencyDuration.Seconds()/1000
			cpuGo = append(cpuGo, used.Go.Seconds()*1000/k)
			cpuEngine = append(cpuEngine, used.Engine.Seconds()*1000/k)
			gwCPU = (used.Go + used.Engine).Seconds() * 1000 / k
			if gc1, err := g.GCCPU(ctx); err == nil && gcErr == nil {
				cpuGC = append(cpuGC, (gc1-gc0).Seconds()*1000/k)
			}
		}
		// How much of the machine the run used, everything on it together
		// (the gateway, the bench's watchers and emitters): the tails of a
		// machine near its last core are queueing, whatever the gateway does.
		if busy1, err := MachineBusy(); err == nil && busyErr == nil {
			busyCores = append(busyCores, (busy1-busy0).Seconds()/time.Since(start).Seconds())
		}
		// A figure without samples (nothing was created, say) has no value
		// for this run; a figure with none in any run shows "error".
		pct := func(p50, p99 *[]float64, xs []float64) {
			if len(xs) > 0 {
				*p50, *p99 = append(*p50, Percentile(xs, 0.5)), append(*p99, Percentile(xs, 0.99))
			}
		}
		pct(&sa50, &sa99, l.StreamAck)
		pct(&ua50, &ua99, l.UnaryAck)
		pct(&w50, &w99, l.Watch)
		pct(&q50, &q99, l.Queryable)
		if len(l.Watch) > 0 {
			ratio = append(ratio, Percentile(l.Watch, 0.99)/max(Percentile(nl, 0.99), 0.001))
		}
		if st := l.Stalls(); st != "" {
			r.logf("latency run %d: %s", i+1, st)
		}
		if l.Stages != "" {
			r.logf("latency run %d: the gateway's stages, p99 ms: %s", i+1, l.Stages)
		}
		// The parts alone at the same rate, with the gateway idle.
		var fl FloorLatency
		dir := filepath.Join(r.cfg.WorkDir, "pipeline-floor")
		err = r.child(ctx, &fl, "pipeline-floor", "-dir", dir, "-rate", strconv.Itoa(rate), "-duration", sc.LatencyDuration.String())
		os.RemoveAll(dir)
		if err != nil {
			r.rep.Failed(SecBaseline, "write path floor: ack p99 at the latency phase's rate", "ms", nil, err)
		} else if len(fl.Ack) > 0 && len(fl.Watch) > 0 {
			a, w := Percentile(fl.Ack, 0.99), Percentile(fl.Watch, 0.99)
			fa99, fw99 = append(fa99, a), append(fw99, w)
			if len(l.StreamAck) > 0 {
				saFloor = append(saFloor, Percentile(l.StreamAck, 0.99)/max(a, 0.001))
			}
			if len(l.UnaryAck) > 0 {
				uaFloor = append(uaFloor, Percentile(l.UnaryAck, 0.99)/max(a, 0.001))
			}
			if len(l.Watch) > 0 {
				wFloor = append(wFloor, Percentile(l.Watch, 0.99)/max(w, 0.001))
			}
			if len(fl.Queryable) > 0 {
				fq := Percentile(fl.Queryable, 0.99)
				fq99 = append(fq99, fq)
				if len(l.Queryable) > 0 {
					qFloor = append(qFloor, Percentile(l.Queryable, 0.99)/max(fq, 0.001))
				}
			}
			if fl.CPUPer1000 > 0 {
				floorCPU = append(floorCPU, fl.CPUPer1000)
				if gwCPU >= 0 {
					cpuOfFloor = append(cpuOfFloor, gwCPU/fl.CPUPer1000)
				}
			}
			r.logf("latency run %d floor: ack p50 %.1f p99 %.1f ms, watch p50 %.1f p99 %.1f ms, inserted p50 %.0f p99 %.0f ms, CPU %.1f ms per 1,000 events", i+1,
				Percentile(fl.Ack, 0.5), a, Percentile(fl.Watch, 0.5), w, Percentile(fl.Queryable, 0.5), Percentile(fl.Queryable, 0.99), fl.CPUPer1000)
		}
		notes = append(notes, fmt.Sprintf("%d/%d", l.Delivered, l.Created))
		if l.Overflowed > 0 {
			notes[len(notes)-1] += fmt.Sprintf(" (%d watchers ended as too slow)", l.Overflowed)
		}
		r.logf("latency run %d: NATS p99 %.1f ms; stream ack p99 %.1f, unary ack p99 %.1f, watch p50 %.1f p99 %.1f, queryable p50 %.0f p99 %.0f ms (%d samples); delivered %s",
			i+1, Percentile(nl, 0.99), Percentile(l.StreamAck, 0.99), Percentile(l.UnaryAck, 0.99), Percentile(l.Watch, 0.5), Percentile(l.Watch, 0.99),
			Percentile(l.Queryable, 0.5), Percentile(l.Queryable, 0.99), len(l.Queryable), notes[i])
	}
	load := fmt.Sprintf("%s events/s offered (50%% of the EmitStream end-to-end rate) through EmitStream, a batch every %v, %v per run", thousands(int64(rate)), Tick, sc.LatencyDuration)
	r.rep.Add(SecBaseline, "plain NATS fan-out p50", "ms", nats50, nil, fmt.Sprintf("%d subscriptions on 10 connections to the gateway's own server, at the latency phase's rate, 600-byte messages", sc.Watchers))
	r.rep.Add(SecBaseline, "plain NATS fan-out p99", "ms", nats99, nil, "")
	r.rep.Add(SecBaseline, "write path floor: ack p99 at the latency phase's rate", "ms", fa99, nil,
		fmt.Sprintf("the parts composed (bench.PipelineFloorPaced) offered %s events/s in a batch every %v, logged as one intake entry per partition, in a child process after each latency run: batch publish → every write acknowledged by the events stream", thousands(int64(rate)), Tick))
	r.rep.Add(SecBaseline, "write path floor: watch p99 at the latency phase's rate", "ms", fw99, nil, "the same runs: publish → decoded by the watch feed")
	r.rep.Add(SecBaseline, "write path floor: inserted p99 at the latency phase's rate", "ms", fq99, nil,
		"the same runs: batch publish → the engine's insert of its last event returned (the ingest's batch size and wait, as the gateway's)")
	r.rep.Add(SecBaseline, "write path floor: CPU per 1,000 events at the latency phase's rate", "ms", floorCPU, nil,
		"the same runs: the floor process's CPU time (its publisher, embedded server and engine, every thread) from the first publish until the engine held the last event")
	r.rep.Add(SecLatency, "EmitStream batch ack p50", "ms", sa50, nil, load)
	r.rep.Add(SecLatency, "EmitStream batch ack p99", "ms", sa99, Below(50), "")
	r.rep.Add(SecLatency, "Emit (unary, 1 event) ack p50", "ms", ua50, nil, "one call every 50 ms alongside the load")
	r.rep.Add(SecLatency, "Emit (unary, 1 event) ack p99", "ms", ua99, Below(20), "")
	r.rep.Add(SecLatency, "emit→watch p50", "ms", w50, nil, fmt.Sprintf("%d watchers, one tenant each; from the eventTime stamped at send; ADDED delivered/created per run: %s", sc.Watchers, strings.Join(notes, ", ")))
	r.rep.Add(SecLatency, "emit→watch p99", "ms", w99, Below(50), "")
	r.rep.Add(SecLatency, "emit→watch p99 ÷ NATS fan-out p99", "ratio", ratio, nil, "")
	r.rep.Add(SecLatency, "EmitStream batch ack p99 ÷ floor", "ratio", saFloor, nil, "÷ write path floor: ack p99 at the same rate, same run")
	r.rep.Add(SecLatency, "Emit (unary) ack p99 ÷ floor", "ratio", uaFloor, nil, "")
	r.rep.Add(SecLatency, "emit→watch p99 ÷ floor", "ratio", wFloor, nil, "÷ write path floor: watch p99 at the same rate, same run")
	r.rep.Add(SecLatency, "emit→queryable p50", "ms", q50, nil, fmt.Sprintf("batch send → Query's resourceVersion covers the batch (polled every %v)", QueryablePoll))
	r.rep.Add(SecLatency, "emit→queryable p99", "ms", q99, Below(1000), "")
	r.rep.Add(SecLatency, "emit→queryable p99 ÷ floor", "ratio", qFloor, nil, "÷ write path floor: inserted p99 at the same rate, same run")
	r.rep.Add(SecLatency, "gateway CPU per 1,000 events: Go", "ms", cpuGo, nil,
		"user + system time of the gateway's Go threads over each run ÷ events offered (the watchers' deliveries included)")
	r.rep.Add(SecLatency, "gateway CPU per 1,000 events: engine", "ms", cpuEngine, nil,
		"the same for the embedded ClickHouse's threads (inserts, merges, materialized views)")
	if len(cpuGC) == len(cpuGo) {
		r.rep.Add(SecLatency, "gateway CPU per 1,000 events: Go collector", "ms", cpuGC, nil, collectorNote)
	}
	r.rep.Add(SecLatency, "gateway CPU per event ÷ floor's", "ratio", cpuOfFloor, nil,
		"the gateway's Go and engine CPU per event over the run ÷ the write path floor's at the same rate, same run")
	r.rep.Add(SecLatency, "machine CPU in use during the run", "cores", busyCores, nil,
		fmt.Sprintf("of %d: busy time of every process on the machine (/proc/stat) ÷ the run's wall time; the gateway with the bench's watchers and emitters", runtime.NumCPU()))
}

func (r *runner) storm(ctx context.Context, g *Gateway) {
	sc := r.cfg.Scale
	flush := config.Default().Intake.Series.FlushInterval
	var storms []*Storm
	for i := 0; i < sc.Runs; i++ {
		st, err := RunStorm(ctx, g, StormTenant(i), sc.StormSeries, sc.StormRepeats)
		if err != nil {
			if errors.Is(err, ErrNotBuilt) {
				r.rep.NotBuilt(SecStorm, "reduction (occurrences ÷ writes)", "×", AtLeast(1000), "")
			} else {
				r.rep.Failed(SecStorm, "reduction (occurrences ÷ writes)", "×", AtLeast(1000), err)
			}
			return
		}
		r.logf("storm run %d: %d occurrences at %.0f/s, outcomes %v", i+1, st.Emitted, st.Accept, st.Outcomes)
		storms = append(storms, st)
	}
	// Every count reaches the store with the next flush (at most
	// --series-flush-interval after the last occurrence): wait for it.
	exact := true
	for _, st := range storms {
		want := int64(st.Emitted)
		var got int64
		err := waitEvery(ctx, flush+time.Minute, time.Second, func() (bool, error) {
			_, n, err := StormCounts(ctx, g, st.Tenant)
			got = n
			return n >= want, err
		})
		if err != nil {
			exact = false
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("series storm %s: stored counts add up to %d of %d occurrences: %v", st.Tenant, got, want, err))
		}
	}
	last, _, err := g.StreamState(ctx, "")
	if err == nil {
		_, err = g.WaitQueryable(ctx, last, 2*time.Minute)
	}
	if err != nil {
		r.rep.Failed(SecStorm, "reduction (occurrences ÷ writes)", "×", AtLeast(1000), err)
		return
	}
	var occ, jsw, chRows, red, rate []float64
	for _, st := range storms {
		_, n, err := g.StreamState(ctx, "events.project."+st.Tenant+".>")
		if err != nil {
			r.rep.Failed(SecStorm, "reduction (occurrences ÷ writes)", "×", AtLeast(1000), err)
			return
		}
		// Ingest inserts each stream message once (acknowledged only after
		// ClickHouse committed it), and the floor now covers them all.
		occ = append(occ, float64(st.Emitted))
		jsw = append(jsw, float64(n))
		chRows = append(chRows, float64(n))
		red = append(red, float64(st.Emitted)/float64(max(n, 1)))
		rate = append(rate, st.Accept)
	}
	r.rep.Add(SecStorm, "occurrences per run", "events", occ, nil, fmt.Sprintf("%d series × %d occurrences on EmitStream, a tenant per run", sc.StormSeries, sc.StormRepeats))
	r.rep.Add(SecStorm, "occurrences accepted", "events/s", rate, nil, "")
	r.rep.Add(SecStorm, "JetStream writes (EVENTS messages)", "msgs", jsw, nil, "messages on the run's tenant subjects after the last flush")
	r.rep.Add(SecStorm, "ClickHouse rows", "rows", chRows, nil, "= the messages: ingest inserts each once and Query's resourceVersion covers them all")
	note := "stored series counts add up exactly to the occurrences"
	if !exact {
		note = "stored series counts did NOT add up (see notes)"
	}
	r.rep.Add(SecStorm, "reduction (occurrences ÷ writes)", "×", red, AtLeast(1000),
		note+"; the Finished write --series-finish-after (6 min) later adds one per series, not awaited")
}

// waitEvery is WaitFor with a fixed poll interval, for expensive conditions.
func waitEvery(ctx context.Context, timeout, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, ErrTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				m.MemoryMB = kb / 1024
			}
		}
		f.Close()
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

// spread is (highest − lowest) ÷ lowest of runs, in percent.
func spread(runs []float64) float64 {
	lo, hi := slices.Min(runs), slices.Max(runs)
	return 100 * (hi - lo) / max(lo, 1)
}
