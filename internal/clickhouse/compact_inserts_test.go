package clickhouse

import (
	"context"
	"testing"
)

// TestIngestBatchOfEventsIsWrittenCompact: an insert of the ingest's batch
// size of realistic events (over the engine's 10 MiB for a part of a file
// per column) writes a compact part of events, on a new store and on a
// store created before migration 10 once this build opens it.
func TestIngestBatchOfEventsIsWrittenCompact(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		rows := distinctRows(t, cfg.BatchSize)
		insert := func(when string) {
			t.Helper()
			if err := s.Insert(ctx, rows); err != nil {
				t.Fatalf("%s: insert: %v", when, err)
			}
			rs, err := s.t.query(ctx, "SELECT part_type, toUInt64(rows), toUInt64(data_uncompressed_bytes) FROM system.parts "+
				"WHERE active AND database = {db:String} AND table = 'events' ORDER BY modification_time DESC, name DESC LIMIT 1",
				map[string]string{"db": s.cfg.Database})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			if !rs.Next() {
				t.Fatalf("%s: no part of events", when)
			}
			var typ string
			var n, bytes uint64
			if err := rs.Scan(&typ, &n, &bytes); err != nil {
				t.Fatal(err)
			}
			if bytes < 10<<20 {
				t.Fatalf("%s: the batch's part holds %d bytes, not over the engine's 10 MiB for a wide part: the test proves nothing", when, bytes)
			}
			if typ != "Compact" {
				t.Fatalf("%s: the part of %d rows (%d bytes) is %s, want Compact", when, n, bytes, typ)
			}
		}
		insert("a new store")

		// Back to schema 9: the engine's default.
		for _, q := range []string{
			"ALTER TABLE " + s.ddl.table("events") + " RESET SETTING min_rows_for_wide_part",
			"ALTER TABLE " + s.ddl.table("schema_migrations") + " DELETE WHERE version = 10 SETTINGS mutations_sync = 1",
		} {
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = open(cfg)
		insert("a store of schema 9, reopened")
	})
}

// TestMergesPastTheIngestBatchWriteWideParts: parts of events merged into
// more rows than the ingest's largest insert are written wide, so the
// engine merges them column by column; smaller merges stay compact.
func TestMergesPastTheIngestBatchWriteWideParts(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		const partRows = 5000
		rows := distinctRows(t, cfg.BatchSize+partRows)
		exec := func(q string) {
			t.Helper()
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		merged := func(parts int) (string, uint64) {
			t.Helper()
			exec("TRUNCATE TABLE " + s.ddl.table("events"))
			exec("SYSTEM STOP MERGES " + s.ddl.table("events"))
			for i := 0; i < parts; i++ {
				if err := s.Insert(ctx, rows[i*partRows:(i+1)*partRows]); err != nil {
					t.Fatal(err)
				}
			}
			exec("SYSTEM START MERGES " + s.ddl.table("events"))
			exec("OPTIMIZE TABLE " + s.ddl.table("events") + " FINAL")
			rs, err := s.t.query(ctx, "SELECT part_type, toUInt64(rows) FROM system.parts "+
				"WHERE active AND database = {db:String} AND table = 'events'", map[string]string{"db": s.cfg.Database})
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			var typ string
			var n uint64
			for k := 0; rs.Next(); k++ {
				if k > 0 {
					t.Fatalf("%d parts merged into more than one part", parts)
				}
				if err := rs.Scan(&typ, &n); err != nil {
					t.Fatal(err)
				}
			}
			return typ, n
		}
		over := cfg.BatchSize/partRows + 1
		if typ, n := merged(over); typ != "Wide" || n != uint64(over*partRows) {
			t.Fatalf("%d parts of %d rows merged into a %s part of %d rows, want Wide of %d", over, partRows, typ, n, over*partRows)
		}
		if typ, n := merged(2); typ != "Compact" || n != 2*partRows {
			t.Fatalf("2 parts of %d rows merged into a %s part of %d rows, want Compact of %d", partRows, typ, n, 2*partRows)
		}
	})
}
