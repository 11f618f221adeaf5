package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// The dashboard benchmark store: the analytics store's events (time order,
// 3% series) with raw events and one large tenant, organization/big, that
// holds half of them beside 500 small ones. Its times end at generation; a kept store
// (EVENTGATE_TEST_CHDB_DIR) is reused.
//
//	EVENTGATE_BENCH_EVENTS=2000000 EVENTGATE_TEST_CHDB_DIR=/tmp/eg-dash go test -run '^$' -bench BenchmarkDashboard -benchtime 20x ./internal/clickhouse/
type dashStore struct {
	once    sync.Once
	err     error
	store   *Store
	n       int
	busy    int
	small   []query.TenantRef
	end     time.Time
	genTime time.Duration
	// rollupHours were rolled up in rollupTime when the bench opened.
	rollupHours int
	rollupTime  time.Duration
}

var (
	dbench = &dashStore{}
	// dbusy is the dashboard store after an hour of heavy ingest:
	// EVENTGATE_BENCH_BUSY_EVENTS (default 1,000,000) more events, of the
	// same shape and tenants, whose times fall in the last hour (what a
	// platform writing 300-3,000 events a second keeps in its newest hour).
	dbusy = &dashStore{busy: benchCount("EVENTGATE_BENCH_BUSY_EVENTS", 1_000_000)}
)

var bigTenant = query.TenantRef{Type: "organization", Name: "big"}

func setupDashboardBench(b *testing.B) { dbench.setup(b) }

func (d *dashStore) setup(b *testing.B) {
	d.once.Do(func() {
		var err error
		ctx := context.Background()
		n := benchEvents()
		cfg := DefaultConfig()
		cfg.Database = fmt.Sprintf("dashboard_bench_%d", n)
		if d.busy > 0 {
			cfg.Database = fmt.Sprintf("dashboard_busy_bench_%d_%d", n, d.busy)
		}
		cfg.RollupInterval = 0
		// As the gateway's: the slow reads logged with -v.
		if v := os.Getenv("EVENTGATE_CLICKHOUSE_SLOW_READ"); v != "" {
			if cfg.SlowRead, err = time.ParseDuration(v); err != nil {
				d.err = fmt.Errorf("EVENTGATE_CLICKHOUSE_SLOW_READ: %w", err)
				return
			}
		}
		s, err := OpenEngine(ctx, chtest.Engine(b), cfg, chtest.Logger(b))
		if err != nil {
			d.err = err
			return
		}
		d.store, d.n = s, n
		if err := s.t.exec(ctx, "SELECT n FROM "+s.ddl.table("bench_generated"), nil); err != nil {
			start := time.Now()
			for _, tbl := range []string{"events", "analytics_events", "analytics_series", "series_minute_totals", "event_minutes",
				"analytics_hours", "rollup_marks", "rollup_built"} {
				if err := s.t.exec(ctx, "TRUNCATE TABLE "+s.ddl.table(tbl), nil); err != nil {
					d.err = err
					return
				}
			}
			if err := generateAnalyticsData(ctx, s, n, benchShape{bigTenant: true, raw: true}); err != nil {
				d.err = err
				return
			}
			if d.busy > 0 {
				busy := benchShape{bigTenant: true, raw: true, span: time.Hour, first: n}
				if err := generateAnalyticsData(ctx, s, d.busy, busy); err != nil {
					d.err = err
					return
				}
			}
			d.genTime = time.Since(start)
		}
		waitMerges(ctx, s)
		// The hourly rollups of a generated or migrated store.
		start := time.Now()
		if n, err := s.RollUp(ctx); err != nil {
			d.err = err
			return
		} else if n > 0 {
			d.rollupHours, d.rollupTime = n, time.Since(start)
		}
		var endUS int64
		rs, err := s.t.query(ctx, "SELECT toInt64(toUnixTimestamp64Micro(max(event_time))) FROM "+s.analyticsEvents(), nil)
		if err != nil {
			d.err = err
			return
		}
		for rs.Next() {
			rs.Scan(&endUS)
		}
		rs.Close()
		d.end = time.UnixMicro(endUS)
		rs, err = s.t.query(ctx, "SELECT DISTINCT toString(tenant_type), toString(tenant_name) FROM "+s.analyticsEvents()+
			" WHERE tenant_name != 'big' LIMIT 100", nil)
		if err != nil {
			d.err = err
			return
		}
		for rs.Next() {
			var t query.TenantRef
			rs.Scan(&t.Type, &t.Name)
			d.small = append(d.small, t)
		}
		rs.Close()
	})
	if d.err != nil {
		b.Fatal(d.err)
	}
}

// BenchmarkDashboard measures the reads a dashboard makes first, on the
// dashboard store: the newest 100 events of the large tenant and of every
// tenant (plain, with a type or kind filter, in the last hour), each read
// from the events table alone (layout "events", the baseline) and with
// keys from analytics_events ("indexed"); and facets, top and histograms over 24 hours
// and 30 days for the large tenant and for every tenant, from the
// per-minute tables alone (layout "minutes", the baseline) and with the
// hourly rollups ("rollup").
func BenchmarkDashboard(b *testing.B) {
	dbench.setup(b)
	dbench.runNewest(b, []string{"events", "indexed"})
	dbench.runAnalytics(b)
}

// BenchmarkDashboardBusyHour measures the newest-100 reads of
// BenchmarkDashboard on the dashboard store after an hour of heavy
// ingest (dbusy): its newest hour holds EVENTGATE_BENCH_BUSY_EVENTS events
// over the same tenants, where the plain store's holds about 1/720 of its
// events. The events layout (keys from the events table alone) is the
// baseline.
//
//	EVENTGATE_BENCH_EVENTS=2000000 EVENTGATE_TEST_CHDB_DIR=/tmp/eg-dash go test -run '^$' -bench BenchmarkDashboardBusyHour -benchtime 20x ./internal/clickhouse/
func BenchmarkDashboardBusyHour(b *testing.B) {
	dbusy.setup(b)
	dbusy.runNewest(b, []string{"events", "indexed"})
	dbusy.runAnalytics(b)
}

// runNewest runs the newest-100 shapes of dashboardLists on d's store, in
// each layout.
func (d *dashStore) runNewest(b *testing.B, layouts []string) {
	s := d.store
	if d.genTime > 0 {
		b.Logf("generated %d+%d events in %v", d.n, d.busy, d.genTime.Round(time.Millisecond))
	}
	if d.rollupHours > 0 {
		b.Logf("rolled up %d hours in %v", d.rollupHours, d.rollupTime.Round(time.Millisecond))
	}
	logTables(b, s, "events", "analytics_events", "series_minute_totals", "event_minutes", "analytics_hours", "rollup_marks")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	// A first page is read at the store's ingest floor: every stored version
	// is at or below it.
	rv := uint64(d.n+d.busy)*3 + 3
	lists := dashboardLists(rng, d.end)
	for _, layout := range layouts {
		for _, l := range lists {
			b.Run("Newest100/"+l.name+"/"+layout, func(b *testing.B) {
				s.eventsOnly = layout == "events"
				defer func() { s.eventsOnly = false }()
				var lat chtest.Latencies
				for i := 0; i < b.N; i++ {
					q := query.List{Scope: l.scope, PageSize: 100}
					if l.f != nil {
						q.Filter = l.f()
					} else {
						q.Scope = query.Scope{Tenants: []query.TenantRef{d.small[rng.IntN(len(d.small))]}}
					}
					start := time.Now()
					p, err := s.Query(ctx, q, rv)
					lat = append(lat, time.Since(start))
					// A 1-hour window of a small store may hold fewer.
					if err != nil || len(p.Events) == 0 || (len(p.Events) < 100 && q.Filter.Since.IsZero()) {
						b.Fatalf("%d events, %v", len(p.Events), err)
					}
				}
				lat.Report(b)
			})
		}
	}
}

// dashboardList is one newest-100 shape of BenchmarkDashboard: a scope
// and a filter (nil: a random small tenant, no filter).
type dashboardList struct {
	name  string
	scope query.Scope
	f     func() query.Filter
}

// dashboardLists are the newest-100 shapes on a store whose events end
// at end.
func dashboardLists(rng *rand.Rand, end time.Time) []dashboardList {
	big := query.Scope{Tenants: []query.TenantRef{bigTenant}}
	return []dashboardList{
		{"big", big, func() query.Filter { return query.Filter{} }},
		{"all", all, func() query.Filter { return query.Filter{} }},
		{"all/warning", all, func() query.Filter { return query.Filter{Type: set("Warning")} }},
		{"all/pods", all, func() query.Filter { return query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod")}} }},
		{"all/reason", all, func() query.Filter { return query.Filter{Reason: set(fmt.Sprintf("Reason%d", rng.IntN(50)))} }},
		{"big/1h/warning", big, func() query.Filter {
			return query.Filter{Type: set("Warning"), Since: end.Add(-time.Hour - time.Duration(rng.IntN(600))*time.Second)}
		}},
		{"all/1h/warning", all, func() query.Filter {
			return query.Filter{Type: set("Warning"), Since: end.Add(-time.Hour - time.Duration(rng.IntN(600))*time.Second)}
		}},
		{"small", query.Scope{}, nil},
	}
}

// BenchmarkDashboardCold measures the first newest-100 listing of the
// dashboard store in a new process, one shape a process, on a store
// generated before (by BenchmarkDashboard; generated here otherwise, which
// warms it). Nothing else reads the store first: its end is read from the
// parts' metadata. The operating system's page cache is warm. Two kinds:
//
//   - <shape>/open: right after the store opened, while its prewarm
//     (prewarm.go) may still run;
//   - <shape>/prewarmed: once the prewarm has ended (about what a gateway
//     up for a second meets).
//
// One shape a process:
//
//	for s in big all all_warning all_pods all_reason big_1h_warning all_1h_warning; do
//	  EVENTGATE_BENCH_EVENTS=10000000 EVENTGATE_TEST_CHDB_DIR=/tmp/eg-dash10 go test -run '^$' \
//	    -bench "BenchmarkDashboardCold/^$s\$/^prewarmed\$" -benchtime 1x ./internal/clickhouse/
//	done
func BenchmarkDashboardCold(b *testing.B) {
	ctx := context.Background()
	s, end, opened := openColdDashboard(b)
	n := benchEvents()
	rv := uint64(n)*3 + 3
	rng := rand.New(rand.NewPCG(5, 6))
	for _, l := range dashboardLists(rng, end) {
		if l.f == nil {
			continue
		}
		// One level of names for the shape (a pattern's slashes separate
		// levels).
		b.Run(strings.ReplaceAll(l.name, "/", "_"), func(b *testing.B) {
			for _, kind := range []string{"open", "prewarmed"} {
				b.Run(kind, func(b *testing.B) {
					if kind == "prewarmed" {
						<-s.prewarmDone
						b.Logf("prewarmed %v after open", time.Since(opened).Round(time.Millisecond))
					}
					var lat chtest.Latencies
					for i := 0; i < b.N; i++ {
						q := query.List{Scope: l.scope, PageSize: 100, Filter: l.f()}
						start := time.Now()
						p, err := s.Query(ctx, q, rv)
						lat = append(lat, time.Since(start))
						if err != nil || len(p.Events) == 0 {
							b.Fatalf("%d events, %v", len(p.Events), err)
						}
					}
					b.ReportMetric(float64(lat[0])/float64(time.Millisecond), "first_ms")
					lat.Report(b)
				})
			}
		})
	}
}

// openColdDashboard opens the dashboard store without reading it: its
// end comes from the parts' metadata (a store not generated yet is
// generated, which warms it).
func openColdDashboard(b *testing.B) (*Store, time.Time, time.Time) {
	b.Helper()
	ctx := context.Background()
	n := benchEvents()
	cfg := DefaultConfig()
	cfg.Database = fmt.Sprintf("dashboard_bench_%d", n)
	cfg.RollupInterval = 0
	opened := time.Now()
	s, err := OpenEngine(ctx, chtest.Engine(b), cfg, chtest.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	p := newParams()
	rs, err := s.t.query(ctx, "SELECT toInt64(toUnixTimestamp(max(max_time))), toUInt64(count()) FROM system.parts "+
		"WHERE active AND database = "+p.str(cfg.Database)+" AND table = 'analytics_events'", p.m)
	if err != nil {
		b.Fatal(err)
	}
	var endS int64
	var parts uint64
	for rs.Next() {
		rs.Scan(&endS, &parts)
	}
	rs.Close()
	if parts == 0 {
		s.Close()
		setupDashboardBench(b)
		return dbench.store, dbench.end, opened
	}
	b.Cleanup(func() { s.Close() })
	// The parts' metadata holds whole seconds: a window's start moves by
	// less than a second.
	return s, time.Unix(endS+1, 0), opened
}

// BenchmarkDashboardAnalyticsCold measures the first analytics read of a
// new process, one a process, once the store's prewarm has ended: facets,
// top 10 reasons and the histogram by type, over 24 hours and 30 days, for
// the large tenant and every tenant, from the per-minute tables alone
// (minutes) or with the hourly rollups (rollup). One a process:
//
//	for q in Facets5 Top10Reasons HistogramByType; do for w in 24h 30d; do for sc in big all; do for l in minutes rollup; do
//	  EVENTGATE_BENCH_EVENTS=10000000 EVENTGATE_TEST_CHDB_DIR=/tmp/eg-dash10 go test -run '^$' \
//	    -bench "BenchmarkDashboardAnalyticsCold/^$q$/^$w$/^$sc$/^$l\$" -benchtime 1x ./internal/clickhouse/
//	done; done; done; done
func BenchmarkDashboardAnalyticsCold(b *testing.B) {
	ctx := context.Background()
	s, end, _ := openColdDashboard(b)
	<-s.prewarmDone
	scopes := map[string]query.Scope{"big": {Tenants: []query.TenantRef{bigTenant}}, "all": all}
	reads := []struct {
		name string
		f    func(query.Analytics) (int64, error)
	}{
		{"Facets5", func(aq query.Analytics) (int64, error) {
			f, err := s.Facets(ctx, query.FacetsRequest{Analytics: aq})
			return f.Total, err
		}},
		{"Top10Reasons", func(aq query.Analytics) (int64, error) {
			t, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: query.DimReason})
			return t.Total, err
		}},
		{"HistogramByType", func(aq query.Analytics) (int64, error) {
			h, err := s.Histogram(ctx, query.HistogramRequest{Analytics: aq, GroupBy: []string{query.DimType}})
			return h.Total, err
		}},
	}
	for _, r := range reads {
		b.Run(r.name, func(b *testing.B) {
			for _, w := range []struct {
				name string
				d    time.Duration
			}{{"24h", 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}} {
				b.Run(w.name, func(b *testing.B) {
					for _, scName := range []string{"big", "all"} {
						b.Run(scName, func(b *testing.B) {
							for _, layout := range []string{"minutes", "rollup"} {
								b.Run(layout, func(b *testing.B) {
									s.noRollup = layout == "minutes"
									defer func() { s.noRollup = false }()
									var lat chtest.Latencies
									for i := 0; i < b.N; i++ {
										aq := query.Analytics{Scope: scopes[scName], Filter: query.Filter{Since: end.Add(-w.d), Until: end}}
										start := time.Now()
										n, err := r.f(aq)
										lat = append(lat, time.Since(start))
										if err != nil || n == 0 {
											b.Fatalf("%d occurrences, %v", n, err)
										}
									}
									b.ReportMetric(float64(lat[0])/float64(time.Millisecond), "first_ms")
									lat.Report(b)
								})
							}
						})
					}
				})
			}
		})
	}
}

func (d *dashStore) runAnalytics(b *testing.B) {
	s := d.store
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	scopes := map[string]query.Scope{"big": {Tenants: []query.TenantRef{bigTenant}}, "all": all}
	for _, w := range []struct {
		name string
		d    time.Duration
	}{{"24h", 24 * time.Hour}, {"30d", 30 * 24 * time.Hour}} {
		for _, scName := range []string{"big", "all"} {
			sc := scopes[scName]
			q := func() query.Analytics {
				until := d.end.Add(-time.Duration(rng.IntN(600)) * time.Second)
				return query.Analytics{Scope: sc, Filter: query.Filter{Since: until.Add(-w.d), Until: until}}
			}
			run := func(name string, f func(query.Analytics) (int64, error)) {
				for _, layout := range []string{"minutes", "rollup"} {
					b.Run(name+"/"+w.name+"/"+scName+"/"+layout, func(b *testing.B) {
						s.noRollup = layout == "minutes"
						defer func() { s.noRollup = false }()
						var lat chtest.Latencies
						for i := 0; i < b.N; i++ {
							aq := q()
							start := time.Now()
							n, err := f(aq)
							lat = append(lat, time.Since(start))
							if err != nil || n == 0 {
								b.Fatalf("%d occurrences, %v", n, err)
							}
						}
						lat.Report(b)
					})
				}
			}
			run("Facets5", func(aq query.Analytics) (int64, error) {
				f, err := s.Facets(ctx, query.FacetsRequest{Analytics: aq})
				return f.Total, err
			})
			run("Top10Reasons", func(aq query.Analytics) (int64, error) {
				t, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: query.DimReason})
				return t.Total, err
			})
			run("Top10WarningReasons", func(aq query.Analytics) (int64, error) {
				aq.Filter.Type = set("Warning")
				t, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: query.DimReason})
				return t.Total, err
			})
			run("HistogramByType", func(aq query.Analytics) (int64, error) {
				h, err := s.Histogram(ctx, query.HistogramRequest{Analytics: aq, GroupBy: []string{query.DimType}})
				return h.Total, err
			})
		}
	}
}
