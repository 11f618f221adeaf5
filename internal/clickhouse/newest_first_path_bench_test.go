package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// BenchmarkNewestFirstPath measures both paths of a newest-first listing
// (list.go: listKeys) on the dashboard store, for scopes of growing size:
// the events table alone ("events") and keys from analytics_events
// ("index"), and what the listing does by default ("chosen"). Each scope
// reports the engine's estimate of the rows the events table would read
// (est_rows, what the probe compares with probeRows), so the runs show
// where the index starts to pay: the threshold.
//
//	EVENTGATE_BENCH_EVENTS=10000000 EVENTGATE_TEST_CHDB_DIR=/tmp/eg-dash10 go test -run '^$' \
//	  -bench BenchmarkNewestFirstPath -benchtime 20x ./internal/clickhouse/
func BenchmarkNewestFirstPath(b *testing.B) {
	dbench.setup(b)
	d := dbench
	s := d.store
	ctx := context.Background()
	rv := uint64(d.n+d.busy)*3 + 3
	type shape struct {
		name  string
		scope query.Scope
		f     func() query.Filter
	}
	var shapes []shape
	for _, k := range []int{1, 5, 20, 50, 100} {
		if k > len(d.small) {
			break
		}
		sc := query.Scope{Tenants: d.small[:k]}
		shapes = append(shapes,
			// The gateway's default window is 7 days.
			shape{fmt.Sprintf("small-%d", k), sc, func() query.Filter { return query.Filter{Since: d.end.Add(-7 * 24 * time.Hour)} }},
			shape{fmt.Sprintf("small-%d/7d/warning", k), sc, func() query.Filter {
				return query.Filter{Type: set("Warning"), Since: d.end.Add(-7 * 24 * time.Hour)}
			}},
		)
	}
	big := query.Scope{Tenants: []query.TenantRef{bigTenant}}
	for _, h := range []int{1, 6, 24} {
		since := d.end.Add(-time.Duration(h) * time.Hour)
		shapes = append(shapes, shape{fmt.Sprintf("big/%dh/warning", h), big, func() query.Filter {
			return query.Filter{Type: set("Warning"), Since: since}
		}})
	}
	for _, sh := range shapes {
		q := query.List{Scope: sh.scope, PageSize: 100, Filter: sh.f()}
		sql, params := s.querySQL(q, rv, nil, 100)
		est, err := s.estimateRows(ctx, sql+probeSettingsOf(s), params)
		if err != nil {
			b.Fatal(err)
		}
		for _, path := range []string{"events", "index", "chosen"} {
			b.Run(sh.name+"/"+path, func(b *testing.B) {
				saved := s.probeRows
				defer func() { s.eventsOnly, s.probeRows = false, saved }()
				switch path {
				case "events":
					s.eventsOnly = true
				case "index":
					s.probeRows = 0
				}
				var lat chtest.Latencies
				for i := 0; i < b.N; i++ {
					q := query.List{Scope: sh.scope, PageSize: 100, Filter: sh.f()}
					start := time.Now()
					p, err := s.Query(ctx, q, rv)
					lat = append(lat, time.Since(start))
					if err != nil || len(p.Events) == 0 {
						b.Fatalf("%d events, %v", len(p.Events), err)
					}
				}
				lat.Report(b)
				b.ReportMetric(float64(est), "est_rows")
			})
		}
	}
}

// probeSettingsOf is the SETTINGS clause the probe adds to an events
// listing, for EXPLAIN ESTIMATE: the same index analysis.
func probeSettingsOf(s *Store) string {
	if s.probeSettings == "" {
		return ""
	}
	if s.selectSettings == "" {
		return " SETTINGS" + s.probeSettings[1:]
	}
	return s.probeSettings
}
