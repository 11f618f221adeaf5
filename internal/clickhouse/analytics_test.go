package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/query"
)

// analyticsT0 is the start of the window the analytics data set is built
// around: a whole hour, recent enough for the TTL.
var analyticsT0 = time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)

// at0 is analyticsT0 + d.
func at0(d time.Duration) time.Time { return analyticsT0.Add(d) }

func mins(kv ...any) []wire.Minute {
	var out []wire.Minute
	for i := 0; i < len(kv); i += 2 {
		out = append(out, wire.Minute{Start: at0(kv[i].(time.Duration)), Count: uint32(kv[i+1].(int))})
	}
	return out
}

type aev struct {
	uid, tenant, reason, typ, kind, ns, name, rc string
	at                                           time.Duration
}

func (a aev) event() *eventgatev1.Event {
	tt, tn, _ := strings.Cut(a.tenant, "/")
	return &eventgatev1.Event{
		Uid: a.uid, Name: a.uid, Namespace: a.ns, EventTime: timestamppb.New(at0(a.at)),
		Reason: a.reason, Type: a.typ, ReportingController: a.rc, Action: "Act",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: a.kind, Namespace: a.ns, Name: a.name},
		Tenant:    &eventgatev1.Tenant{Type: tt, Name: tn},
	}
}

// version is a's event at a series version (count 0: a singleton).
func (a aev) version(seq uint64, count int32, last time.Duration, state string, m []wire.Minute) Row {
	ev := a.event()
	if count > 0 {
		ev.Series = &eventgatev1.EventSeries{Count: count, LastObservedTime: timestamppb.New(at0(last)), State: state}
	}
	return Row{Seq: seq, Subject: event.SubjectOf(ev), Event: ev, Minutes: m, StoredAt: time.Now()}
}

const (
	ongoing  = "Ongoing"
	finished = "Finished"
)

// analyticsRows is the data set with known answers (window [T0, T0+1h),
// previous window [T0-1h, T0)):
//
// project/a:
//   - a1 singleton BackOff Warning Pod web/api-0 kubelet at +1m (stored twice: a redelivery)
//   - a2 singleton Pulled Normal Pod web/api-0 kubelet at +2m30s
//   - s1 intake series BackOff Warning Pod web/api-1 kubelet from +5m: versions
//     created (minutes ignored), 2, 5 (stored twice), 7 Finished; minutes
//     +6m:1 +7m:2 +8m:1 +19m:1 +20m:1; so 1 at +5m (7 - 6)
//   - c1 client series FailedMount Warning PersistentVolumeClaim db/data-0 csi at +10m: versions 3, 4 (no minutes): 4 at +10m
//   - old singleton BackOff Warning Pod web/api-0 kubelet at -30m (previous window)
//   - s2 intake series Unhealthy Warning Pod web/api-2 kubelet from -10m: count 5,
//     minutes -9m:1 +2m:3: 1 at -10m, 1 at -9m, 3 at +2m
//
// project/b: b1 singleton BackOff at +1m; b2 intake series BackOff from +3m,
// count 10, minutes +4m:4 +40m:5 (1 at +3m).
func analyticsRows() [][]Row {
	m := time.Minute
	a1 := aev{"a1", "project/a", "BackOff", "Warning", "Pod", "web", "api-0", "kubelet", 1 * m}
	a2 := aev{"a2", "project/a", "Pulled", "Normal", "Pod", "web", "api-0", "kubelet", 150 * time.Second}
	s1 := aev{"s1", "project/a", "BackOff", "Warning", "Pod", "web", "api-1", "kubelet", 5 * m}
	c1 := aev{"c1", "project/a", "FailedMount", "Warning", "PersistentVolumeClaim", "db", "data-0", "csi", 10 * m}
	old := aev{"old", "project/a", "BackOff", "Warning", "Pod", "web", "api-0", "kubelet", -30 * m}
	s2 := aev{"s2", "project/a", "Unhealthy", "Warning", "Pod", "web", "api-2", "kubelet", -10 * m}
	b1 := aev{"b1", "project/b", "BackOff", "Warning", "Pod", "web", "api-0", "kubelet", 1 * m}
	b2 := aev{"b2", "project/b", "BackOff", "Warning", "Pod", "web", "api-9", "kubelet", 3 * m}
	return [][]Row{
		{old.version(1, 0, 0, "", nil), s2.version(2, 0, 0, "", mins(-10*m, 1)), s2.version(3, 2, -9*m, ongoing, mins(-9*m, 1))},
		{a1.version(4, 0, 0, "", mins(1*m, 1)), a2.version(5, 0, 0, "", nil), s1.version(6, 0, 0, "", mins(5*m, 1))},
		{a1.version(4, 0, 0, "", mins(1*m, 1))}, // redelivery
		{s1.version(7, 2, 6*m+10*time.Second, ongoing, mins(6*m, 1)), s2.version(8, 5, 2*m, ongoing, mins(2*m, 3))},
		{s1.version(9, 5, 8*m+30*time.Second, ongoing, mins(7*m, 2, 8*m, 1)), c1.version(10, 3, 11*m, ongoing, nil)},
		{s1.version(9, 5, 8*m+30*time.Second, ongoing, mins(7*m, 2, 8*m, 1))}, // redelivery
		{c1.version(11, 4, 12*m, ongoing, nil), s1.version(12, 7, 20*m, finished, mins(19*m, 1, 20*m, 1))},
		{b1.version(13, 0, 0, "", nil), b2.version(14, 0, 0, "", mins(3*m, 1)), b2.version(15, 10, 40*m, ongoing, mins(4*m, 4, 40*m, 5))},
	}
}

func loadAnalytics(t testing.TB, s *Store) {
	t.Helper()
	for _, b := range analyticsRows() {
		if err := s.Insert(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
}

var (
	tenantA = query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}
	tenantB = query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}}}
	window  = query.Filter{Since: analyticsT0, Until: analyticsT0.Add(time.Hour)}
)

func aq(sc query.Scope, f query.Filter) query.Analytics { return query.Analytics{Scope: sc, Filter: f} }

func TestAnalyticsKnownAnswers(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		loadAnalytics(t, s)
		for _, merged := range []bool{false, true} {
			if merged {
				// Merges drop the redelivered copies; the answers stay.
				for _, tbl := range []string{"events", "analytics_events", "event_minutes"} {
					if err := s.t.exec(ctx, "OPTIMIZE TABLE "+s.ddl.table(tbl)+" FINAL", nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			t.Run(fmt.Sprintf("merged=%v", merged), func(t *testing.T) {
				h, err := s.Histogram(ctx, query.HistogramRequest{Analytics: aq(tenantA, window), Bucket: 15 * time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]int64{14, 2, 0, 0}, h.Totals); diff != "" || h.Total != 16 || !h.Since.Equal(analyticsT0) {
					t.Errorf("histogram totals (-want +got)\n%s total %d since %v", diff, h.Total, h.Since)
				}
				h, err = s.Histogram(ctx, query.HistogramRequest{Analytics: aq(tenantA, window), Bucket: 15 * time.Minute, GroupBy: []string{query.DimReason}, Limit: 2})
				if err != nil {
					t.Fatal(err)
				}
				want := []query.HistogramGroup{
					{Values: []string{"BackOff"}, Total: 8, Counts: []int64{6, 2, 0, 0}},
					{Values: []string{"FailedMount"}, Total: 4, Counts: []int64{4, 0, 0, 0}},
					{Other: true, Total: 4, Counts: []int64{4, 0, 0, 0}},
				}
				if diff := cmp.Diff(want, h.Groups); diff != "" || h.DistinctGroups != 4 {
					t.Errorf("histogram by reason (-want +got)\n%s distinct %d", diff, h.DistinctGroups)
				}
				h, err = s.Histogram(ctx, query.HistogramRequest{Analytics: aq(query.Scope{All: true}, window), Bucket: 30 * time.Minute, GroupBy: []string{query.DimTenant, query.DimType}})
				if err != nil {
					t.Fatal(err)
				}
				want = []query.HistogramGroup{
					{Values: []string{"project/a", "Warning"}, Total: 15, Counts: []int64{15, 0}},
					{Values: []string{"project/b", "Warning"}, Total: 11, Counts: []int64{6, 5}},
					{Values: []string{"project/a", "Normal"}, Total: 1, Counts: []int64{1, 0}},
				}
				if diff := cmp.Diff(want, h.Groups); diff != "" {
					t.Errorf("histogram by tenant and type (-want +got)\n%s", diff)
				}

				top, err := s.Top(ctx, query.TopRequest{Analytics: aq(tenantA, window), Dimension: query.DimReason})
				if err != nil {
					t.Fatal(err)
				}
				wantTop := query.Top{
					Since: analyticsT0, Until: analyticsT0.Add(time.Hour), PreviousSince: analyticsT0.Add(-time.Hour),
					Entries: []query.TopEntry{
						{Value: "BackOff", Count: 8, Previous: 1, Share: 0.5},
						{Value: "FailedMount", Count: 4, Share: 0.25},
						{Value: "Unhealthy", Count: 3, Previous: 2, Share: 0.1875},
						{Value: "Pulled", Count: 1, Share: 0.0625},
					},
					Total: 16, PreviousTotal: 3, Distinct: 4,
				}
				if diff := cmp.Diff(wantTop, top); diff != "" {
					t.Errorf("top (-want +got)\n%s", diff)
				}

				fs, err := s.Facets(ctx, query.FacetsRequest{Analytics: aq(tenantA, window), Dimensions: []string{query.DimType, query.DimRegardingKind, query.DimNamespace}, Limit: 1})
				if err != nil {
					t.Fatal(err)
				}
				wantFacets := query.Facets{Since: analyticsT0, Until: analyticsT0.Add(time.Hour), Total: 16, Facets: []query.Facet{
					{Dimension: query.DimType, Values: []query.FacetValue{{Value: "Warning", Count: 15}}, Distinct: 2, Other: 1},
					{Dimension: query.DimRegardingKind, Values: []query.FacetValue{{Value: "Pod", Count: 12}}, Distinct: 2, Other: 4},
					{Dimension: query.DimNamespace, Values: []query.FacetValue{{Value: "web", Count: 12}}, Distinct: 2, Other: 4},
				}}
				if diff := cmp.Diff(wantFacets, fs); diff != "" {
					t.Errorf("facets (-want +got)\n%s", diff)
				}

				sl, err := s.Series(ctx, query.SeriesRequest{Analytics: aq(tenantA, window)})
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for _, e := range sl.Series {
					got = append(got, fmt.Sprintf("%s n=%d w=%d %s %s", e.UID, e.Count, e.WindowCount, e.State, pointsString(e.Minutes)))
				}
				wantSeries := []string{
					"s1 n=7 w=7 Finished +5m:1 +6m:1 +7m:2 +8m:1 +19m:1 +20m:1",
					"s2 n=5 w=3 Ongoing +2m:3",
					"c1 n=4 w=4 Ongoing +10m:4",
				}
				if diff := cmp.Diff(wantSeries, got); diff != "" || sl.Total != 3 {
					t.Errorf("series (-want +got)\n%s total %d", diff, sl.Total)
				}
			})
		}
		// Tenant b sees its own only.
		top, err := s.Top(ctx, query.TopRequest{Analytics: aq(tenantB, window), Dimension: query.DimReason})
		if err != nil || len(top.Entries) != 1 || top.Entries[0] != (query.TopEntry{Value: "BackOff", Count: 11, Share: 1}) {
			t.Errorf("top of b: %+v %v", top, err)
		}
	})
}

func pointsString(ps []query.MinutePoint) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%+dm:%d", int(p.Minute.Sub(analyticsT0)/time.Minute), p.Count)
	}
	return b.String()
}

func TestAnalyticsLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		run   func(s *Store) error
		field string
		limit string
	}{
		{"range", func(s *Store) error {
			_, err := s.Top(context.Background(), query.TopRequest{Analytics: aq(tenantA, query.Filter{Since: analyticsT0.Add(-40 * 24 * time.Hour), Until: analyticsT0}), Dimension: query.DimReason})
			return err
		}, "since", "MaxRange"},
		{"buckets", func(s *Store) error {
			_, err := s.Histogram(context.Background(), query.HistogramRequest{Analytics: aq(tenantA, window), Bucket: time.Second})
			return err
		}, "bucket", "MaxBuckets"},
		{"tenant dimension for one tenant", func(s *Store) error {
			_, err := s.Facets(context.Background(), query.FacetsRequest{Analytics: aq(tenantA, window), Dimensions: []string{query.DimTenant}})
			return err
		}, "dimensions", ""},
		{"three dimensions", func(s *Store) error {
			_, err := s.Histogram(context.Background(), query.HistogramRequest{Analytics: aq(tenantA, window), GroupBy: []string{query.DimType, query.DimReason, query.DimAction}})
			return err
		}, "groupBy", "MaxGroupBy"},
		{"top limit", func(s *Store) error {
			_, err := s.Top(context.Background(), query.TopRequest{Analytics: aq(tenantA, window), Dimension: query.DimReason, Limit: 5000})
			return err
		}, "limit", "MaxTopLimit"},
		{"groups", func(s *Store) error {
			l := query.DefaultLimits()
			l.MaxGroups = 3
			q := aq(tenantA, window)
			q.Limits = &l
			_, err := s.Histogram(context.Background(), query.HistogramRequest{Analytics: q, GroupBy: []string{query.DimReason}})
			return err
		}, "groupBy", "MaxGroups"},
		{"cells (engine)", func(s *Store) error {
			l := query.DefaultLimits()
			l.MaxCells = 2
			q := aq(tenantA, window)
			q.Limits = &l
			_, err := s.Histogram(context.Background(), query.HistogramRequest{Analytics: q, GroupBy: []string{query.DimReason}, Bucket: time.Minute})
			return err
		}, "groupBy", "MaxCells"},
		{"top values (engine)", func(s *Store) error {
			l := query.DefaultLimits()
			l.MaxGroups = 1
			q := aq(tenantA, window)
			q.Limits = &l
			_, err := s.Top(context.Background(), query.TopRequest{Analytics: q, Dimension: query.DimReason})
			return err
		}, "dimension", "MaxGroups"},
		{"facet values", func(s *Store) error {
			l := query.DefaultLimits()
			l.MaxGroups = 2
			q := aq(tenantA, window)
			q.Limits = &l
			_, err := s.Facets(context.Background(), query.FacetsRequest{Analytics: q, Dimensions: []string{query.DimType, query.DimReason}})
			return err
		}, "dimensions", "MaxGroups"},
		{"series points", func(s *Store) error {
			l := query.DefaultLimits()
			l.MaxSeriesPoints = 3
			q := aq(tenantA, window)
			q.Limits = &l
			_, err := s.Series(context.Background(), query.SeriesRequest{Analytics: q})
			return err
		}, "limit", "MaxSeriesPoints"},
		{"unknown dimension", func(s *Store) error {
			_, err := s.Top(context.Background(), query.TopRequest{Analytics: aq(tenantA, window), Dimension: "note"})
			return err
		}, "dimension", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, s *Store) {
				loadAnalytics(t, s)
				err := tc.run(s)
				var ae *query.FieldError
				if !errors.As(err, &ae) || ae.Field != tc.field || ae.Limit != tc.limit || !errors.Is(err, query.ErrInvalidQuery) {
					t.Fatalf("got %v, want field %s limit %q", err, tc.field, tc.limit)
				}
			})
		})
	}
}

// TestAnalyticsSeriesStateOfLatestVersion: filters on what changes between
// versions (state, last observation) apply to the latest version only.
func TestAnalyticsSeriesStateOfLatestVersion(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		loadAnalytics(t, s)
		for state, want := range map[string]string{"Ongoing": "s2 c1", "Finished": "s1"} {
			sl, err := s.Series(context.Background(), query.SeriesRequest{Analytics: aq(tenantA, window), State: state})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range sl.Series {
				got = append(got, e.UID)
			}
			if strings.Join(got, " ") != want || sl.Total != len(got) {
				t.Errorf("state %s: %v (total %d), want %s", state, got, sl.Total, want)
			}
		}
		// s1's older versions were last observed before +10m, its latest
		// at +20m: a window from +15m still finds it, with the minutes in it.
		sl, err := s.Series(context.Background(), query.SeriesRequest{Analytics: aq(tenantA, query.Filter{Since: at0(15 * time.Minute), Until: at0(time.Hour)}), OrderBy: query.SeriesOrderLastObserved})
		if err != nil {
			t.Fatal(err)
		}
		if len(sl.Series) != 1 || sl.Series[0].UID != "s1" || pointsString(sl.Series[0].Minutes) != "+19m:1 +20m:1" || sl.Series[0].WindowCount != 2 {
			t.Errorf("series from +15m: %+v", sl.Series)
		}
	})
}

// TestAnalyticsWriteReasonsAndMinutes: the store keeps each version's write
// reason, and spreads a series' occurrences over its per-minute records;
// a version without them (the ingest drops a malformed record) counts at
// its event time.
func TestAnalyticsWriteReasonsAndMinutes(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		m := time.Minute
		s1 := aev{"s1", "project/a", "BackOff", "Warning", "Pod", "web", "api-1", "kubelet", 5 * m}
		bad := aev{"bad", "project/a", "Failed", "Warning", "Pod", "web", "api-2", "kubelet", 6 * m}
		rows := []Row{
			s1.version(1, 0, 0, "", mins(5*m, 1)),
			s1.version(2, 3, 7*m, ongoing, mins(6*m, 1, 7*m, 1)),
			bad.version(3, 4, 9*m, ongoing, nil),
			s1.version(4, 5, 30*m, finished, mins(30*m, 2)),
		}
		for i, reason := range []string{"created", "started", "client", "finished"} {
			rows[i].WriteReason = reason
		}
		if err := s.Insert(context.Background(), rows); err != nil {
			t.Fatal(err)
		}

		h, err := s.Histogram(context.Background(), query.HistogramRequest{Analytics: aq(tenantA, window), Bucket: 15 * time.Minute, GroupBy: []string{query.DimReason}})
		if err != nil {
			t.Fatal(err)
		}
		want := []query.HistogramGroup{
			{Values: []string{"BackOff"}, Total: 5, Counts: []int64{3, 0, 2, 0}},
			{Values: []string{"Failed"}, Total: 4, Counts: []int64{4, 0, 0, 0}},
		}
		if diff := cmp.Diff(want, h.Groups); diff != "" {
			t.Errorf("histogram (-want +got)\n%s", diff)
		}
		rs, err := s.t.query(context.Background(), "SELECT toString(write_reason) FROM "+s.events()+" ORDER BY seq", nil)
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for rs.Next() {
			var r string
			rs.Scan(&r)
			reasons = append(reasons, r)
		}
		rs.Close()
		if strings.Join(reasons, " ") != "created started client finished" {
			t.Errorf("write reasons stored: %v", reasons)
		}
	})
}

// TestAnalyticsMigrationBackfill: events stored before the analytics
// migration are counted after it, per-minute records included.
func TestAnalyticsMigrationBackfill(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		loadAnalytics(t, s)
		// Back to schema 1 with the data: no analytics tables.
		for _, q := range []string{
			"DROP VIEW " + s.ddl.table("analytics_events_mv"), "DROP VIEW " + s.ddl.table("analytics_series_mv"),
			"DROP VIEW " + s.ddl.table("series_minute_totals_mv"), "DROP VIEW " + s.ddl.table("event_minutes_mv"),
			"DROP TABLE " + s.analyticsEvents(), "DROP TABLE " + s.analyticsSeries(),
			"DROP TABLE " + s.seriesMinuteTotals(), "DROP TABLE " + s.eventMinutes(),
			"ALTER TABLE " + s.ddl.table("schema_migrations") + " DELETE WHERE version = 2 SETTINGS mutations_sync = 1",
		} {
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = open(cfg)
		top, err := s.Top(ctx, query.TopRequest{Analytics: aq(tenantA, window), Dimension: query.DimReason})
		if err != nil {
			t.Fatal(err)
		}
		want := []query.TopEntry{
			{Value: "BackOff", Count: 8, Previous: 1, Share: 0.5},
			{Value: "FailedMount", Count: 4, Share: 0.25},
			{Value: "Unhealthy", Count: 3, Previous: 2, Share: 0.1875},
			{Value: "Pulled", Count: 1, Share: 0.0625},
		}
		if diff := cmp.Diff(want, top.Entries); diff != "" || top.PreviousTotal != 3 {
			t.Errorf("top after backfill (-want +got)\n%s previous %d", diff, top.PreviousTotal)
		}
	})
}

// TestAnalyticsClusterDDL: on a cluster, every statement of the
// migrations after the events table but the backfills runs ON CLUSTER, and
// the tables are replicated.
func TestAnalyticsClusterDDL(t *testing.T) {
	if len(migrations) < 4 {
		t.Fatalf("%d migrations, want at least 4", len(migrations))
	}
	for _, m := range migrations[1:] {
		for _, q := range m.stmts(ddl{db: quoteIdent("eg"), cluster: quoteIdent("prod")}) {
			if strings.HasPrefix(q, "INSERT") {
				continue
			}
			if !strings.Contains(q, "ON CLUSTER `prod`") {
				t.Errorf("migration %d: not ON CLUSTER: %s", m.version, q)
			}
			if strings.HasPrefix(q, "CREATE TABLE") && !strings.Contains(q, "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/") {
				t.Errorf("migration %d: not replicated: %s", m.version, q)
			}
		}
		for _, q := range m.stmts(ddl{db: quoteIdent("eg")}) {
			if strings.Contains(q, "ON CLUSTER") || strings.Contains(q, "Replicated") {
				t.Errorf("migration %d: single-node DDL: %s", m.version, q)
			}
		}
	}
}
