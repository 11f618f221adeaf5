package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// The analytics benchmark store: EVENTGATE_BENCH_EVENTS events (default
// 10,000,000) in a database of its own, with the store benchmark's
// cardinalities (1,000 tenants, 100,000 objects of 20 kinds in 10
// namespaces per kind, 50 reasons, 200 reporting instances, 30 days of
// event times ending at generation), of which 3% are intake series: besides
// their first write (a singleton), two series versions (counts 2 and 2+2k,
// k = 1..20, the last one Finished) whose per-minute records spread the
// occurrences over the minutes after the first one — 10.6 million stored
// versions and about 6 million minute rows. It is written as ingest writes
// it: in time order, in INSERTs of 100,000 events through the analytics
// views, then left to merge (the steady state).
//
//	EVENTGATE_TEST_CHDB_DIR=/tmp/eg-bench go test -run '^$' -bench BenchmarkAnalytics -benchtime 100x -timeout 60m ./internal/clickhouse/
//
// (the directory keeps the generated store for later runs).
var abench struct {
	once    sync.Once
	err     error
	store   *Store
	n       int
	tenants []query.TenantRef
	end     time.Time // the newest eventTime
	genTime time.Duration
}

const benchSeriesPercent = 3

// benchShape varies the generated store.
type benchShape struct {
	// bigTenant puts half of the objects (and events) in one tenant,
	// organization/big.
	bigTenant bool
	// raw writes the protobuf event, so that Query can list the store, and
	// a metadata key (team, 50 values).
	raw bool
	// span is how far back the event times reach from generation (default
	// 30 days).
	span time.Duration
	// first numbers the first event (default 0): events numbered apart
	// have distinct uids and sequences.
	first int
}

// generateAnalyticsData writes n events (and their series versions) in
// time order.
func generateAnalyticsData(ctx context.Context, s *Store, n int, shape benchShape) error {
	bigSQL := "0"
	if shape.bigTenant {
		bigSQL = "obj % 2 = 0"
	}
	if shape.span <= 0 {
		shape.span = 30 * 24 * time.Hour
	}
	span := int64(shape.span / time.Microsecond)
	step := max(span/int64(n), 1) // microseconds between events
	start := time.Now().Add(-shape.span).UnixMicro() - int64(shape.first)*step
	with := []string{
		"number AS n",
		"n % 100000 AS obj",
		"obj % 1000 AS tenant",
		"cityHash64(n, 'series') % 100 < " + strconv.Itoa(benchSeriesPercent) + " AS is_series",
		"if(tenant % 10 = 0 OR " + bigSQL + ", 'organization', 'project') AS tt",
		"if(" + bigSQL + ", 'big', concat('tenant-', toString(tenant))) AS tn",
		benchKindSQL + "[intHash32(obj) % 20 + 1] AS kind",
		"concat('ns-', toString(intHash32(obj) % 200 % 10)) AS ns",
		"concat(lower(kind), '-', toString(obj)) AS rname",
		fmt.Sprintf("fromUnixTimestamp64Micro(toInt64(%d + n * %d + cityHash64(n) %% %d), 'UTC') AS et", start, step, step),
		"1 + cityHash64(n) % 20 AS k",
		"intDiv(toUnixTimestamp(et), 60) * 60 AS m0",
		"lower(toString(reinterpretAsUUID(sipHash128(n)))) AS u",
		"concat(rname, '.', toString(n)) AS ename",
		"concat('Reason', toString(cityHash64(n, 7) % 50)) AS reason",
		"if(n % 7 = 0, 'Warning', 'Normal') AS typ",
		"'Back-off restarting failed container' AS note",
		"'v1' AS apiv",
		"concat('example.com/controller-', toString(intHash32(obj) % 20)) AS rc",
		"concat('controller-', toString(n % 200)) AS ri",
		"toUnixTimestamp64Micro(et) AS et_us",
	}
	values := map[string]string{
		"tenant_type": "tt", "tenant_name": "tn", "regarding_kind": "kind", "regarding_namespace": "ns",
		"regarding_name": "rname", "event_time": "et", "uid": "u",
		"seq": "n * 3 + v + 1", "name": "ename", "namespace": "ns",
		"type": "typ", "reason": "reason",
		"action": "'Restart'", "note": "note", "regarding_api_version": "apiv",
		"reporting_controller": "rc",
		"reporting_instance":   "ri",
		"labels":               "map('app', concat('app-', toString(obj % 1000)))",
		"subject":              "concat('events.', tt, '.', tn, '.core_', kind, '.', ns, '.', rname)",
		"stored_at":            "et", "ttl_seconds": strconv.Itoa(int(ttlSeconds(DefaultTTL))),
		"series_count":         "toInt32(multiIf(v = 0, 0, v = 1, 2, 2 + 2 * k))",
		"series_last_observed": "if(v = 0, toDateTime64(0, 6, 'UTC'), et + toIntervalMinute(if(v = 1, 1, 1 + 2 * k)))",
		"series_state":         "multiIf(v = 0, '', v = 1, 'Ongoing', 'Finished')",
		"write_reason":         "['created', 'started', 'finished'][v + 1]",
		"minutes": "multiIf(v = 0, [toDateTime(m0, 'UTC')], v = 1, [toDateTime(m0 + 60, 'UTC')], " +
			"arrayMap(j -> toDateTime(m0 + 60 * (2 + j), 'UTC'), range(2 * k - 1)))",
		"minute_counts": "if(v < 2, [toUInt32(1)], arrayWithConstant(2 * k - 1, toUInt32(1)))",
	}
	if shape.raw {
		values["raw"] = benchRawSQL()
		values["metadata"] = "map('team', concat('team-', toString(obj % 50)))"
	}
	if err := insertGenerated(ctx, s, with, values, shape.first, shape.first+n, 100_000, " ARRAY JOIN if(is_series, [0, 1, 2], [0]) AS v"); err != nil {
		return err
	}
	return s.t.exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.ddl.table("bench_generated")+" ENGINE = MergeTree ORDER BY n AS SELECT toUInt64("+strconv.Itoa(n)+") AS n", nil)
}

// waitMerges waits until no merge runs in the store's database (at most 10
// minutes).
func waitMerges(ctx context.Context, s *Store) {
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		p := newParams()
		rs, err := s.t.query(ctx, "SELECT toUInt64(count()) FROM system.merges WHERE database = "+p.str(s.cfg.Database), p.m)
		if err != nil {
			return
		}
		var merging uint64
		for rs.Next() {
			rs.Scan(&merging)
		}
		rs.Close()
		if merging == 0 {
			return
		}
	}
}

func setupAnalyticsBench(b *testing.B) {
	abench.once.Do(func() {
		ctx := context.Background()
		n := benchEvents()
		cfg := DefaultConfig()
		cfg.Database = fmt.Sprintf("analytics_bench_%d", n)
		s, err := OpenEngine(ctx, chtest.Engine(b), cfg, chtest.Logger(b))
		if err != nil {
			abench.err = err
			return
		}
		abench.store, abench.n = s, n
		if err := s.t.exec(ctx, "SELECT n FROM "+s.ddl.table("bench_generated"), nil); err != nil {
			start := time.Now()
			for _, tbl := range []string{"events", "analytics_events", "series_minute_totals", "event_minutes"} {
				if err := s.t.exec(ctx, "TRUNCATE TABLE "+s.ddl.table(tbl), nil); err != nil {
					abench.err = err
					return
				}
			}
			if err := generateAnalyticsData(ctx, s, n, benchShape{}); err != nil {
				abench.err = err
				return
			}
			abench.genTime = time.Since(start)
		}
		waitMerges(ctx, s)
		var endUS int64
		rs, err := s.t.query(ctx, "SELECT toInt64(toUnixTimestamp64Micro(max(event_time))) FROM "+s.analyticsEvents(), nil)
		if err != nil {
			abench.err = err
			return
		}
		for rs.Next() {
			rs.Scan(&endUS)
		}
		rs.Close()
		abench.end = time.UnixMicro(endUS)
		rs, err = s.t.query(ctx, "SELECT DISTINCT toString(tenant_type), toString(tenant_name) FROM "+s.analyticsEvents()+" LIMIT 200", nil)
		if err != nil {
			abench.err = err
			return
		}
		for rs.Next() {
			var t query.TenantRef
			rs.Scan(&t.Type, &t.Name)
			abench.tenants = append(abench.tenants, t)
		}
		rs.Close()
		if len(abench.tenants) == 0 {
			abench.err = fmt.Errorf("no tenants")
		}
	})
	if abench.err != nil {
		b.Fatal(abench.err)
	}
}

// BenchmarkAnalytics measures, on the analytics benchmark store, windows
// ending at the newest events: Histogram over 24 h grouped by reason (auto
// bucket: 15 minutes), Top-10 reasons (which also reads the previous 24 h),
// Facets over 5 dimensions and Series, for one tenant (another each
// iteration) and for a platform caller (every tenant); and the same over 7
// days for every tenant.
func BenchmarkAnalytics(b *testing.B) {
	setupAnalyticsBench(b)
	s := abench.store
	if abench.genTime > 0 {
		b.Logf("generated %d events (and their series versions) in %v", abench.n, abench.genTime.Round(time.Millisecond))
	}
	logTables(b, s, "events", "analytics_events", "series_minute_totals", "event_minutes")
	runAnalyticsBench(b, s, abench.end)
}

// BenchmarkAnalyticsRecent is BenchmarkAnalytics for every tenant after the
// newest 2 hours were inserted again as 24 small parts: redelivered copies
// in parts that overlap, as the hours still being ingested are, which FINAL
// must merge. (The copies are merged away in the background afterwards.)
func BenchmarkAnalyticsRecent(b *testing.B) {
	setupAnalyticsBench(b)
	s := abench.store
	if err := reinsertRecent(context.Background(), s, abench.end); err != nil {
		b.Fatal(err)
	}
	logTables(b, s, "events", "analytics_events", "series_minute_totals", "event_minutes")
	runAnalyticsBench(b, s, abench.end)
}

// reinsertRecent inserts the newest 2 hours of events again, as 24 small
// INSERTs.
func reinsertRecent(ctx context.Context, s *Store, end time.Time) error {
	for i := 0; i < 24; i++ {
		lo := end.Add(-2*time.Hour + time.Duration(i)*5*time.Minute)
		p := newParams()
		sql := "INSERT INTO " + s.events() + " SELECT * FROM " + s.events() +
			" WHERE event_time >= " + p.micros(lo.UnixMicro()) + " AND event_time < " + p.micros(lo.Add(5*time.Minute).UnixMicro()) +
			" SETTINGS insert_deduplicate = 0"
		if err := s.t.exec(ctx, sql, p.m); err != nil {
			return err
		}
	}
	return nil
}

func runAnalyticsBench(b *testing.B, s *Store, end time.Time) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	scopes := []struct {
		name  string
		scope func() query.Scope
	}{
		{"tenant", func() query.Scope {
			return query.Scope{Tenants: []query.TenantRef{abench.tenants[rng.IntN(len(abench.tenants))]}}
		}},
		{"all", func() query.Scope { return query.Scope{All: true} }},
	}
	windows := []struct {
		name string
		d    time.Duration
	}{{"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}
	for _, w := range windows {
		for _, sc := range scopes {
			if w.name != "24h" && sc.name == "tenant" {
				continue
			}
			q := func() query.Analytics {
				// Windows end at the newest events, at a fresh instant
				// each time, as a dashboard's "last 24 hours".
				until := end.Add(-time.Duration(rng.IntN(600)) * time.Second)
				return query.Analytics{Scope: sc.scope(), Filter: query.Filter{Since: until.Add(-w.d), Until: until}}
			}
			run := func(name string, f func(query.Analytics) (int64, error)) {
				b.Run(name+"/"+w.name+"/"+sc.name, func(b *testing.B) {
					var lat chtest.Latencies
					var total int64
					for i := 0; i < b.N; i++ {
						aq := q()
						start := time.Now()
						n, err := f(aq)
						lat = append(lat, time.Since(start))
						if err != nil {
							b.Fatal(err)
						}
						total += n
					}
					if total == 0 {
						b.Fatal("no occurrences counted")
					}
					lat.Report(b)
				})
			}
			run("HistogramByReason", func(aq query.Analytics) (int64, error) {
				h, err := s.Histogram(ctx, query.HistogramRequest{Analytics: aq, GroupBy: []string{query.DimReason}})
				return h.Total, err
			})
			run("Top10Reasons", func(aq query.Analytics) (int64, error) {
				t, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: query.DimReason, Limit: 10})
				return t.Total, err
			})
			run("Facets5", func(aq query.Analytics) (int64, error) {
				f, err := s.Facets(ctx, query.FacetsRequest{Analytics: aq})
				return f.Total, err
			})
			run("Series", func(aq query.Analytics) (int64, error) {
				l, err := s.Series(ctx, query.SeriesRequest{Analytics: aq})
				return int64(l.Total), err
			})
		}
	}
}
