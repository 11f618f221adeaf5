package series

import (
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

// Snapshot encodes the aggregator's whole state in one piece: Restore (or
// RestoreCheckpoint) turns it back into an aggregator that continues exactly
// where this one stands, at Position. It is a checkpoint head with every
// tracked singleton inline and no segments.
func (a *Aggregator) Snapshot() ([]byte, error) {
	b := appendHeader(nil, checkpointVersion)
	b = protowire.AppendTag(b, snapPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, a.pos)
	b = protowire.AppendTag(b, snapClock, protowire.VarintType)
	b = protowire.AppendVarint(b, protowire.EncodeZigZag(a.clock))
	recs := make([]byte, 0, a.single.live()*singleRecLen)
	for i := range a.single.n {
		if r := a.single.at(i); a.single.isLive(r) {
			recs = appendSingleRec(recs, *r)
		}
	}
	if len(recs) > 0 {
		b = protowire.AppendTag(b, snapSingles, protowire.BytesType)
		b = protowire.AppendBytes(b, recs)
	}
	return appendEntries(b, a.series.head)
}

// appendEntries appends series e and those after it as snapshot entries;
// size, their estimated memory, bounds what they take encoded.
func appendEntries(b []byte, e *entry) ([]byte, error) {
	// Grown once to about what the entries take: a checkpoint writes every
	// series, each second.
	need := 0
	for x := e; x != nil; x = x.next {
		ev, err := x.encode()
		if err != nil {
			return nil, err
		}
		need += len(ev) + len(x.note) + entryFieldsBytes + pendingMinuteBytes*len(x.pending)
	}
	b = slices.Grow(b, need)
	var eb []byte
	for ; e != nil; e = e.next {
		ev, err := e.encode()
		if err != nil {
			return nil, err
		}
		eb = appendEntry(eb[:0], e, ev)
		b = protowire.AppendTag(b, snapEntry, protowire.BytesType)
		b = protowire.AppendBytes(b, eb)
	}
	return b, nil
}

// entryFieldsBytes bounds what a snapshot entry takes besides its event,
// note and minutes (tags, lengths and varints); pendingMinuteBytes bounds a
// pending minute's two varints and their share of two lengths.
const (
	entryFieldsBytes   = 64
	pendingMinuteBytes = 16
)

func appendEntry(b []byte, e *entry, ev []byte) []byte {
	b = protowire.AppendTag(b, entEvent, protowire.BytesType)
	b = protowire.AppendBytes(b, ev)
	if e.note != "" {
		b = protowire.AppendTag(b, entNote, protowire.BytesType)
		b = protowire.AppendString(b, e.note)
	}
	b = protowire.AppendTag(b, entOngoing, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
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
// the snapshot was taken under (see the package documentation). Set the
// restored aggregator's Reader: it holds no singleton's event.
func Restore(cfg Config, b []byte) (*Aggregator, error) {
	return RestoreCheckpoint(cfg, b, func(id uint64) ([]byte, error) {
		return nil, corrupt("a snapshot names segment %d", id)
	})
}

// restoreV1 restores a snapshot of version 1, which held every tracked
// key's event, singletons first.
func restoreV1(cfg Config, p parsed) (*Aggregator, error) {
	a, err := New(cfg)
	if err != nil {
		return nil, err
	}
	a.pos, a.clock = p.position, p.clock
	var singles []decoded
	var series [][]byte
	for i, r := range p.entries {
		d, err := decodeEntry(r)
		if err != nil {
			return nil, corrupt("entry %d: %v", i, err)
		}
		if d.ongoing {
			series = append(series, r)
			continue
		}
		if len(series) > 0 {
			return nil, corrupt("entry %d: a singleton after the series", i)
		}
		singles = append(singles, d)
	}
	// Snapshots written before positions were recorded: any increasing
	// positions up to Position will do (there were as many entries).
	if len(singles) > 0 && singles[0].pos == 0 {
		next := uint64(1)
		if uint64(len(singles)) < a.pos {
			next = a.pos - uint64(len(singles)) + 1
		}
		for i := range singles {
			singles[i].pos, next = next, next+1
		}
	}
	a.unckpt = a.pos + 1
	if len(singles) > 0 {
		a.unckpt = singles[0].pos
	}
	for i, d := range singles {
		if err := a.restoreSingle(d.single(), d.raw); err != nil {
			return nil, corrupt("singleton %d: %v", i, err)
		}
	}
	if err := a.restoreSeries(series); err != nil {
		return nil, err
	}
	return a, nil
}

// decoded is a snapshot entry: a series, or a singleton of a version 1 or
// 2 snapshot.
type decoded struct {
	ev              *eventgatev1.Event // series cleared
	raw             []byte             // ev's encoding, as snapshotted
	note            string
	ongoing         bool
	count           int32
	last, lastWrite int64
	seq             uint32
	pending         []minute
	pos             uint64
}

// single is a decoded singleton's record.
func (d decoded) single() ringRec {
	return ringRec{h: hashKey(appendKey(nil, d.ev)), tenant: tenantOf(d.ev), last: d.last, pos: d.pos}
}

func decodeEntry(b []byte) (decoded, error) {
	var d decoded
	var minutes, counts []uint64
	var count, seq uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return d, protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		switch {
		case num == entEvent && typ == protowire.BytesType:
			d.raw, n = protowire.ConsumeBytes(b)
		case num == entNote && typ == protowire.BytesType:
			d.note, n = protowire.ConsumeString(b)
		case num == entOngoing && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			d.ongoing = v != 0
		case num == entCount && typ == protowire.VarintType:
			count, n = protowire.ConsumeVarint(b)
		case num == entLast && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			d.last = protowire.DecodeZigZag(v)
		case num == entLastWrite && typ == protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
			d.lastWrite = protowire.DecodeZigZag(v)
		case num == entSeq && typ == protowire.VarintType:
			seq, n = protowire.ConsumeVarint(b)
		case num == entPos && typ == protowire.VarintType:
			d.pos, n = protowire.ConsumeVarint(b)
		case num == entMinutes && typ == protowire.BytesType:
			minutes, n = consumePacked(b, minutes)
		case num == entCounts && typ == protowire.BytesType:
			counts, n = consumePacked(b, counts)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return d, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}

	d.ev = new(eventgatev1.Event)
	if err := proto.Unmarshal(d.raw, d.ev); err != nil {
		return d, fmt.Errorf("event: %w", err)
	}
	if d.ev.GetUid() == "" {
		return d, errors.New("event without uid")
	}
	d.ev.Series = nil
	switch {
	case !d.ongoing && count != 1:
		return d, fmt.Errorf("singleton with count %d", count)
	case d.ongoing && (count < 2 || count > math.MaxInt32):
		return d, fmt.Errorf("series with count %d", count)
	case !d.ongoing && seq != 1 || d.ongoing && (seq < 2 || seq > math.MaxUint32):
		return d, fmt.Errorf("%d writes for count %d", seq, count)
	case len(minutes) != len(counts):
		return d, fmt.Errorf("%d pending minutes with %d counts", len(minutes), len(counts))
	case !d.ongoing && len(minutes) > 0:
		return d, errors.New("singleton with pending occurrences")
	}
	d.count = int32(count)
	d.seq = uint32(seq)
	sum := uint64(0)
	for i := range minutes {
		m := protowire.DecodeZigZag(minutes[i])
		if counts[i] == 0 || counts[i] > math.MaxInt32 || i > 0 && m <= d.pending[i-1].m {
			return d, errors.New("pending minutes out of order or empty")
		}
		sum += counts[i]
		d.pending = append(d.pending, minute{m: m, n: int32(counts[i])})
	}
	if sum > count {
		return d, fmt.Errorf("%d pending occurrences for count %d", sum, count)
	}
	return d, nil
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
