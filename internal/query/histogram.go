package query

import (
	"slices"
	"time"
)

// HistogramRequest asks for occurrences per bucket.
type HistogramRequest struct {
	Analytics
	// Bucket is the bucket width, whole seconds; 0 chooses one for about
	// 100 buckets.
	Bucket time.Duration
	// GroupBy names up to two dimensions.
	GroupBy []string
	// Limit is the groups returned (default 10); the rest are one "other"
	// group.
	Limit int
}

// Histogram is occurrences per bucket.
type Histogram struct {
	// Since and Until are the window widened to whole buckets.
	Since, Until time.Time
	Bucket       time.Duration
	// Totals are the occurrences per bucket, all groups together.
	Totals []int64
	Total  int64
	// Groups are ordered by occurrences (ties by values), "other" last.
	// Without GroupBy there are none.
	Groups []HistogramGroup
	// DistinctGroups counts the groups in the window before the cut.
	DistinctGroups int
}

// HistogramGroup is one group's occurrences per bucket.
type HistogramGroup struct {
	Values []string // one per GroupBy dimension; nil for "other"
	Other  bool
	Total  int64
	Counts []int64
}

// histogramTarget is the bucket count an automatic bucket aims at.
const histogramTarget = 100

// niceBuckets are the automatic bucket widths.
var niceBuckets = []time.Duration{
	time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// AutoBucket is the smallest nice width that covers d in at most 100
// buckets.
func AutoBucket(d time.Duration) time.Duration {
	for _, b := range niceBuckets {
		if d <= b*histogramTarget {
			return b
		}
	}
	return niceBuckets[len(niceBuckets)-1]
}

// HistogramPlan is a checked HistogramRequest.
type HistogramPlan struct {
	// Since and Until are the window widened to whole buckets (of Unix
	// time), Buckets the buckets between them.
	Since, Until time.Time
	Step         time.Duration
	Buckets      int
	GroupBy      []string
	Limit        int
	Limits       Limits
}

// Plan checks the request against its limits and resolves its defaults.
func (r HistogramRequest) Plan() (HistogramPlan, error) {
	l := r.HardLimits()
	since, until, err := r.Window()
	if err != nil {
		return HistogramPlan{}, err
	}
	step := r.Bucket
	switch {
	case step == 0:
		step = AutoBucket(until.Sub(since))
	case step < time.Second || step%time.Second != 0:
		return HistogramPlan{}, BadField("bucket", "must be whole seconds, at least 1s")
	}
	stepUS := step.Microseconds()
	startUS := floorDiv(CeilMicros(since), stepUS) * stepUS
	endUS := -floorDiv(-CeilMicros(until), stepUS) * stepUS
	nb := (endUS - startUS) / stepUS
	if nb > int64(l.MaxBuckets) {
		return HistogramPlan{}, OverLimit("bucket", "MaxBuckets", "%s buckets over %s are %d, more than %d", step, until.Sub(since), nb, l.MaxBuckets)
	}
	if len(r.GroupBy) > min(l.MaxGroupBy, 2) {
		return HistogramPlan{}, OverLimit("groupBy", "MaxGroupBy", "%d dimensions, at most %d", len(r.GroupBy), min(l.MaxGroupBy, 2))
	}
	for i, g := range r.GroupBy {
		if err := CheckDimension("groupBy", g, r.Scope); err != nil {
			return HistogramPlan{}, err
		}
		if slices.Contains(r.GroupBy[:i], g) {
			return HistogramPlan{}, BadField("groupBy", "dimension %q twice", g)
		}
	}
	limit, err := limitOf("limit", "MaxHistogramLimit", r.Limit, DefaultHistogramLimit, l.MaxHistogramLimit)
	if err != nil {
		return HistogramPlan{}, err
	}
	return HistogramPlan{
		Since: time.UnixMicro(startUS).UTC(), Until: time.UnixMicro(endUS).UTC(), Step: step, Buckets: int(nb),
		GroupBy: r.GroupBy, Limit: limit, Limits: l,
	}, nil
}

// CeilMicros is t in Unix microseconds, rounded up: event times are whole
// microseconds, so e >= t ⟺ e >= ceil(t) and e < t ⟺ e < ceil(t).
func CeilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if t.Nanosecond()%1000 != 0 {
		us++
	}
	return us
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
