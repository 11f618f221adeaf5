package clickhouse

import (
	"context"
	"fmt"
)

// Embedded reports whether the store runs on the engine embedded in this
// process (no DSN).
func (s *Store) Embedded() bool { return s.cfg.DSN == "" }

// EngineMemory is the memory the engine's own tracker counts in use
// (system.metrics MemoryTracking): its queries, inserts, merges and caches,
// and the parts of it that its running merges and statements hold. For the
// embedded engine it is the part of this process's resident memory the
// engine allocated and holds; its code and the freed pages its allocator
// has not returned yet are not in it (docs/design/chdb.md, "Memory").
type EngineMemory struct {
	Tracked int64 // everything the tracker counts
	Merges  int64 // running background merges and mutations
	Inserts int64 // running INSERT statements, their views included
	Reads   int64 // running reads and other statements but this one
}

// engineMemorySQL reads EngineMemory in one statement: aggregates without
// GROUP BY, one row each (scalar subqueries would be Nullable, which
// RowBinary does not mark). A statement's or merge's memory_usage counts
// what its threads hold now. (The engine's MergesMutationsMemoryTracking
// read 0 through a write load while merges ran.)
const engineMemorySQL = "SELECT toUInt64(greatest(m.tracked, 0)), toUInt64(greatest(g.merges, 0)), " +
	"toUInt64(greatest(p.inserts, 0)), toUInt64(greatest(p.reads, 0)) " +
	"FROM (SELECT sumIf(value, metric = 'MemoryTracking') AS tracked FROM system.metrics) AS m " +
	"CROSS JOIN (SELECT sum(memory_usage) AS merges FROM system.merges) AS g " +
	"CROSS JOIN (SELECT sumIf(memory_usage, query_kind = 'Insert') AS inserts, " +
	"sumIf(memory_usage, query_kind != 'Insert' AND query_id != queryID()) AS reads FROM system.processes) AS p"

// EngineMemory reads what the engine's tracker counts in use, and what its
// running merges, inserts and reads hold of it.
func (s *Store) EngineMemory(ctx context.Context) (EngineMemory, error) {
	rs, err := s.t.query(ctx, engineMemorySQL, nil)
	if err != nil {
		return EngineMemory{}, fmt.Errorf("clickhouse: engine memory: %w", err)
	}
	defer rs.Close()
	var v [4]uint64
	if !rs.Next() {
		if err := rs.Err(); err != nil {
			return EngineMemory{}, fmt.Errorf("clickhouse: engine memory: %w", err)
		}
		return EngineMemory{}, fmt.Errorf("clickhouse: engine memory: no row")
	}
	if err := rs.Scan(&v[0], &v[1], &v[2], &v[3]); err != nil {
		return EngineMemory{}, fmt.Errorf("clickhouse: engine memory: %w", err)
	}
	if err := rs.Err(); err != nil {
		return EngineMemory{}, fmt.Errorf("clickhouse: engine memory: %w", err)
	}
	return EngineMemory{Tracked: int64(v[0]), Merges: int64(v[1]), Inserts: int64(v[2]), Reads: int64(v[3])}, nil
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
