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
	// One aggregation over (dimension index, value): each occurrence row
	// is repeated once per dimension by ARRAY JOIN. A grouping set per
	// dimension says the same, but the engine held 200–310 MiB for it in a
	// 30-day Facets over every tenant after a busy hour, and 60–70 MiB for
	// this (BENCHMARKS.md, session 48). A rolled-up row holds one
	// dimension's value, NULL in the others' columns
	// (plannedOccurrencesSQL): those NULLs are no values.
	idx := make([]string, len(cols))
	values := make([]string, len(cols))
	for i, c := range cols {
		idx[i] = strconv.Itoa(i)
		values[i] = "toString(" + c + ")"
	}
	sql := "SELECT toUInt64(k), ifNull(v, ''), toUInt64(n), toUInt64(nv), toUInt64(tot) FROM (" +
		"SELECT k, v, n, row_number() OVER (PARTITION BY k ORDER BY n DESC, v) AS rn, count() OVER (PARTITION BY k) AS nv, " +
		"sum(n) OVER (PARTITION BY k) AS tot FROM (" +
		"SELECT k, v, sum(c) AS n FROM " + occ +
		" ARRAY JOIN [" + strings.Join(idx, ", ") + "] AS k, [" + strings.Join(values, ", ") + "] AS v" +
		" WHERE v IS NOT NULL GROUP BY k, v HAVING n > 0)" +
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
