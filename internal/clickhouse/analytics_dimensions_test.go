package clickhouse

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// dimensionRows: five singletons and one series of 4 occurrences in
// project/a, with objects, related objects, instances, labels and
// metadata to group by.
func dimensionRows() []Row {
	mk := func(uid string, at time.Duration, kind, ns, name, inst string, labels, meta map[string]string, related *eventgatev1.ObjectReference) *eventgatev1.Event {
		return &eventgatev1.Event{
			Uid: uid, Name: uid, Namespace: ns, EventTime: timestamppb.New(at0(at)), Reason: "R", Type: "Normal",
			ReportingController: "ctl", ReportingInstance: inst,
			Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: kind, Namespace: ns, Name: name},
			Related:   related, Labels: labels, Metadata: meta,
			Tenant: &eventgatev1.Tenant{Type: "project", Name: "a"},
		}
	}
	node := &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Node", Name: "n1"}
	evs := []*eventgatev1.Event{
		mk("e1", time.Minute, "Pod", "web", "api-0", "i1", map[string]string{"app": "api"}, map[string]string{"team": "x"}, node),
		mk("e2", 2*time.Minute, "Pod", "web", "api-0", "i1", map[string]string{"app": "api"}, nil, nil),
		mk("e3", 3*time.Minute, "Pod", "db", "api-0", "i2", map[string]string{"app": "db"}, map[string]string{"team": "y"}, node),
		mk("e4", 4*time.Minute, "Node", "", "n1", "i2", nil, map[string]string{"team": "x"}, nil),
		mk("e5", 5*time.Minute, "Deployment", "web", "api", "i1", map[string]string{"app": "api"}, nil, nil),
	}
	var rows []Row
	for i, ev := range evs {
		rows = append(rows, Row{Seq: uint64(i + 1), Subject: event.SubjectOf(ev), Event: ev, StoredAt: time.Now()})
	}
	s := mk("s1", 10*time.Minute, "Pod", "web", "api-1", "i3", map[string]string{"app": "api"}, map[string]string{"team": "y"}, nil)
	s.Series = &eventgatev1.EventSeries{Count: 4, LastObservedTime: timestamppb.New(at0(12 * time.Minute)), State: "Ongoing"}
	return append(rows, Row{Seq: 6, Subject: event.SubjectOf(s), Event: s, StoredAt: time.Now()})
}

// TestAnalyticsObjectAndKeyDimensions groups by the regarding object (its
// name, namespace/name, kind/namespace/name), the related object, the
// reporting instance, a label key and a metadata key, through Top, Facets
// and Histogram, and refuses keyed dimensions without a key.
func TestAnalyticsObjectAndKeyDimensions(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.Insert(ctx, dimensionRows()); err != nil {
			t.Fatal(err)
		}
		aq := query.Analytics{Scope: all, Filter: query.Filter{Since: at0(0), Until: at0(time.Hour)}}
		top := func(dim string) map[string]int64 {
			t.Helper()
			res, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: dim, Limit: 100})
			if err != nil {
				t.Fatalf("top %s: %v", dim, err)
			}
			out := map[string]int64{}
			for _, e := range res.Entries {
				out[e.Value] = e.Count
			}
			return out
		}
		for dim, want := range map[string]map[string]int64{
			query.DimRegardingName:     {"api-0": 3, "n1": 1, "api": 1, "api-1": 4},
			query.DimRegardingObject:   {"web/api-0": 2, "db/api-0": 1, "n1": 1, "web/api": 1, "web/api-1": 4},
			query.DimRegarding:         {"Pod/web/api-0": 2, "Pod/db/api-0": 1, "Node/n1": 1, "Deployment/web/api": 1, "Pod/web/api-1": 4},
			query.DimRelated:           {"Node/n1": 2, "": 7},
			query.DimReportingInstance: {"i1": 3, "i2": 2, "i3": 4},
			"labels.app":               {"api": 7, "db": 1, "": 1},
			"metadata.team":            {"x": 2, "y": 5, "": 2},
		} {
			if diff := cmp.Diff(want, top(dim)); diff != "" {
				t.Errorf("top %s (-want +got):\n%s", dim, diff)
			}
		}
		f, err := s.Facets(ctx, query.FacetsRequest{Analytics: aq, Dimensions: []string{query.DimRegarding, "labels.app", "metadata.team"}, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := []query.Facet{
			{Dimension: query.DimRegarding, Values: []query.FacetValue{{Value: "Pod/web/api-1", Count: 4}}, Distinct: 5, Other: 5},
			{Dimension: "labels.app", Values: []query.FacetValue{{Value: "api", Count: 7}}, Distinct: 3, Other: 2},
			{Dimension: "metadata.team", Values: []query.FacetValue{{Value: "y", Count: 5}}, Distinct: 3, Other: 4},
		}
		if diff := cmp.Diff(want, f.Facets); diff != "" {
			t.Errorf("facets (-want +got):\n%s", diff)
		}
		h, err := s.Histogram(ctx, query.HistogramRequest{Analytics: aq, Bucket: time.Hour, GroupBy: []string{query.DimRegardingObject, "labels.app"}, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Groups) != 2 || !cmp.Equal(h.Groups[0].Values, []string{"web/api-1", "api"}) || h.Groups[0].Total != 4 || h.Groups[1].Total != 5 {
			t.Errorf("histogram groups: %+v", h.Groups)
		}
		for _, dim := range []string{"labels.", "metadata.", "label.app", "regarding.uid"} {
			_, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: dim})
			var fe *query.FieldError
			if !errors.As(err, &fe) || fe.Field != "dimension" {
				t.Errorf("top %q: %v, want a FieldError on dimension", dim, err)
			}
		}
	})
}

// TestAnalyticsDimensionsMigration upgrades a database whose analytics
// tables and views predate metadata (migration 4): afterwards the views
// copy it and metadata.<key> groups new events by it.
func TestAnalyticsDimensionsMigration(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		// Back to schema 3: the views and tables without metadata.
		saved := analyticsDimensionColumns
		analyticsDimensionColumns = nil
		events := s.events()
		downgrade := []string{
			"ALTER TABLE " + s.ddl.table("analytics_events_mv") + " MODIFY QUERY " + analyticsEventsSelect(events),
			"ALTER TABLE " + s.ddl.table("analytics_series_mv") + " MODIFY QUERY " + analyticsEventsSelect(events) + " WHERE series_count > 0",
			"ALTER TABLE " + s.ddl.table("series_minute_totals_mv") + " MODIFY QUERY " + seriesMinuteTotalsSelect(events),
			"ALTER TABLE " + s.ddl.table("event_minutes_mv") + " MODIFY QUERY " + eventMinutesSelect(events),
		}
		analyticsDimensionColumns = saved
		for _, tbl := range []string{"analytics_events", "analytics_series", "series_minute_totals", "event_minutes"} {
			downgrade = append(downgrade, "ALTER TABLE "+s.ddl.table(tbl)+" DROP COLUMN metadata")
		}
		downgrade = append(downgrade, "ALTER TABLE "+s.ddl.table("schema_migrations")+" DELETE WHERE version = 4 SETTINGS mutations_sync = 1")
		for _, q := range downgrade {
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = open(cfg)
		if err := s.Insert(ctx, dimensionRows()); err != nil {
			t.Fatal(err)
		}
		aq := query.Analytics{Scope: all, Filter: query.Filter{Since: at0(0), Until: at0(time.Hour)}}
		res, err := s.Top(ctx, query.TopRequest{Analytics: aq, Dimension: "metadata.team"})
		if err != nil {
			t.Fatal(err)
		}
		want := []query.TopEntry{{Value: "y", Count: 5, Share: 5.0 / 9}, {Value: "", Count: 2, Share: 2.0 / 9}, {Value: "x", Count: 2, Share: 2.0 / 9}}
		if diff := cmp.Diff(want, res.Entries); diff != "" {
			t.Errorf("top metadata.team after the migration (-want +got):\n%s", diff)
		}
	})
}
