package clickhouse

import "fmt"

// Hourly rollups (migration 6): analytics_hours holds, per closed hour and
// event type, the occurrences of every value of the rolled-up dimensions
// (rollupDims), per tenant and over all tenants (tenant_type = tenant_name
// = ''), so a 30-day answer reads thousands of rows instead of millions.
// The type is kept apart because "the warnings" is the filter dashboards
// use most; it has two values, so it at most doubles the rows.
//
// The occurrences of an hour cannot be summed as events arrive: a uid's
// count is its latest version's, and a redelivered version must count once
// (analytics.go), which only FINAL over the per-minute tables knows. So an
// hour is rolled up from exactly what the per-minute path counts (the same
// occurrencesSQL), once it is closed, and used only while nothing was
// written into it since:
//
//   - rollup_marks: a materialized view on events records, per hour an
//     INSERT touches (an eventTime or a per-minute record in it), the
//     time of the INSERT.
//   - rollup_built: per rolled-up hour, the time its rollup read the
//     per-minute tables.
//
// An hour is read from analytics_hours only when it was built more than
// rollupMargin after its last mark; an hour written since (late data, a new
// version of a series) is read from the per-minute tables until the next
// build. The margin covers an INSERT whose mark was taken before the
// build's read but whose rows were committed after it.

func rollupMigration(d ddl) []string {
	events := d.table("events")
	return []string{
		"CREATE TABLE IF NOT EXISTS " + d.table("analytics_hours") + d.onCluster() + " (\n" +
			"    tenant_type LowCardinality(String),\n    tenant_name LowCardinality(String),\n" +
			"    dim LowCardinality(String),\n    hour DateTime('UTC') CODEC(Delta, ZSTD(1)),\n    type LowCardinality(String),\n" +
			"    value String,\n    c Int64,\n    built DateTime64(6, 'UTC'),\n    expires DateTime('UTC')\n)\n" +
			"ENGINE = " + d.engine("analytics_hours", "built") + "\n" +
			"PARTITION BY toYYYYMM(hour)\n" +
			"ORDER BY (tenant_type, tenant_name, dim, hour, type, value)\n" +
			"TTL expires",
		"CREATE TABLE IF NOT EXISTS " + d.table("rollup_marks") + d.onCluster() + " (\n" +
			"    hour DateTime('UTC'),\n    marked DateTime64(6, 'UTC')\n)\n" +
			"ENGINE = " + d.engine("rollup_marks", "marked") + "\nORDER BY hour",
		"CREATE TABLE IF NOT EXISTS " + d.table("rollup_built") + d.onCluster() + " (\n" +
			"    hour DateTime('UTC'),\n    built DateTime64(6, 'UTC'),\n    expires DateTime('UTC')\n)\n" +
			"ENGINE = " + d.engine("rollup_built", "built") + "\nORDER BY hour\nTTL expires",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("rollup_marks_mv") + d.onCluster() +
			" TO " + d.table("rollup_marks") + " AS " + rollupMarksSelect(events),
		// Every hour stored before the view existed is to be rolled up,
		// by a build that starts after this statement (the mark is a
		// margin back, so the first build need not wait a margin).
		"INSERT INTO " + d.table("rollup_marks") + " (hour, marked) " +
			"SELECT hour, now64(6, 'UTC') - toIntervalMicrosecond(" + fmt.Sprint(rollupMargin.Microseconds()) + ") FROM (" +
			"SELECT DISTINCT toDateTime(toStartOfHour(event_time), 'UTC') AS hour FROM " + d.table("analytics_events") +
			" UNION DISTINCT SELECT DISTINCT toDateTime(toStartOfHour(minute), 'UTC') FROM " + d.table("event_minutes") + ")",
	}
}

// rollupMarksSelect maps an events block to the hours it writes into: its
// rows' eventTimes and per-minute records.
func rollupMarksSelect(from string) string {
	return "SELECT arrayJoin(arrayDistinct(arrayConcat([toDateTime(toStartOfHour(event_time), 'UTC')], " +
		"arrayMap(m -> toDateTime(toStartOfHour(m), 'UTC'), minutes)))) AS hour, max(now64(6, 'UTC')) AS marked FROM " + from +
		" GROUP BY hour"
}
