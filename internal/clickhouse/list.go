package clickhouse

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// resultColumns are what Query and Get read back.
const resultColumns = "seq, raw, toInt64(toUnixTimestamp64Micro(event_time)) AS t_us, uid, " +
	"toString(tenant_type) AS tt, toString(tenant_name) AS tn"

type result struct {
	seq    uint64
	raw    string
	tus    int64
	uid    string
	tt, tn string
}

// Query returns one page of the events matching q within q.Scope, as of
// resourceVersion rv: only versions with seq <= rv are read, each event once
// at its latest such version. Pass the ingest ack floor (every seq <= it is
// in ClickHouse) so that a watch from Page.ResourceVersion continues the
// list exactly. With q.PageToken, the token's rv is used instead of rv, so
// every page of one listing reads the same snapshot.
func (s *Store) Query(ctx context.Context, q query.List, rv uint64) (query.Page, error) {
	size := q.PageSize
	if size <= 0 {
		size = query.DefaultPageSize
	}
	size = min(size, query.MaxPageSize)
	hash := filterHash(q.Filter, q.OldestFirst)
	var cur *pageToken
	if q.PageToken != "" {
		tok, err := decodeToken(q.PageToken)
		if err != nil || tok.Hash != hash {
			return query.Page{}, query.ErrBadPageToken
		}
		cur, rv = tok, tok.RV
	}
	page := query.Page{ResourceVersion: rv}
	if !q.Scope.All && len(q.Scope.Tenants) == 0 {
		return page, nil
	}

	if err := q.Filter.Validate(); err != nil {
		return query.Page{}, err
	}
	keys, err := s.listKeys(ctx, q, rv, cur, size+1)
	if err != nil {
		return query.Page{}, err
	}
	if len(keys) > size {
		keys = keys[:size]
		last := keys[size-1]
		page.NextPageToken = encodeToken(&pageToken{
			V: tokenVersion, RV: rv, TimeUS: last.tus, UID: last.uid,
			TenantType: last.tt, TenantName: last.tn, Hash: hash,
		})
	}
	page.Events = make([]*eventgatev1.Event, 0, len(keys))
	for _, r := range keys {
		ev, err := decodeRow(r)
		if err != nil {
			return query.Page{}, err
		}
		page.Events = append(page.Events, ev)
	}
	return page, nil
}

// appendLatest appends to keys the first row of each key in res (its latest
// version: versions of a key are adjacent, newest first) up to want keys;
// done: keys holds want.
func appendLatest(keys, res []result, want int) (_ []result, done bool) {
	for _, r := range res {
		if n := len(keys); n > 0 && sameKey(keys[n-1], r) {
			continue
		}
		keys = append(keys, r)
		if len(keys) == want {
			return keys, true
		}
	}
	return keys, false
}

func sameKey(a, b result) bool {
	return a.tus == b.tus && a.uid == b.uid && a.tt == b.tt && a.tn == b.tn
}

// listKeys reads up to want events (their latest versions <= rv) after
// cur, in the listing's order.
//
// Versions of one event are adjacent in the order (same event_time, uid
// and tenant; seq descending), so the first row of each key is its latest
// version <= rv and the others are skipped here. The SQL has no LIMIT 1 BY:
// that step makes ClickHouse sort every matching row (measured on 10M
// events: 3.2 s for the newest 100 of all tenants), while ORDER BY … LIMIT
// runs as a top-N, read in order when the sort key prefix is fixed, with
// the raw column read for the top rows only. When versions fill a chunk,
// the next chunk starts after the last key.
//
// Newest first, unless the filter names the regarding object, the keys
// come from analytics_events, which is in time order (listIndexed).
func (s *Store) listKeys(ctx context.Context, q query.List, rv uint64, cur *pageToken, want int) ([]result, error) {
	if !s.indexed(q) {
		return s.listEvents(ctx, q, rv, cur, want, "")
	}
	// The events table answers a small scope best (a small tenant's rows
	// are one short range of its key), analytics_events a large one. The
	// engine knows which from its index before it reads anything: the
	// events table is asked to refuse a read of more than probeRows rows.
	// (The refusal needs the primary index of every events part: a new
	// process loaded them in the first listing, 0.1-0.45 s on the 10M-event
	// dashboard store; the store's prewarm loads them now, prewarm.go.)
	if probe := s.probeRows; probe > 0 {
		if l, ok := query.ReadLimitsFrom(ctx); ok && l.MaxRowsToRead > 0 {
			probe = min(probe, l.MaxRowsToRead)
		}
		keys, err := s.listEvents(ctx, q, rv, cur, want, ", max_rows_to_read = "+strconv.FormatInt(probe, 10)+", read_overflow_mode = 'throw'"+s.probeSettings)
		if err == nil || !tooManyRows(err) {
			return keys, err
		}
	}
	return s.listIndexed(ctx, q, rv, cur, want)
}

// probeRows (the default of Store.probeRows): a newest-first listing whose
// rows in the events table are more than this reads its keys from
// analytics_events. Reading this many
// takes the events table about what the two steps of listIndexed take
// (measured on the 1M-event dashboard store: a 14 ms small tenant vs 52 ms
// through the index; 500k rows 43 ms).
const probeRows = 256 << 10

// tooManyRows: err is the engine refusing a read over max_rows_to_read.
func tooManyRows(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "TOO_MANY_ROWS") || strings.Contains(msg, "max_rows_to_read")
}

// estimateRows returns the rows a SELECT would read, as the engine
// estimates them from its indexes without reading (EXPLAIN ESTIMATE): the
// prewarm has it analyse the primary indexes.
func (s *Store) estimateRows(ctx context.Context, sql string, params map[string]string) (uint64, error) {
	rs, err := s.t.query(ctx, "EXPLAIN ESTIMATE "+sql, params)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: estimate a listing: %w", err)
	}
	defer rs.Close()
	var total uint64
	for rs.Next() {
		var db, table string
		var parts, rows, marks uint64
		if err := rs.Scan(&db, &table, &parts, &rows, &marks); err != nil {
			return 0, fmt.Errorf("clickhouse: estimate a listing: %w", err)
		}
		total += rows
	}
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("clickhouse: estimate a listing: %w", err)
	}
	return total, nil
}

// listEvents is listKeys from the events table; settings are added to
// its SETTINGS clause.
func (s *Store) listEvents(ctx context.Context, q query.List, rv uint64, cur *pageToken, want int, settings string) ([]result, error) {
	chunk := want + want/8 + 8
	var keys []result
	for {
		sql, params := s.querySQL(q, rv, cur, chunk)
		if settings != "" {
			if s.selectSettings == "" {
				sql += " SETTINGS " + strings.TrimPrefix(settings, ", ")
			} else {
				sql += settings
			}
		}
		res, err := s.read(ctx, sql, params)
		if err != nil {
			return nil, err
		}
		var done bool
		if keys, done = appendLatest(keys, res, want); done {
			return keys, nil
		}
		if len(res) < chunk {
			return keys, nil
		}
		last := keys[len(keys)-1]
		cur = &pageToken{TimeUS: last.tus, UID: last.uid, TenantType: last.tt, TenantName: last.tn}
	}
}

// indexed reports whether a listing reads its keys from analytics_events:
// newest first, unless the filter names the regarding object (the events
// table's key finds its rows directly).
func (s *Store) indexed(q query.List) bool {
	f := q.Filter
	return !q.OldestFirst && !s.eventsOnly && s.eventsTable == "events" &&
		len(f.Regarding.Name.In) == 0 && len(f.Regarding.UID.In) == 0
}

// querySQL renders one chunk of a listing from the events table: the
// versions <= rv matching q, in order, after the cursor, at most limit rows.
func (s *Store) querySQL(q query.List, rv uint64, cur *pageToken, limit int) (string, map[string]string) {
	p := newParams()
	var w where
	w.add("seq <= " + p.u64(rv))
	w.add(scopeSQL(p, q.Scope))
	filterSQL(p, &w, q.Filter) // validated by the caller
	dir := "DESC"
	if q.OldestFirst {
		dir = "ASC"
	}
	cursorSQL(p, &w, cur, q.OldestFirst, false)
	return "SELECT " + resultColumns + " FROM " + s.events() +
		" WHERE " + w.String() +
		" ORDER BY event_time " + dir + ", uid " + dir + ", tenant_type " + dir + ", tenant_name " + dir + ", seq DESC" +
		" LIMIT " + p.u64(uint64(limit)) + s.selectSettings, p.m
}

// cursorSQL adds the keyset position after cur; hour also bounds the hour
// (analytics_events' key starts with it, and the engine does not derive
// that bound from event_time's).
func cursorSQL(p *paramSet, w *where, cur *pageToken, asc, hour bool) {
	if cur == nil {
		return
	}
	cmp := "<"
	if asc {
		cmp = ">"
	}
	t := p.micros(cur.TimeUS)
	// The plain bound prunes by the primary key; the tuple is the exact
	// keyset position.
	w.add("event_time " + cmp + "= " + t)
	if hour {
		w.add("toStartOfHour(event_time) " + cmp + "= toStartOfHour(" + t + ")")
	}
	w.add("(event_time, uid, toString(tenant_type), toString(tenant_name)) " + cmp + " (" +
		t + ", " + p.str(cur.UID) + ", " + p.str(cur.TenantType) + ", " + p.str(cur.TenantName) + ")")
}

// candidate is a key read from analytics_events.
type candidate struct {
	tus         int64
	uid, tt, tn string
}

// listIndexed lists newest first in two steps per chunk. analytics_events
// (migration 2, filled with every insert for analytics) holds every event
// once, with the filter columns, in a key that starts with the hour and the
// tenant: read in order, the newest hours first, it yields the next
// candidate keys of the listing without reading raw events, and stops at
// the chunk. Then the events table gives each candidate's latest version
// <= rv, found by its uid, with the filter applied again to that
// version. A candidate with no such version (stored after rv) is skipped,
// and the listing goes on after the chunk's last candidate. So the write path pays nothing for newest-first
// listings: analytics_events is written anyway.
func (s *Store) listIndexed(ctx context.Context, q query.List, rv uint64, cur *pageToken, want int) ([]result, error) {
	chunk := want + want/8 + 8
	var keys []result
	for {
		cands, rows, err := s.candidates(ctx, q, cur, chunk)
		if err != nil {
			return nil, err
		}
		if len(cands) > 0 {
			sql, params := versionsSQL(s, q, rv, cands)
			res, err := s.read(ctx, sql, params)
			if err != nil {
				return nil, err
			}
			var done bool
			if keys, done = appendLatest(keys, res, want); done {
				return keys, nil
			}
		}
		if rows < chunk {
			return keys, nil
		}
		last := cands[len(cands)-1]
		cur = &pageToken{TimeUS: last.tus, UID: last.uid, TenantType: last.tt, TenantName: last.tn}
	}
}

// candidates reads the next distinct keys of a newest-first listing from
// analytics_events, from at most limit rows (rows): copies of one key not
// yet merged are adjacent and count once.
//
// Within an hour, analytics_events is in tenant order: a listing over many
// tenants sorts every row of the newest hour it reads, which costs what
// the hour holds (measured on the busy-hour dashboard store, 2M events in
// the newest hour: 119 ms for the keys of every tenant's newest 100).
// So it first reads a window before the listing's position (the newest
// event time stored, the cursor, or the filter's Until), in which the primary key leaves only the
// granules that reach into it (6.6 ms there). A window that yields limit
// rows yields exactly the listing's first limit rows; one that does not is
// widened, from its own rate, a few times at most, then the read is
// unbounded.
func (s *Store) candidates(ctx context.Context, q query.List, cur *pageToken, limit int) (out []candidate, rows int, err error) {
	ref := s.now().UnixMicro()
	if t := s.newest.get(ctx, s); !t.IsZero() && t.UnixMicro() < ref {
		ref = t.UnixMicro()
	}
	if cur != nil {
		ref = cur.TimeUS
	} else if t := q.Filter.Until; !t.IsZero() && t.Before(s.now()) {
		ref = ceilMicros(t)
	}
	w := firstCandidateWindow
	for range maxCandidateWindows {
		from := ref - w.Microseconds()
		if t := q.Filter.Since; !t.IsZero() && ceilMicros(t) >= from {
			break // the filter's own window is narrower
		}
		if !inDateTimeRange(time.UnixMicro(from)) {
			break
		}
		out, rows, err = s.candidatesFrom(ctx, q, cur, limit, from)
		if err != nil || rows == limit {
			return out, rows, err
		}
		// The window holds rows ÷ w of the listing's rows: widen it to
		// hold about twice limit (at least ×4; ×60 when empty).
		grow := int64(60)
		if rows > 0 {
			grow = min(max(int64(2*limit/rows), 4), 60)
		}
		w *= time.Duration(grow)
	}
	return s.candidatesFrom(ctx, q, cur, limit, math.MinInt64)
}

// now is the wall clock of the listings' windows.
func (s *Store) now() time.Time { return time.Now() }

// newestTime caches the newest event time analytics_events holds, for a
// second: where candidates' first window ends when the store's newest
// events are older than now. It is read from the parts' minmax index
// (whole seconds, rounded up here), which costs no read of the table. A
// stale or missing value costs a wider window, never a wrong listing.
type newestTime struct {
	mu sync.Mutex
	at time.Time // when t was read
	t  time.Time
}

func (n *newestTime) get(ctx context.Context, s *Store) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := s.now()
	if now.Sub(n.at) < time.Second {
		return n.t
	}
	n.at = now
	p := newParams()
	rs, err := s.t.query(ctx, "SELECT toInt64(toUnixTimestamp(max(max_time))), toUInt64(count()) FROM system.parts "+
		"WHERE active AND database = "+p.str(s.cfg.Database)+" AND table = 'analytics_events'", p.m)
	if err != nil {
		n.t = time.Time{}
		return n.t
	}
	defer rs.Close()
	var sec int64
	var parts uint64
	for rs.Next() {
		if rs.Scan(&sec, &parts) != nil {
			parts = 0
		}
	}
	if rs.Err() != nil || parts == 0 {
		n.t = time.Time{}
	} else {
		n.t = time.Unix(sec+1, 0)
	}
	return n.t
}

// firstCandidateWindow and maxCandidateWindows bound the windows
// candidates tries before an unbounded read: a minute first (a second of a
// platform-wide feed at a few thousand events a second), then one at most
// 60 times wider. On a store whose newest hour is sparse (the dashboard
// store: 2M events over 30 days), the two cost 5-15 ms more than the
// unbounded read alone; on a busy one they save most of its cost
// (BenchmarkDashboardBusyHour).
const (
	firstCandidateWindow = time.Minute
	maxCandidateWindows  = 2
)

// candidatesFrom is one read of candidates, of event times from fromUS on
// (math.MinInt64: unbounded).
func (s *Store) candidatesFrom(ctx context.Context, q query.List, cur *pageToken, limit int, fromUS int64) (out []candidate, rows int, err error) {
	sql, params := s.candidatesSQL(q, cur, limit, fromUS)
	rs, err := s.t.query(ctx, sql, params)
	if err != nil {
		return nil, 0, fmt.Errorf("newest-first keys: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		rows++
		var c candidate
		if err := rs.Scan(&c.tus, &c.uid, &c.tt, &c.tn); err != nil {
			return nil, 0, fmt.Errorf("newest-first keys: %w", err)
		}
		if n := len(out); n > 0 && out[n-1].tus == c.tus && out[n-1].uid == c.uid && out[n-1].tt == c.tt && out[n-1].tn == c.tn {
			continue
		}
		out = append(out, c)
	}
	if err := rs.Err(); err != nil {
		return nil, 0, fmt.Errorf("newest-first keys: %w", err)
	}
	return out, rows, nil
}

// candidatesSQL renders one chunk of candidates, of event times from
// fromUS on (math.MinInt64: unbounded).
func (s *Store) candidatesSQL(q query.List, cur *pageToken, limit int, fromUS int64) (string, map[string]string) {
	p := newParams()
	var w where
	w.add(scopeSQL(p, q.Scope))
	filterSQL(p, &w, q.Filter)
	// The window bounds the hour too (toStartOfHour returns a DateTime:
	// only within its range).
	if t := q.Filter.Since; !t.IsZero() && inDateTimeRange(t) {
		w.add("toStartOfHour(event_time) >= toStartOfHour(" + p.micros(ceilMicros(t)) + ")")
	}
	if t := q.Filter.Until; !t.IsZero() && inDateTimeRange(t) {
		w.add("toStartOfHour(event_time) <= toStartOfHour(" + p.micros(ceilMicros(t)) + ")")
	}
	if fromUS != math.MinInt64 {
		from := p.micros(fromUS)
		w.add("event_time >= " + from)
		w.add("toStartOfHour(event_time) >= toStartOfHour(" + from + ")")
	}
	cursorSQL(p, &w, cur, false, true)
	// The hour leads the order as it leads the key: unbounded, the engine
	// reads hours in order and stops at the limit. Within a window it
	// reads every granule the window leaves anyway and sorts them (within
	// an hour the table is in tenant order), and reading them in order
	// only takes the parallelism away: one stream a part, in reverse.
	// Every tenant's newest 100 on the store a full bench write phase
	// leaves (4.3M events in its newest minutes, analytics_events in 9
	// parts): 70-90 ms in order, 30 ms without.
	settings := s.inOrder()
	if fromUS != math.MinInt64 {
		settings = s.withSettings("optimize_read_in_order = 0")
	}
	return "SELECT toInt64(toUnixTimestamp64Micro(event_time)), uid, toString(tenant_type), toString(tenant_name) FROM " + s.analyticsEvents() +
		" WHERE " + w.String() +
		" ORDER BY toStartOfHour(event_time) DESC, event_time DESC, uid DESC, tenant_type DESC, tenant_name DESC" +
		" LIMIT " + p.u64(uint64(limit)) + settings, p.m
}

// withSettings is the SETTINGS clause of a read with the store's own
// settings and more (name = value, ...).
func (s *Store) withSettings(more string) string {
	if s.selectSettings == "" {
		return " SETTINGS " + more
	}
	return s.selectSettings + ", " + more
}

// inDateTimeRange: t is within the range of ClickHouse's DateTime, with a
// day to spare.
func inDateTimeRange(t time.Time) bool {
	return t.After(time.Unix(86400, 0)) && t.Before(time.Date(2106, 1, 1, 0, 0, 0, 0, time.UTC))
}

// inOrder is the SETTINGS clause of a read in key order.
func (s *Store) inOrder() string {
	switch {
	case s.inOrderSettings == "":
		return s.selectSettings
	case s.selectSettings == "":
		return " SETTINGS" + s.inOrderSettings
	}
	return s.selectSettings + "," + s.inOrderSettings
}

// versionsSQL reads the versions <= rv of the candidates that match q, in
// the listing's order: the event_time minmax index of the events table
// (migration 7) leaves the granules that hold an event of the chunk's time
// range, and the uid bloom filter finds the candidates' among them. Naming
// the candidates' key prefixes instead (tenant and regarding object) was
// slower: the engine spent it on matching the set against the index.
func versionsSQL(s *Store, q query.List, rv uint64, cands []candidate) (string, map[string]string) {
	p := newParams()
	var w where
	w.add("seq <= " + p.u64(rv))
	w.add(scopeSQL(p, q.Scope))
	filterSQL(p, &w, q.Filter)
	uids := make([]string, len(cands))
	lo, hi := cands[0].tus, cands[0].tus
	for i, c := range cands {
		uids[i] = p.str(c.uid)
		lo, hi = min(lo, c.tus), max(hi, c.tus)
	}
	w.add("uid IN (" + strings.Join(uids, ", ") + ")")
	w.add("event_time BETWEEN " + p.micros(lo) + " AND " + p.micros(hi))
	return "SELECT " + resultColumns + " FROM " + s.events() +
		" WHERE " + w.String() +
		" ORDER BY event_time DESC, uid DESC, tenant_type DESC, tenant_name DESC, seq DESC" + s.selectSettings, p.m
}

// Get returns the latest stored version of one event within scope, by uid
// and/or namespace and name. An event outside scope is query.ErrNotFound.
func (s *Store) Get(ctx context.Context, scope query.Scope, g query.Lookup) (*eventgatev1.Event, error) {
	if g.UID == "" && g.Name == "" {
		return nil, fmt.Errorf("%w: get needs a uid or a name", query.ErrInvalidQuery)
	}
	if !scope.All && len(scope.Tenants) == 0 {
		return nil, query.ErrNotFound
	}
	p := newParams()
	var w where
	w.add(scopeSQL(p, scope))
	if g.Tenant != nil {
		w.add(tenantSQL(p, *g.Tenant))
	}
	if g.UID != "" {
		w.add("uid = " + p.str(g.UID))
	}
	if g.Name != "" {
		w.add("name = " + p.str(g.Name))
		w.add("namespace = " + p.str(g.Namespace))
	}
	sql := "SELECT " + resultColumns + " FROM " + s.events() +
		" WHERE " + w.String() + " ORDER BY seq DESC LIMIT 1" + s.selectSettings
	res, err := s.read(ctx, sql, p.m)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, query.ErrNotFound
	}
	return decodeRow(res[0])
}

func (s *Store) read(ctx context.Context, sql string, params map[string]string) ([]result, error) {
	rs, err := s.t.query(ctx, sql, params)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: query: %w", err)
	}
	defer rs.Close()
	var out []result
	for rs.Next() {
		var r result
		if err := rs.Scan(&r.seq, &r.raw, &r.tus, &r.uid, &r.tt, &r.tn); err != nil {
			return nil, fmt.Errorf("clickhouse: query: %w", err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: query: %w", err)
	}
	return out, nil
}

func decodeRow(r result) (*eventgatev1.Event, error) {
	ev, err := event.Unmarshal([]byte(r.raw))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: stored event seq %d: %w", r.seq, err)
	}
	ev.ResourceVersion = strconv.FormatUint(r.seq, 10)
	return ev, nil
}
