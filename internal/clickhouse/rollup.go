package clickhouse

// Building and reading the hourly rollups (rollup_schema.go).
//
// A question is answered from them when nothing in it needs a row: no
// filter but the window and the type, a scope of whole tenants (or all of
// them), and dimensions that are rolled up. Its window is then split: the closed hours
// inside it whose rollup is current are read from analytics_hours, and the
// rest — the partial hours at its ends, the hour a Top's two windows meet
// in when that is not an hour's start, and hours written since their
// build — from the per-minute tables, as before. A histogram uses them when
// its step is whole hours (its buckets then start on hours). The answer is
// the same sum over the same rows either way (TestRollupMatchesMinutes).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// rollupDims are the dimensions analytics_hours holds, "" being the total:
// the fixed vocabularies of an event, whose values per tenant and hour are
// few (dimensions of object names are not rolled up).
var rollupDims = []string{"", query.DimType, query.DimReason, query.DimAction, query.DimRegardingKind,
	query.DimNamespace, query.DimReportingController, query.DimReportingInstance}

// rollupMargin bounds the time between an INSERT's mark and its commit
// (rollup_schema.go); an hour is rolled up once it has been quiet that long.
const rollupMargin = time.Minute

// rollupBatchHours bounds the hours one build statement reads, and so its
// memory: a day of the 10M-event benchmark store is ~330k events, ~650k
// cells (a backfill of its 721 hours took 3-8 minutes on 2 busy cores).
const rollupBatchHours = 24

func (s *Store) analyticsHours() string { return s.ddl.table("analytics_hours") }

// RollUp builds the rollups of the closed hours written to since their
// last build and returns how many hours it built. Open runs it every
// Config.RollupInterval; running it more often, or from several gateways
// at once, is harmless.
func (s *Store) RollUp(ctx context.Context) (int, error) {
	built := 0
	for {
		now, hours, err := s.dirtyHours(ctx)
		if err != nil || len(hours) == 0 {
			return built, err
		}
		if err := s.buildHours(ctx, now, hours); err != nil {
			return built, err
		}
		built += len(hours)
	}
}

// startRollup runs RollUp every interval until Close.
func (s *Store) startRollup(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRollup, s.rollupDone = cancel, make(chan struct{})
	go func() {
		defer close(s.rollupDone)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			start := time.Now()
			n, err := s.RollUp(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("clickhouse rollup failed; analytics read the per-minute tables for the hours not rolled up", "error", err)
			case n > 0:
				s.log.Debug("clickhouse rollup", "hours", n, "took", time.Since(start))
			}
		}
	}()
}

// dirtyHours returns the server's time and up to rollupBatchHours closed,
// quiet hours whose rollup is missing or older than their last mark.
func (s *Store) dirtyHours(ctx context.Context) (int64, []time.Time, error) {
	p := newParams()
	margin := p.i64(s.rollupMargin.Microseconds())
	sql := "SELECT toInt64(toUnixTimestamp64Micro(now64(6, 'UTC'))) AS now, toInt64(toUnixTimestamp(hour)) FROM (" +
		"SELECT hour, max(marked) AS m FROM " + s.ddl.table("rollup_marks") + " GROUP BY hour) AS mk " +
		"LEFT JOIN (SELECT hour, max(built) AS b FROM " + s.ddl.table("rollup_built") + " GROUP BY hour) AS bt USING (hour) " +
		"WHERE toUnixTimestamp64Micro(b) - " + margin + " <= toUnixTimestamp64Micro(m)" +
		" AND toUnixTimestamp64Micro(m) < toUnixTimestamp64Micro(now64(6, 'UTC')) - " + margin +
		" AND (toInt64(toUnixTimestamp(hour)) + 3600) * 1000000 < toUnixTimestamp64Micro(now64(6, 'UTC')) - " + margin +
		" ORDER BY hour LIMIT " + p.u64(rollupBatchHours)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return 0, nil, fmt.Errorf("clickhouse: rollup: find hours: %w", err)
	}
	defer rs.Close()
	var now int64
	var hours []time.Time
	for rs.Next() {
		var h int64
		if err := rs.Scan(&now, &h); err != nil {
			return 0, nil, fmt.Errorf("clickhouse: rollup: find hours: %w", err)
		}
		hours = append(hours, time.Unix(h, 0).UTC())
	}
	if err := rs.Err(); err != nil {
		return 0, nil, fmt.Errorf("clickhouse: rollup: find hours: %w", err)
	}
	return now, hours, nil
}

// buildHours rolls up hours (sorted) as the per-minute tables hold them
// now (server time, Unix microseconds), then records them built at now.
func (s *Store) buildHours(ctx context.Context, now int64, hours []time.Time) error {
	p := newParams()
	at := p.micros(now)
	// Occurrences with their tenant and TTL, then one (dimension, value)
	// pair per rolled-up dimension.
	dims := []string{"tenant_type", "tenant_name", "ttl_seconds", "type"}
	pairs := []string{"('', '')"}
	for _, d := range rollupDims[1:] {
		dims = append(dims, dimensionExprs[d])
		pairs = append(pairs, "("+p.str(d)+", toString(d"+fmt.Sprint(len(dims)-1)+"))")
	}
	occ := s.occurrenceRowsSQL(p, "1", dims, hourRanges(hours))
	// A rolled-up hour expires no later than the first of its rows: then
	// the hour is read from what is left of the per-minute tables.
	sql := "INSERT INTO " + s.analyticsHours() + " (tenant_type, tenant_name, dim, hour, type, value, c, built, expires) " +
		"SELECT tenant_type, tenant_name, dim, hour, type, value, c, " + at + ", " +
		"hour + toIntervalSecond(min(ttl) OVER (PARTITION BY hour)) FROM (" +
		"SELECT tenant_type, tenant_name, dim, hour, type, value, sum(c) AS c, min(ttl) AS ttl FROM (" +
		"SELECT d0 AS tenant_type, d1 AS tenant_name, d2 AS ttl, d3 AS type, toDateTime(toStartOfHour(t), 'UTC') AS hour, " +
		"arrayJoin([" + strings.Join(pairs, ", ") + "]) AS dv, dv.1 AS dim, dv.2 AS value, c FROM (" + occ + ")" +
		") GROUP BY GROUPING SETS ((tenant_type, tenant_name, dim, hour, type, value), (dim, hour, type, value)))" +
		" SETTINGS " + finalSettings + s.finalThreads
	if err := s.t.exec(ctx, sql, p.m); err != nil {
		return fmt.Errorf("clickhouse: rollup: build %d hours from %s: %w", len(hours), hours[0].Format(time.RFC3339), err)
	}
	// An hour without rows (its events expired) is recorded built too,
	// expiring with the default TTL: a write into it marks it again.
	p = newParams()
	at = p.micros(now)
	tuples := make([]string, len(hours))
	for i, h := range hours {
		tuples[i] = p.i64(h.Unix())
	}
	sql = "INSERT INTO " + s.ddl.table("rollup_built") + " (hour, built, expires) " +
		"SELECT h, " + at + ", if(e = 0, h + toIntervalSecond(" + p.i64(int64(s.ttls.def)) + "), toDateTime(e, 'UTC')) FROM (" +
		"SELECT toDateTime(arrayJoin([" + strings.Join(tuples, ", ") + "]), 'UTC') AS h) AS hs " +
		"LEFT JOIN (SELECT hour, toUnixTimestamp(min(expires)) AS e FROM " + s.analyticsHours() +
		" WHERE built = " + at + " GROUP BY hour) AS ex ON hs.h = ex.hour"
	if err := s.t.exec(ctx, sql, p.m); err != nil {
		return fmt.Errorf("clickhouse: rollup: record %d hours: %w", len(hours), err)
	}
	return nil
}

// hourRanges merges sorted hour starts into ranges.
func hourRanges(hours []time.Time) []timeRange {
	var out []timeRange
	for _, h := range hours {
		if n := len(out); n > 0 && out[n-1].to.Equal(h) {
			out[n-1].to = h.Add(time.Hour)
			continue
		}
		out = append(out, timeRange{h, h.Add(time.Hour)})
	}
	return out
}

// rollupPlan splits a window: hours read from analytics_hours and the rest
// from the per-minute tables.
type rollupPlan struct {
	hours []timeRange
	rest  []timeRange
}

// rollupEligible reports whether analytics_hours can answer for sc and f
// with dimensions names.
func (s *Store) rollupEligible(sc query.Scope, f query.Filter, names []string) bool {
	if s.noRollup {
		return false
	}
	sc, f = tenantIntoScope(sc, f)
	if !typeFilterOnly(f) {
		return false
	}
	if !sc.All {
		for _, t := range sc.Tenants {
			if t.Name == "*" || len(t.Kinds) > 0 {
				return false
			}
		}
	}
	for _, n := range names {
		if !slices.Contains(rollupDims[1:], n) {
			return false
		}
	}
	return true
}

// tenantIntoScope moves a filter's one tenant into the scope when that
// changes no answer: the scope is every tenant (it becomes that tenant),
// or already that tenant alone. The service passes a request's tenant in
// both, so without this a tenant's dashboard never read the rollups.
func tenantIntoScope(sc query.Scope, f query.Filter) (query.Scope, query.Filter) {
	t := f.Tenant
	if t == nil || t.Name == "*" {
		return sc, f
	}
	if !sc.All {
		if len(sc.Tenants) == 0 {
			return sc, f
		}
		for _, s := range sc.Tenants {
			if s.Type != t.Type || s.Name != t.Name {
				return sc, f
			}
		}
	} else {
		sc = query.Scope{Tenants: []query.TenantRef{{Type: t.Type, Name: t.Name}}}
	}
	f.Tenant = nil
	return sc, f
}

// typeFilterOnly: f constrains nothing but the window and the type.
func typeFilterOnly(f query.Filter) bool {
	if f.Tenant != nil || f.Involving != nil || len(f.Labels) > 0 {
		return false
	}
	f.Type = query.StringSet{}
	for _, ss := range slices.Concat(f.Sets(), f.Regarding.Sets(), f.Related.Sets()) {
		if !ss.Empty() {
			return false
		}
	}
	return true
}

// planRollup splits [since, until) for a question rollupEligible accepts:
// the current rolled-up hours inside it, except the one holding cut when
// cut is not an hour's start (zero: none).
func (s *Store) planRollup(ctx context.Context, since, until, cut time.Time) (rollupPlan, error) {
	whole := rollupPlan{rest: []timeRange{{since, until}}}
	h0, h1 := since.Truncate(time.Hour), until.Truncate(time.Hour)
	if h0.Before(since) {
		h0 = h0.Add(time.Hour)
	}
	if !h0.Before(h1) {
		return whole, nil
	}
	p := newParams()
	lo, hi := p.i64(h0.Unix()), p.i64(h1.Unix())
	inHours := "hour >= toDateTime(" + lo + ", 'UTC') AND hour < toDateTime(" + hi + ", 'UTC')"
	sql := "SELECT toInt64(toUnixTimestamp(hour)) FROM (" +
		"SELECT hour, max(built) AS b, argMax(expires, built) AS e FROM " + s.ddl.table("rollup_built") +
		" WHERE " + inHours + " GROUP BY hour) AS bt " +
		"LEFT JOIN (SELECT hour, max(marked) AS m FROM " + s.ddl.table("rollup_marks") + " WHERE " + inHours + " GROUP BY hour) AS mk USING (hour) " +
		"WHERE toUnixTimestamp64Micro(b) - " + p.i64(s.rollupMargin.Microseconds()) + " > toUnixTimestamp64Micro(m) AND e > now() ORDER BY hour"
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return rollupPlan{}, fmt.Errorf("clickhouse: rollup: plan: %w", err)
	}
	defer rs.Close()
	var hours []time.Time
	for rs.Next() {
		var h int64
		if err := rs.Scan(&h); err != nil {
			return rollupPlan{}, fmt.Errorf("clickhouse: rollup: plan: %w", err)
		}
		hr := time.Unix(h, 0).UTC()
		if !cut.IsZero() && hr.Before(cut) && cut.Before(hr.Add(time.Hour)) {
			continue
		}
		hours = append(hours, hr)
	}
	if err := rs.Err(); err != nil {
		return rollupPlan{}, fmt.Errorf("clickhouse: rollup: plan: %w", err)
	}
	if len(hours) == 0 {
		return whole, nil
	}
	pl := rollupPlan{hours: hourRanges(hours)}
	at := since
	for _, r := range pl.hours {
		if at.Before(r.from) {
			pl.rest = append(pl.rest, timeRange{at, r.from})
		}
		at = r.to
	}
	if at.Before(until) {
		pl.rest = append(pl.rest, timeRange{at, until})
	}
	return pl, nil
}

// plannedOccurrencesSQL is occurrencesSQL for a window [since, until)
// split by planRollup when the question allows (step: a histogram's, 0
// otherwise; cut: see planRollup). names are the dimensions, dims their
// expressions; with facets, a rolled-up row carries its value in the
// column of its dimension and NULL in the others.
func (s *Store) plannedOccurrencesSQL(ctx context.Context, p *paramSet, sc query.Scope, f query.Filter, names, dims []string,
	since, until, cut time.Time, step time.Duration, facets bool) (string, error) {
	sc, f = tenantIntoScope(sc, f)
	if !s.rollupEligible(sc, f, names) || step%time.Hour != 0 || (!facets && len(names) > 1) {
		return s.occurrencesSQL(p, sc, f, dims, since, until), nil
	}
	pl, err := s.planRollup(ctx, since, until, cut)
	if err != nil {
		return "", err
	}
	if len(pl.hours) == 0 {
		return s.occurrencesSQL(p, sc, f, dims, since, until), nil
	}
	var parts []string
	if len(pl.rest) > 0 {
		parts = append(parts, s.occurrenceRowsSQL(p, analyticsCond(p, sc, f), dims, pl.rest))
	}
	var ds strings.Builder
	dimCond := "dim = ''"
	switch {
	case facets:
		qs := make([]string, len(names))
		for i, n := range names {
			qs[i] = p.str(n)
			fmt.Fprintf(&ds, ", if(dim = %s, value, NULL) AS d%d", qs[i], i)
		}
		dimCond = "dim IN (" + strings.Join(qs, ", ") + ")"
	case len(names) == 1:
		ds.WriteString(", value AS d0")
		dimCond = "dim = " + p.str(names[0])
	}
	tenants := "tenant_type = '' AND tenant_name = ''"
	if !sc.All {
		ors := make([]string, len(sc.Tenants))
		for i, t := range sc.Tenants {
			ors[i] = "(" + tenantSQL(p, t) + ")"
		}
		tenants = strings.Join(ors, " OR ")
	}
	hours := make([]string, len(pl.hours))
	for i, r := range pl.hours {
		hours[i] = "(hour >= toDateTime(" + p.i64(r.from.Unix()) + ", 'UTC') AND hour < toDateTime(" + p.i64(r.to.Unix()) + ", 'UTC'))"
	}
	var w where
	w.add(tenants)
	w.add(dimCond)
	w.add(setSQL(p, "type", f.Type))
	w.add(strings.Join(hours, " OR "))
	parts = append(parts, "SELECT toDateTime64(hour, 6, 'UTC') AS t"+ds.String()+", c FROM "+s.analyticsHours()+" FINAL WHERE "+w.String())
	return "(" + strings.Join(parts, " UNION ALL ") + ")", nil
}
