package clickhouse

import (
	"fmt"
	"strings"
)

// Analytics tables (migration 2), filled from every INSERT into events by
// materialized views, so they commit with the events they come from. Each is
// a ReplacingMergeTree, and every query reads it with FINAL: merges and
// FINAL keep one row per sort key, and the sort keys are chosen so that
// each table then holds exactly what counting needs (see analytics.go):
//
//   - analytics_events: the latest version of each event. The sort key ends
//     with (event_time, uid) and the version column is seq, so a newer
//     version replaces an older one and a redelivered copy collapses.
//   - analytics_series: the same for the events that are series (3% of the
//     rows in the benchmark), so that Series reads only those.
//   - series_minute_totals: each series version that carries a per-minute
//     record, with its total; the sort key ends with (uid, seq), so every
//     version stays and only copies collapse.
//   - event_minutes: one row per (version, minute) of those records; the
//     sort key ends with (uid, seq) and starts with the minute.
//
// All three copy the columns a Filter or Scope reads, under the same names,
// so every filter applies to them unchanged. The sort keys start with the
// hour of the row's time, then the tenant: a window reads only its hours
// (one contiguous range per tenant and hour), and because ingest writes
// events roughly in time order, parts overlap only in the recent hours, so
// FINAL merges little more than the hours still being written (measured:
// BenchmarkAnalytics). index_granularity 1024 keeps the one-tenant reads of
// an hour small.

// analyticsFilterColumns are the events columns a Filter or Scope reads.
var analyticsFilterColumns = []string{
	"tenant_type", "tenant_name",
	"namespace", "type", "reason", "action", "reporting_controller", "reporting_instance",
	"regarding_api_version", "regarding_kind", "regarding_namespace", "regarding_name", "regarding_uid", "regarding_field_path",
	"related_api_version", "related_kind", "related_namespace", "related_name", "related_uid", "related_field_path",
	"labels",
}

// analyticsDimensionColumns are the events columns analytics groups by
// beyond the filter columns (metadata.<key>; migration 4).
var analyticsDimensionColumns = []string{"metadata"}

// analyticsEventsColumns: identity, filter columns, series state, retention.
func analyticsEventsColumns() []column {
	names := append([]string{"event_time", "uid", "seq"}, analyticsFilterColumns...)
	names = append(names, analyticsDimensionColumns...)
	names = append(names, "series_count", "series_last_observed", "series_state", "ttl_seconds")
	return eventColumnsNamed(names...)
}

// seriesMinuteTotalsColumns: a version's identity and filter columns and the
// occurrences its per-minute record holds.
func seriesMinuteTotalsColumns() []column {
	names := append([]string{"event_time", "uid", "seq"}, analyticsFilterColumns...)
	names = append(names, analyticsDimensionColumns...)
	names = append(names, "series_last_observed", "ttl_seconds")
	return append(eventColumnsNamed(names...), column{"minutes_total", "UInt64", ""})
}

// eventMinutesColumns: the version's identity and filter columns, the
// minute and its count.
func eventMinutesColumns() []column {
	names := append([]string{"event_time", "uid", "seq"}, analyticsFilterColumns...)
	names = append(names, analyticsDimensionColumns...)
	names = append(names, "series_last_observed", "ttl_seconds")
	cols := eventColumnsNamed(names...)
	return append(cols, column{"minute", "DateTime('UTC')", "CODEC(Delta, ZSTD(1))"}, column{"occurrences", "UInt32", ""})
}

func eventColumnsNamed(names ...string) []column {
	out := make([]column, 0, len(names))
	for _, n := range names {
		found := false
		for _, c := range eventColumns {
			if c.name == n {
				out = append(out, c)
				found = true
				break
			}
		}
		if !found {
			panic("clickhouse: no events column " + n)
		}
	}
	return out
}

func columnsDDL(cols []column) string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "    %s %s", c.name, c.typ)
		if c.codec != "" {
			b.WriteString(" " + c.codec)
		}
	}
	return b.String()
}

// analyticsEventsSelect maps an events block to analytics_events rows.
func analyticsEventsSelect(from string) string {
	var names []string
	for _, c := range analyticsEventsColumns() {
		names = append(names, c.name)
	}
	return "SELECT " + strings.Join(names, ", ") + " FROM " + from
}

// The per-minute record of a version without series is not counted: a
// singleton's Created write carries its one occurrence, which counts at its
// eventTime, and so does the first occurrence of a series (its eventTime is
// the first occurrence's).
const seriesMinutesWhere = "series_count > 0"

// seriesMinuteTotalsSelect maps an events block to series_minute_totals rows.
func seriesMinuteTotalsSelect(from string) string {
	var names []string
	for _, c := range seriesMinuteTotalsColumns() {
		if c.name != "minutes_total" {
			names = append(names, c.name)
		}
	}
	return "SELECT " + strings.Join(names, ", ") + ", arraySum(minute_counts) AS minutes_total FROM " + from +
		" WHERE " + seriesMinutesWhere + " AND minutes_total > 0"
}

// eventMinutesSelect maps an events block to event_minutes rows: one per
// minute of a series version's per-minute record (ingest writes minutes and
// minute_counts in step).
func eventMinutesSelect(from string) string {
	var names []string
	for _, c := range eventMinutesColumns() {
		if c.name != "minute" && c.name != "occurrences" {
			names = append(names, c.name)
		}
	}
	return "SELECT " + strings.Join(names, ", ") + ", m AS minute, n AS occurrences FROM " + from +
		" ARRAY JOIN minutes AS m, minute_counts AS n WHERE " + seriesMinutesWhere + " AND n > 0"
}

// analyticsTTL keeps analytics rows exactly as long as the events rows they
// come from.
const analyticsTTL = "TTL toDateTime(greatest(event_time, series_last_observed)) + toIntervalSecond(ttl_seconds)"

func analyticsMigration(d ddl) []string {
	events := d.table("events")
	ae, as, st, em := d.table("analytics_events"), d.table("analytics_series"), d.table("series_minute_totals"), d.table("event_minutes")
	table := func(name, cols, version, timeCol, identity, extra string) string {
		return "CREATE TABLE IF NOT EXISTS " + d.table(name) + d.onCluster() + " (\n" + cols + extra + "\n)\n" +
			"ENGINE = " + d.engine(name, version) + "\n" +
			"PARTITION BY toYYYYMM(" + timeCol + ")\n" +
			"PRIMARY KEY (toStartOfHour(" + timeCol + "), tenant_type, tenant_name, " + timeCol + ")\n" +
			"ORDER BY (toStartOfHour(" + timeCol + "), tenant_type, tenant_name, " + timeCol + ", " + identity + ")\n" +
			analyticsTTL + "\n" +
			"SETTINGS index_granularity = 1024"
	}
	return []string{
		// Columns for the intake's headers (a new database has them from
		// migration 1, which renders eventColumns).
		"ALTER TABLE " + events + d.onCluster() +
			" ADD COLUMN IF NOT EXISTS write_reason LowCardinality(String)," +
			" ADD COLUMN IF NOT EXISTS minutes Array(DateTime('UTC'))," +
			" ADD COLUMN IF NOT EXISTS minute_counts Array(UInt32)",
		table("analytics_events", columnsDDL(analyticsEventsColumns()), "seq", "event_time", "uid", ""),
		// Series whose last observation is recent sit in few granules:
		// Series skips the others.
		table("analytics_series", columnsDDL(analyticsEventsColumns()), "seq", "event_time", "uid",
			",\n    INDEX last_observed_mm series_last_observed TYPE minmax GRANULARITY 1"),
		table("series_minute_totals", columnsDDL(seriesMinuteTotalsColumns()), "", "event_time", "uid, seq", ""),
		table("event_minutes", columnsDDL(eventMinutesColumns()), "", "minute", "uid, seq", ""),
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("analytics_events_mv") + d.onCluster() +
			" TO " + ae + " AS " + analyticsEventsSelect(events),
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("analytics_series_mv") + d.onCluster() +
			" TO " + as + " AS " + analyticsEventsSelect(events) + " WHERE series_count > 0",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("series_minute_totals_mv") + d.onCluster() +
			" TO " + st + " AS " + seriesMinuteTotalsSelect(events),
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("event_minutes_mv") + d.onCluster() +
			" TO " + em + " AS " + eventMinutesSelect(events),
		// Events stored before the views existed. Rows a view copied
		// meanwhile are copied again, which FINAL collapses like a
		// redelivery.
		"INSERT INTO " + ae + " " + analyticsEventsSelect(events),
		"INSERT INTO " + as + " " + analyticsEventsSelect(events) + " WHERE series_count > 0",
		"INSERT INTO " + st + " " + seriesMinuteTotalsSelect(events),
		"INSERT INTO " + em + " " + eventMinutesSelect(events),
	}
}

// analyticsDimensionsMigration adds analyticsDimensionColumns to the
// analytics tables of a database created before them (one created since has
// them from migration 2, which renders the current columns) and has the
// views copy them. Rows stored before have them empty.
func analyticsDimensionsMigration(d ddl) []string {
	events := d.table("events")
	var stmts []string
	for _, tbl := range []string{"analytics_events", "analytics_series", "series_minute_totals", "event_minutes"} {
		for _, c := range eventColumnsNamed(analyticsDimensionColumns...) {
			stmts = append(stmts, "ALTER TABLE "+d.table(tbl)+d.onCluster()+" ADD COLUMN IF NOT EXISTS "+c.name+" "+c.typ+" "+c.codec)
		}
	}
	return append(stmts,
		"ALTER TABLE "+d.table("analytics_events_mv")+d.onCluster()+" MODIFY QUERY "+analyticsEventsSelect(events),
		"ALTER TABLE "+d.table("analytics_series_mv")+d.onCluster()+" MODIFY QUERY "+analyticsEventsSelect(events)+" WHERE series_count > 0",
		"ALTER TABLE "+d.table("series_minute_totals_mv")+d.onCluster()+" MODIFY QUERY "+seriesMinuteTotalsSelect(events),
		"ALTER TABLE "+d.table("event_minutes_mv")+d.onCluster()+" MODIFY QUERY "+eventMinutesSelect(events),
	)
}
