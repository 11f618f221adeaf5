package clickhouse

// events_recent (migration 3, session 7) was a copy of the last three days'
// events, raw included, in time order, for newest-first listings. A
// materialized view filled it from every insert into events, and that cost
// the write path 1.6x per row (BenchmarkInsertRecentCost, measured before it
// was dropped). Newest-first listings now take their keys from
// analytics_events, which every insert fills anyway, and read the raw
// events by key (list.go: listIndexed). Migration 3 creates nothing any
// more; migration 5 drops what an earlier build created.

func recentMigration(ddl) []string { return nil }

func dropRecentMigration(d ddl) []string {
	return []string{
		"DROP VIEW IF EXISTS " + d.table("events_recent_mv") + d.onCluster(),
		"DROP TABLE IF EXISTS " + d.table("events_recent") + d.onCluster(),
	}
}
