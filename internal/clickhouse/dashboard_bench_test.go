package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
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
var dbench struct {
	once    sync.Once
	err     error
	store   *Store
	n       int
	small   []query.TenantRef
	end     time.Time
	genTime time.Duration
	// rollupHours were rolled up in rollupTime when the bench opened.
	rollupHours int
	rollupTime  time.Duration
}

var bigTenant = query.TenantRef{Type: "organization", Name: "big"}

func setupDashboardBench(b *testing.B) {
	dbench.once.Do(func() {
		ctx := context.Background()
		n := benchEvents()
		cfg := DefaultConfig()
		cfg.Database = fmt.Sprintf("dashboard_bench_%d", n)
		cfg.RollupInterval = 0
		s, err := OpenEngine(ctx, chtest.Engine(b), cfg, chtest.Logger(b))
		if err != nil {
			dbench.err = err
			return
		}
		dbench.store, dbench.n = s, n
		if err := s.t.exec(ctx, "SELECT n FROM "+s.ddl.table("bench_generated"), nil); err != nil {
			start := time.Now()
			for _, tbl := range []string{"events", "analytics_events", "analytics_series", "series_minute_totals", "event_minutes",
				"analytics_hours", "rollup_marks", "rollup_built"} {
				if err := s.t.exec(ctx, "TRUNCATE TABLE "+s.ddl.table(tbl), nil); err != nil {
					dbench.err = err
					return
				}
			}
			if err := generateAnalyticsData(ctx, s, n, benchShape{bigTenant: true, raw: true}); err != nil {
				dbench.err = err
				return
			}
			dbench.genTime = time.Since(start)
		}
		waitMerges(ctx, s)
		// The hourly rollups of a generated or migrated store.
		start := time.Now()
		if n, err := s.RollUp(ctx); err != nil {
			dbench.err = err
			return
		} else if n > 0 {
			dbench.rollupHours, dbench.rollupTime = n, time.Since(start)
		}
		var endUS int64
		rs, err := s.t.query(ctx, "SELECT toInt64(toUnixTimestamp64Micro(max(event_time))) FROM "+s.analyticsEvents(), nil)
		if err != nil {
			dbench.err = err
			return
		}
		for rs.Next() {
			rs.Scan(&endUS)
		}
		rs.Close()
		dbench.end = time.UnixMicro(endUS)
		rs, err = s.t.query(ctx, "SELECT DISTINCT toString(tenant_type), toString(tenant_name) FROM "+s.analyticsEvents()+
			" WHERE tenant_name != 'big' LIMIT 100", nil)
		if err != nil {
			dbench.err = err
			return
		}
		for rs.Next() {
			var t query.TenantRef
			rs.Scan(&t.Type, &t.Name)
			dbench.small = append(dbench.small, t)
		}
		rs.Close()
	})
	if dbench.err != nil {
		b.Fatal(dbench.err)
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
	setupDashboardBench(b)
	s := dbench.store
	if dbench.genTime > 0 {
		b.Logf("generated %d events in %v", dbench.n, dbench.genTime.Round(time.Millisecond))
	}
	if dbench.rollupHours > 0 {
		b.Logf("rolled up %d hours in %v", dbench.rollupHours, dbench.rollupTime.Round(time.Millisecond))
	}
	logTables(b, s, "events", "analytics_events", "series_minute_totals", "event_minutes", "analytics_hours", "rollup_marks")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	// A first page is read at the store's ingest floor: every stored version
	// is at or below it.
	rv := uint64(dbench.n)*3 + 3
	big := query.Scope{Tenants: []query.TenantRef{bigTenant}}
	lists := []struct {
		name  string
		scope query.Scope
		f     func() query.Filter
	}{
		{"big", big, func() query.Filter { return query.Filter{} }},
		{"all", all, func() query.Filter { return query.Filter{} }},
		{"all/warning", all, func() query.Filter { return query.Filter{Type: set("Warning")} }},
		{"all/pods", all, func() query.Filter { return query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod")}} }},
		{"all/reason", all, func() query.Filter { return query.Filter{Reason: set(fmt.Sprintf("Reason%d", rng.IntN(50)))} }},
		{"big/1h/warning", big, func() query.Filter {
			return query.Filter{Type: set("Warning"), Since: dbench.end.Add(-time.Hour - time.Duration(rng.IntN(600))*time.Second)}
		}},
		{"all/1h/warning", all, func() query.Filter {
			return query.Filter{Type: set("Warning"), Since: dbench.end.Add(-time.Hour - time.Duration(rng.IntN(600))*time.Second)}
		}},
		{"small", query.Scope{}, nil},
	}
	for _, layout := range []string{"events", "indexed"} {
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
						q.Scope = query.Scope{Tenants: []query.TenantRef{dbench.small[rng.IntN(len(dbench.small))]}}
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
	runDashboardAnalytics(b, s)
}

func runDashboardAnalytics(b *testing.B, s *Store) {
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
				until := dbench.end.Add(-time.Duration(rng.IntN(600)) * time.Second)
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
