package series

import (
	"crypto/sha256"
	"encoding/binary"
)

// Lean singleton tracking.
//
// Nearly every tracked key is a singleton: a distinct event that waits,
// for Window, for an isomorphic one that will usually never come. What
// decides that next occurrence is only the key and where the first one is
// in the log, so a singleton is tracked as a 128-bit hash of its key and
// its log position and time, in structures without pointers (the
// collector never scans them): a map from hash to position and a ring of
// (hash, time, position) in log order, which expires them as their window
// closes. Their events are not kept: when a second occurrence comes, the
// first is read back from the log by its position (Reader), or from a
// small ring of the most recent encodings, which serves the common case of
// an event repeated within seconds without I/O.
//
// A hash collision (two different keys with one hash, about 2^-128 per
// pair) is caught: the first occurrence read back must have the same key,
// or the tracked singleton is forgotten (as if evicted; Stats.Collisions)
// and the new occurrence becomes a singleton of its own.

// hash128 is the first 128 bits of the SHA-256 of a key's canonical
// encoding: the same in every process and release with that encoding, as
// checkpoints require.
type hash128 [16]byte

func hashKey(key []byte) hash128 {
	s := sha256.Sum256(key)
	return hash128(s[:16])
}

// single is a tracked singleton, by hash: its log position and where its
// encoding is in the recent ring, if it still is (n > 0).
type single struct {
	pos uint64
	off uint64 // offset of the encoding in the stream of recent encodings
	n   uint32
}

// ringRec is a singleton in log order. A record whose hash no longer maps
// to its position is stale (the singleton started a series, was evicted,
// or collided): it only waits to be popped.
type ringRec struct {
	h    hash128
	last int64 // log time of the occurrence, unix ns
	pos  uint64
}

// Estimated bytes per singleton and record, for the memory budget: a map
// slot (key, value and control byte) at the map's lowest load after it
// grows, and a ring record with the ring's spare capacity after it grows.
const (
	singleBytes  = (16 + 24 + 1) * 2
	ringRecBytes = 32 * 2
)

// singles is the set of tracked singletons.
type singles struct {
	byHash map[hash128]single
	ring   []ringRec // circular: n records from head
	head   int
	n      int
	recent recent
}

func newSingles(recentBytes int) singles {
	return singles{byHash: make(map[hash128]single), recent: recent{max: recentBytes}}
}

func (s *singles) live() int { return len(s.byHash) }

// bytes is the memory the singletons account for in the budget.
func (s *singles) bytes() int64 {
	return int64(len(s.byHash))*singleBytes + int64(s.n)*ringRecBytes + int64(s.recent.max)
}

// add tracks a new singleton; pos is above every tracked one's.
func (s *singles) add(h hash128, last int64, pos uint64, raw []byte) {
	off, n := s.recent.put(raw)
	s.byHash[h] = single{pos: pos, off: off, n: n}
	if s.n == len(s.ring) {
		grown := make([]ringRec, max(64, 2*len(s.ring)))
		for i := range s.n {
			grown[i] = s.ring[(s.head+i)%len(s.ring)]
		}
		s.ring, s.head = grown, 0
	}
	s.ring[(s.head+s.n)%len(s.ring)] = ringRec{h: h, last: last, pos: pos}
	s.n++
}

// at returns the i-th record from the oldest.
func (s *singles) at(i int) *ringRec { return &s.ring[(s.head+i)%len(s.ring)] }

// isLive reports whether r is a tracked singleton.
func (s *singles) isLive(r *ringRec) bool {
	v, ok := s.byHash[r.h]
	return ok && v.pos == r.pos
}

// oldest returns the oldest tracked singleton, popping stale records.
func (s *singles) oldest() (ringRec, bool) {
	for s.n > 0 {
		r := s.at(0)
		if s.isLive(r) {
			return *r, true
		}
		s.pop()
	}
	return ringRec{}, false
}

func (s *singles) pop() {
	*s.at(0) = ringRec{}
	s.head = (s.head + 1) % len(s.ring)
	s.n--
	if s.n == 0 {
		s.head = 0
	}
}

// remove stops tracking the singleton of hash h (its ring record goes
// stale).
func (s *singles) remove(h hash128) { delete(s.byHash, h) }

// recent is a ring of the most recent singletons' encodings: a stream of
// bytes of which the last len(buf) are kept. The ring grows up to max as
// the stream does (a quiet partition holds little), and the budget counts
// max.
type recent struct {
	buf []byte
	max int
	lo  uint64 // the stream's first byte still held
	end uint64 // bytes written to the stream
}

// put appends raw to the stream and returns where it is; n is 0 when raw
// is not kept (too large for the ring).
func (r *recent) put(raw []byte) (off uint64, n uint32) {
	if len(raw) == 0 || len(raw) > r.max/8 {
		return 0, 0
	}
	if r.end+uint64(len(raw)) > uint64(len(r.buf)) && len(r.buf) < r.max {
		r.grow(max(len(raw), int(r.end)+len(raw)))
	}
	off = r.end
	i := int(off % uint64(len(r.buf)))
	k := copy(r.buf[i:], raw)
	copy(r.buf, raw[k:])
	r.end += uint64(len(raw))
	r.lo = max(r.lo, r.end-min(r.end, uint64(len(r.buf))))
	return off, uint32(len(raw))
}

// grow makes the ring hold at least n bytes (at most max), keeping the
// stream's bytes at the same offsets.
func (r *recent) grow(n int) {
	size := min(r.max, max(64<<10, 2*len(r.buf), n))
	buf := make([]byte, size)
	kept := min(r.end, uint64(len(r.buf)))
	for o := r.end - kept; o < r.end; o++ {
		buf[o%uint64(size)] = r.buf[o%uint64(len(r.buf))]
	}
	r.buf, r.lo = buf, r.end-kept
}

// get returns a copy of the encoding at off, if the ring still holds it.
func (r *recent) get(off uint64, n uint32) ([]byte, bool) {
	if n == 0 || off < r.lo {
		return nil, false
	}
	b := make([]byte, n)
	i := int(off % uint64(len(r.buf)))
	k := copy(b, r.buf[i:])
	copy(b[k:], r.buf)
	return b, true
}

// Checkpointed singletons are fixed-size records: hash, log time, position.
const singleRecLen = 16 + 8 + 8

func appendSingleRec(b []byte, r ringRec) []byte {
	b = append(b, r.h[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.last))
	return binary.LittleEndian.AppendUint64(b, r.pos)
}

func readSingleRec(b []byte) ringRec {
	var r ringRec
	copy(r.h[:], b)
	r.last = int64(binary.LittleEndian.Uint64(b[16:]))
	r.pos = binary.LittleEndian.Uint64(b[24:])
	return r
}
