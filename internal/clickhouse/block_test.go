package clickhouse

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"
	chcolumn "github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// encodeNativeRows is how the chDB transport encoded a batch before
// eventBlock: a clickhouse-go block filled with one []any per row
// (rowValues). It is the baseline of BenchmarkEncodeBatch and of
// TestNativeInsertRoundTrip.
func encodeNativeRows(rows []Row, ttls *ttlTable) ([]byte, error) {
	block := proto.NewBlock()
	for _, c := range eventColumns {
		if err := block.AddColumn(c.name, chcolumn.Type(c.typ)); err != nil {
			return nil, fmt.Errorf("native block: %w", err)
		}
	}
	for _, r := range rows {
		v, err := rowValues(r, ttls)
		if err != nil {
			return nil, fmt.Errorf("row seq %d: %w", r.Seq, err)
		}
		if err := block.Append(v...); err != nil {
			return nil, fmt.Errorf("native block: %w", err)
		}
	}
	var buf chproto.Buffer
	if err := block.Encode(&buf, 0); err != nil {
		return nil, fmt.Errorf("native block: %w", err)
	}
	return buf.Buf, nil
}

func TestEventBlockMatchesColumns(t *testing.T) {
	b := newEventBlock()
	norm := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	for i, c := range b.cols {
		if got, want := norm(string(c.Type())), norm(eventColumns[i].typ); got != want {
			t.Errorf("column %d (%s): block type %s, table type %s", i, eventColumns[i].name, got, want)
		}
	}
}

// roundTripRows are versions of events covering every column's edge
// cases: unicode and empty strings, nil, empty and multi-key maps (keys
// out of order), series fields, a related object present or absent,
// per-minute arrays, per-tenant TTLs and times at DateTime64's limits.
func roundTripRows() []Row {
	// Recent, or the TTL drops the rows as they are written.
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second).Add(535897 * time.Microsecond)
	mk := func(uid string, f func(ev *eventgatev1.Event)) *eventgatev1.Event {
		ev := &eventgatev1.Event{
			Uid: uid, Name: "ev-" + uid, Namespace: "web", Reason: "BackOff", Type: "Warning",
			EventTime: timestamppb.New(t0),
			Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "pod-" + uid, Uid: "u-" + uid, FieldPath: "spec.containers{app}"},
			Tenant:    &eventgatev1.Tenant{Type: "project", Name: "a"},
		}
		if f != nil {
			f(ev)
		}
		return ev
	}
	evs := []*eventgatev1.Event{
		mk("plain", nil),
		mk("unicode", func(ev *eventgatev1.Event) {
			ev.Note = "Ünïcödé ✓ 日本語 🚀 — «quotes» 'single' \"double\" back\\slash\ttab\nnewline\n\nblank line\x00nul"
			ev.Reason = "Grüße"
			ev.Regarding.Name = "pöd-ß"
			ev.Tenant = &eventgatev1.Tenant{Type: "organization", Name: "ürg"}
			ev.Labels = map[string]string{"zeta": "ω", "alpha": "α", "mid": "", "": "empty key"}
			ev.Annotations = map[string]string{"example.com/ünï": strings.Repeat("ab", 5000)}
			ev.Metadata = map[string]string{"k": "v"}
		}),
		mk("empty", func(ev *eventgatev1.Event) {
			ev.Name, ev.Namespace, ev.Reason, ev.Type = "", "", "", ""
			ev.Regarding = nil
			ev.EventTime = nil
			ev.Labels = map[string]string{}
			ev.Tenant = &eventgatev1.Tenant{Type: event.TenantGlobal}
		}),
		mk("series", func(ev *eventgatev1.Event) {
			ev.Series = &eventgatev1.EventSeries{Count: 2147483647, LastObservedTime: timestamppb.New(t0.Add(time.Hour + 123456*time.Nanosecond)), State: "Ongoing"}
			ev.Action = "Reconcile"
			ev.ReportingController = "example.com/ctl"
			ev.ReportingInstance = "ctl-0"
		}),
		mk("related", func(ev *eventgatev1.Event) {
			ev.Related = &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "web", Name: "rs-1", Uid: "rs-uid", FieldPath: "x"}
			ev.Labels = map[string]string{"b": "2", "a": "1", "c": "3"}
		}),
		mk("old", func(ev *eventgatev1.Event) {
			ev.EventTime = timestamppb.New(time.Date(1850, 1, 1, 0, 0, 0, 0, time.UTC))
			ev.Tenant = &eventgatev1.Tenant{Type: event.TenantUser, Name: "old"}
			ev.Series = &eventgatev1.EventSeries{Count: -1, LastObservedTime: timestamppb.New(time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC))}
		}),
	}
	rows := make([]Row, len(evs))
	for i, ev := range evs {
		rows[i] = Row{Seq: uint64(10 + i), Subject: event.SubjectOf(ev), Event: ev, StoredAt: t0.Add(time.Duration(i) * time.Microsecond)}
	}
	rows[0].WriteReason = "new"
	rows[0].Raw = []byte("raw as published\n\n\x00\xff")
	rows[1].WriteReason = "series-update"
	rows[1].Minutes = []wire.Minute{{Start: t0.Add(-2 * time.Minute), Count: 3}, {Start: t0.Add(-time.Minute + 5*time.Second), Count: 4294967295}, {Start: t0, Count: 0}}
	rows[3].Minutes = []wire.Minute{{Start: time.Unix(-60, 0), Count: 1}, {Start: t0, Count: 1}}
	rows[4].StoredAt = time.Time{}
	return rows
}

// roundTripConfig is a store's configuration whose TTLs keep every row of
// roundTripRows: long enough for the rows of 1900 and 1970.
func roundTripConfig() Config {
	cfg := DefaultConfig()
	cfg.Database = ""
	cfg.TenantTTL = map[string]time.Duration{"organization/*": 24 * time.Hour, "global": maxTTL - time.Second, "user/old": maxTTL}
	return cfg
}

// TestNativeInsertRoundTrip inserts varied rows through the chDB
// transport's typed Native block and compares every column a query
// returns with what the rows contained, and with what the previous
// encoding (encodeNativeRows) stores for the same rows.
func TestNativeInsertRoundTrip(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		s := open(roundTripConfig())
		ctx := context.Background()
		rows := roundTripRows()
		if err := s.Insert(ctx, rows); err != nil {
			t.Fatal(err)
		}
		got := selectEvents(t, s, s.eventsTable)
		want := expectedEvents(t, s, rows)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stored rows (-want +got):\n%s", diff)
		}

		if s.t.kind() != "chdb" {
			return
		}
		// The same rows through the previous encoding, into a copy of
		// the table: every column the same.
		if err := s.t.exec(ctx, "CREATE TABLE "+s.ddl.table("events_old")+" AS "+s.events(), nil); err != nil {
			t.Fatal(err)
		}
		native, err := encodeNativeRows(rows, s.ttls)
		if err != nil {
			t.Fatal(err)
		}
		if err := chtest.Engine(t).InsertFile(ctx, s.cfg.Database+".events_old", eventColumnNames, "Native", native); err != nil {
			t.Fatal(err)
		}
		old := selectEvents(t, s, "events_old")
		if diff := cmp.Diff(old, got); diff != "" {
			t.Errorf("new encoding differs from the previous one (-old +new):\n%s", diff)
		}
	})
}

// selectEvents returns every column of every row of table, by seq, as
// JSON values (raw in hex, maps as objects).
func selectEvents(t *testing.T, s *Store, table string) []map[string]any {
	t.Helper()
	rs, err := s.t.query(context.Background(), "SELECT formatRow('JSONEachRow', *) FROM (SELECT * REPLACE (hex(raw) AS raw) FROM "+
		s.ddl.table(table)+") ORDER BY seq", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []map[string]any
	for rs.Next() {
		var line string
		if err := rs.Scan(&line); err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		out = append(out, m)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectedEvents is what the events table should hold for rows, in the
// JSON form of selectEvents, written from the events' fields.
func expectedEvents(t *testing.T, s *Store, rows []Row) []map[string]any {
	t.Helper()
	dt64 := func(ts time.Time) string {
		switch {
		case ts.IsZero():
			ts = time.Unix(0, 0)
		case ts.Before(minTime):
			ts = minTime
		case ts.After(maxTime):
			ts = maxTime
		}
		return ts.UTC().Format("2006-01-02 15:04:05.000000")
	}
	pbTime := func(ts *timestamppb.Timestamp) string {
		if ts == nil {
			return dt64(time.Time{})
		}
		return dt64(ts.AsTime())
	}
	obj := func(m map[string]string) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	var out []map[string]any
	for _, r := range rows {
		ev := r.Event
		raw := r.Raw
		if raw == nil {
			var err error
			if raw, err = event.Marshal(ev); err != nil {
				t.Fatal(err)
			}
		}
		reg, rel := ev.GetRegarding(), ev.GetRelated()
		minutes, counts := []any{}, []any{}
		for _, m := range r.Minutes {
			if m.Count > 0 && !m.Start.Before(time.Unix(0, 0)) {
				minutes = append(minutes, m.Start.UTC().Truncate(time.Minute).Format("2006-01-02 15:04:05"))
				counts = append(counts, float64(m.Count))
			}
		}
		out = append(out, map[string]any{
			"tenant_type": ev.GetTenant().GetType(), "tenant_name": ev.GetTenant().GetName(),
			"regarding_kind": reg.GetKind(), "regarding_namespace": reg.GetNamespace(), "regarding_name": reg.GetName(),
			"event_time": pbTime(ev.GetEventTime()), "uid": ev.GetUid(), "seq": float64(r.Seq),
			"name": ev.GetName(), "namespace": ev.GetNamespace(), "type": ev.GetType(), "reason": ev.GetReason(),
			"action": ev.GetAction(), "note": ev.GetNote(),
			"regarding_api_version": reg.GetApiVersion(), "regarding_uid": reg.GetUid(), "regarding_field_path": reg.GetFieldPath(),
			"related_api_version": rel.GetApiVersion(), "related_kind": rel.GetKind(), "related_namespace": rel.GetNamespace(),
			"related_name": rel.GetName(), "related_uid": rel.GetUid(), "related_field_path": rel.GetFieldPath(),
			"reporting_controller": ev.GetReportingController(), "reporting_instance": ev.GetReportingInstance(),
			"labels": obj(ev.GetLabels()), "annotations": obj(ev.GetAnnotations()), "metadata": obj(ev.GetMetadata()),
			"series_count": float64(ev.GetSeries().GetCount()), "series_last_observed": pbTime(ev.GetSeries().GetLastObservedTime()),
			"series_state": ev.GetSeries().GetState(), "subject": r.Subject, "stored_at": dt64(r.StoredAt),
			"ttl_seconds": float64(s.ttls.lookup(ev.GetTenant().GetType(), ev.GetTenant().GetName())),
			"raw":         strings.ToUpper(hex.EncodeToString(raw)), "write_reason": r.WriteReason,
			"minutes": minutes, "minute_counts": counts,
		})
	}
	return out
}

// TestNativeBlockFarFuture: times after 2262 (up to clampTime's 2299) do
// not overflow on the way to DateTime64 (UnixNano does, and so did the
// previous encoding).
func TestNativeBlockFarFuture(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		if s.t.kind() != "chdb" {
			t.Skip("clickhouse-go encodes DateTime64 itself")
		}
		ev := mkEvent("future", 0)
		ev.EventTime = timestamppb.New(time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
		ev.Series = &eventgatev1.EventSeries{Count: 1, LastObservedTime: timestamppb.New(time.Date(2280, 6, 1, 1, 2, 3, 456789000, time.UTC))}
		rows := []Row{{Seq: 1, Subject: event.SubjectOf(ev), Event: ev, StoredAt: time.Now()}}
		if err := s.Insert(context.Background(), rows); err != nil {
			t.Fatal(err)
		}
		got := selectEvents(t, s, s.eventsTable)
		if len(got) != 1 || got[0]["event_time"] != "2299-12-31 23:59:59.999999" || got[0]["series_last_observed"] != "2280-06-01 01:02:03.456789" {
			t.Errorf("got event_time %v, series_last_observed %v", got[0]["event_time"], got[0]["series_last_observed"])
		}
	})
}

// TestNativeBlockLargerThanItsWriteBuffer: the events' encodings and notes
// are kept in the block by reference and written into the insert's file
// through a 256 KiB buffer; a batch of them spanning many such buffers,
// passed without their events as the ingest passes them (each note then
// shares its row's encoding), is stored as sent, every value in its row.
func TestNativeBlockLargerThanItsWriteBuffer(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
		const n = 1500
		sent, rows := make([]Row, n), make([]Row, n)
		for i := range n {
			ev := chtest.RealisticEvent(i, 1000, at)
			ev.Note = strconv.Itoa(i) + " " + strings.Repeat("ñ", i%700)
			raw, err := event.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			sent[i] = Row{Seq: uint64(i + 1), Subject: event.SubjectOf(ev), Event: ev, StoredAt: at, Raw: raw, WriteReason: "new"}
			rows[i] = sent[i]
			rows[i].Event = nil
		}
		if err := s.Insert(context.Background(), rows); err != nil {
			t.Fatal(err)
		}
		got := selectEvents(t, s, s.eventsTable)
		if diff := cmp.Diff(expectedEvents(t, s, sent), got); diff != "" {
			t.Errorf("stored rows (-want +got):\n%s", diff)
		}
	})
}

// encodeBenchRows is a batch of n ~600-byte events as the ingester decodes
// them (Raw set).
func encodeBenchRows(n int) []Row {
	at := time.Date(2026, 3, 14, 15, 0, 0, 0, time.UTC)
	rows := make([]Row, n)
	for i := range rows {
		ev := chtest.RealisticEvent(i, 1000, at)
		raw, _ := event.Marshal(ev)
		rows[i] = Row{Seq: uint64(i + 1), Subject: event.SubjectOf(ev), Event: ev, StoredAt: at, Raw: raw,
			WriteReason: "new", Minutes: []wire.Minute{{Start: at, Count: 1}}}
	}
	return rows
}

// BenchmarkEncodeBatch measures the Go side of a chDB insert of 5,000
// events: building and encoding the Native block the previous way (one
// []any per row into clickhouse-go's block) and with eventBlock.
func BenchmarkEncodeBatch(b *testing.B) {
	rows := encodeBenchRows(5000)
	ttls, err := newTTLTable(DefaultTTL, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rows-any", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeNativeRows(rows, ttls); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-columns", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			eb := &eventBatch{rows: rows, ttls: ttls}
			if err := eb.encodeNative(); err != nil {
				b.Fatal(err)
			}
			eb.release()
		}
	})
}

// BenchmarkKeptBlockBytes reports the heap a block holds once it has
// encoded a full batch (20,000 workload events, as the ingest inserts
// under load) and is kept for the next: kept-B, bytes per block.
func BenchmarkKeptBlockBytes(b *testing.B) {
	rows := encodeBenchRows(20_000)
	ttls, err := newTTLTable(DefaultTTL, nil)
	if err != nil {
		b.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var held float64
	for b.Loop() {
		before := heap()
		blk := newEventBlock()
		for _, r := range rows {
			if err := blk.appendRow(r, ttls); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := blk.encode(); err != nil {
			b.Fatal(err)
		}
		// Kept: emptied, as the next batch finds it.
		blk.reset()
		held = float64(heap()) - float64(before)
		runtime.KeepAlive(blk)
	}
	b.ReportMetric(held, "kept-B")
}

// TestInsertDecodesRowsPassedWithoutTheirEvents: rows passed with their
// encoding only (Row.Event nil, as the ingest passes them) are stored
// exactly as the same rows with their events, on both transports, the
// store decoding each into one event it reuses; a row whose encoding is
// not an event makes Insert refuse the batch with an UndecodableError
// naming its seq, and store nothing.
func TestInsertDecodesRowsPassedWithoutTheirEvents(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		s := open(roundTripConfig())
		ctx := context.Background()
		rows := roundTripRows()
		for i := range rows {
			rows[i].Raw = nil // stored as Marshal encodes it: the bytes a bare row decodes from
		}
		want := expectedEvents(t, s, rows)
		bare := make([]Row, len(rows))
		for i, r := range rows {
			raw, err := event.Marshal(r.Event)
			if err != nil {
				t.Fatal(err)
			}
			r.Event, r.Raw = nil, raw
			bare[i] = r
		}

		bad := slices.Clone(bare)
		bad[2].Raw = []byte{0xff, 0xff, 0xff, 0xff}
		err := s.Insert(ctx, bad)
		var undecodable *event.UndecodableError
		if !errors.As(err, &undecodable) || undecodable.Seq != bad[2].Seq {
			t.Fatalf("insert with an undecodable row: %v, want an UndecodableError for seq %d", err, bad[2].Seq)
		}
		if got := selectEvents(t, s, s.eventsTable); len(got) != 0 {
			t.Fatalf("a refused batch stored %d rows", len(got))
		}

		if err := s.Insert(ctx, bare); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, selectEvents(t, s, s.eventsTable)); diff != "" {
			t.Errorf("rows without their events, stored (-as with them +got):\n%s", diff)
		}
	})
}

// TestKeptBlockIsLetGoWhenItsBatchesShrink: a block grown by full batches
// is kept while batches fill it, and let go after shrinkAfter batches in a
// row far smaller than it (a full batch among them starts the count again),
// so that a burst's columns do not stay in the heap under a lighter load;
// the next batch then grows a block to its own size.
func TestKeptBlockIsLetGoWhenItsBatchesShrink(t *testing.T) {
	ttls, err := newTTLTable(DefaultTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	full, small := encodeBenchRows(20_000), encodeBenchRows(500)
	l := blockList{free: make(chan *eventBlock, 1)}
	// batch builds and encodes rows as encodeNative does, in a block of l,
	// and gives the block back to l as release does.
	batch := func(rows []Row) *eventBlock {
		blk := l.Get()
		blk.reset()
		for _, r := range rows {
			if err := blk.appendRow(r, ttls); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := blk.encode(); err != nil {
			t.Fatal(err)
		}
		l.Put(blk)
		return blk
	}
	grown := batch(full)
	if c := cap(grown.buf.Buf); c <= shrinkFloorBytes {
		t.Fatalf("a full batch encoded into %d bytes, not above shrinkFloorBytes (%d): the test proves nothing", c, shrinkFloorBytes)
	}
	for range 2 {
		for i := 1; i < shrinkAfter; i++ {
			if blk := batch(small); blk != grown {
				t.Fatalf("small batch %d of %d: the grown block was let go", i, shrinkAfter-1)
			}
		}
		if blk := batch(full); blk != grown {
			t.Fatal("a full batch after small ones: the grown block was let go")
		}
	}
	for i := 1; i <= shrinkAfter; i++ {
		if blk := batch(small); blk != grown {
			t.Fatalf("small batch %d of %d: the grown block was let go before its last", i, shrinkAfter)
		}
	}
	next := batch(small)
	if next == grown {
		t.Fatalf("the block grown by a full batch was kept after %d small batches in a row", shrinkAfter)
	}
	if c := cap(next.buf.Buf); c*shrinkRatio > cap(grown.buf.Buf) {
		t.Errorf("the next block holds %d bytes for a batch of %d, not sized to it (the grown one %d)", c, len(next.buf.Buf), cap(grown.buf.Buf))
	}
}
