package clickhouse

import (
	"context"
	"fmt"
	"testing"
)

// TestEventsMergeAtMostTwentyPartsAtOnce: however many parts of events have
// piled up, one merge reads at most 20 of them (a merge holds buffers for
// every part it reads), on a new store and on a store created before
// migration 11 once this build opens it.
func TestEventsMergeAtMostTwentyPartsAtOnce(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		rows := distinctRows(t, 60)
		const piled = 30
		round := func(when string, rows []Row) {
			t.Helper()
			exec := func(q string) {
				t.Helper()
				if err := s.t.exec(ctx, q, nil); err != nil {
					t.Fatalf("%s: %s: %v", when, q, err)
				}
			}
			// query returns the first column of each row of q as integers.
			query := func(q string) []uint64 {
				t.Helper()
				rs, err := s.t.query(ctx, q, map[string]string{"db": s.cfg.Database})
				if err != nil {
					t.Fatalf("%s: %s: %v", when, q, err)
				}
				defer rs.Close()
				var out []uint64
				for rs.Next() {
					var v uint64
					if err := rs.Scan(&v); err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
				if err := rs.Err(); err != nil {
					t.Fatal(err)
				}
				return out
			}
			parts := "FROM system.parts WHERE database = {db:String} AND table = 'events'"
			since := query("SELECT toUInt64(max(max_block_number)) " + parts)[0]
			exec("TRUNCATE TABLE " + s.ddl.table("events")) // nothing older to merge the parts with
			exec("SYSTEM STOP MERGES " + s.ddl.table("events"))
			for i := range piled {
				if err := s.Insert(ctx, rows[i:i+1]); err != nil {
					t.Fatalf("%s: insert: %v", when, err)
				}
			}
			ours := fmt.Sprintf("%s AND min_block_number > %d", parts, since)
			if n := query("SELECT count() " + ours + " AND active")[0]; n != piled {
				t.Fatalf("%s: %d active parts after %d inserts with merges stopped", when, n, piled)
			}
			inserted := query("SELECT toUInt64(max(level)) " + ours)[0] // the engine's level of an inserted part
			exec("SYSTEM START MERGES " + s.ddl.table("events"))
			// OPTIMIZE (not FINAL) merges as the background merges do; either
			// may take the parts first, so merge until one part is left.
			for i := 0; query("SELECT count() " + ours + " AND active")[0] > 1; i++ {
				if i == 100 {
					t.Fatalf("%s: the piled-up parts were not merged into one", when)
				}
				exec("OPTIMIZE TABLE " + s.ddl.table("events"))
			}
			// Merges of the inserted parts, active or replaced since.
			spans := query(fmt.Sprintf("SELECT toUInt64(max_block_number - min_block_number + 1) %s AND level = %d", ours, inserted+1))
			if len(spans) == 0 {
				t.Fatalf("%s: no merge of the inserted parts", when)
			}
			for _, n := range spans {
				if n > 20 {
					t.Errorf("%s: a merge read %d parts at once, want at most 20", when, n)
				}
			}
		}
		round("a new store", rows[:piled])

		// Back to schema 10: the engine's default (100).
		for _, q := range []string{
			"ALTER TABLE " + s.ddl.table("events") + " RESET SETTING max_parts_to_merge_at_once",
			"ALTER TABLE " + s.ddl.table("schema_migrations") + " DELETE WHERE version = 11 SETTINGS mutations_sync = 1",
		} {
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s = open(cfg)
		round("a store of schema 10, reopened", rows[piled:])
	})
}
