package clickhouse

import (
	"context"
	"strings"
	"testing"
)

// TestEmbeddedFinalReadsOnOneThread: on the embedded engine a store's reads
// and rollup builds merge FINAL on one thread (see Open); through a server
// they keep the server's default.
func TestEmbeddedFinalReadsOnOneThread(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		rs, err := s.t.query(ctx, "SELECT toUInt64(getSetting('max_final_threads'))"+s.selectSettings, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		var n uint64
		for rs.Next() {
			if err := rs.Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		embedded := s.t.kind() == "chdb"
		if embedded && (n != 1 || s.finalThreads == "") {
			t.Fatalf("embedded engine: reads merge FINAL on %d threads (rollup setting %q), want 1", n, s.finalThreads)
		}
		if !embedded && (strings.Contains(s.selectSettings, "max_final_threads") || s.finalThreads != "") {
			t.Fatalf("%s: reads set %q and rollups %q, want the server's default threads", s.t.kind(), s.selectSettings, s.finalThreads)
		}
	})
}
