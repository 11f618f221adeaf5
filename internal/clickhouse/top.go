package clickhouse

import (
	"context"
	"fmt"

	"github.com/eventgate/eventgate/internal/query"
)

// Top lists the values of q.Dimension with the most occurrences.
func (s *Store) Top(ctx context.Context, q query.TopRequest) (query.Top, error) {
	pl, err := q.Plan()
	if err != nil {
		return query.Top{}, err
	}
	l, limit := pl.Limits, pl.Limit
	top := query.Top{Since: pl.Since, Until: pl.Until, PreviousSince: pl.PreviousSince}
	if q.Scope.Empty() {
		return top, nil
	}
	p := newParams()
	names := []string{q.Dimension}
	occ, err := s.plannedOccurrencesSQL(ctx, p, q.Scope, q.Filter, names, dimensionSQLs(p, names), pl.PreviousSince, pl.Until, pl.Since, 0, false)
	if err != nil {
		return query.Top{}, err
	}
	cut := p.micros(ceilMicros(pl.Since))
	// The engine's bound counts the values of both windows; the exact
	// check (values of the window) follows.
	bound := &groupBound{field: "dimension", limit: "MaxGroups", what: "distinct values in the two windows", max: 2 * l.MaxGroups}
	sql := "SELECT toString(v), toUInt64(cur), toUInt64(prev), toUInt64(total), toUInt64(ptotal), toUInt64(nv) FROM (" +
		"SELECT v, cur, prev, sum(cur) OVER () AS total, sum(prev) OVER () AS ptotal, countIf(cur > 0) OVER () AS nv FROM (" +
		"SELECT d0 AS v, greatest(0, sumIf(c, t >= " + cut + ")) AS cur, greatest(0, sumIf(c, t < " + cut + ")) AS prev FROM " + occ + " GROUP BY v)" +
		") ORDER BY cur DESC, v LIMIT " + p.u64(uint64(limit)) + s.analyticsSettings(l, bound)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return query.Top{}, analyticsQueryError(err, l, bound)
	}
	defer rs.Close()
	var listed int64
	for rs.Next() {
		var e query.TopEntry
		var cur, pc, total, ptotal, nv uint64
		if err := rs.Scan(&e.Value, &cur, &pc, &total, &ptotal, &nv); err != nil {
			return query.Top{}, fmt.Errorf("clickhouse: top: %w", err)
		}
		top.Total, top.PreviousTotal, top.Distinct = int64(total), int64(ptotal), int(nv)
		if cur == 0 {
			continue // only values of the previous window are left
		}
		e.Count, e.Previous = int64(cur), int64(pc)
		e.Share = float64(cur) / float64(total)
		listed += e.Count
		top.Entries = append(top.Entries, e)
	}
	if err := rs.Err(); err != nil {
		return query.Top{}, fmt.Errorf("clickhouse: top: %w", err)
	}
	if top.Distinct > l.MaxGroups {
		return query.Top{}, query.OverLimit("dimension", "MaxGroups", "%d distinct values of %s in the window, more than %d; narrow the filter or the window", top.Distinct, q.Dimension, l.MaxGroups)
	}
	top.Other = top.Total - listed
	return top, nil
}
