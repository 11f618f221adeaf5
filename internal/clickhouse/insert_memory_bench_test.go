package clickhouse

import (
	"context"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

// BenchmarkInsertMemory measures the engine's memory while the ingest's
// inserts and the merges they cause run: batches of the ingest's batch size
// (EVENTGATE_BENCH_INSERT_ROWS, default 20,000; EVENTGATE_BENCH_INSERT_BATCHES
// of them, default 30, 200 ms apart), then until no merge has run for a
// second. "as-migrated" is the store as its migrations leave it;
// "engine-defaults" resets writeMemorySettings to the engine's defaults
// first, so the difference is theirs. Reported: the engine's memory tracker
// (MemoryTracking, every 50 ms) at its highest and median, the process's
// resident memory outside Go's runtime (every 10 ms) at its highest and
// median, the process's CPU per 1,000 rows (of which the merges'), and the
// bytes on disk per row. The engine's allocator keeps freed pages for a
// while, so for the resident figures run each variant in a process of its
// own:
//
//	go test -run '^$' -bench 'BenchmarkInsertMemory/as-migrated$' -benchtime 1x ./internal/clickhouse/
//	go test -run '^$' -bench 'BenchmarkInsertMemory/engine-defaults$' -benchtime 1x ./internal/clickhouse/
func BenchmarkInsertMemory(b *testing.B) {
	for _, v := range []struct {
		name  string
		reset bool
	}{{"as-migrated", false}, {"engine-defaults", true}} {
		b.Run(v.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Database = chtest.Database(b)
			s := openStore(b, chtest.Transports[0], cfg)
			ctx := context.Background()
			eng := chtest.Engine(b)
			defer func() {
				s.Close()
				eng.Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
			}()
			if v.reset {
				for _, t := range writeMemoryTables {
					q := "ALTER TABLE " + s.ddl.table(t) + " RESET SETTING vertical_merge_algorithm_min_rows_to_activate"
					if err := s.t.exec(ctx, q, nil); err != nil {
						b.Fatalf("%s: %v", q, err)
					}
				}
			}
			batches := benchCount("EVENTGATE_BENCH_INSERT_BATCHES", 30)
			batch := benchCount("EVENTGATE_BENCH_INSERT_ROWS", 20_000)
			rows := distinctRows(b, batches*batch)
			b.ResetTimer()
			for range b.N {
				m := startMemorySampler(ctx, b)
				cpu0, merge0 := processCPU(), mergeCPU()
				for start := 0; start < len(rows); start += batch {
					if err := s.Insert(ctx, rows[start:start+batch]); err != nil {
						b.Fatal(err)
					}
					time.Sleep(200 * time.Millisecond) // the ingest's pace, not a wait for an outcome
				}
				waitMergesQuiet(ctx, b, cfg.Database)
				cpu, merge := processCPU()-cpu0, mergeCPU()-merge0
				outside, tracker := m.stop()
				k := float64(len(rows)) / 1000
				b.ReportMetric(float64(cpu)/1e6/k, "cpu-ms/1k-rows")
				b.ReportMetric(float64(merge)/1e6/k, "merge-ms/1k-rows")
				b.ReportMetric(slices.Max(tracker), "tracker-max-MiB")
				b.ReportMetric(median(tracker), "tracker-p50-MiB")
				b.ReportMetric(slices.Max(outside), "outside-go-max-MiB")
				b.ReportMetric(median(outside), "outside-go-p50-MiB")
				out, err := eng.Query(ctx, "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = '"+cfg.Database+"' AND table IN ('"+strings.Join(writeMemoryTables, "','")+"')", "TSV")
				if err != nil {
					b.Fatal(err)
				}
				bytes, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
				b.ReportMetric(bytes/float64(len(rows)), "disk-B/row")
			}
		})
	}
}

// memorySampler reads the process's resident memory outside Go's runtime
// and the engine's memory tracker until stopped.
type memorySampler struct {
	stopc            chan struct{}
	wg               sync.WaitGroup
	mu               sync.Mutex
	outside, tracker []float64 // MiB
}

func startMemorySampler(ctx context.Context, b *testing.B) *memorySampler {
	m := &memorySampler{stopc: make(chan struct{})}
	eng := chtest.Engine(b)
	every := func(d time.Duration, read func() (float64, bool), into *[]float64) {
		defer m.wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			if v, ok := read(); ok {
				m.mu.Lock()
				*into = append(*into, v)
				m.mu.Unlock()
			}
			select {
			case <-m.stopc:
				return
			case <-t.C:
			}
		}
	}
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	m.wg.Add(2)
	go every(10*time.Millisecond, func() (float64, bool) {
		rss, err := residentSet()
		if err != nil {
			return 0, false
		}
		metrics.Read(samples)
		goHeld := int64(samples[0].Value.Uint64() - samples[1].Value.Uint64())
		return float64(rss-goHeld) / (1 << 20), true
	}, &m.outside)
	go every(50*time.Millisecond, func() (float64, bool) {
		out, err := eng.Query(ctx, "SELECT value FROM system.metrics WHERE metric = 'MemoryTracking'", "TSV")
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		return v / (1 << 20), err == nil
	}, &m.tracker)
	return m
}

func (m *memorySampler) stop() (outside, tracker []float64) {
	close(m.stopc)
	m.wg.Wait()
	return m.outside, m.tracker
}

// waitMergesQuiet returns once no merge of db has run for a second.
func waitMergesQuiet(ctx context.Context, b *testing.B, db string) {
	quiet := time.Time{}
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := chtest.Engine(b).Query(ctx, "SELECT count() FROM system.merges WHERE database = '"+db+"'", "TSV")
		if err != nil {
			b.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != "0" {
			quiet = time.Time{}
			continue
		}
		if quiet.IsZero() {
			quiet = time.Now()
		} else if time.Since(quiet) >= time.Second {
			return
		}
	}
	b.Fatal("merges still running after 5 minutes")
}

// residentSet is the process's resident set (/proc/self/statm).
func residentSet() (int64, error) {
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(raw))
	if len(f) < 2 {
		return 0, os.ErrInvalid
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize()), err
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
