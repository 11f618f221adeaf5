package clickhouse

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestWriteTablesMergeColumnByColumnAndFewerTimes: every table the
// ingest's inserts and the rollup builds write is merged column by column
// at every size, those the views fill with the wider merge fan-in (events
// with the engine's), and a store created before migrations 8 and 9 is
// too once a gateway of this build opens it.
func TestWriteTablesMergeColumnByColumnAndFewerTimes(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		s := open(cfg)
		check := func(when string) {
			t.Helper()
			for _, table := range writeMemoryTables {
				rows, err := s.t.query(ctx, "SELECT create_table_query FROM system.tables WHERE database = {db:String} AND name = {t:String}",
					map[string]string{"db": s.cfg.Database, "t": table})
				if err != nil {
					t.Fatal(err)
				}
				var ddl string
				found := rows.Next()
				if found {
					err = rows.Scan(&ddl)
				}
				rows.Close()
				if err != nil || !found {
					t.Fatalf("%s: %s: no table (%v)", when, table, err)
				}
				if want := "vertical_merge_algorithm_min_rows_to_activate = 1"; !strings.Contains(ddl, want) {
					t.Errorf("%s: %s lacks %q:\n%s", when, table, want, ddl)
				}
				if fanIn := slices.Contains(mergeFanInTables, table); strings.Contains(ddl, mergeFanInSetting) != fanIn {
					t.Errorf("%s: %s: %q set: %v, want %v:\n%s", when, table, mergeFanInSetting, !fanIn, fanIn, ddl)
				}
			}
		}
		check("a new store")

		// Back to schema 7: the engine's defaults.
		for _, table := range writeMemoryTables {
			q := "ALTER TABLE " + s.ddl.table(table) + " RESET SETTING vertical_merge_algorithm_min_rows_to_activate, merge_selector_base"
			if err := s.t.exec(ctx, q, nil); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		q := "ALTER TABLE " + s.ddl.table("schema_migrations") + " DELETE WHERE version IN (8, 9) SETTINGS mutations_sync = 1"
		if err := s.t.exec(ctx, q, nil); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		s = open(cfg)
		check("a store of schema 7, reopened")
	})
}
