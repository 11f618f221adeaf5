package series

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// ErrCorruptSnapshot is wrapped by Restore's errors about its input.
var ErrCorruptSnapshot = errors.New("corrupt series snapshot")

// snapshotVersion is bumped on any change that an older Restore would
// misread (new fields are skipped by older readers and need no bump; so is a
// change of the key encoding, which is recomputed from the events).
const snapshotVersion = 1

// The snapshot is protobuf wire format, encoded by hand so that the package
// needs no generated code. As a schema:
//
//	message Snapshot {
//	  uint32 version  = 1;
//	  uint64 position = 2; // Aggregator.Position
//	  sint64 clock    = 3; // latest log time, unix ns
//	  repeated Entry entries = 4; // singletons oldest first, then series least recently observed first
//	}
//	message Entry {
//	  bytes  event      = 1; // eventgate.v1.Event: the first occurrence
//	  string note       = 2; // the latest occurrence's note
//	  bool   ongoing    = 3; // a series, not a singleton
//	  uint32 count      = 4;
//	  sint64 last       = 5; // log time of the latest occurrence, unix ns
//	  sint64 last_write = 6; // log time of the latest write, unix ns
//	  uint32 seq        = 7; // writes emitted
//	  repeated sint64 pending_minutes = 8; // unix minutes not yet written, ascending
//	  repeated uint32 pending_counts  = 9; // occurrences in each
//	  uint64 position = 10; // log position of the first occurrence
//	}
const (
	snapVersion  protowire.Number = 1
	snapPosition protowire.Number = 2
	snapClock    protowire.Number = 3
	snapEntry    protowire.Number = 4

	entEvent     protowire.Number = 1
	entNote      protowire.Number = 2
	entOngoing   protowire.Number = 3
	entCount     protowire.Number = 4
	entLast      protowire.Number = 5
	entLastWrite protowire.Number = 6
	entSeq       protowire.Number = 7
	entMinutes   protowire.Number = 8
	entCounts    protowire.Number = 9
)

// Snapshot encodes the aggregator's whole state: Restore turns it back into
// an aggregator that continues exactly where this one stands, at Position.
func (a *Aggregator) Snapshot() ([]byte, error) {
	var b []byte
	b = protowire.AppendTag(b, snapVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, snapshotVersion)
	b = protowire.AppendTag(b, snapPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, a.pos)
	b = protowire.AppendTag(b, snapClock, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(a.clock))
	for _, l := range []*list{&a.singles, &a.series} {
		var err error
		if b, err = appendEntries(b, l.head, nil); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendEntries appends e and the entries after it as snapshot entries,
// calling visit (when not nil) with each.
func appendEntries(b []byte, e *entry, visit func(*entry)) ([]byte, error) {
	// Room for them all at once: a segment carries megabytes of encoded
	// singletons, and growing it by appends copied it several times.
	// (An event not held encoded is counted at a guess.)
	size := 0
	for x := e; x != nil; x = x.next {
		size += len(x.raw) + len(x.note) + 64 + 3*len(x.pending)
		if x.raw == nil {
			size += 512
		}
	}
	b = slices.Grow(b, size)
	var ev, eb []byte
	for ; e != nil; e = e.next {
		var err error
		if ev, err = e.encode(ev[:0]); err != nil {
			return nil, err
		}
		eb = appendEntry(eb[:0], e, ev)
		b = protowire.AppendTag(b, snapEntry, protowire.BytesType)
		b = protowire.AppendBytes(b, eb)
		if visit != nil {
			visit(e)
		}
	}
	return b, nil
}

func appendEntry(b []byte, e *entry, ev []byte) []byte {
	b = protowire.AppendTag(b, entEvent, protowire.BytesType)
	b = protowire.AppendBytes(b, ev)
	if e.note != "" {
		b = protowire.AppendTag(b, entNote, protowire.BytesType)
		b = protowire.AppendString(b, e.note)
	}
	if e.kind == ongoing {
		b = protowire.AppendTag(b, entOngoing, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	b = protowire.AppendTag(b, entCount, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(e.count))
	b = protowire.AppendTag(b, entLast, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(e.last))
	b = protowire.AppendTag(b, entLastWrite, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(e.lastWrite))
	b = protowire.AppendTag(b, entSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(e.seq))
	if len(e.pending) > 0 {
		var p []byte
		for _, m := range e.pending {
			p = protowire.AppendVarint(p, protowire.EncodeZigZag(m.m))
		}
		b = protowire.AppendTag(b, entMinutes, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
		p = p[:0]
		for _, m := range e.pending {
			p = protowire.AppendVarint(p, uint64(m.n))
		}
		b = protowire.AppendTag(b, entCounts, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	if e.pos != 0 {
		b = protowire.AppendTag(b, entPos, protowire.VarintType)
		b = protowire.AppendVarint(b, e.pos)
	}
	return b
}

// Restore rebuilds an aggregator from a Snapshot. cfg should be the config
// the snapshot was taken under (see the package documentation).
func Restore(cfg Config, b []byte) (*Aggregator, error) {
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p, err := parseSnapshot(b)
	if err != nil {
		return nil, err
	}
	if p.version != snapshotVersion {
		return nil, corrupt("version %d, want %d", p.version, snapshotVersion)
	}
	a.pos, a.clock = p.position, p.clock
	a.timers = make(timers, 0, len(p.entries))
	singles := 0
	for i, r := range p.entries {
		e, err := a.decodeEntry(r)
		if err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
		if e.kind == singleton {
			if t := a.singles.tail; t != nil && (t.last > e.last || e.pos != 0 && t.pos >= e.pos) {
				return nil, corrupt("entry %d: singletons out of order", i)
			}
			singles++
		}
		if err := a.track(e); err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
	}
	// Snapshots written before positions were recorded: any increasing
	// positions up to Position will do (there were as many entries).
	if h := a.singles.head; h != nil && h.pos == 0 {
		next := uint64(1)
		if uint64(singles) < a.pos {
			next = a.pos - uint64(singles) + 1
		}
		for e := h; e != nil; e = e.next {
			e.pos, next = next, next+1
		}
	}
	heap.Init(&a.timers)
	return a, nil
}

func (a *Aggregator) decodeEntry(b []byte) (*entry, error) {
	e := &entry{}
	var evb []byte
	var minutes, counts []uint64
	var count, seq uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		switch {
		case num == entEvent && typ == protowire.BytesType:
			evb, n = protowire.ConsumeBytes(b)
		case num == entNote && typ == protowire.BytesType:
			e.note, n = protowire.ConsumeString(b)
		case num == entOngoing && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			if v != 0 {
				e.kind = ongoing
			}
		case num == entCount && typ == protowire.VarintType:
			count, n = protowire.ConsumeVarint(b)
		case num == entLast && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			e.last = protowire.DecodeZigZag(v)
		case num == entLastWrite && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			e.lastWrite = protowire.DecodeZigZag(v)
		case num == entSeq && typ == protowire.VarintType:
			seq, n = protowire.ConsumeVarint(b)
		case num == entPos && typ == protowire.VarintType:
			e.pos, n = protowire.ConsumeVarint(b)
		case num == entMinutes && typ == protowire.BytesType:
			minutes, n = consumePacked(b, minutes)
		case num == entCounts && typ == protowire.BytesType:
			counts, n = consumePacked(b, counts)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}

	ev := new(eventgatev1.Event)
	if err := proto.Unmarshal(evb, ev); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	if ev.GetUid() == "" {
		return nil, errors.New("event without uid")
	}
	if e.kind == singleton && ev.Series == nil {
		// Kept encoded, as Observe keeps a singleton.
		e.keep(appendKey(nil, ev), evb, ev.GetUid())
	} else {
		ev.Series = nil
		e.key, e.uid, e.ev = string(appendKey(nil, ev)), ev.GetUid(), ev
	}
	switch {
	case e.kind == singleton && count != 1:
		return nil, fmt.Errorf("singleton with count %d", count)
	case e.kind == ongoing && (count < 2 || count > math.MaxInt32):
		return nil, fmt.Errorf("series with count %d", count)
	case e.kind == singleton && seq != 1 || e.kind == ongoing && (seq < 2 || seq > math.MaxUint32):
		return nil, fmt.Errorf("%d writes for count %d", seq, count)
	case e.last > a.clock || e.lastWrite > a.clock:
		return nil, errors.New("times after the snapshot's clock")
	case len(minutes) != len(counts):
		return nil, fmt.Errorf("%d pending minutes with %d counts", len(minutes), len(counts))
	case e.kind == singleton && len(minutes) > 0:
		return nil, errors.New("singleton with pending occurrences")
	}
	e.count = int32(count)
	e.seq = uint32(seq)
	sum := uint64(0)
	for i := range minutes {
		m := protowire.DecodeZigZag(minutes[i])
		if counts[i] == 0 || counts[i] > math.MaxInt32 || i > 0 && m <= e.pending[i-1].m {
			return nil, errors.New("pending minutes out of order or empty")
		}
		sum += counts[i]
		e.pending = append(e.pending, minute{m: m, n: int32(counts[i])})
	}
	if sum > count {
		return nil, fmt.Errorf("%d pending occurrences for count %d", sum, count)
	}
	return e, nil
}

// consumePacked appends a packed repeated varint field's values to dst.
func consumePacked(b []byte, dst []uint64) ([]uint64, int) {
	p, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return dst, n
	}
	for len(p) > 0 {
		v, m := protowire.ConsumeVarint(p)
		if m < 0 {
			return dst, m
		}
		dst = append(dst, v)
		p = p[m:]
	}
	return dst, n
}
