package clickhouse

import (
	"context"
	"math"

	"github.com/eventgate/eventgate/internal/query"
)

// The first newest-first listing in a process paid for what the engine
// loads on first use: the primary indexes of every part of the events table
// (the size probe's refusal analyses them), the marks and newest granules of
// analytics_events, the uid skip index and marks of the newest events part,
// and the engine's own code paths. Measured on the 10M-event dashboard
// store, the first listing of a new process took 0.5-0.9 s, and 0.1-0.3 s
// once the engine had served another store. So a store, once open, lists
// the newest event of every tenant in the background through that path,
// and the first dashboard read finds those loaded. It reads one page of
// one row: what it loads is kept by the engine's caches, not by it.

// startPrewarm starts the background read; Close ends it.
func (s *Store) startPrewarm() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPrewarm, s.prewarmDone = cancel, make(chan struct{})
	go func() {
		defer close(s.prewarmDone)
		if err := s.prewarm(ctx); err != nil && ctx.Err() == nil {
			s.prewarmErr = err
			s.log.Debug("clickhouse prewarm failed", "error", err)
		}
	}()
}

func (s *Store) prewarm(ctx context.Context) error {
	// A tenant condition makes the estimate analyse every part's primary
	// index, as the size probe of a listing does; the estimate reads
	// nothing else.
	q := query.List{Scope: query.Scope{Tenants: []query.TenantRef{{Type: "", Name: ""}}}, PageSize: 1}
	sql, params := s.querySQL(q, math.MaxUint64, nil, 2)
	if _, err := s.estimateRows(ctx, sql, params); err != nil {
		return err
	}
	_, err := s.listIndexed(ctx, query.List{Scope: query.Scope{All: true}, PageSize: 1}, math.MaxUint64, nil, 1)
	return err
}
