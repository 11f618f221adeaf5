package clickhouse

import (
	"context"
	"fmt"
)

// TenantStored tells what the events table holds for tenant typ/name:
// events is its rows (every stored version of an event counts until the
// engine merges a series' versions), bytes an estimate of its bytes on
// disk, events times the table's compressed bytes per row: the engine
// keeps sizes per part, not per tenant, and weighing a tenant's columns
// would cost as much as reading its events. The count reads only the sort
// key's tenant columns in the tenant's granules, under the read limits of
// ctx (query.WithReadLimits).
func (s *Store) TenantStored(ctx context.Context, typ, name string) (events, bytes int64, err error) {
	p := newParams()
	n, err := s.usageCount(ctx, "SELECT toUInt64(count()) FROM "+s.events()+" WHERE tenant_type = "+p.str(typ)+" AND tenant_name = "+p.str(name), p.m)
	if err != nil {
		return 0, 0, err
	}
	if n == 0 {
		return 0, 0, nil
	}
	p = newParams()
	rs, err := s.t.query(ctx, "SELECT toUInt64(sum(rows)), toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE active AND database = "+
		p.str(s.cfg.Database)+" AND table = "+p.str(s.eventsTable), p.m)
	if err != nil {
		return 0, 0, fmt.Errorf("clickhouse: table size: %w", err)
	}
	defer rs.Close()
	var rows, size uint64
	if rs.Next() {
		if err := rs.Scan(&rows, &size); err != nil {
			return 0, 0, fmt.Errorf("clickhouse: table size: %w", err)
		}
	}
	if err := rs.Err(); err != nil {
		return 0, 0, fmt.Errorf("clickhouse: table size: %w", err)
	}
	if rows > 0 {
		bytes = int64(float64(size) / float64(rows) * float64(n))
	}
	return int64(n), bytes, nil
}

// usageCount runs a statement answering one UInt64.
func (s *Store) usageCount(ctx context.Context, sql string, params map[string]string) (uint64, error) {
	rs, err := s.t.query(ctx, sql, params)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: count: %w", err)
	}
	defer rs.Close()
	var n uint64
	if rs.Next() {
		if err := rs.Scan(&n); err != nil {
			return 0, fmt.Errorf("clickhouse: count: %w", err)
		}
	}
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("clickhouse: count: %w", err)
	}
	return n, nil
}
