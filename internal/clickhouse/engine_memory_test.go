package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

// The engine's memory on /metrics is split by what holds it: a read that
// builds a large result holds memory while it runs, and it is counted as
// a read, not as an insert or a merge.
func TestEngineMemoryCountsWhatARunningReadHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		before, err := s.EngineMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if before.Tracked <= 0 || before.Tracked > 16<<30 {
			t.Fatalf("tracked %d bytes, want the engine's memory in use (above 0, under 16 GiB)", before.Tracked)
		}
		// About 3 s (0.1 s a block of 65,536 rows) building a 16 MiB array.
		const read = "SELECT length(groupArray(number)) FROM numbers(2000000) WHERE sleepEachRow(0.0000015) = 0 SETTINGS max_block_size = 65536"
		done := make(chan error, 1)
		go func() {
			_, err := chtest.Engine(t).Query(context.Background(), read, "TSV")
			done <- err
		}()
		const want = 4 << 20
		var seen EngineMemory
		for {
			m, err := s.EngineMemory(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			seen.Reads, seen.Inserts = max(seen.Reads, m.Reads), max(seen.Inserts, m.Inserts)
			if seen.Reads >= want {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("the read ended (err %v) and the most its reads held was %d bytes, want at least %d", err, seen.Reads, want)
			case <-time.After(20 * time.Millisecond): // the poll's interval
			}
		}
		if seen.Reads > 256<<20 {
			t.Errorf("the read held %d bytes, want about its 16 MiB array (at most 256 MiB)", seen.Reads)
		}
		if seen.Inserts != 0 {
			t.Errorf("inserts held %d bytes with no insert running, want 0", seen.Inserts)
		}
		if err := <-done; err != nil {
			t.Fatalf("the read: %v", err)
		}
	})
}
