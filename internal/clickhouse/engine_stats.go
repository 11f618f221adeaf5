package clickhouse

import (
	"context"
	"fmt"
)

// Embedded reports whether the store runs on the engine embedded in this
// process (no DSN).
func (s *Store) Embedded() bool { return s.cfg.DSN == "" }

// EngineMemory is the memory the engine's own tracker counts in use
// (system.metrics MemoryTracking): its queries, inserts, merges and caches.
// For the embedded engine it is the part of this process's resident memory
// the engine allocated and holds; its code and the freed pages its allocator
// has not returned yet are not in it (docs/design/chdb.md, "Memory").
func (s *Store) EngineMemory(ctx context.Context) (int64, error) {
	n, err := s.usageCount(ctx, "SELECT toUInt64(greatest(value, 0)) FROM system.metrics WHERE metric = 'MemoryTracking'", nil)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: engine memory: %w", err)
	}
	return int64(n), nil
}

// ActiveParts is the number of active parts of each of the store's tables.
// The engine merges an insert's parts in the background; parts that pile
// up (merges behind the inserts) slow every read.
func (s *Store) ActiveParts(ctx context.Context) (map[string]int, error) {
	p := newParams()
	rs, err := s.t.query(ctx, "SELECT table, toUInt64(count()) FROM system.parts WHERE active AND database = "+p.str(s.cfg.Database)+" GROUP BY table", p.m)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: active parts: %w", err)
	}
	defer rs.Close()
	out := map[string]int{}
	for rs.Next() {
		var table string
		var n uint64
		if err := rs.Scan(&table, &n); err != nil {
			return nil, fmt.Errorf("clickhouse: active parts: %w", err)
		}
		out[table] = int(n)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: active parts: %w", err)
	}
	return out, nil
}
