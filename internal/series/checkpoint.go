package series

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// Incremental checkpoints.
//
// Nearly all tracked keys are singletons that will never change: they only
// wait, for Window, for an isomorphic occurrence. Writing them all at every
// checkpoint costs the whole state each time. Checkpoint writes each
// singleton once instead, as a fixed-size record (its key's hash, log time
// and position: its event is in the log):
//
//   - A segment holds the singletons created since the previous
//     checkpoint, in log order; its ID is the log position of its first one.
//     It is written once and never changes.
//   - The head holds the rest of the state, which is small: the position,
//     the clock, every ongoing series, the IDs of the segments that still
//     hold a tracked singleton, and which of their singletons are gone: all
//     those before Floor (singletons leave in log order when their window
//     closes or the budget evicts them) and the positions of those that left
//     out of order (they started a series).
//
// The head is a snapshot of version 3:
//
//	message Snapshot {
//	  uint32 version  = 1;  // 3
//	  uint64 position = 2;
//	  sint64 clock    = 3;
//	  repeated Entry entries = 4;  // ongoing series only, least recently observed first
//	  uint64 floor    = 5;  // segment singletons before this position are gone
//	  repeated uint64 removed  = 6 [packed];  // ascending, deltas: singletons gone out of order
//	  repeated uint64 segments = 7 [packed];  // ascending, deltas: live segment IDs
//	  bytes singles   = 9;  // Snapshot only: every tracked singleton, in log order
//	}
//
// and a segment is
//
//	message Segment {
//	  uint32 version = 1;  // 3
//	  uint64 id      = 8;
//	  bytes singles  = 9;  // records in log order
//	}
//
// where a record of singles is 40 bytes: the key's hash (16), the tenant's
// (see tenantOf), the log time (unix ns) and the position (8 each, little
// endian). Version 2 segments,
// which held each singleton's event, are still read.
const (
	checkpointV2      = 2
	checkpointVersion = 3

	snapFloor    protowire.Number = 5
	snapRemoved  protowire.Number = 6
	snapSegments protowire.Number = 7
	segID        protowire.Number = 8
	snapSingles  protowire.Number = 9
	entPos       protowire.Number = 10
)

// Segment is a checkpoint segment: singletons in log order.
type Segment struct {
	// ID is the log position of the segment's first singleton.
	ID   uint64
	Data []byte
}

// Checkpoint is an incremental checkpoint. Persist Segment (when not nil)
// before Head; the checkpoint is Head with the segments Live names, and
// every other segment persisted before may go.
type Checkpoint struct {
	Head []byte
	// Segment holds the singletons created since the previous Checkpoint;
	// nil when there are none.
	Segment *Segment
	// Live is the IDs of the segments the head needs, ascending (Segment's
	// included).
	Live []uint64
}

// Checkpoint returns an incremental checkpoint of the aggregator's state,
// which RestoreCheckpoint turns back into an aggregator that continues
// exactly where this one stands. Its cost is that of the singletons created
// since the previous Checkpoint (40 bytes each) plus the ongoing series,
// not that of every tracked key. The singletons it puts in the new segment
// count as persisted from then on: if the checkpoint cannot be persisted,
// the aggregator must be discarded (restore the previous checkpoint), or
// the next checkpoint would miss them.
func (a *Aggregator) Checkpoint() (Checkpoint, error) {
	var cp Checkpoint

	// Singletons not yet in a segment are the newest: a suffix of the ring.
	i := a.single.n
	for i > 0 && a.single.at(i-1).pos >= a.unckpt {
		i--
	}
	var recs []byte
	var id uint64
	n := 0
	for ; i < a.single.n; i++ {
		if r := a.single.at(i); a.single.isLive(r) {
			if n == 0 {
				id = r.pos
				recs = make([]byte, 0, (a.single.n-i)*singleRecLen)
			}
			recs = appendSingleRec(recs, *r)
			n++
		}
	}
	if n > 0 {
		b := appendHeader(nil, checkpointVersion)
		b = protowire.AppendTag(b, segID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
		b = protowire.AppendTag(b, snapSingles, protowire.BytesType)
		b = protowire.AppendBytes(b, recs)
		a.segs = append(a.segs, segLive{id: id, n: n})
		cp.Segment = &Segment{ID: id, Data: b}
	}
	a.unckpt = a.pos + 1

	floor := a.pos + 1
	if r, ok := a.single.oldest(); ok {
		floor = r.pos
	}
	slices.Sort(a.removed)
	a.removed = slices.Compact(a.removed)
	a.removed = slices.DeleteFunc(a.removed, func(p uint64) bool { return p < floor })
	for _, s := range a.segs {
		cp.Live = append(cp.Live, s.id)
	}

	b := appendHeader(nil, checkpointVersion)
	b = protowire.AppendTag(b, snapPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, a.pos)
	b = protowire.AppendTag(b, snapClock, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(a.clock))
	b = protowire.AppendTag(b, snapFloor, protowire.VarintType)
	b = protowire.AppendVarint(b, floor)
	b = appendPackedDeltas(b, snapRemoved, a.removed)
	b = appendPackedDeltas(b, snapSegments, cp.Live)
	b, err := appendEntries(b, a.series.head)
	if err != nil {
		return Checkpoint{}, err
	}
	cp.Head = b
	return cp, nil
}

func appendHeader(b []byte, version uint64) []byte {
	b = protowire.AppendTag(b, snapVersion, protowire.VarintType)
	return protowire.AppendVarint(b, version)
}

// dropSingle stops tracking the singleton of hash h at position pos. Only
// a checkpointed singleton that leaves out of log order (not the oldest:
// it started a series or collided) is noted in removed; the oldest ones
// leave below the next checkpoint's floor.
func (a *Aggregator) dropSingle(h hash128, pos uint64) {
	r, ok := a.single.oldest()
	oldest := ok && r.pos == pos
	a.single.remove(h)
	if pos >= a.unckpt {
		return
	}
	if !oldest {
		a.removed = append(a.removed, pos)
	}
	// Segments hold consecutive ranges of positions: the singleton's is
	// the last one that starts at or before it.
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].id > pos }) - 1
	if i < 0 {
		return
	}
	if a.segs[i].n--; a.segs[i].n <= 0 {
		a.segs = slices.Delete(a.segs, i, i+1)
	}
}

func appendPackedDeltas(b []byte, num protowire.Number, vs []uint64) []byte {
	if len(vs) == 0 {
		return b
	}
	var p []byte
	prev := uint64(0)
	for _, v := range vs {
		p = protowire.AppendVarint(p, v-prev)
		prev = v
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, p)
}

// ErrSegmentLost, returned by RestoreCheckpoint's segment reader, says a
// segment can no longer be read (its checkpoint was damaged): the
// singletons it held are restored as not seen, and their next occurrences
// are new events instead of starting a series.
var ErrSegmentLost = errors.New("series checkpoint segment lost")

// RestoreCheckpoint rebuilds an aggregator from a Checkpoint's head (or a
// Snapshot), reading the segments it names with segment. A head written by
// an earlier version (1 or 2) is restored too. cfg should be the config the
// checkpoint was taken under. Set the restored aggregator's Reader: it
// holds no singleton's event.
func RestoreCheckpoint(cfg Config, head []byte, segment func(id uint64) ([]byte, error)) (*Aggregator, error) {
	h, err := parseSnapshot(head)
	if err != nil {
		return nil, err
	}
	if h.version == snapshotVersion {
		return restoreV1(cfg, h)
	}
	if h.version != checkpointV2 && h.version != checkpointVersion {
		return nil, corrupt("version %d, want %d to %d", h.version, snapshotVersion, checkpointVersion)
	}
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	a.pos, a.clock = h.position, h.clock
	removed := deltas(h.removed)
	segs := deltas(h.segments)
	if removed == nil && h.removed != nil || segs == nil && h.segments != nil {
		return nil, corrupt("bad packed positions")
	}
	for _, id := range segs {
		if id == 0 {
			return nil, corrupt("segment 0")
		}
		b, err := segment(id)
		if errors.Is(err, ErrSegmentLost) {
			continue // its singletons are not tracked any more
		}
		if err != nil {
			return nil, fmt.Errorf("series checkpoint segment %d: %w", id, err)
		}
		s, err := parseSnapshot(b)
		if err != nil {
			return nil, fmt.Errorf("segment %d: %w", id, err)
		}
		if s.version != checkpointV2 && s.version != checkpointVersion || s.id != id {
			return nil, corrupt("segment %d: version %d, id %d", id, s.version, s.id)
		}
		n := 0
		err = a.eachSingle(s, func(r ringRec, raw []byte) error {
			if r.pos < id {
				return errors.New("not a singleton of the segment")
			}
			if r.pos < h.floor {
				return nil
			}
			if _, gone := slices.BinarySearch(removed, r.pos); gone {
				return nil
			}
			n++
			return a.restoreSingle(r, raw)
		})
		if err != nil {
			return nil, corrupt("segment %d: %v", id, err)
		}
		if n > 0 {
			a.segs = append(a.segs, segLive{id: id, n: n})
		}
	}
	a.unckpt = a.pos + 1
	err = a.eachSingle(h, func(r ringRec, raw []byte) error {
		if a.unckpt > r.pos {
			a.unckpt = r.pos // inline singletons are in no segment
		}
		return a.restoreSingle(r, raw)
	})
	if err != nil {
		return nil, corrupt("%v", err)
	}
	if err := a.restoreSeries(h.entries); err != nil {
		return nil, err
	}
	// The singletons gone from the live segments stay gone in the next
	// checkpoints.
	a.removed = removed
	return a, nil
}

// eachSingle calls f with each singleton of a parsed head or segment, in
// order: the records of version 3, or the entries of version 2 (with the
// event's encoding).
func (a *Aggregator) eachSingle(p parsed, f func(r ringRec, raw []byte) error) error {
	if len(p.singles)%singleRecLen != 0 {
		return errors.New("singles: truncated record")
	}
	for b := p.singles; len(b) > 0; b = b[singleRecLen:] {
		if err := f(readSingleRec(b), nil); err != nil {
			return err
		}
	}
	if p.version != checkpointV2 || p.id == 0 {
		return nil
	}
	for i, r := range p.entries {
		d, err := decodeEntry(r)
		if err != nil {
			return fmt.Errorf("entry %d: %v", i, err)
		}
		if d.ongoing {
			return fmt.Errorf("entry %d: a series in a segment", i)
		}
		if err := f(d.single(), d.raw); err != nil {
			return fmt.Errorf("entry %d: %v", i, err)
		}
	}
	return nil
}

// restoreSingle tracks a restored singleton (raw, its event's encoding, if
// at hand). Singletons must come in log order.
func (a *Aggregator) restoreSingle(r ringRec, raw []byte) error {
	if r.last > a.clock || r.pos > a.pos {
		return errors.New("a singleton after the snapshot's position")
	}
	if r.h == (hash128{}) {
		return errors.New("a singleton without a hash")
	}
	if a.single.n > 0 {
		if t := a.single.at(a.single.n - 1); t.pos >= r.pos || t.last > r.last {
			return errors.New("singletons out of order")
		}
	}
	if _, dup := a.single.get(r.h); dup {
		return fmt.Errorf("singleton at %d tracked twice", r.pos)
	}
	a.single.add(r.h, r.tenant, r.last, r.pos, raw)
	return nil
}

// restoreSeries tracks the ongoing series of a snapshot's entries.
func (a *Aggregator) restoreSeries(entries [][]byte) error {
	for i, r := range entries {
		d, err := decodeEntry(r)
		if err != nil {
			return corrupt("entry %d: %v", i, err)
		}
		if !d.ongoing {
			return corrupt("entry %d: a singleton among the series", i)
		}
		if err := a.restoreEntry(d); err != nil {
			return corrupt("entry %d: %v", i, err)
		}
	}
	heap.Init(&a.timers)
	return nil
}

// restoreEntry tracks a restored series (the caller re-initializes the
// timers' heap once all are in).
func (a *Aggregator) restoreEntry(d decoded) error {
	if d.last > a.clock || d.lastWrite > a.clock {
		return errors.New("times after the snapshot's clock")
	}
	key := string(appendKey(nil, d.ev))
	if _, dup := a.entries[key]; dup {
		return fmt.Errorf("key of uid %s tracked twice", d.ev.GetUid())
	}
	e := a.track(key, d.ev, d.pos)
	e.note, e.count, e.last, e.lastWrite, e.seq, e.pending = d.note, d.count, d.last, d.lastWrite, d.seq, d.pending
	e.due = a.dueOf(e)
	e.idx = len(a.timers)
	a.timers = append(a.timers, e)
	return nil
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorruptSnapshot}, args...)...)
}

// parsed is a snapshot, head or segment, split into its fields.
type parsed struct {
	version, position, floor, id uint64
	clock                        int64
	entries                      [][]byte
	removed, segments, singles   []byte
}

func parseSnapshot(b []byte) (parsed, error) {
	var p parsed
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, corrupt("%v", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == snapVersion && typ == protowire.VarintType:
			p.version, n = protowire.ConsumeVarint(b)
		case num == snapPosition && typ == protowire.VarintType:
			p.position, n = protowire.ConsumeVarint(b)
		case num == snapClock && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			p.clock = protowire.DecodeZigZag(v)
		case num == snapEntry && typ == protowire.BytesType:
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			p.entries = append(p.entries, v)
		case num == snapFloor && typ == protowire.VarintType:
			p.floor, n = protowire.ConsumeVarint(b)
		case num == segID && typ == protowire.VarintType:
			p.id, n = protowire.ConsumeVarint(b)
		case num == snapRemoved && typ == protowire.BytesType:
			p.removed, n = protowire.ConsumeBytes(b)
		case num == snapSegments && typ == protowire.BytesType:
			p.segments, n = protowire.ConsumeBytes(b)
		case num == snapSingles && typ == protowire.BytesType:
			p.singles, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return p, corrupt("field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return p, nil
}

// deltas decodes packed ascending deltas; nil when b does not decode or
// the values overflow.
func deltas(b []byte) []uint64 {
	var vs []uint64
	prev := uint64(0)
	for len(b) > 0 {
		d, n := protowire.ConsumeVarint(b)
		if n < 0 || prev+d < prev {
			return nil
		}
		prev += d
		vs = append(vs, prev)
		b = b[n:]
	}
	return vs
}
