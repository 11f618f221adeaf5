package query

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestHistogramPlanWidensToWholeBuckets: the window is widened to whole
// buckets of Unix time, an automatic bucket is chosen for about 100, and
// the limits are named when exceeded.
func TestHistogramPlanWidensToWholeBuckets(t *testing.T) {
	since := time.Date(2026, 11, 24, 10, 7, 30, 0, time.UTC)
	until := since.Add(time.Hour)
	req := HistogramRequest{Analytics: Analytics{Scope: Scope{All: true}, Filter: Filter{Since: since, Until: until}}, Bucket: 15 * time.Minute}
	pl, err := req.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC); !pl.Since.Equal(want) || !pl.Until.Equal(want.Add(75*time.Minute)) || pl.Buckets != 5 {
		t.Errorf("plan %v..%v, %d buckets; want 10:00..11:15, 5", pl.Since, pl.Until, pl.Buckets)
	}
	if pl.Limit != DefaultHistogramLimit {
		t.Errorf("limit %d, want the default %d", pl.Limit, DefaultHistogramLimit)
	}
	req.Bucket = 0
	if pl, _ := req.Plan(); pl.Step != time.Minute {
		t.Errorf("automatic bucket over 1h: %v, want 1m", pl.Step)
	}
	for _, tc := range []struct {
		name        string
		mod         func(r *HistogramRequest)
		field, lim  string
		description string
	}{
		{"buckets", func(r *HistogramRequest) { r.Bucket = time.Second; r.Filter.Until = since.Add(2 * time.Hour) }, "bucket", "MaxBuckets", "buckets"},
		{"fraction", func(r *HistogramRequest) { r.Bucket = 1500 * time.Millisecond }, "bucket", "", "whole seconds"},
		{"three dimensions", func(r *HistogramRequest) { r.GroupBy = []string{DimType, DimReason, DimAction} }, "groupBy", "MaxGroupBy", "3 dimensions"},
		{"twice", func(r *HistogramRequest) { r.GroupBy = []string{DimType, DimType} }, "groupBy", "", "twice"},
		{"range", func(r *HistogramRequest) { r.Filter.Since = until.Add(-32 * 24 * time.Hour) }, "since", "MaxRange", "more than"},
		{"limit", func(r *HistogramRequest) { r.Limit = 101 }, "limit", "MaxHistogramLimit", "more than"},
	} {
		r := req
		tc.mod(&r)
		_, err := r.Plan()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Limit != tc.lim || !strings.Contains(fe.Description, tc.description) {
			t.Errorf("%s: %v, want field %s limit %q mentioning %q", tc.name, err, tc.field, tc.lim, tc.description)
		}
		if !errors.Is(err, ErrInvalidQuery) {
			t.Errorf("%s: %v does not wrap ErrInvalidQuery", tc.name, err)
		}
	}
}

// TestCheckDimension: the named dimensions, labels.<key> and
// metadata.<key> with a key, and tenant only across tenants.
func TestCheckDimension(t *testing.T) {
	one := Scope{Tenants: []TenantRef{{Type: "project", Name: "a"}}}
	typeWide := Scope{Tenants: []TenantRef{{Type: "project", Name: "*"}}}
	for _, tc := range []struct {
		dim   string
		scope Scope
		ok    bool
	}{
		{DimRegarding, one, true}, {DimRegardingObject, one, true}, {DimRelated, one, true}, {DimReportingInstance, one, true},
		{"labels.app.kubernetes.io/name", one, true}, {"metadata.team", one, true},
		{"labels.", one, false}, {"metadata.", one, false}, {"labels." + strings.Repeat("k", MaxDimensionKey+1), one, false},
		{"label.app", one, false}, {"regarding.uid", one, false},
		{DimTenant, one, false}, {DimTenant, typeWide, true}, {DimTenant, Scope{All: true}, true},
	} {
		err := CheckDimension("dimension", tc.dim, tc.scope)
		if (err == nil) != tc.ok {
			t.Errorf("CheckDimension(%q, %+v) = %v, want ok %v", tc.dim, tc.scope, err, tc.ok)
		}
	}
}

// TestFilterValidateCountsEveryValue: the values of every field count
// toward MaxFilterValues, an involving filter's twice (it is matched on
// both objects).
func TestFilterValidateCountsEveryValue(t *testing.T) {
	vals := func(n int) []string { return make([]string, n) }
	ok := Filter{Reason: StringSet{In: vals(MaxFilterValues / 2)}, Involving: &ObjectFilter{Name: StringSet{In: vals(MaxFilterValues / 4)}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("%d values: %v", MaxFilterValues, err)
	}
	over := ok
	over.Type = StringSet{NotIn: vals(1)}
	if err := over.Validate(); !errors.Is(err, ErrInvalidQuery) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d values: %v, want ErrInvalidQuery", MaxFilterValues+1, err)
	}
}
