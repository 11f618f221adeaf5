// Command bench measures eventgate against the raw limits of its own parts
// in one run and prints one table (see internal/bench and BENCHMARKS.md):
//
//	bench -scale full -gateway bin/gateway -json bench-results.json
//
// `bench child …` runs the steps that load the embedded ClickHouse engine
// in a process of their own (the runner calls it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/eventgate/eventgate/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "child" {
		err = child(ctx, os.Args[2:], os.Stdout)
	} else {
		err = run(ctx, os.Args[1:])
	}
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	scale := fs.String("scale", envOr("BENCH_SCALE", "full"), "full or small (BENCH_SCALE)")
	gw := fs.String("gateway", "bin/gateway", "gateway binary")
	work := fs.String("work-dir", "bench-data", "data directories and the gateway log (emptied first)")
	jsonOut := fs.String("json", "bench-results.json", "write the table as JSON here")
	mdOut := fs.String("md", "", "also write the table as Markdown here")
	lib := fs.String("chdb-lib", os.Getenv("EVENTGATE_CHDB_LIB"), "libchdb.so (default: the cache scripts/fetch-chdb.sh fills)")
	only := fs.String("only", "", "comma-separated sections to run besides the baselines: query, emit, latency, rules, storm, noisy (default all)")
	commit := fs.String("commit", "", "commit measured (default: git rev-parse HEAD, +dirty when the tree has changes)")
	rulesWindows := fs.Int("rules-windows", 0, "the rules section's windows with rules and with the control together (each between two without rules); 0: eight per run of the scale (24)")
	latRate := fs.Int("latency-rate", 0, "offer this many events/s in the latency phase instead of half the measured EmitStream rate, and skip the throughput phase unless emit is selected")
	runs := fs.Int("runs", 0, "runs of each figure instead of the scale's (3): more show whether a throughput figure keeps falling or settles")
	profile := fs.Bool("profile", false, "sample the gateway's CPU with perf during the emit and latency phases (work-dir/perf.data.*.txt), with pprof during the first rules runs (work-dir/cpu.*.pb.gz)")
	pgo := fs.String("pgo", "", "write the gateway's CPU profile over the write and latency phases here (pprof, merged), for a profile-guided build: `make pgo`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sc, ok := bench.Scales[*scale]
	if !ok {
		return fmt.Errorf("unknown scale %q (full or small)", *scale)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("own path: %w", err)
	}
	gwAbs, err := filepath.Abs(*gw)
	if err != nil {
		return fmt.Errorf("gateway path: %w", err)
	}
	if _, err := os.Stat(gwAbs); err != nil {
		return fmt.Errorf("gateway binary (make build): %w", err)
	}
	pgoAbs := *pgo
	if pgoAbs != "" {
		if pgoAbs, err = filepath.Abs(pgoAbs); err != nil {
			return fmt.Errorf("-pgo path: %w", err)
		}
	}
	if *runs < 0 {
		return fmt.Errorf("-runs %d: want 1 or more (0: the scale's)", *runs)
	}
	if *runs > 0 {
		sc.Runs = *runs
	}
	cfg := bench.Config{Scale: sc, GatewayBin: gwAbs, Self: self, WorkDir: *work, ChDBLib: *lib, Profile: *profile, PGO: pgoAbs, LatencyRate: *latRate, RulesWindows: *rulesWindows, Commit: *commit, Log: os.Stderr}
	if *only != "" {
		cfg.Only = map[string]bool{}
		for _, s := range strings.Split(*only, ",") {
			cfg.Only[strings.TrimSpace(s)] = true
		}
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if err := writeFile(*jsonOut, rep.WriteJSON); err != nil {
		return err
	}
	if *mdOut != "" {
		if err := writeFile(*mdOut, rep.WriteTable); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// child runs one engine step and writes its result as JSON to out.
func child(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("child: which step? gen-store, chdb-insert or pipeline-floor")
	}
	fs := flag.NewFlagSet("child "+args[0], flag.ContinueOnError)
	dir := fs.String("dir", "", "engine data directory")
	lib := fs.String("chdb-lib", os.Getenv("EVENTGATE_CHDB_LIB"), "libchdb.so")
	events := fs.Int("events", 10_000_000, "gen-store: events to generate")
	batches := fs.Int("batches", 10, "chdb-insert: batches per run")
	runs := fs.Int("runs", 3, "chdb-insert: runs")
	total := fs.Int("total", 200_000, "pipeline-floor: events to pass through")
	rate := fs.Int("rate", 0, "pipeline-floor: offer this many events/s for -duration and measure latencies (0: as fast as the parts go)")
	duration := fs.Duration("duration", 20*time.Second, "pipeline-floor: how long to offer -rate")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("child: -dir is required")
	}
	var res any
	switch args[0] {
	case "gen-store":
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		start := time.Now()
		info, err := bench.GenerateStore(ctx, *dir, *lib, *events, log)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "child gen-store: done in %v\n", time.Since(start).Round(time.Second))
		res = info
	case "chdb-insert":
		rates, err := bench.ClickHouseInsert(ctx, *dir, *lib, *batches, *runs)
		if err != nil {
			return err
		}
		res = rates
	case "pipeline-floor":
		if *rate > 0 {
			lat, err := bench.PipelineFloorPaced(ctx, *dir, *lib, *rate, *duration)
			if err != nil {
				return err
			}
			res = lat
			break
		}
		rate, err := bench.PipelineFloor(ctx, *dir, *lib, *total)
		if err != nil {
			return err
		}
		res = rate
	default:
		return fmt.Errorf("child: unknown step %q", args[0])
	}
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return fmt.Errorf("child: encode: %w", err)
	}
	return nil
}
