package intake

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

func newTestStore(t *testing.T, chunk int) *store {
	t.Helper()
	ns := startServer(t)
	_, js := connect(t, ns, "", "store")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "snap", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &store{kv: kv, js: js, bucket: "snap", chunkSize: chunk}
}

func chunkKeys(t *testing.T, s *store) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := s.kv.ListKeysFiltered(ctx, "chunk.>")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys
}

// TestStore checks the checkpoint store: chunked and inline head snapshots
// and segments read back intact, a head carries over the segments its
// checkpoint still needs, a stale compare-and-set is fenced, superseded and
// orphaned chunks are purged, and a head whose chunks are gone reads as
// fenced.
func TestStore(t *testing.T) {
	s := newTestStore(t, 64)
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789"), 30) // 5 chunks
	small := []byte("small")
	seg := func(id uint64, n int) *series.Segment {
		return &series.Segment{ID: id, Data: bytes.Repeat([]byte{byte(id)}, n)}
	}

	snap, _, rev, err := s.load(ctx, 1)
	if snap != nil || rev != 0 || err != nil {
		t.Fatalf("empty partition: %v %d %v", snap, rev, err)
	}
	// A chunked head snapshot and a 2-chunk segment.
	h1, rev1, err := s.save(ctx, 1, series.Checkpoint{Head: big, Segment: seg(5, 100), Live: []uint64{5}}, head{}, position(10, 1), 10, 7, "owner-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if h1.gen == "" || h1.chunks != 5 || len(h1.segments) != 1 || h1.segments[0].chunks != 2 {
		t.Fatalf("head %+v, want 5 chunks and one segment of 2", h1)
	}
	snap, h, rev, err := s.load(ctx, 1)
	if err != nil || !bytes.Equal(snap, big) || rev != rev1 || h.position != position(10, 1) || h.logSeq != 10 || h.eventsSeq != 7 || !h.hasEventsSeq || h.owner != "owner-a" {
		t.Fatalf("load: %q %+v %d %v", snap, h, rev, err)
	}
	if b, err := s.segment(ctx, 1, h, 5); err != nil || !bytes.Equal(b, seg(5, 100).Data) {
		t.Fatalf("segment 5: %v", err)
	}
	if _, err := s.segment(ctx, 1, h, 6); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("segment the head does not name: %v", err)
	}

	// An owner that crashed after writing a checkpoint's chunks, before
	// its head, left orphans (5 chunks). A second owner claims the head;
	// the first one's next checkpoint is fenced and removes the chunks it
	// wrote (5 + 1).
	if _, err := s.writeBlob(ctx, 1, big); err != nil {
		t.Fatal(err)
	}
	h.owner = "owner-b"
	rev2, err := s.putHead(ctx, 1, h, rev1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.save(ctx, 1, series.Checkpoint{Head: big, Segment: seg(9, 10), Live: []uint64{5, 9}}, h1, position(20, 1), 20, 7, "owner-a", rev1); !errors.Is(err, ErrFenced) {
		t.Fatalf("stale checkpoint: %v, want ErrFenced", err)
	}
	if n := len(chunkKeys(t, s)); n != 12 {
		t.Fatalf("%d chunks, want 12 (the head's 7 and the crash's 5)", n)
	}
	if err := s.purgeUnnamed(ctx, 1, h, rev2); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkKeys(t, s)); n != 7 {
		t.Fatalf("%d chunks after purging the orphans, want 7 (the head's)", n)
	}

	// The next checkpoint: an inline head, segment 5 carried over, a new
	// segment 9; the old head snapshot is garbage.
	h3, rev3, err := s.save(ctx, 1, series.Checkpoint{Head: small, Segment: seg(9, 10), Live: []uint64{5, 9}}, h, position(30, 1), 30, 7, "owner-b", rev2)
	if err != nil {
		t.Fatal(err)
	}
	if len(h3.segments) != 2 || h3.segments[0] != h.segments[0] {
		t.Fatalf("segments %+v, want 5 carried over, then 9", h3.segments)
	}
	if gone := garbage(h, h3); len(gone) != 1 || gone[0] != h.gen {
		t.Fatalf("garbage %v, want the old head snapshot's %s", gone, h.gen)
	}
	if err := s.purgeGens(ctx, 1, garbage(h, h3)); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkKeys(t, s)); n != 3 {
		t.Fatalf("%d chunks, want 3 (segments 5 and 9)", n)
	}
	snap, h, _, err = s.load(ctx, 1)
	if err != nil || !bytes.Equal(snap, small) || h.gen != "" || h.position != position(30, 1) || h.logSeq != 30 {
		t.Fatalf("inline load: %q %+v %v", snap, h, err)
	}
	for _, id := range []uint64{5, 9} {
		if _, err := s.segment(ctx, 1, h, id); err != nil {
			t.Fatalf("segment %d: %v", id, err)
		}
	}
	// Segment 5 is no longer needed.
	h4, _, err := s.save(ctx, 1, series.Checkpoint{Head: small, Live: []uint64{9}}, h3, position(40, 1), 40, 7, "owner-b", rev3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.purgeGens(ctx, 1, garbage(h3, h4)); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkKeys(t, s)); n != 1 {
		t.Fatalf("%d chunks, want 1 (segment 9)", n)
	}
	// A checkpoint naming a segment its previous head does not have is a bug.
	if _, _, err := s.save(ctx, 1, series.Checkpoint{Head: small, Live: []uint64{5}}, h4, position(50, 1), 50, 7, "owner-b", 0); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("unknown segment: %v", err)
	}

	// A head naming purged chunks reads as fenced (a newer head replaced it).
	h5, rev5, err := s.save(ctx, 2, series.Checkpoint{Head: big}, head{}, position(1, 1), 1, 7, "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.purgeUnnamed(ctx, 2, head{}, rev5); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.load(ctx, 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("head without chunks: %v, want ErrFenced (%+v)", err, h5)
	}

	// A corrupt head.
	if _, err := s.kv.Put(ctx, headKey(3), []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.load(ctx, 3); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("corrupt head: %v", err)
	}

	// The partition count is recorded once.
	if err := s.checkMeta(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if err := s.checkMeta(ctx, 16); err != nil {
		t.Fatal(err)
	}
	if err := s.checkMeta(ctx, 8); !errors.Is(err, ErrPartitionsChanged) {
		t.Fatalf("changed partition count: %v", err)
	}
}

// A replica that claimed a partition's head purges the chunks that head
// does not name only once it has done the rest of its takeover. If the
// partition was taken from it meanwhile and the next owner checkpointed,
// that late purge leaves the next owner's chunks alone: its head still
// reads back whole.
func TestALateTakeoverPurgeKeepsTheNextOwnersCheckpoint(t *testing.T) {
	s := newTestStore(t, 64)
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789"), 30) // 5 chunks
	cBig := append([]byte("c"), big...)
	seg := &series.Segment{ID: 3, Data: bytes.Repeat([]byte{3}, 100)}

	h1, rev1, err := s.save(ctx, 4, series.Checkpoint{Head: big}, head{}, position(10, 1), 10, 7, "owner-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Owner b claims the head, then stalls before its purge.
	h1.owner = "owner-b"
	revB, err := s.putHead(ctx, 4, h1, rev1)
	if err != nil {
		t.Fatal(err)
	}
	// Owner c takes the partition over from b's head and checkpoints: a
	// chunked head snapshot and a segment, all new chunks.
	h1.owner = "owner-c"
	revC, err := s.putHead(ctx, 4, h1, revB)
	if err != nil {
		t.Fatal(err)
	}
	hC, _, err := s.save(ctx, 4, series.Checkpoint{Head: cBig, Segment: seg, Live: []uint64{3}}, h1, position(20, 1), 20, 7, "owner-c", revC)
	if err != nil {
		t.Fatal(err)
	}
	// b's purge runs now.
	if err := s.purgeUnnamed(ctx, 4, h1, revB); err != nil {
		t.Fatal(err)
	}
	snap, h, _, err := s.load(ctx, 4)
	if err != nil || !bytes.Equal(snap, cBig) || h.owner != "owner-c" {
		t.Fatalf("owner c's checkpoint after b's late purge: %v (%q, %+v)", err, snap, h)
	}
	if b, err := s.segment(ctx, 4, h, 3); err != nil || !bytes.Equal(b, seg.Data) {
		t.Fatalf("owner c's segment after b's late purge: %v", err)
	}
	// c's own checkpoint's predecessor chunks (b's head's) are garbage to
	// c, which purges them: only c's head snapshot and segment remain.
	if err := s.purgeUnnamed(ctx, 4, hC, revC+1000); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkKeys(t, s)); n != 7 {
		t.Fatalf("%d chunks, want 7 (owner c's head snapshot and segment)", n)
	}
}

func TestHeadRoundTrip(t *testing.T) {
	for _, h := range []head{
		{position: 7, logSeq: 7, owner: "o", inline: []byte("snap"), blob: blob{size: 4, crc: 99}},
		{position: position(1<<40, 5), logSeq: 1 << 40, owner: "p", blob: blob{gen: "g-1", chunks: 3, firstSeq: 12, size: 1000, crc: 1}},
		{position: 9, logSeq: 0, owner: "q", inline: []byte{}, segments: []segRef{
			{id: 3, blob: blob{gen: "s-1", chunks: 1, firstSeq: 4, size: 10, crc: 7}},
			{id: 1 << 33, blob: blob{gen: "s-2", chunks: 2, firstSeq: 5, size: 20, crc: 8}},
		}},
	} {
		got, err := unmarshalHead(h.marshal())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(h, got, cmp.AllowUnexported(head{}, blob{}, segRef{})); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

// A head written before batched entries has no log_seq: its position is
// the intake sequence.
func TestHeadWithoutLogSeq(t *testing.T) {
	var b []byte
	b = protowire.AppendTag(b, hPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, 41)
	b = protowire.AppendTag(b, hInline, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("snap"))
	h, err := unmarshalHead(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.position != 41 || h.logSeq != 41 {
		t.Errorf("legacy head: position %d, logSeq %d; want 41, 41", h.position, h.logSeq)
	}
}

func TestBatchWire(t *testing.T) {
	raws := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{0xff}, 300)}
	var data []byte
	for _, r := range raws {
		data = protowire.AppendBytes(data, r)
	}
	got, err := splitBatch(data, len(raws))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(raws, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
	if _, err := splitBatch(data, 2); err == nil {
		t.Error("3 occurrences split as 2")
	}
	if _, err := splitBatch(data[:len(data)-1], 3); err == nil {
		t.Error("truncated batch split")
	}
	idxs, err := parseIndexes(formatIndexes([]int{0, 7, 4095}))
	if err != nil || !slices.Equal(idxs, []uint32{0, 7, 4095}) {
		t.Errorf("indexes round trip: %v, %v", idxs, err)
	}
	for _, bad := range []string{"", "1,,2", "-1", "x", "4294967296"} {
		if _, err := parseIndexes(bad); err == nil {
			t.Errorf("parseIndexes(%q) accepted", bad)
		}
	}
	// Positions grow with the log, occurrence by occurrence, past any
	// position of a head written before batched entries (the sequence).
	if !(position(9, maxBatch) < position(10, 0) && position(10, 0) > 10 && position(10, 0)>>posShift == 10) {
		t.Error("positions do not order entries and occurrences")
	}
}

func TestDecisionsRoundTrip(t *testing.T) {
	want := []decision{
		{index: 0, outcome: series.Created, uid: "a", rv: 12},
		{index: 99, outcome: series.Counted, uid: "b"},
		{index: 3, outcome: series.SeriesStarted, uid: "", rv: 1 << 50},
	}
	var b []byte
	for _, d := range want {
		b = appendDecision(b, d)
	}
	var got []decision
	if err := parseDecisions(b, func(d decision) { got = append(got, d) }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(decision{})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := parseDecisions([]byte{0x0a, 0x05, 0x08}, func(decision) {}); err == nil {
		t.Error("truncated message parsed")
	}
}

func FuzzParseDecisions(f *testing.F) {
	f.Add(appendDecision(nil, decision{index: 1, outcome: series.Created, uid: "u", rv: 2}))
	f.Add([]byte{0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = parseDecisions(b, func(decision) {})
		_, _ = unmarshalHead(b)
	})
}

func TestWriteMinutesKeepEveryCount(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ms := []series.MinuteCount{{Start: t0, Count: 3}, {Start: t0.Add(2 * time.Minute), Count: math.MaxInt32}}
	want := []wire.Minute{{Start: t0, Count: 3}, {Start: t0.Add(2 * time.Minute), Count: math.MaxInt32}}
	if diff := cmp.Diff(want, wireMinutes(ms)); diff != "" {
		t.Errorf("wireMinutes (-want +got):\n%s", diff)
	}
	if wireMinutes(nil) != nil {
		t.Error("no minutes should convert to none")
	}
}
