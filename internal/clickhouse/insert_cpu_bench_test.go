package clickhouse

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
)

// BenchmarkInsertCPU measures what the ingest's inserts cost the process
// (the embedded engine's threads and the Go side together: getrusage) per
// 1,000 rows, paced as the ingest inserts at the bench's latency rate: a
// batch of insertCPUBatch rows (EVENTGATE_BENCH_INSERT_ROWS: another
// size) every DefaultBatchWait, for
// EVENTGATE_BENCH_SECONDS (default 20), merges included as they happen.
// Each sub-benchmark starts on a fresh database and changes one part of the
// schema first, so that the difference with "as-is" is that part's share:
// the materialized views (analytics and rollup marks), the three of them
// that copy only series versions, and the skip indexes of the events
// table; merge-selector-base-5 puts the engine's default
// merge fan-in back, events-merge-selector-base-10 sets migration 9's on
// events too. merge-ms/1k-rows is the engine's merge threads' part,
// active-parts what the tables hold at the end. -benchtime 1x.
//
//	go test -run '^$' -bench BenchmarkInsertCPU -benchtime 1x ./internal/clickhouse/
func BenchmarkInsertCPU(b *testing.B) {
	views := []string{"analytics_events_mv", "analytics_series_mv", "series_minute_totals_mv", "event_minutes_mv", "rollup_marks_mv"}
	indexes := []string{"uid_bf", "name_bf", "related_name_bf", "event_time_mm"}
	for _, v := range []struct {
		name  string
		alter func(db string) []string
	}{
		{"as-is", func(string) []string { return nil }},
		{"without-views", func(db string) (qs []string) {
			for _, v := range views {
				qs = append(qs, "DROP VIEW "+db+"."+quoteIdent(v))
			}
			return qs
		}},
		// The three views that copy only series versions (a batch of
		// new events gives them no rows; they are planned and run on
		// every insert all the same).
		{"without-series-views", func(db string) (qs []string) {
			for _, v := range []string{"analytics_series_mv", "series_minute_totals_mv", "event_minutes_mv"} {
				qs = append(qs, "DROP VIEW "+db+"."+quoteIdent(v))
			}
			return qs
		}},
		{"without-skip-indexes", func(db string) (qs []string) {
			for _, ix := range indexes {
				qs = append(qs, "ALTER TABLE "+db+".events DROP INDEX "+ix)
			}
			return qs
		}},
		// The engine's default merge fan-in, against migration 9's
		// (mergeFanInSetting on mergeFanInTables), and that fan-in on
		// events as well.
		{"merge-selector-base-5", func(db string) (qs []string) {
			for _, t := range mergeFanInTables {
				qs = append(qs, "ALTER TABLE "+db+"."+quoteIdent(t)+" MODIFY SETTING merge_selector_base = 5")
			}
			return qs
		}},
		{"events-merge-selector-base-10", func(db string) []string {
			return []string{"ALTER TABLE " + db + ".events MODIFY SETTING " + mergeFanInSetting}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Database = chtest.Database(b)
			s := openStore(b, chtest.Transports[0], cfg)
			ctx := context.Background()
			defer func() {
				s.Close()
				chtest.Engine(b).Exec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
			}()
			for _, q := range v.alter(quoteIdent(cfg.Database)) {
				if err := s.t.exec(ctx, q, nil); err != nil {
					b.Fatalf("%s: %v", q, err)
				}
			}
			seconds := benchCount("EVENTGATE_BENCH_SECONDS", 20)
			batch := benchCount("EVENTGATE_BENCH_INSERT_ROWS", insertCPUBatch)
			per := int(time.Second / DefaultBatchWait)
			rows := distinctRows(b, seconds*per*batch)
			b.ResetTimer()
			for range b.N {
				cpu0, merge0 := processCPU(), mergeCPU()
				next := time.Now()
				for start := 0; start < len(rows); start += batch {
					time.Sleep(time.Until(next))
					next = next.Add(DefaultBatchWait)
					if err := s.Insert(ctx, rows[start:start+batch]); err != nil {
						b.Fatal(err)
					}
				}
				k := float64(len(rows)) / 1000
				cpu, merge := processCPU()-cpu0, mergeCPU()-merge0
				b.ReportMetric(float64(cpu)/1e6/k, "cpu-ms/1k-rows")
				// The engine's merges run on threads of their own; the
				// statements on the calling (Go) thread and the engine's
				// query pools.
				b.ReportMetric(float64(merge)/1e6/k, "merge-ms/1k-rows")
				b.ReportMetric(float64(cpu-merge)/1e6/k, "other-ms/1k-rows")
				// What the merges leave for reads: the active parts of
				// the tables the inserts write, at the end.
				if parts, err := s.ActiveParts(ctx); err == nil {
					n := 0
					for _, t := range writeMemoryTables {
						n += parts[t]
					}
					b.ReportMetric(float64(n), "active-parts")
				}
			}
		})
	}
}

// insertCPUBatch is what the ingest inserts every DefaultBatchWait at the
// full-scale bench's latency rate (9,200 events/s).
const insertCPUBatch = 4600

// mergeCPU is the CPU time the engine's merge threads (MergeMutate) have
// used so far, from /proc (a thread that ended meanwhile is not counted).
func mergeCPU() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var ticks int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || !strings.HasPrefix(s[open+1:end], "MergeMutate") {
			continue
		}
		if f := strings.Fields(s[end+1:]); len(f) >= 13 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			sy, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + sy
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// processCPU is the process's user and system CPU time so far, every
// thread.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// distinctRows are n rows of distinct realistic events over 1,000 tenants,
// stored as new (no series), as the ingest inserts them.
func distinctRows(b testing.TB, n int) []Row {
	rows := make([]Row, n)
	now := time.Now()
	for i := range rows {
		ev := chtest.RealisticEvent(i, 1000, now)
		ev.Series = nil
		raw, err := event.Marshal(ev)
		if err != nil {
			b.Fatal(err)
		}
		rows[i] = Row{Seq: uint64(i + 1), Subject: event.SubjectOf(ev), Event: ev, StoredAt: now, Raw: raw, WriteReason: "created"}
	}
	return rows
}
