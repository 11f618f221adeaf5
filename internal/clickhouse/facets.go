package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// Facets counts the occurrences of every value of several dimensions in one
// statement.
func (s *Store) Facets(ctx context.Context, q query.FacetsRequest) (query.Facets, error) {
	pl, err := q.Plan()
	if err != nil {
		return query.Facets{}, err
	}
	l, limit, names := pl.Limits, pl.Limit, pl.Dimensions
	cols := make([]string, len(names))
	for i := range names {
		cols[i] = "d" + strconv.Itoa(i)
	}
	since, until := pl.Since, pl.Until
	out := query.Facets{Since: since, Until: until}
	for _, n := range names {
		out.Facets = append(out.Facets, query.Facet{Dimension: n})
	}
	if q.Scope.Empty() {
		return out, nil
	}
	p := newParams()
	occ, err := s.plannedOccurrencesSQL(ctx, p, q.Scope, q.Filter, names, dimensionSQLs(p, names), since, until, time.Time{}, 0, true)
	if err != nil {
		return query.Facets{}, err
	}
	bound := &groupBound{field: "dimensions", limit: "MaxGroups", what: "distinct values of the dimensions together", max: len(names) * l.MaxGroups}
	// One aggregation with a grouping set per dimension; grouping() tells
	// the sets apart (0 for the dimension a set groups by).
	var grouping, values, sets []string
	for _, c := range cols {
		grouping = append(grouping, "grouping("+c+")")
		values = append(values, "toString("+c+")")
		sets = append(sets, "("+c+")")
	}
	// A rolled-up row holds one dimension's value, NULL in the others'
	// columns (plannedOccurrencesSQL): those NULL groups are no values.
	sql := "SELECT toUInt64(k), ifNull(v, ''), toUInt64(n), toUInt64(nv), toUInt64(tot) FROM (" +
		"SELECT k, v, n, row_number() OVER (PARTITION BY k ORDER BY n DESC, v) AS rn, count() OVER (PARTITION BY k) AS nv, " +
		"sum(n) OVER (PARTITION BY k) AS tot FROM (" +
		"SELECT arrayFirstIndex(x -> x = 0, [" + strings.Join(grouping, ", ") + "]) - 1 AS k, " +
		"[" + strings.Join(values, ", ") + "][k + 1] AS v, sum(c) AS n FROM " + occ +
		" GROUP BY GROUPING SETS (" + strings.Join(sets, ", ") + ") HAVING n > 0 AND v IS NOT NULL)" +
		") WHERE rn <= " + p.u64(uint64(limit)) + " ORDER BY k, rn" + s.analyticsSettings(l, bound)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return query.Facets{}, analyticsQueryError(err, l, bound)
	}
	defer rs.Close()
	listed := make([]int64, len(names))
	for rs.Next() {
		var k, c, nv, tot uint64
		var v string
		if err := rs.Scan(&k, &v, &c, &nv, &tot); err != nil {
			return query.Facets{}, fmt.Errorf("clickhouse: facets: %w", err)
		}
		if k >= uint64(len(names)) {
			continue
		}
		f := &out.Facets[k]
		f.Values = append(f.Values, query.FacetValue{Value: v, Count: int64(c)})
		f.Distinct = int(nv)
		f.Other = int64(tot) // listed is subtracted below
		listed[k] += int64(c)
		out.Total = int64(tot)
	}
	if err := rs.Err(); err != nil {
		return query.Facets{}, fmt.Errorf("clickhouse: facets: %w", err)
	}
	for i := range out.Facets {
		f := &out.Facets[i]
		f.Other -= listed[i]
		if f.Distinct > l.MaxGroups {
			return query.Facets{}, query.OverLimit("dimensions", "MaxGroups", "%d distinct values of %s in the window, more than %d; narrow the filter or the window", f.Distinct, f.Dimension, l.MaxGroups)
		}
	}
	return out, nil
}
