// Package clickhouse keeps events in ClickHouse and answers the read model
// of package query from it (the service's Store and AnalyticsStore ports):
// "two transports, one SQL". The schema (schema.go, analytics_schema.go,
// recent_schema.go, rollup_schema.go), the writer (store.go, writer.go, block.go), listings (list.go,
// filter_sql.go, pagetoken.go) and analytics (analytics.go, rollup.go and one file per
// kind) are written once in ClickHouse SQL with {name:Type} placeholders
// and run over either
//
//   - the embedded chDB engine (package chdb), the default, or
//   - github.com/ClickHouse/clickhouse-go/v2 when Config.DSN is set: the
//     native protocol for servers (TLS and credentials from the DSN), or HTTP
//     when the DSN's scheme is http(s) — the tests use that against the real
//     engine served by package chdbhttp.
//
// Every value a caller supplies reaches ClickHouse as a bound parameter,
// never as SQL text; only identifiers from the configuration (database,
// cluster), validated first, are spliced into DDL.
//
// How versions of an event are stored and read (one snapshot per listing,
// continued exactly by a watch) is described in docs/design/store.md.
package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/event"
)

// Store is the ClickHouse event store. It is safe for concurrent use.
type Store struct {
	cfg  Config
	log  *slog.Logger
	t    transport
	ddl  ddl
	db   string // quoted database
	ttls *ttlTable
	// eventsTable is the events table's name ("events"; benchmarks compare
	// schema variants under other names).
	eventsTable string
	// selectSettings ends every ORDER BY … LIMIT query (see Open).
	selectSettings string
	// inOrderSettings are more settings for a read in key order (see
	// Open), without SETTINGS.
	inOrderSettings string
	// finalThreads is the setting of a FINAL read's threads, after ", "
	// (see Open); empty: the engine's default.
	finalThreads string
	// eventsOnly makes listings read the events table only (benchmarks
	// and tests compare it with the analytics_events index).
	eventsOnly bool
	// probeRows: see list.go; 0 makes every newest-first listing that
	// may read analytics_events read it (tests).
	probeRows int64
	// probeSettings are more settings of that probe (see Open), each
	// after ", ".
	probeSettings string
	// noRollup makes analytics read the per-minute tables only (tests
	// compare the two).
	noRollup bool
	// rollupMargin: see rollup_schema.go (rollupMargin; tests that do
	// not write while they roll up shorten it).
	rollupMargin time.Duration
	// stopRollup ends the background RollUp loop; rollupDone is closed
	// when it has ended (nil without a loop).
	stopRollup context.CancelFunc
	rollupDone chan struct{}
	// stopPrewarm ends the read that warms the engine after open
	// (prewarm.go); prewarmDone is closed when it has ended.
	stopPrewarm context.CancelFunc
	prewarmDone chan struct{}
	// prewarmErr is the prewarm's error (read it after prewarmDone).
	prewarmErr error
	// newest is where newest-first listings start looking (list.go).
	newest newestTime
}

// events is the quoted events table.
func (s *Store) events() string { return s.ddl.table(s.eventsTable) }

// Open opens the transport named by cfg (the embedded engine unless cfg.DSN
// is set) and applies the schema migrations. When the embedded library is
// missing and no DSN is set, the error wraps chdb.ErrLibraryNotFound and says
// how to get the library or how to point at a server.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DSN != "" {
		t, err := openGo(ctx, cfg.DSN, cfg.PoolSize)
		if err != nil {
			return nil, err
		}
		return open(ctx, cfg, log, t)
	}
	return startEngine(ctx, log, engineStarts, func() (*Store, error) { return openEmbedded(ctx, cfg, log) })
}

// openEmbedded starts the embedded engine on cfg.DataDir and opens the
// store on it; the store owns the engine.
func openEmbedded(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	e, err := chdb.Open(chdb.Options{LibPath: cfg.ChDBLib, DataDir: cfg.DataDir, PoolSize: cfg.PoolSize,
		InsertNice: cfg.IngestNice, BackgroundNice: cfg.IngestNice, BackgroundIdle: cfg.BackgroundIdle,
		MergeThreads: mergeThreads(cfg.MergeThreads, runtime.GOMAXPROCS(0))})
	if err != nil {
		if errors.Is(err, chdb.ErrLibraryNotFound) {
			return nil, fmt.Errorf("clickhouse: the embedded engine is not available: %w "+
				"(fetch it with `bash scripts/fetch-chdb.sh` or `make chdb`, set --chdb-lib / EVENTGATE_CHDB_LIB "+
				"to an existing libchdb.so, or set --clickhouse-dsn to use a ClickHouse server)", err)
		}
		return nil, fmt.Errorf("clickhouse: open embedded engine: %w", err)
	}
	return open(ctx, cfg, log, &chdbTransport{e: e, own: true})
}

// engineStarts bounds how often Open starts the embedded engine.
const engineStarts = 3

// startEngine calls start until it succeeds, at most attempts times, again
// only while it fails in a way a new start of the engine may not:
// engineStartFailed. A failed start leaves no engine open (open closes the
// engine it owns), so the next one starts the engine afresh.
func startEngine(ctx context.Context, log *slog.Logger, attempts int, start func() (*Store, error)) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for i := 1; ; i++ {
		s, err := start()
		if err == nil || i >= attempts || ctx.Err() != nil || !engineStartFailed(err) {
			return s, err
		}
		log.Warn("clickhouse: the embedded engine failed to start; starting it again", "attempt", i, "error", err)
	}
}

// engineStartFailed reports an error of the embedded engine's start that
// another start may not meet: it refused the connection (chdb.ErrConnect),
// or a table it loads failed to load (ASYNC_LOAD_WAIT_FAILED, seen once
// after a process using the directory exited: "recursive_mutex lock
// failed"; the next start was clean).
func engineStartFailed(err error) bool {
	if errors.Is(err, chdb.ErrConnect) {
		return true
	}
	var ce *chdb.Error
	return errors.As(err, &ce) && (ce.Code == chdb.CodeAsyncLoadWaitFailed || strings.Contains(ce.Message, "ASYNC_LOAD_WAIT_FAILED"))
}

// OpenEngine is Open on an embedded engine the caller already holds (the
// engine allows one storage path per process, so several stores share it).
// Close does not close e; cfg.DSN, ChDBLib, DataDir and PoolSize are ignored.
func OpenEngine(ctx context.Context, e *chdb.Engine, cfg Config, log *slog.Logger) (*Store, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return open(ctx, cfg, log, &chdbTransport{e: e})
}

func open(ctx context.Context, cfg Config, log *slog.Logger, t transport) (*Store, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ttls, err := newTTLTable(cfg.TTL, cfg.TenantTTL)
	if err != nil {
		t.close()
		return nil, err
	}
	if cfg.SlowRead > 0 {
		t = &slowReads{transport: t, min: cfg.SlowRead, log: log}
	}
	s := &Store{cfg: cfg, log: log, t: t, ttls: ttls, db: quoteIdent(cfg.Database), eventsTable: "events", probeRows: probeRows, rollupMargin: rollupMargin}
	s.ddl = ddl{db: s.db}
	if cfg.Cluster != "" {
		s.ddl.cluster = quoteIdent(cfg.Cluster)
	}
	if err := t.ping(ctx); err != nil {
		t.close()
		return nil, fmt.Errorf("clickhouse: ping (%s): %w", t.kind(), err)
	}
	if err := s.migrate(ctx); err != nil {
		t.close()
		return nil, err
	}
	// Engine 26.5's dynamic top-K filtering (use_top_k_dynamic_filtering,
	// on by default) made ORDER BY … LIMIT skip matching rows of our
	// listings (TestPaginationUnderConcurrentIngest lost up to half of a
	// snapshot; correct with the setting off). Turn it off where the server
	// knows it; older servers reject unknown settings.
	if ok, err := s.hasSetting(ctx, "use_top_k_dynamic_filtering"); err != nil {
		t.close()
		return nil, fmt.Errorf("clickhouse: read settings: %w", err)
	} else if ok {
		s.selectSettings = " SETTINGS use_top_k_dynamic_filtering = 0"
	}
	// Its top-K by skip index (use_skip_indexes_for_top_k, on by default)
	// did the same once events had a minmax index of event_time (migration
	// 7): the oldest-first pages of TestPaginationUnderConcurrentIngest
	// lost 40% of a snapshot.
	if ok, err := s.hasSetting(ctx, "use_skip_indexes_for_top_k"); err != nil {
		t.close()
		return nil, fmt.Errorf("clickhouse: read settings: %w", err)
	} else if ok {
		if s.selectSettings == "" {
			s.selectSettings = " SETTINGS use_skip_indexes_for_top_k = 0"
		} else {
			s.selectSettings += ", use_skip_indexes_for_top_k = 0"
		}
	}
	// The probe of a newest-first listing (list.go: listKeys) asks the
	// events table for its estimate of the rows to read: with a time
	// bound (the gateway's default window) the event_time index made the
	// engine analyse it for every granule first, 15 ms on the 2M-event
	// dashboard store against 4 ms without. The primary key is enough
	// to tell a small scope from a large one.
	if ok, err := s.hasSetting(ctx, "ignore_data_skipping_indices"); err != nil {
		t.close()
		return nil, fmt.Errorf("clickhouse: read settings: %w", err)
	} else if ok {
		s.probeSettings = ", ignore_data_skipping_indices = 'event_time_mm'"
	}
	// Reading in key order with a WHERE, the engine buffers chunks ahead
	// of the merge (read_in_order_use_buffering): for a newest-first page
	// of analytics_events it read 4x what the LIMIT needs (72 -> 16 ms on
	// the 1M-event dashboard store with it off).
	if ok, err := s.hasSetting(ctx, "read_in_order_use_buffering"); err != nil {
		t.close()
		return nil, fmt.Errorf("clickhouse: read settings: %w", err)
	} else if ok {
		s.inOrderSettings = " read_in_order_use_buffering = 0"
	}
	// A FINAL read merges the versions of the parts its range spans; in
	// parallel (max_final_threads, the cores by default) every thread
	// holds a stream of each part. On the embedded engine that doubled
	// what a read over a busy hour held (facets over every tenant after a
	// write phase: 440 MiB against 110 MiB more resident memory) and was
	// no faster on two cores, where the write path needs the other one:
	// one thread there. A server's cores are its own.
	if t.kind() == "chdb" {
		if ok, err := s.hasSetting(ctx, "max_final_threads"); err != nil {
			t.close()
			return nil, fmt.Errorf("clickhouse: read settings: %w", err)
		} else if ok {
			s.finalThreads = ", max_final_threads = 1"
			if s.selectSettings == "" {
				s.selectSettings = " SETTINGS max_final_threads = 1"
			} else {
				s.selectSettings += s.finalThreads
			}
		}
	}
	if cfg.RollupInterval > 0 {
		s.startRollup(cfg.RollupInterval)
	}
	s.startPrewarm()
	log.Info("clickhouse store open", "transport", t.kind(), "database", cfg.Database, "schema_version", latestMigration)
	return s, nil
}

func (s *Store) hasSetting(ctx context.Context, name string) (bool, error) {
	p := newParams()
	rs, err := s.t.query(ctx, "SELECT toUInt64(count()) FROM system.settings WHERE name = "+p.str(name), p.m)
	if err != nil {
		return false, err
	}
	defer rs.Close()
	var n uint64
	for rs.Next() {
		if err := rs.Scan(&n); err != nil {
			return false, err
		}
	}
	return n > 0, rs.Err()
}

// HoldsEvents reports whether the events table holds any row: a store
// whose database was dropped or recreated holds none, whatever a floor kept
// beside it claims.
func (s *Store) HoldsEvents(ctx context.Context) (bool, error) {
	n, err := s.usageCount(ctx, "SELECT toUInt64(count()) FROM (SELECT 1 FROM "+s.events()+" LIMIT 1)", nil)
	if err != nil {
		return false, fmt.Errorf("clickhouse: any event: %w", err)
	}
	return n > 0, nil
}

// Ping checks that ClickHouse answers.
func (s *Store) Ping(ctx context.Context) error { return s.t.ping(ctx) }

// Close stops the background rollups and closes the transport (and the
// embedded engine Open opened).
func (s *Store) Close() error {
	if s.stopPrewarm != nil {
		s.stopPrewarm()
		<-s.prewarmDone
	}
	if s.stopRollup != nil {
		s.stopRollup()
		<-s.rollupDone
	}
	return s.t.close()
}

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// Row is one stored version of an event, as Insert takes it.
type Row = event.Stored

var zeroTime = time.Unix(0, 0).UTC()

// Insert stores rows as one INSERT. Inserting a version again (same uid and
// seq, e.g. after a redelivery) is harmless: queries return each uid once.
func (s *Store) Insert(ctx context.Context, rows []Row) error {
	return s.insert(ctx, rows, nil)
}

// insert is Insert with the batch's client-side work (building and
// encoding it) run on th when th is not nil.
func (s *Store) insert(ctx context.Context, rows []Row, th *niceThread) error {
	if len(rows) == 0 {
		return nil
	}
	b := &eventBatch{rows: rows, ttls: s.ttls}
	defer b.release()
	var err error
	if th != nil {
		err = th.do(ctx, func() error { return s.t.encode(b) })
	} else {
		err = s.t.encode(b)
	}
	if err != nil {
		return fmt.Errorf("clickhouse: insert: %w", err)
	}
	if err := s.t.insert(ctx, s.cfg.Database, s.eventsTable, b); err != nil {
		return fmt.Errorf("clickhouse: insert %d rows: %w", len(rows), err)
	}
	return nil
}

// preparedRow is what both encodings of a row derive from it alike.
type preparedRow struct {
	raw                             []byte
	reg, rel                        *eventgatev1.ObjectReference
	tenantType, tenantName          string
	eventTime, seriesLast, storedAt time.Time // clamped to the columns' range
}

func prepareRow(r Row) (preparedRow, error) {
	ev := r.Event
	if ev == nil {
		return preparedRow{}, errors.New("no event")
	}
	p := preparedRow{
		raw: r.Raw, reg: ev.GetRegarding(), rel: ev.GetRelated(),
		tenantType: ev.GetTenant().GetType(), tenantName: ev.GetTenant().GetName(),
		eventTime: zeroTime, seriesLast: zeroTime, storedAt: zeroTime,
	}
	if p.raw == nil {
		var err error
		if p.raw, err = event.Marshal(ev); err != nil {
			return preparedRow{}, err
		}
	}
	if ev.GetEventTime() != nil {
		p.eventTime = clampTime(ev.GetEventTime().AsTime())
	}
	if lo := ev.GetSeries().GetLastObservedTime(); lo != nil {
		p.seriesLast = clampTime(lo.AsTime())
	}
	if !r.StoredAt.IsZero() {
		p.storedAt = clampTime(r.StoredAt)
	}
	return p, nil
}

// rowValues are the values of one row in eventColumns order, in the
// columns' Go types (for clickhouse-go; eventBlock.appendRow is the same for
// the embedded engine).
func rowValues(r Row, ttls *ttlTable) ([]any, error) {
	if r.Event == nil && r.Raw != nil {
		// Decoded for this row alone: its values keep its maps.
		ev, err := event.UnmarshalAliased(r.Raw)
		if err != nil {
			return nil, &event.UndecodableError{Seq: r.Seq, Err: err}
		}
		r.Event = ev
	}
	p, err := prepareRow(r)
	if err != nil {
		return nil, err
	}
	ev, raw, reg, rel := r.Event, p.raw, p.reg, p.rel
	tt, tn, et, seriesLast, storedAt := p.tenantType, p.tenantName, p.eventTime, p.seriesLast, p.storedAt
	v := []any{
		tt,
		tn,
		reg.GetKind(),
		reg.GetNamespace(),
		reg.GetName(),
		et,
		ev.GetUid(),
		r.Seq,
		ev.GetName(),
		ev.GetNamespace(),
		ev.GetType(),
		ev.GetReason(),
		ev.GetAction(),
		ev.GetNote(),
		reg.GetApiVersion(),
		reg.GetUid(),
		reg.GetFieldPath(),
		rel.GetApiVersion(),
		rel.GetKind(),
		rel.GetNamespace(),
		rel.GetName(),
		rel.GetUid(),
		rel.GetFieldPath(),
		ev.GetReportingController(),
		ev.GetReportingInstance(),
		nonNil(ev.GetLabels()),
		nonNil(ev.GetAnnotations()),
		nonNil(ev.GetMetadata()),
		ev.GetSeries().GetCount(),
		seriesLast,
		ev.GetSeries().GetState(),
		r.Subject,
		storedAt,
		ttls.lookup(tt, tn),
		string(raw),
		r.WriteReason,
	}
	starts, counts := minuteColumns(r.Minutes)
	v = append(v, starts, counts)
	if len(v) != len(eventColumns) {
		panic("clickhouse: rowValues does not match eventColumns")
	}
	return v, nil
}

// DateTime64 holds 1900-01-01 to 2299-12-31; the columns clamp to that
// range (the raw event keeps the exact time).
var (
	minTime = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(2299, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

func clampTime(t time.Time) time.Time {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Before(minTime) {
		return minTime
	}
	if t.After(maxTime) {
		return maxTime
	}
	return t
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
