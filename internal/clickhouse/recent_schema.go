package clickhouse

import (
	"strconv"
	"strings"
	"time"
)

// events_recent (migration 3) is the events of the last recentKeep in time
// order, for the reads a dashboard makes first: the newest events of a whole
// tenant or of every tenant, with or without a time window. The events
// table cannot serve them: its key starts with tenant, kind, namespace and
// name and ends with time, so "newest first" and a time window prune little
// unless the object is named (measured on 10M events: newest 100 of every
// tenant 1.9 s through the gateway).
//
// It holds what Query reads (identity, version, the filter columns and
// raw), every version, like events: a ReplacingMergeTree(seq) whose sort
// key ends with (uid, seq), so only redelivered copies collapse. The key
// starts with the hour, then the tenant and time:
//
//   - ORDER BY toStartOfHour(event_time) DESC, event_time DESC, … is the
//     listing's order (the hour is monotonic in the time) and its prefix is
//     the key's, so the engine reads hours newest first and stops at the
//     page (optimize_read_in_order);
//   - a window reads only its hours, and a tenant only its range of each.
//
// A materialized view fills it from every INSERT into events, so it commits
// with the events it copies, and TTL removes rows once their eventTime is
// recentKeep old (or when the events row expires, if sooner). Listings
// read it only for event times after now - recentSpan, where it is sure to
// hold every row; older event times are read from events (recent.go).
// raw is compressed with LZ4, not ZSTD: the copy is small and short-lived,
// and it keeps the write cost down.

const (
	recentKeep = 3 * 24 * time.Hour
	recentSpan = 2 * 24 * time.Hour
)

// recentColumns: identity, version, filter columns, raw, and what the TTL
// reads.
func recentColumns() []column {
	names := append([]string{"event_time", "uid", "seq"}, analyticsFilterColumns...)
	names = append(names, "series_last_observed", "ttl_seconds", "raw")
	cols := eventColumnsNamed(names...)
	for i := range cols {
		if cols[i].name == "raw" {
			cols[i].codec = "CODEC(LZ4)"
		}
	}
	return cols
}

func recentSelect(from string) string {
	var names []string
	for _, c := range recentColumns() {
		names = append(names, c.name)
	}
	return "SELECT " + strings.Join(names, ", ") + " FROM " + from
}

func recentMigration(d ddl) []string {
	events, recent := d.table("events"), d.table("events_recent")
	keep := strconv.FormatInt(int64(recentKeep/time.Second), 10)
	return []string{
		"CREATE TABLE IF NOT EXISTS " + recent + d.onCluster() + " (\n" + columnsDDL(recentColumns()) + "\n)\n" +
			"ENGINE = " + d.engine("events_recent", "seq") + "\n" +
			"PARTITION BY toYYYYMM(event_time)\n" +
			"PRIMARY KEY (toStartOfHour(event_time), tenant_type, tenant_name, event_time)\n" +
			"ORDER BY (toStartOfHour(event_time), tenant_type, tenant_name, event_time, uid, seq)\n" +
			"TTL least(toDateTime(greatest(event_time, series_last_observed)) + toIntervalSecond(ttl_seconds), " +
			"toDateTime(event_time) + toIntervalSecond(" + keep + "))\n" +
			"SETTINGS index_granularity = 1024",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS " + d.table("events_recent_mv") + d.onCluster() +
			" TO " + recent + " AS " + recentSelect(events),
		// Events stored before the view existed (copies the view made
		// meanwhile collapse like a redelivery).
		"INSERT INTO " + recent + " " + recentSelect(events) +
			" WHERE event_time >= now64(6, 'UTC') - toIntervalSecond(" + keep + ")",
	}
}
