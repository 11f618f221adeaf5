package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// Histogram counts occurrences per bucket, grouped by up to two dimensions.
func (s *Store) Histogram(ctx context.Context, q query.HistogramRequest) (query.Histogram, error) {
	pl, err := q.Plan()
	if err != nil {
		return query.Histogram{}, err
	}
	h := query.Histogram{Since: pl.Since, Until: pl.Until, Bucket: pl.Step, Totals: make([]int64, pl.Buckets)}
	if q.Scope.Empty() {
		return h, nil
	}
	p := newParams()
	dims := dimensionSQLs(p, pl.GroupBy)
	occ, err := s.plannedOccurrencesSQL(ctx, p, q.Scope, q.Filter, pl.GroupBy, dims, pl.Since, pl.Until, time.Time{}, pl.Step, false)
	if err != nil {
		return query.Histogram{}, err
	}
	bucket := "intDiv(toUnixTimestamp64Micro(t) - " + p.i64(pl.Since.UnixMicro()) + ", " + p.i64(pl.Step.Microseconds()) + ")"
	if len(dims) == 0 {
		return h, s.histogramTotals(ctx, &h, pl, p, occ, bucket)
	}
	return h, s.histogramGroups(ctx, &h, pl, p, occ, bucket, len(dims))
}

// histogramTotals fills h's totals per bucket.
func (s *Store) histogramTotals(ctx context.Context, h *query.Histogram, pl query.HistogramPlan, p *paramSet, occ, bucket string) error {
	sql := "SELECT toInt64(" + bucket + ") AS b, toUInt64(greatest(0, sum(c))) FROM " + occ + " GROUP BY b" + s.analyticsSettings(pl.Limits, nil)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return analyticsQueryError(err, pl.Limits, nil)
	}
	defer rs.Close()
	nb := int64(pl.Buckets)
	for rs.Next() {
		var b int64
		var c uint64
		if err := rs.Scan(&b, &c); err != nil {
			return fmt.Errorf("clickhouse: histogram: %w", err)
		}
		if b >= 0 && b < nb {
			h.Totals[b] += int64(c)
			h.Total += int64(c)
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("clickhouse: histogram: %w", err)
	}
	return nil
}

// histogramGroups fills h's groups (the top pl.Limit and "other") and
// totals per bucket, for ndims dimensions d0, d1 of occ.
func (s *Store) histogramGroups(ctx context.Context, h *query.Histogram, pl query.HistogramPlan, p *paramSet, occ, bucket string, ndims int) error {
	l := pl.Limits
	gs := []string{"g0"}
	if ndims == 2 {
		gs = append(gs, "g1")
	}
	var sel0, sel1, sel2 strings.Builder
	lim := p.u64(uint64(pl.Limit))
	for i := range ndims {
		fmt.Fprintf(&sel0, ", d%d AS g%d", i, i)
		fmt.Fprintf(&sel1, ", if(rk <= %s, g%d, '') AS h%d", lim, i, i)
		fmt.Fprintf(&sel2, ", toString(h%d)", i)
	}
	g := strings.Join(gs, ", ")
	cells := &groupBound{field: "groupBy", limit: "MaxCells", what: "(bucket, group) cells", max: l.MaxCells}
	// Innermost: occurrences per (bucket, group); then each group's total,
	// its rank (ties by values) and the number of groups; then the groups
	// past the limit folded into "other".
	sql := "SELECT toInt64(b)" + sel2.String() + ", toUInt64(other), toUInt64(sum(n)), toUInt64(min(rk)), toUInt64(max(ng)) FROM (" +
		"SELECT b" + sel1.String() + ", rk > " + lim + " AS other, n, rk, max(rk) OVER () AS ng FROM (" +
		"SELECT b, " + g + ", n, dense_rank() OVER (ORDER BY gt DESC, " + g + ") AS rk FROM (" +
		"SELECT b, " + g + ", n, sum(n) OVER (PARTITION BY " + g + ") AS gt FROM (" +
		"SELECT " + bucket + " AS b" + sel0.String() + ", sum(c) AS n FROM " + occ + " GROUP BY b, " + g +
		" HAVING n > 0)))) GROUP BY b" + sel2.String() + ", other" + s.analyticsSettings(l, cells)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return analyticsQueryError(err, l, cells)
	}
	defer rs.Close()
	nb := int64(pl.Buckets)
	groups := map[int64]*query.HistogramGroup{} // by rank
	for rs.Next() {
		var b int64
		var other, c, rank, ng uint64
		values := make([]string, ndims)
		dest := []any{&b}
		for i := range values {
			dest = append(dest, &values[i])
		}
		dest = append(dest, &other, &c, &rank, &ng)
		if err := rs.Scan(dest...); err != nil {
			return fmt.Errorf("clickhouse: histogram: %w", err)
		}
		h.DistinctGroups = int(ng)
		if other != 0 {
			rank, values = uint64(pl.Limit)+1, nil
		}
		gr := groups[int64(rank)]
		if gr == nil {
			gr = &query.HistogramGroup{Values: values, Other: other != 0, Counts: make([]int64, nb)}
			groups[int64(rank)] = gr
		}
		if b >= 0 && b < nb {
			gr.Counts[b] += int64(c)
			gr.Total += int64(c)
			h.Totals[b] += int64(c)
			h.Total += int64(c)
		}
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("clickhouse: histogram: %w", err)
	}
	if h.DistinctGroups > l.MaxGroups {
		return query.OverLimit("groupBy", "MaxGroups", "%d distinct groups in the window, more than %d; narrow the filter or the window", h.DistinctGroups, l.MaxGroups)
	}
	ranks := make([]int64, 0, len(groups))
	for r := range groups {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	for _, r := range ranks {
		h.Groups = append(h.Groups, *groups[r])
	}
	return nil
}
