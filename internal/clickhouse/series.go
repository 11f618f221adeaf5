package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/query"
)

// Series lists the event series active in the window, with their
// per-minute occurrences in it.
func (s *Store) Series(ctx context.Context, q query.SeriesRequest) (query.SeriesList, error) {
	pl, err := q.Plan()
	if err != nil {
		return query.SeriesList{}, err
	}
	l, limit, since, until := pl.Limits, pl.Limit, pl.Since, pl.Until
	order := "cnt DESC, last DESC"
	if pl.OrderBy == query.SeriesOrderLastObserved {
		order = "last DESC, cnt DESC"
	}
	out := query.SeriesList{Since: since, Until: until}
	if q.Scope.Empty() {
		return out, nil
	}
	f := q.Filter
	f.Since, f.Until = time.Time{}, time.Time{}
	p := newParams()
	var w where
	w.add(scopeSQL(p, q.Scope))
	filterSQL(p, &w, f)
	w.add("series_count > 0")
	hi := p.micros(ceilMicros(until))
	w.add("event_time < " + hi)
	w.add("toStartOfHour(event_time) <= toStartOfHour(" + hi + ")")
	w.add("series_last_observed >= " + p.micros(ceilMicros(since)))
	if q.State != "" {
		w.add("series_state = " + p.str(q.State))
	}
	// The latest version of each series (FINAL applies the WHERE to it).
	sql := "SELECT uid, toString(tenant_type) AS tt, toString(tenant_name) AS tn, toString(reason), toString(type), toString(action), " +
		"toString(namespace), toString(reporting_controller), toString(reporting_instance), toString(regarding_api_version), " +
		"toString(regarding_kind), toString(regarding_namespace), regarding_name, regarding_uid, regarding_field_path, " +
		"toInt64(series_count) AS cnt, toInt64(toUnixTimestamp64Micro(event_time)), toInt64(toUnixTimestamp64Micro(series_last_observed)) AS last, " +
		"toString(series_state), toUInt64(count() OVER ()) FROM " + s.analyticsSeries() + " FINAL WHERE " + w.String() +
		" ORDER BY " + order + ", uid, tt, tn LIMIT " + p.u64(uint64(limit)) + s.analyticsSettings(l, nil)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return query.SeriesList{}, analyticsQueryError(err, l, nil)
	}
	for rs.Next() {
		var e query.Series
		var firstUS, lastUS int64
		var total uint64
		if err := rs.Scan(&e.UID, &e.Tenant.Type, &e.Tenant.Name, &e.Reason, &e.Type, &e.Action, &e.Namespace,
			&e.ReportingController, &e.ReportingInstance, &e.Regarding.APIVersion, &e.Regarding.Kind, &e.Regarding.Namespace,
			&e.Regarding.Name, &e.Regarding.UID, &e.Regarding.FieldPath, &e.Count, &firstUS, &lastUS, &e.State, &total); err != nil {
			rs.Close()
			return query.SeriesList{}, fmt.Errorf("clickhouse: series: %w", err)
		}
		e.First, e.Last = time.UnixMicro(firstUS).UTC(), time.UnixMicro(lastUS).UTC()
		out.Total = int(total)
		out.Series = append(out.Series, e)
	}
	err = rs.Err()
	rs.Close()
	if err != nil {
		return query.SeriesList{}, fmt.Errorf("clickhouse: series: %w", err)
	}
	if len(out.Series) == 0 {
		return out, nil
	}
	if err := s.addSeriesMinutes(ctx, &out, pl); err != nil {
		return query.SeriesList{}, err
	}
	return out, nil
}

// seriesKey identifies a series.
type seriesKey struct{ tt, tn, uid string }

// addSeriesMinutes reads the per-minute totals of out's series (over every
// version) and their minutes in the window, and adds the occurrences
// counted at eventTime to its minute.
func (s *Store) addSeriesMinutes(ctx context.Context, out *query.SeriesList, pl query.SeriesPlan) error {
	l, since, until := pl.Limits, pl.Since, pl.Until
	index := map[seriesKey]int{}
	var minFirst, maxFirst time.Time
	for i, e := range out.Series {
		if i == 0 || e.First.Before(minFirst) {
			minFirst = e.First
		}
		if i == 0 || e.First.After(maxFirst) {
			maxFirst = e.First
		}
		index[seriesKey{e.Tenant.Type, e.Tenant.Name, e.UID}] = i
	}
	p := newParams()
	tuples := make([]string, 0, len(out.Series))
	for _, e := range out.Series {
		tuples = append(tuples, "("+p.str(e.Tenant.Type)+", "+p.str(e.Tenant.Name)+", "+p.str(e.UID)+")")
	}
	ids := "(tenant_type, tenant_name, uid) IN (" + strings.Join(tuples, ", ") + ")"
	points := &groupBound{field: "limit", limit: "MaxSeriesPoints", what: "minutes with occurrences (lower the limit)",
		max: l.MaxSeriesPoints + len(out.Series)}
	sql := "SELECT toString(tenant_type), toString(tenant_name), uid, toInt64(-1), toUInt64(sum(minutes_total))" +
		" FROM " + s.seriesMinuteTotals() + " FINAL WHERE " + ids +
		" AND " + inRange("event_time", p.micros(minFirst.UnixMicro()), p.micros(maxFirst.UnixMicro()+1)) +
		" GROUP BY tenant_type, tenant_name, uid" +
		" UNION ALL SELECT tt, tn, uid, m, n FROM (SELECT toString(tenant_type) AS tt, toString(tenant_name) AS tn, uid," +
		" toInt64(toUnixTimestamp(minute)) AS m, toUInt64(sum(occurrences)) AS n" +
		" FROM " + s.eventMinutes() + " FINAL WHERE " + ids +
		" AND " + inRange("minute", p.micros(ceilMicros(since)), p.micros(ceilMicros(until))) +
		" GROUP BY tenant_type, tenant_name, uid, minute ORDER BY tt, tn, uid, m LIMIT " + p.u64(uint64(l.MaxSeriesPoints)+1) + ")" +
		s.analyticsSettings(l, points)
	rs, err := s.t.query(ctx, sql, p.m)
	if err != nil {
		return analyticsQueryError(err, l, points)
	}
	defer rs.Close()
	recorded := map[seriesKey]int64{}
	npoints := 0
	for rs.Next() {
		var k seriesKey
		var m int64
		var n uint64
		if err := rs.Scan(&k.tt, &k.tn, &k.uid, &m, &n); err != nil {
			return fmt.Errorf("clickhouse: series minutes: %w", err)
		}
		i, ok := index[k]
		if !ok {
			continue
		}
		if m < 0 {
			recorded[k] = int64(n)
			continue
		}
		if npoints++; npoints > l.MaxSeriesPoints {
			return query.OverLimit("limit", "MaxSeriesPoints", "the series hold more than %d minutes with occurrences in the window; lower the limit or narrow the window", l.MaxSeriesPoints)
		}
		e := &out.Series[i]
		e.Minutes = append(e.Minutes, query.MinutePoint{Minute: time.Unix(m, 0).UTC(), Count: int64(n)})
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("clickhouse: series minutes: %w", err)
	}
	addUnrecorded(out, index, recorded, since, until)
	return nil
}

// addUnrecorded sorts each series' minutes, adds the occurrences no minute
// records (its count less recorded[k], its minutes' total over every
// version) to the minute of its eventTime when that is in [since, until),
// and sums its WindowCount.
func addUnrecorded(out *query.SeriesList, index map[seriesKey]int, recorded map[seriesKey]int64, since, until time.Time) {
	for k, i := range index {
		e := &out.Series[i]
		slices.SortFunc(e.Minutes, func(a, b query.MinutePoint) int { return a.Minute.Compare(b.Minute) })
		if r := max(1, e.Count) - recorded[k]; r > 0 && !e.First.Before(since) && e.First.Before(until) {
			m := e.First.Truncate(time.Minute)
			j, found := slices.BinarySearchFunc(e.Minutes, m, func(p query.MinutePoint, t time.Time) int { return p.Minute.Compare(t) })
			if found {
				e.Minutes[j].Count += r
			} else {
				e.Minutes = slices.Insert(e.Minutes, j, query.MinutePoint{Minute: m, Count: r})
			}
		}
		for _, p := range e.Minutes {
			e.WindowCount += p.Count
		}
	}
}
