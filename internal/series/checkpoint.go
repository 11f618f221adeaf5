package series

import (
	"container/heap"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Incremental checkpoints.
//
// A Snapshot holds every tracked key, and most of them are singletons that
// will never change: they only wait, for Window, for an isomorphic
// occurrence. Writing them all at every checkpoint costs the whole state
// each time, which at a high rate of distinct events is far more than the
// events themselves. Checkpoint writes each singleton once instead:
//
//   - A segment holds the singletons created since the previous
//     checkpoint, in log order; its ID is the log position of its first one.
//     It is written once and never changes.
//   - The head holds the rest of the state, which is small: the position,
//     the clock, every ongoing series, the IDs of the segments that still
//     hold a tracked singleton, and which of their singletons are gone: all
//     those before Floor (singletons leave in log order when their window
//     closes or the cap evicts them) and the positions of those that left
//     out of order (they started a series).
//
// The head is a snapshot of version 2:
//
//	message Snapshot {
//	  uint32 version  = 1;  // 2
//	  uint64 position = 2;
//	  sint64 clock    = 3;
//	  repeated Entry entries = 4;  // ongoing series only, least recently observed first
//	  uint64 floor    = 5;  // segment singletons before this position are gone
//	  repeated uint64 removed  = 6 [packed];  // ascending, deltas: singletons gone out of order
//	  repeated uint64 segments = 7 [packed];  // ascending, deltas: live segment IDs
//	}
//
// and a segment is
//
//	message Segment {
//	  uint32 version = 1;  // 2
//	  uint64 id      = 8;
//	  repeated Entry entries = 4;  // singletons in log order, each with its position
//	}
const (
	checkpointVersion = 2

	snapFloor    protowire.Number = 5
	snapRemoved  protowire.Number = 6
	snapSegments protowire.Number = 7
	segID        protowire.Number = 8
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
// since the previous Checkpoint plus the ongoing series, not that of every
// tracked key. The singletons it puts in the new segment count as
// persisted from then on: if the checkpoint cannot be persisted, the
// aggregator must be discarded (restore the previous checkpoint), or the
// next checkpoint would miss them.
func (a *Aggregator) Checkpoint() (Checkpoint, error) {
	var cp Checkpoint

	// Singletons not yet in a segment are the newest: a suffix of singles.
	first := a.singles.tail
	if first != nil && first.seg != 0 {
		first = nil
	}
	for first != nil && first.prev != nil && first.prev.seg == 0 {
		first = first.prev
	}
	if first != nil {
		id := first.pos
		b := protowire.AppendTag(nil, snapVersion, protowire.VarintType)
		b = protowire.AppendVarint(b, checkpointVersion)
		b = protowire.AppendTag(b, segID, protowire.VarintType)
		b = protowire.AppendVarint(b, id)
		n := 0
		b, err := appendEntries(b, first, func(e *entry) { e.seg = id; n++ })
		if err != nil {
			return Checkpoint{}, err
		}
		a.segLive[id] = n
		cp.Segment = &Segment{ID: id, Data: b}
	}

	floor := a.pos + 1
	if h := a.singles.head; h != nil {
		floor = h.pos
	}
	slices.Sort(a.removed)
	a.removed = slices.Compact(a.removed)
	a.removed = slices.DeleteFunc(a.removed, func(p uint64) bool { return p < floor })
	cp.Live = slices.Sorted(maps.Keys(a.segLive))

	b := protowire.AppendTag(nil, snapVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, checkpointVersion)
	b = protowire.AppendTag(b, snapPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, a.pos)
	b = protowire.AppendTag(b, snapClock, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(a.clock))
	b = protowire.AppendTag(b, snapFloor, protowire.VarintType)
	b = protowire.AppendVarint(b, floor)
	b = appendPackedDeltas(b, snapRemoved, a.removed)
	b = appendPackedDeltas(b, snapSegments, cp.Live)
	b, err := appendEntries(b, a.series.head, nil)
	if err != nil {
		return Checkpoint{}, err
	}
	cp.Head = b
	return cp, nil
}

// dropSingle stops tracking singleton e as one. Only a singleton that
// leaves out of log order (not the oldest: it started a series) is noted in
// removed; the oldest ones leave below the next checkpoint's floor.
func (a *Aggregator) dropSingle(e *entry) {
	oldest := a.singles.head == e
	a.singles.remove(e)
	if e.seg == 0 {
		return
	}
	if !oldest {
		a.removed = append(a.removed, e.pos)
	}
	if a.segLive[e.seg]--; a.segLive[e.seg] <= 0 {
		delete(a.segLive, e.seg)
	}
	e.seg = 0
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

// RestoreCheckpoint rebuilds an aggregator from a Checkpoint's head,
// reading the segments it names with segment. A head written by Snapshot
// (version 1) is restored as Restore does. cfg should be the config the
// checkpoint was taken under.
func RestoreCheckpoint(cfg Config, head []byte, segment func(id uint64) ([]byte, error)) (*Aggregator, error) {
	h, err := parseSnapshot(head)
	if err != nil {
		return nil, err
	}
	if h.version == snapshotVersion {
		return Restore(cfg, head)
	}
	if h.version != checkpointVersion {
		return nil, corrupt("version %d, want %d or %d", h.version, snapshotVersion, checkpointVersion)
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
		if err != nil {
			return nil, fmt.Errorf("series checkpoint segment %d: %w", id, err)
		}
		s, err := parseSnapshot(b)
		if err != nil {
			return nil, fmt.Errorf("segment %d: %w", id, err)
		}
		if s.version != checkpointVersion || s.id != id {
			return nil, corrupt("segment %d: version %d, id %d", id, s.version, s.id)
		}
		for i, r := range s.entries {
			e, err := a.decodeEntry(r)
			if err != nil {
				return nil, corrupt("segment %d entry %d: %v", id, i, err)
			}
			if e.kind != singleton || e.pos < id {
				return nil, corrupt("segment %d entry %d: not a singleton of the segment", id, i)
			}
			if e.pos < h.floor {
				continue
			}
			if _, gone := slices.BinarySearch(removed, e.pos); gone {
				continue
			}
			if t := a.singles.tail; t != nil && (t.pos >= e.pos || t.last > e.last) {
				return nil, corrupt("segment %d entry %d: singletons out of order", id, i)
			}
			if err := a.track(e); err != nil {
				return nil, corrupt("segment %d entry %d: %v", id, i, err)
			}
			e.seg = id
			a.segLive[id]++
		}
	}
	for i, r := range h.entries {
		e, err := a.decodeEntry(r)
		if err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
		if e.kind != ongoing {
			return nil, corrupt("entry %d: a singleton in the head", i)
		}
		if err := a.track(e); err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
	}
	heap.Init(&a.timers)
	// The singletons gone from the live segments stay gone in the next
	// checkpoints.
	a.removed = removed
	return a, nil
}

// track adds a restored entry to the aggregator's indexes (the caller
// re-initializes the timers' heap once all are in).
func (a *Aggregator) track(e *entry) error {
	if _, dup := a.entries[e.key]; dup {
		return fmt.Errorf("key of uid %s tracked twice", e.uid)
	}
	a.entries[e.key] = e
	e.idx = -1
	if e.kind == singleton {
		a.singles.pushBack(e)
		return nil
	}
	a.series.pushBack(e)
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
	removed, segments            []byte
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
