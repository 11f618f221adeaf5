package clickhouse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// rollupRows spreads events over the eight hours before analyticsT0 and
// the two after it, for three tenants: singletons, intake series whose
// per-minute records cross hours, and client series, in three inserts (the
// series' later versions apart, then redeliveries), then analyticsRows.
func rollupRows() [][]Row {
	tenants := []string{"project/a", "project/b", "organization/c"}
	reasons := []string{"BackOff", "Pulled", "Unhealthy", "FailedMount"}
	kinds := []string{"Pod", "Node", "PersistentVolumeClaim"}
	var first, later, again []Row
	seq := uint64(100)
	next := func() uint64 { seq++; return seq }
	m := time.Minute
	for i := range 240 {
		at := -8*time.Hour + time.Duration(i)*(10*time.Hour/240) + time.Duration(i%7)*time.Second
		a := aev{fmt.Sprintf("r%d", i), tenants[i%3], reasons[i%4], []string{"Normal", "Warning"}[i%5/4], kinds[i%3],
			fmt.Sprintf("ns-%d", i%2), fmt.Sprintf("obj-%d", i%11), fmt.Sprintf("ctl-%d", i%3), at}
		switch i % 10 {
		case 3: // intake series over the next two hours
			first = append(first, a.version(next(), 0, 0, "", mins(at.Truncate(m), 1)))
			later = append(later, a.version(next(), 4, at+90*m, ongoing, mins(at.Truncate(m)+40*m, 2, at.Truncate(m)+90*m, 1)))
		case 7: // client series
			first = append(first, a.version(next(), 3, at+5*m, ongoing, nil))
			later = append(later, a.version(next(), 6, at+9*m, ongoing, nil))
		default:
			first = append(first, a.version(next(), 0, 0, "", nil))
		}
		if i%13 == 0 {
			again = append(again, first[len(first)-1])
		}
	}
	return append([][]Row{first, later, again}, analyticsRows()...)
}

// rollupAnswers are the answers the rollups serve, for several scopes and
// windows that do not start or end on hours.
func rollupAnswers(t *testing.T, s *Store) map[string]any {
	t.Helper()
	ctx := context.Background()
	cases := []struct {
		name  string
		scope query.Scope
		f     query.Filter
	}{
		{"all/7h", query.Scope{All: true}, query.Filter{Since: at0(-6*time.Hour - 17*time.Minute - 3*time.Second), Until: at0(43*time.Minute + 500*time.Microsecond)}},
		{"a+c/9h", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}, {Type: "organization", Name: "c"}}},
			query.Filter{Since: at0(-8 * time.Hour), Until: at0(time.Hour + 59*time.Minute)}},
		{"all/7h/warning", query.Scope{All: true}, query.Filter{Type: set("Warning"),
			Since: at0(-6*time.Hour - 17*time.Minute - 3*time.Second), Until: at0(43*time.Minute + 500*time.Microsecond)}},
		{"a+c/9h/not-warning", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}, {Type: "organization", Name: "c"}}},
			query.Filter{Type: query.StringSet{NotIn: []string{"Warning"}}, Since: at0(-8 * time.Hour), Until: at0(time.Hour + 59*time.Minute)}},
		// A request naming its tenant, as the service passes it: in the
		// filter, and in the scope (an administrator's or the tenant's own).
		{"all/a/9h", query.Scope{All: true},
			query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "a"}, Since: at0(-8 * time.Hour), Until: at0(time.Hour + 59*time.Minute)}},
		{"a/a/9h", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}},
			query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "a"}, Since: at0(-8 * time.Hour), Until: at0(time.Hour + 59*time.Minute)}},
	}
	out := map[string]any{}
	for _, c := range cases {
		{
			k := c.name + "/"
			a := aq(c.scope, c.f)
			var err error
			add := func(name string, v any, e error) {
				out[k+name] = v
				if e != nil && err == nil {
					err = e
				}
			}
			f, e := s.Facets(ctx, query.FacetsRequest{Analytics: a})
			add("facets", f, e)
			f, e = s.Facets(ctx, query.FacetsRequest{Analytics: a, Dimensions: []string{query.DimReportingInstance, query.DimAction}, Limit: 2})
			add("facets2", f, e)
			tp, e := s.Top(ctx, query.TopRequest{Analytics: a, Dimension: query.DimReason, Limit: 3})
			add("top/reason", tp, e)
			h, e := s.Histogram(ctx, query.HistogramRequest{Analytics: a, Bucket: time.Hour})
			add("histogram/1h", h, e)
			h, e = s.Histogram(ctx, query.HistogramRequest{Analytics: a, Bucket: 2 * time.Hour, GroupBy: []string{query.DimType}, Limit: 1})
			add("histogram/2h/type", h, e)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
		}
	}
	return out
}

// TestRollupMatchesMinutes: Histogram, Top and Facets answer the same from
// the hourly rollups as from the per-minute tables alone — for windows that
// do not align to hours, across tenants and for some, with and without a
// type filter, with versions,
// per-minute records across hours and redeliveries — and stay the same when
// late data arrives in a rolled-up hour, before and after it is rolled up
// again.
func TestRollupMatchesMinutes(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database, cfg.RollupInterval = "", 0
		s := open(cfg)
		// Nothing is written while the test rolls up.
		s.rollupMargin = 0
		for _, b := range rollupRows() {
			if err := s.Insert(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		compare := func(stage string, wantRolled bool) {
			t.Helper()
			s.noRollup = true
			want := rollupAnswers(t, s)
			s.noRollup = false
			got := rollupAnswers(t, s)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: rolled-up answers differ from the per-minute ones (-minutes +rollup):\n%s", stage, diff)
			}
			pl, err := s.planRollup(ctx, at0(-6*time.Hour-17*time.Minute), at0(43*time.Minute), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if rolled := len(pl.hours) > 0; rolled != wantRolled {
				t.Fatalf("%s: plan %+v, want rolled-up hours: %v", stage, pl, wantRolled)
			}
		}
		compare("before any rollup", false)

		n, err := s.RollUp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n < 10 {
			t.Fatalf("rolled up %d hours, want at least the 10 closed hours written", n)
		}
		compare("rolled up", true)
		if n, err := s.RollUp(ctx); err != nil || n != 0 {
			t.Fatalf("second RollUp built %d hours (%v), want 0", n, err)
		}

		// Late data in rolled-up hours: a singleton, a new version of a
		// client series (count 6 -> 9), an intake series version with
		// minutes in an earlier hour, and a redelivery.
		m := time.Minute
		late := aev{"late", "project/a", "BackOff", "Warning", "Pod", "ns-0", "obj-1", "ctl-0", -5*time.Hour + 12*m}
		client := aev{"r7", "project/b", "BackOff", "Normal", "Node", "ns-1", "obj-7", "ctl-1", -8*time.Hour + 7*(10*time.Hour/240)}
		intake := aev{"r3", "project/a", "BackOff", "Normal", "Pod", "ns-1", "obj-3", "ctl-0", -8*time.Hour + 3*(10*time.Hour/240) + 3*time.Second}
		lateRows := []Row{
			late.version(9001, 0, 0, "", nil),
			client.version(9002, 9, client.at+30*m, ongoing, nil),
			intake.version(9003, 6, intake.at+2*time.Hour, ongoing, mins(intake.at.Truncate(m)+3*time.Hour, 2)),
		}
		for _, b := range [][]Row{lateRows, lateRows[:1]} {
			if err := s.Insert(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		pl, err := s.planRollup(ctx, at0(-6*time.Hour-17*time.Minute), at0(43*time.Minute), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range pl.hours {
			if h := at0(-5 * time.Hour); !h.Before(r.from) && h.Before(r.to) {
				t.Errorf("the hour late data arrived in is read from its rollup: %+v", pl.hours)
			}
		}
		compare("late data, not rolled up", true)
		if n, err := s.RollUp(ctx); err != nil || n < 1 {
			t.Fatalf("RollUp after late data built %d hours (%v)", n, err)
		}
		compare("late data rolled up", true)
	})
}

// TestRollupMigrationBackfill upgrades a database with events stored
// before migration 6: the migration marks their hours, the first RollUp
// rolls them up, and the answers stay those of the per-minute tables.
func TestRollupMigrationBackfill(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database, cfg.RollupInterval = "", 0
		s := open(cfg)
		// Back to schema 5, with the events stored meanwhile.
		for _, q := range []string{
			"DROP VIEW " + s.ddl.table("rollup_marks_mv"),
			"DROP TABLE " + s.ddl.table("rollup_marks"),
			"DROP TABLE " + s.ddl.table("rollup_built"),
			"DROP TABLE " + s.ddl.table("analytics_hours"),
			"ALTER TABLE " + s.ddl.table("schema_migrations") + " DELETE WHERE version = 6 SETTINGS mutations_sync = 1",
		} {
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		for _, b := range rollupRows() {
			if err := s.Insert(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		s = open(cfg)
		s.rollupMargin = 0
		n, err := s.RollUp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n < 10 {
			t.Fatalf("rolled up %d hours after the migration, want at least the 10 closed hours stored before it", n)
		}
		s.noRollup = true
		want := rollupAnswers(t, s)
		s.noRollup = false
		if diff := cmp.Diff(want, rollupAnswers(t, s)); diff != "" {
			t.Errorf("rolled-up answers differ from the per-minute ones (-minutes +rollup):\n%s", diff)
		}
	})
}

// TestRollupEligible: the rollups answer only questions whose filter is
// the window and the type, over whole tenants, by rolled-up dimensions.
func TestRollupEligible(t *testing.T) {
	s := &Store{}
	a := query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}
	for _, tc := range []struct {
		name  string
		sc    query.Scope
		f     query.Filter
		dims  []string
		rolls bool
	}{
		{"no filter", all, query.Filter{Since: at0(0)}, []string{query.DimReason}, true},
		{"type", a, query.Filter{Type: set("Warning")}, nil, true},
		{"type not in", a, query.Filter{Type: query.StringSet{NotIn: []string{"Normal"}}}, []string{query.DimType}, true},
		{"empty sets", all, query.Filter{Reason: query.StringSet{In: []string{}}}, nil, true},
		{"reason", all, query.Filter{Reason: set("BackOff")}, nil, false},
		{"regarding kind", all, query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod")}}, nil, false},
		{"labels", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "exists"}}}, nil, false},
		{"tenant filter over every tenant", all, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "a"}}, nil, true},
		{"tenant filter of the scope's tenant", a, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "a"}}, nil, true},
		{"tenant filter of another tenant", a, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "b"}}, nil, false},
		{"tenant filter of every tenant of a type", all, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "*"}}, nil, false},
		{"tenant filter and scope kinds", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Kind: "Pod"}}}}},
			query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "a"}}, nil, false},
		{"tenant kinds", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Kind: "Pod"}}}}}, query.Filter{}, nil, false},
		{"every tenant of a type", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "*"}}}, query.Filter{}, nil, false},
		{"object dimension", all, query.Filter{}, []string{query.DimRegardingName}, false},
		{"label dimension", all, query.Filter{}, []string{"labels.app"}, false},
	} {
		if got := s.rollupEligible(tc.sc, tc.f, tc.dims); got != tc.rolls {
			t.Errorf("%s: rollupEligible = %v, want %v", tc.name, got, tc.rolls)
		}
	}
}

// TestRollupLoopEndsOnClose: the background rollup loop a store runs ends
// when the store is closed.
func TestRollupLoopEndsOnClose(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Database, cfg.RollupInterval = chtest.Database(t), 10*time.Millisecond
	s, err := OpenEngine(context.Background(), chtest.Engine(t), cfg, chtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer chtest.Engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
	if err := s.Insert(context.Background(), rollupRows()[0]); err != nil {
		t.Fatal(err)
	}
	done := s.rollupDone
	if done == nil {
		t.Fatal("no rollup loop with RollupInterval 10ms")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Fatal("the rollup loop still runs after Close")
	}
}
