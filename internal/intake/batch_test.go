package intake

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// TestBatchedSubmit: one Submit mixes occurrences without message ids
// (batched: two of the same key in one entry) and one with an id (an entry
// of its own); each gets its own decision at its index, in log order. A
// SubmitAsIs without ids stores each occurrence of a batched entry under
// its own id. Then a restart restores the partitions from checkpoints
// between batched entries, and the series goes on counting.
func TestBatchedSubmit(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	cfg.Series = series.Config{Window: time.Minute, FinishAfter: time.Minute, FlushInterval: 300 * time.Millisecond, Heartbeat: 30 * time.Second}
	a := startReplica(t, ns, "", "a", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	a1, a2, b, a3 := occurrence(1, "1"), occurrence(1, "2"), occurrence(2, "b"), occurrence(1, "3")
	rs, err := a.in.Submit(ctx, []*eventgatev1.Event{a1, a2, b, a3}, []string{"", "", "b-id", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		outcome   eventgatev1.EmitOutcome
		uid, sUID string
	}{
		{eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED, a1.Uid, ""},
		{eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED, a1.Uid, a1.Uid},
		{eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED, b.Uid, ""},
		{eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED, a1.Uid, a1.Uid},
	}
	for i, w := range want {
		if r := rs[i]; r.Outcome != w.outcome || r.UID != w.uid || r.SeriesUID != w.sUID {
			t.Errorf("result %d: %+v, want %v uid %s series %q", i, r, w.outcome, w.uid, w.sUID)
		}
	}
	if rs[0].ResourceVersion == 0 || rs[1].ResourceVersion <= rs[0].ResourceVersion {
		t.Errorf("resourceVersions %d then %d: want the series' write after the singleton's", rs[0].ResourceVersion, rs[1].ResourceVersion)
	}
	// The retry of the id is a duplicate, batched with a new occurrence.
	rs, err = a.in.Submit(ctx, []*eventgatev1.Event{occurrence(2, "b again"), occurrence(1, "4")}, []string{"b-id", ""})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || rs[1].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED {
		t.Errorf("retry with a new occurrence: %+v", rs)
	}

	// Occurrences of one key without, with and without an id: the
	// partition's log keeps the batch's order (the one with an id is an
	// entry of its own between the other two).
	y1, y2, y3 := occurrence(3, "1"), occurrence(3, "2"), occurrence(3, "3")
	rs, err = a.in.Submit(ctx, []*eventgatev1.Event{y1, y2, y3}, []string{"", "y2-id", ""})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED ||
		rs[1].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED ||
		rs[2].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED {
		t.Errorf("one key without, with and without an id: %+v, want CREATED, SERIES_STARTED, SERIES_COUNTED", rs)
	}

	// As-is occurrences of one batched entry, each stored under its own id.
	x, y := occurrence(5, "x"), occurrence(5, "y")
	rs, err = a.in.SubmitAsIs(ctx, []*eventgatev1.Event{x, y}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range []*eventgatev1.Event{x, y} {
		if rs[i].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || rs[i].UID != ev.Uid {
			t.Errorf("as-is %d: %+v, want CREATED %s", i, rs[i], ev.Uid)
		}
	}
	evs := readEvents(t, a.js)
	for _, ev := range []*eventgatev1.Event{x, y} {
		if vs := evs[ev.Uid]; len(vs) != 1 || vs[0].ev.GetSeries() != nil || vs[0].hdr.Get(wire.HeaderWriteReason) != wire.ReasonClient {
			t.Errorf("as-is %s stored %d times: %+v", ev.Uid, len(vs), vs)
		} else if id := vs[0].hdr.Get(jetstream.MsgIDHeader); id == "" {
			t.Errorf("as-is %s stored without a message id", ev.Uid)
		}
	}
	if ix, iy := evs[x.Uid][0].hdr.Get(jetstream.MsgIDHeader), evs[y.Uid][0].hdr.Get(jetstream.MsgIDHeader); ix[len(ix)-2:] == iy[len(iy)-2:] {
		t.Errorf("as-is ids %q and %q do not tell the occurrences apart", ix, iy)
	}

	a.stop(t)
	c := startReplica(t, ns, "", "c", cfg)
	rs, err = c.in.Submit(ctx, []*eventgatev1.Event{occurrence(1, "5"), occurrence(1, "6")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED || r.SeriesUID != a1.Uid {
			t.Errorf("after the restart, occurrence %d: %+v, want SERIES_COUNTED into %s", i, r, a1.Uid)
		}
	}
	waitFlushedCount(t, c.js, a1.Uid, 6)
}

// TestBatchedEntriesAreCompressedAndOldOnesStillFold: a Submit's batched
// entry is logged compressed (s2, smaller than its occurrences), and folds
// as before; a batched entry as earlier versions logged it, uncompressed,
// still folds: each occurrence is stored.
func TestBatchedEntriesAreCompressedAndOldOnesStillFold(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	a := startReplica(t, ns, "", "a", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Distinct events (series keys) of one partition: one batched entry.
	samePartition := func(n, from int, note string) []*eventgatev1.Event {
		var evs []*eventgatev1.Event
		for k := from; len(evs) < n; k++ {
			ev := occurrence(k, note)
			if len(evs) == 0 || a.in.Partition(ev) == a.in.Partition(evs[0]) {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	evs := samePartition(8, 100, "note")
	plain := 0
	for _, ev := range evs {
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		plain += len(b)
	}
	rs, err := a.in.Submit(ctx, evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r.UID != evs[i].Uid {
			t.Errorf("occurrence %d: %+v, want CREATED %s", i, r, evs[i].Uid)
		}
	}
	st, err := a.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, cfg.subject(a.in.Partition(evs[0])))
	if err != nil {
		t.Fatal(err)
	}
	if enc := m.Header.Get(HeaderEncoding); enc != EncodingS2 || len(m.Data) >= plain/2 {
		t.Errorf("batched entry: encoding %q, %d bytes for %d bytes of occurrences; want s2 at most half", enc, len(m.Data), plain)
	}

	// An uncompressed batched entry, as an earlier version logged it.
	old := samePartition(2, 1000, "old")
	msg := nats.NewMsg(cfg.subject(a.in.Partition(old[0])))
	for _, ev := range old {
		b, err := event.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		msg.Data = protowire.AppendBytes(msg.Data, b)
	}
	msg.Header.Set(HeaderReply, "_INBOX.nobody.1")
	msg.Header.Set(HeaderBatch, "0,1")
	if _, err := a.js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "both occurrences of the uncompressed entry stored", func() bool {
		stored := readEvents(t, a.js)
		return len(stored[old[0].Uid]) == 1 && len(stored[old[1].Uid]) == 1
	})
}

// TestCompressedEntriesInReusedBuffersKeepEveryOccurrence: calls encode
// their batched entries into reused buffers (entryBufs), which the
// committer merges and compresses; an owner decompresses the entries into
// buffers it reuses once an entry's writes and decisions are done. With
// many calls and entries in flight at once, every occurrence is still
// stored as it was sent and decided under its own uid.
func TestCompressedEntriesInReusedBuffersKeepEveryOccurrence(t *testing.T) {
	ns := startServer(t)
	cfg := testConfig()
	a := startReplica(t, ns, "", "a", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const workers, calls, perCall = 4, 25, 40
	sent := make(map[string]*eventgatev1.Event)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range calls {
				evs := make([]*eventgatev1.Event, perCall)
				for i := range evs {
					k := (w*calls+c)*perCall + i
					evs[i] = occurrence(k, "note of occurrence "+strconv.Itoa(k)+" in a batch alike the others")
				}
				mu.Lock()
				for _, ev := range evs {
					sent[ev.Uid] = ev
				}
				mu.Unlock()
				rs, err := a.in.Submit(ctx, evs, nil)
				if err != nil {
					errs <- err
					return
				}
				for i, r := range rs {
					if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r.UID != evs[i].Uid {
						errs <- fmt.Errorf("call %d.%d occurrence %d: %+v, want CREATED %s", w, c, i, r, evs[i].Uid)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st, err := a.js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, cfg.subject(0))
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(HeaderEncoding) != EncodingS2 {
		t.Fatalf("the last entry of partition 0 is not compressed (%q): the test does not reach the reused buffers", m.Header.Get(HeaderEncoding))
	}
	stored := readEvents(t, a.js)
	for uid, ev := range sent {
		vs := stored[uid]
		if len(vs) != 1 {
			t.Errorf("%s stored %d times, want once", uid, len(vs))
			continue
		}
		if !proto.Equal(vs[0].ev, ev) {
			t.Errorf("%s stored as %v, sent %v", uid, vs[0].ev, ev)
		}
	}
}

// TestCompressedEntryDecodesIntoABufferOfItsSize: an owner decompresses a
// compressed entry into a pooled buffer sized to the entry (its power of
// two), not one sized for the largest entry, and gets back exactly the
// data that was compressed.
func TestCompressedEntryDecodesIntoABufferOfItsSize(t *testing.T) {
	for _, size := range []int{3 << 10, 40 << 10, maxBatchBytes - 1000} {
		var data []byte
		for i := 0; len(data) < size; i++ {
			data = protowire.AppendBytes(data, []byte("an occurrence alike the others, number "+strconv.Itoa(i)))
		}
		m := &nats.Msg{Header: nats.Header{}, Data: append([]byte(nil), data...)}
		if !compressBatch(m, 2) {
			t.Fatalf("%d bytes: not compressed", len(data))
		}
		out, pooled, err := batchData(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if !pooled {
			t.Errorf("%d bytes: decoded into memory of its own, want a pooled buffer", len(data))
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("%d bytes: decoded %d bytes that differ from what was compressed", len(data), len(out))
		}
		if cap(out) >= 2*len(data) {
			t.Errorf("%d bytes decoded into a buffer of %d: want the entry's size class", len(data), cap(out))
		}
		putEntryBuf(out)
	}
}
