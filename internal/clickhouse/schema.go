package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// column is one column of the events table: its name, type and codec. The
// table's DDL and every INSERT are generated from eventColumns, so the two
// cannot drift apart.
type column struct {
	name, typ, codec string
}

// eventColumns is the events table, in the order rows are appended.
var eventColumns = []column{
	// Sort key (see sortKey).
	{"tenant_type", "LowCardinality(String)", ""},
	{"tenant_name", "LowCardinality(String)", ""},
	{"regarding_kind", "LowCardinality(String)", ""},
	{"regarding_namespace", "LowCardinality(String)", ""},
	{"regarding_name", "String", ""},
	{"event_time", "DateTime64(6, 'UTC')", "CODEC(Delta, ZSTD(1))"},
	{"uid", "String", ""},
	// Version: the stream sequence (= resourceVersion).
	{"seq", "UInt64", ""},

	{"name", "String", ""},
	{"namespace", "LowCardinality(String)", ""},
	{"type", "LowCardinality(String)", ""},
	{"reason", "LowCardinality(String)", ""},
	{"action", "LowCardinality(String)", ""},
	{"note", "String", "CODEC(ZSTD(1))"},
	{"regarding_api_version", "LowCardinality(String)", ""},
	{"regarding_uid", "String", ""},
	{"regarding_field_path", "String", ""},
	{"related_api_version", "LowCardinality(String)", ""},
	{"related_kind", "LowCardinality(String)", ""},
	{"related_namespace", "LowCardinality(String)", ""},
	{"related_name", "String", ""},
	{"related_uid", "String", ""},
	{"related_field_path", "String", ""},
	{"reporting_controller", "LowCardinality(String)", ""},
	{"reporting_instance", "LowCardinality(String)", ""},
	{"labels", "Map(String, String)", "CODEC(ZSTD(1))"},
	{"annotations", "Map(String, String)", "CODEC(ZSTD(1))"},
	{"metadata", "Map(String, String)", "CODEC(ZSTD(1))"},
	{"series_count", "Int32", ""},
	{"series_last_observed", "DateTime64(6, 'UTC')", "CODEC(Delta, ZSTD(1))"},
	{"series_state", "LowCardinality(String)", ""},
	{"subject", "String", "CODEC(ZSTD(1))"},
	{"stored_at", "DateTime64(6, 'UTC')", "CODEC(Delta, ZSTD(1))"},
	{"ttl_seconds", "UInt32", ""},
	// The event exactly as published (deterministic protobuf, without
	// resourceVersion): Query and Get decode it, so nothing is lost.
	{"raw", "String", "CODEC(ZSTD(3))"},
	// Why the intake wrote this version (its Eventgate-Write-Reason header;
	// "" when absent) and the occurrences it adds per minute of log time
	// (Eventgate-Series-Minutes), minute starts and counts in step. Not part
	// of the event: analytics reads them (see analytics_schema.go).
	{"write_reason", "LowCardinality(String)", ""},
	{"minutes", "Array(DateTime('UTC'))", ""},
	{"minute_counts", "Array(UInt32)", ""},
}

// eventColumnNames are the names of eventColumns.
var eventColumnNames = func() []string {
	names := make([]string, len(eventColumns))
	for i, c := range eventColumns {
		names[i] = c.name
	}
	return names
}()

// sortKey orders the table. The tenant comes first (every query is scoped
// to tenants), then the regarding object and time, so "the newest events of
// one object" is a contiguous, time-ordered range read in order, and a time
// range within a tenant and kind prunes granules.
//
// uid and seq end the key, so the ReplacingMergeTree identity is one stream
// message: merges drop the copies a redelivery inserted (same seq) but keep
// every version of a series. Folding versions (identity without seq) would
// let a merge replace the version a listing pinned at rv reads (seq <= rv)
// by a newer one (seq > rv) in the middle of the listing: measured with
// TestPaginationUnderConcurrentIngest, ~40% of the snapshot vanished. Queries
// pick the latest version <= rv themselves.
const sortKey = primaryKey + ", uid, seq"

// primaryKey is the sort key without uid and seq, which prune nothing after
// event_time; leaving them out keeps the in-memory index small. With
// index_granularity 2048 (8192 is the default), "newest 100 of one object"
// reads 4x fewer rows per part; measured on 10M events: 12 ms p50 against
// 19 ms, with Get by uid unchanged (bench_test.go).
const primaryKey = "tenant_type, tenant_name, regarding_kind, regarding_namespace, regarding_name, event_time"

// migration is one versioned, idempotent schema step.
type migration struct {
	version int
	name    string
	stmts   func(d ddl) []string
}

// ddl renders DDL for a database, optionally ON CLUSTER. Only validated
// identifiers are spliced into it.
type ddl struct {
	db      string // quoted
	cluster string // quoted, or ""
}

func (d ddl) onCluster() string {
	if d.cluster == "" {
		return ""
	}
	return " ON CLUSTER " + d.cluster
}

// engine returns a (Replicated)ReplacingMergeTree with the given version
// column ("" for none).
func (d ddl) engine(table, version string) string {
	if d.cluster == "" {
		return "ReplacingMergeTree(" + version + ")"
	}
	args := "'/clickhouse/tables/{shard}/{database}/" + table + "', '{replica}'"
	if version != "" {
		args += ", " + version
	}
	return "ReplicatedReplacingMergeTree(" + args + ")"
}

func (d ddl) table(name string) string { return d.db + "." + quoteIdent(name) }

// migrations are applied in order by Open; each statement is idempotent so
// that gateways starting together, or a crash between a statement and the
// schema_migrations row, are harmless.
var migrations = []migration{
	{1, "events table", func(d ddl) []string {
		var cols strings.Builder
		for _, c := range eventColumns {
			fmt.Fprintf(&cols, "    %s %s", c.name, c.typ)
			if c.codec != "" {
				cols.WriteString(" " + c.codec)
			}
			cols.WriteString(",\n")
		}
		// Skip indexes: uid and name answer Get without a tenant-wide scan;
		// related_name helps "involving" and related.name filters, which the
		// sort key cannot serve.
		cols.WriteString("    INDEX uid_bf uid TYPE bloom_filter(0.001) GRANULARITY 1,\n")
		cols.WriteString("    INDEX name_bf name TYPE bloom_filter(0.01) GRANULARITY 1,\n")
		cols.WriteString("    INDEX related_name_bf related_name TYPE bloom_filter(0.01) GRANULARITY 1\n")
		settings := "index_granularity = 2048"
		if d.cluster == "" {
			// Retried identical insert blocks are dropped (replicated
			// tables deduplicate by default).
			settings += ", non_replicated_deduplication_window = 1000"
		}
		return []string{
			"CREATE TABLE IF NOT EXISTS " + d.table("events") + d.onCluster() + " (\n" + cols.String() + ")\n" +
				"ENGINE = " + d.engine("events", "seq") + "\n" +
				"PARTITION BY toYYYYMM(event_time)\n" +
				"PRIMARY KEY (" + primaryKey + ")\n" +
				"ORDER BY (" + sortKey + ")\n" +
				// Retention per row: ttl_seconds is computed at insert from
				// Config.TTL / TenantTTL; a series is kept from its last
				// observation.
				"TTL toDateTime(greatest(event_time, series_last_observed)) + toIntervalSecond(ttl_seconds)\n" +
				"SETTINGS " + settings,
		}
	}},
	{2, "analytics: series minutes, analytics_events, event_minutes", analyticsMigration},
	{3, "events_recent: the last days in time order", recentMigration},
	{4, "analytics: metadata for metadata.<key> dimensions", analyticsDimensionsMigration},
	{5, "drop events_recent: newest first reads analytics_events", dropRecentMigration},
	{6, "analytics_hours: hourly rollups", rollupMigration},
	{7, "events: event_time minmax index for reads by uid in a time range", eventTimeIndexMigration},
	{8, "merges column by column", writeMemoryMigration},
	{9, "merges of more parts at once: fewer rewrites of each row", mergeFanInMigration},
	{10, "events: the ingest's parts in one file", compactInsertsMigration},
	{11, "events: merges of at most 20 parts", mergePartsMigration},
	{12, "events: merges past the ingest's batch column by column", wideMergesMigration},
}

// writeMemoryTables are the tables every insert writes a part to (events
// and what its views fill; analytics_hours, which the rollup builds fill),
// so their parts are merged all the time.
var writeMemoryTables = []string{"events", "analytics_events", "analytics_series", "series_minute_totals", "event_minutes", "analytics_hours"}

// writeMemorySettings bounds the engine's memory per merge. Below 131,072
// rows (every merge of the ingest's parts but the largest) the engine merges
// row by row, reading every column of every part at once through a buffer
// of up to 1 MiB each: a merge of six parts of events held 268–301 MiB, of
// analytics_events about 150 MiB, and up to four run at once. Merged column
// by column, they hold tens of megabytes, for the same CPU
// (BenchmarkInsertMemory; BENCHMARKS.md, session 39). Smaller compressed
// blocks (max_compress_block_size) would bound the inserts' buffers as
// well, but made the dashboard reads about 9% slower: left at the engine's.
const writeMemorySettings = "vertical_merge_algorithm_min_rows_to_activate = 1"

func writeMemoryMigration(d ddl) []string {
	stmts := make([]string, 0, len(writeMemoryTables))
	for _, t := range writeMemoryTables {
		stmts = append(stmts, "ALTER TABLE "+d.table(t)+d.onCluster()+" MODIFY SETTING "+writeMemorySettings)
	}
	return stmts
}

// mergeFanInSetting lets the engine's merge selector wait for about ten
// parts of a size, not five, before it merges them, so each row is
// rewritten about log10 instead of log5 times on its way to a large part.
// The ingest writes a part to each of writeMemoryTables with every insert
// (two a second at the latency phase's rate), and merging them again and
// again was the engine's largest cost. It is set on mergeFanInTables: the
// tables the views fill, not events, whose reads of one object, of a small
// tenant and by uid open every part of the partition and were 1.3–1.7
// times slower with twice the parts (BENCHMARKS.md, session 40).
const mergeFanInSetting = "merge_selector_base = 10"

// mergeFanInTables are writeMemoryTables less events.
var mergeFanInTables = []string{"analytics_events", "analytics_series", "series_minute_totals", "event_minutes", "analytics_hours"}

func mergeFanInMigration(d ddl) []string {
	stmts := make([]string, 0, len(mergeFanInTables))
	for _, t := range mergeFanInTables {
		stmts = append(stmts, "ALTER TABLE "+d.table(t)+d.onCluster()+" MODIFY SETTING "+mergeFanInSetting)
	}
	return stmts
}

// compactInsertSetting keeps a part of events below this many rows in one
// file (compact) whatever its bytes. An insert of the ingest's batch
// (20,000 events of ~600 bytes) passed the engine's 10 MiB for a part of
// a file per column (wide), and writing one holds buffers of about 4 MiB
// for each of its ~60 column streams: 256 MiB of the engine's memory per
// insert, against 87 MiB compact, in about the same time
// (BENCHMARKS.md, session 46). wideMergeSetting (migration 12) lowered
// the threshold to just past the ingest's batch.
const compactInsertSetting = "min_rows_for_wide_part = 100000"

func compactInsertsMigration(d ddl) []string {
	return []string{"ALTER TABLE " + d.table("events") + d.onCluster() + " MODIFY SETTING " + compactInsertSetting}
}

// mergePartsSetting bounds the parts of events one merge reads: a merge
// holds a buffer for each part it reads (a granule of every column, up to
// 10 MiB of events, for compact parts; a column at a time for wide ones).
// When the merges fell behind a write burst the engine merged up to its
// default 100 parts at once, and one such merge held 375 MiB, the largest
// part of the process's resident peak; at most 20 parts, the largest merge
// of a write phase held 196 MiB (BENCHMARKS.md, session 47).
const mergePartsSetting = "max_parts_to_merge_at_once = 20"

func mergePartsMigration(d ddl) []string {
	return []string{"ALTER TABLE " + d.table("events") + d.onCluster() + " MODIFY SETTING " + mergePartsSetting}
}

// wideMergeSetting makes a part of events wide (a file per column) once it
// holds more rows than the ingest's largest insert (DefaultBatchSize), in
// place of compactInsertSetting's 100,000: the inserts stay compact, and
// the merges of them past a batch are written wide. Only a merge into a
// wide part runs column by column (writeMemorySettings); one into a
// compact part reads every column of every part at once. At a write
// phase's rate the ingest inserts parts of about 5,000 rows, and a merge of
// 19 of them into a compact part held 227 MiB, of 10 141 MiB; into a wide
// part, column by column, 154 (20 parts) and 105 MiB, in the same time
// (BENCHMARKS.md, session 49).
var wideMergeSetting = "min_rows_for_wide_part = " + strconv.Itoa(DefaultBatchSize+1)

func wideMergesMigration(d ddl) []string {
	return []string{"ALTER TABLE " + d.table("events") + d.onCluster() + " MODIFY SETTING " + wideMergeSetting}
}

// eventTimeIndexMigration indexes each granule of events by its event_time
// range, first of the skip indexes. The table is sorted by object, so
// every granule holds events of all ages, and a read of the newest
// versions by uid (versionsSQL: the uids of a newest-first chunk, in the
// chunk's time range) checked the uid bloom filter of every granule of the
// partition; the time range now leaves it the few granules that hold an
// event of those seconds. Parts stored before get the index in the
// background (MATERIALIZE INDEX, a mutation that writes the index beside
// the columns).
func eventTimeIndexMigration(d ddl) []string {
	return []string{
		"ALTER TABLE " + d.table("events") + d.onCluster() +
			" ADD INDEX IF NOT EXISTS event_time_mm event_time TYPE minmax GRANULARITY 1 FIRST",
		"ALTER TABLE " + d.table("events") + d.onCluster() + " MATERIALIZE INDEX event_time_mm",
	}
}

// latestMigration is the schema version this build writes.
var latestMigration = migrations[len(migrations)-1].version

// migrate creates the database and applies the migrations not yet recorded
// in schema_migrations.
func (s *Store) migrate(ctx context.Context) error {
	d := s.ddl
	pre := []string{
		"CREATE DATABASE IF NOT EXISTS " + d.db + d.onCluster(),
		"CREATE TABLE IF NOT EXISTS " + d.table("schema_migrations") + d.onCluster() + " (\n" +
			"    version UInt32,\n    name String,\n    applied_at DateTime64(3, 'UTC')\n" +
			") ENGINE = " + d.engine("schema_migrations", "") + " ORDER BY version",
	}
	for _, q := range pre {
		if err := s.t.exec(ctx, q, nil); err != nil {
			return fmt.Errorf("clickhouse: migrate: %w", err)
		}
	}
	applied := map[int]bool{}
	rows, err := s.t.query(ctx, "SELECT toUInt64(version) FROM "+d.table("schema_migrations"), nil)
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: read versions: %w", err)
	}
	maxSeen := 0
	for rows.Next() {
		var v uint64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: migrate: read versions: %w", err)
		}
		applied[int(v)] = true
		maxSeen = max(maxSeen, int(v))
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return fmt.Errorf("clickhouse: migrate: read versions: %w", err)
	}
	if maxSeen > latestMigration {
		s.log.Warn("clickhouse schema is newer than this gateway knows", "database", s.cfg.Database,
			"schema_version", maxSeen, "known_version", latestMigration)
	}
	for _, m := range migrations {
		if applied[m.version] {
			continue
		}
		for _, q := range m.stmts(d) {
			if err := s.t.exec(ctx, q, nil); err != nil {
				return fmt.Errorf("clickhouse: migration %d (%s): %w", m.version, m.name, err)
			}
		}
		p := newParams()
		q := "INSERT INTO " + d.table("schema_migrations") + " (version, name, applied_at) SELECT " +
			p.u64(uint64(m.version)) + ", " + p.str(m.name) + ", now64(3, 'UTC')"
		if err := s.t.exec(ctx, q, p.m); err != nil {
			return fmt.Errorf("clickhouse: record migration %d: %w", m.version, err)
		}
		s.log.Info("clickhouse migration applied", "database", s.cfg.Database, "version", m.version, "name", m.name)
	}
	return nil
}

// quoteIdent quotes a validated identifier.
func quoteIdent(s string) string { return "`" + identEscaper.Replace(s) + "`" }

// identEscaper escapes a backquoted identifier; built once (a Replacer
// builds its tables on first use, and quoteIdent renders every statement).
var identEscaper = strings.NewReplacer("\\", "\\\\", "`", "\\`")
