package series

import (
	"container/heap"
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
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

// tenantOf identifies ev's tenant: the first 64 bits of the FNV-1a hash
// of its type and name, the same in every process, as checkpoints and the
// order of evictions require.
func tenantOf(ev *eventgatev1.Event) uint64 {
	return tenantID(ev.GetTenant().GetType(), ev.GetTenant().GetName())
}

func tenantID(typ, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return h.Sum64()
}

// single is a tracked singleton, by hash: its log position, its tenant and
// where its encoding is in the recent ring, if it still is (n > 0).
type single struct {
	pos    uint64
	tenant uint64
	off    uint64 // offset of the encoding in the stream of recent encodings
	n      uint32
}

// ringRec is a singleton in log order. A record whose hash no longer maps
// to its position is stale (the singleton started a series, was evicted,
// or collided): it only waits to be popped.
type ringRec struct {
	h      hash128
	tenant uint64
	last   int64 // log time of the occurrence, unix ns
	pos    uint64
}

// Estimated bytes per singleton and record, for the memory budget: a map
// slot (key, value and control byte) at the map's lowest load after it
// grows, and a ring record with the ring's spare capacity after it grows.
// A singleton's tenant also lists it, by ring index, in log order.
const (
	singleBytes  = (16 + 32 + 1) * 2
	ringRecBytes = 40*2 + 8*2
)

// singles is the set of tracked singletons.
type singles struct {
	byHash map[hash128]single
	ring   []ringRec // circular: n records from head
	head   int
	n      int
	// headIdx is the ring index of the record at head: ring indexes grow
	// by one per record ever added.
	headIdx uint64
	// Per tenant, its singletons in log order, and the tenants by how
	// many they track: when the budget is reached, the tenant that tracks
	// the most gives up its oldest (see evictable).
	tenants map[uint64]*tenantSingles
	largest tenantHeap
	recent  recent
}

// tenantSingles is one tenant's tracked singletons: their ring indexes in
// log order (some stale), and how many are live.
type tenantSingles struct {
	id   uint64
	idxs []uint64
	live int
	hi   int // index in the heap
}

func newSingles(recentBytes int) singles {
	return singles{byHash: make(map[hash128]single), tenants: make(map[uint64]*tenantSingles), recent: recent{max: recentBytes}}
}

func (s *singles) live() int { return len(s.byHash) }

// bytes is the memory the singletons account for in the budget.
func (s *singles) bytes() int64 {
	return int64(len(s.byHash))*singleBytes + int64(s.n)*ringRecBytes + int64(s.recent.max)
}

// add tracks a new singleton; pos is above every tracked one's.
func (s *singles) add(h hash128, tenant uint64, last int64, pos uint64, raw []byte) {
	if s.n >= 2*len(s.byHash)+64 {
		s.compact()
	}
	off, n := s.recent.put(raw)
	s.byHash[h] = single{pos: pos, tenant: tenant, off: off, n: n}
	t := s.tenants[tenant]
	if t == nil {
		t = &tenantSingles{id: tenant}
		s.tenants[tenant] = t
		heap.Push(&s.largest, t)
	}
	t.idxs = append(t.idxs, s.headIdx+uint64(s.n))
	t.live++
	heap.Fix(&s.largest, t.hi)
	if s.n == len(s.ring) {
		grown := make([]ringRec, max(64, 2*len(s.ring)))
		for i := range s.n {
			grown[i] = s.ring[(s.head+i)%len(s.ring)]
		}
		s.ring, s.head = grown, 0
	}
	s.ring[(s.head+s.n)%len(s.ring)] = ringRec{h: h, tenant: tenant, last: last, pos: pos}
	s.n++
}

// compact drops the stale records from the ring (and the tenants' lists),
// keeping the live ones in order: stale records pile up behind a live one
// that stays at the head (a quiet tenant's, while another's are evicted).
func (s *singles) compact() {
	ring := make([]ringRec, max(64, 2*len(s.byHash)))
	for _, t := range s.tenants {
		t.idxs = t.idxs[:0]
	}
	n := 0
	for i := range s.n {
		r := s.at(i)
		if !s.isLive(r) {
			continue
		}
		ring[n] = *r
		t := s.tenants[r.tenant]
		t.idxs = append(t.idxs, uint64(n))
		n++
	}
	s.ring, s.head, s.n, s.headIdx = ring, 0, n, 0
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
	r := s.at(0)
	if t := s.tenants[r.tenant]; t != nil && len(t.idxs) > 0 && t.idxs[0] == s.headIdx {
		t.idxs = t.idxs[1:]
	}
	*r = ringRec{}
	s.head = (s.head + 1) % len(s.ring)
	s.headIdx++
	s.n--
	if s.n == 0 {
		s.head = 0
	}
}

// remove stops tracking the singleton of hash h (its ring record goes
// stale).
func (s *singles) remove(h hash128) {
	v, ok := s.byHash[h]
	if !ok {
		return
	}
	delete(s.byHash, h)
	t := s.tenants[v.tenant]
	if t.live--; t.live == 0 {
		heap.Remove(&s.largest, t.hi)
		delete(s.tenants, v.tenant)
		return
	}
	heap.Fix(&s.largest, t.hi)
}

// evictable is the singleton the budget gives up first: the oldest of the
// tenant that tracks the most (ties: the lowest tenant id), so that one
// tenant's flood of distinct events forgets its own singletons, not the
// other tenants'. With one tenant it is the oldest singleton.
func (s *singles) evictable() (ringRec, bool) {
	if len(s.largest) == 0 {
		return ringRec{}, false
	}
	t := s.largest[0]
	for len(t.idxs) > 0 {
		i := t.idxs[0]
		if i >= s.headIdx {
			if r := s.at(int(i - s.headIdx)); s.isLive(r) {
				return *r, true
			}
		}
		t.idxs[0] = 0
		t.idxs = t.idxs[1:]
	}
	return ringRec{}, false // unreachable: a tenant in the heap has a live singleton
}

// tenantHeap orders tenants by tracked singletons, most first.
type tenantHeap []*tenantSingles

func (h tenantHeap) Len() int { return len(h) }
func (h tenantHeap) Less(i, j int) bool {
	if h[i].live != h[j].live {
		return h[i].live > h[j].live
	}
	return h[i].id < h[j].id
}
func (h tenantHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi = i
	h[j].hi = j
}
func (h *tenantHeap) Push(x any) {
	t := x.(*tenantSingles)
	t.hi = len(*h)
	*h = append(*h, t)
}
func (h *tenantHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

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
// stream's bytes at the same offsets. The ring grows only before it first
// wraps (once it wraps it is at its max), so what it holds is the stream's
// first r.end bytes, in place.
func (r *recent) grow(n int) {
	buf := make([]byte, min(r.max, max(64<<10, 2*len(r.buf), n)))
	copy(buf, r.buf[:min(r.end, uint64(len(r.buf)))])
	r.buf = buf
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

// Checkpointed singletons are fixed-size records: hash, tenant, log time,
// position.
const singleRecLen = 16 + 8 + 8 + 8

func appendSingleRec(b []byte, r ringRec) []byte {
	b = append(b, r.h[:]...)
	b = binary.LittleEndian.AppendUint64(b, r.tenant)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.last))
	return binary.LittleEndian.AppendUint64(b, r.pos)
}

func readSingleRec(b []byte) ringRec {
	var r ringRec
	copy(r.h[:], b)
	r.tenant = binary.LittleEndian.Uint64(b[16:])
	r.last = int64(binary.LittleEndian.Uint64(b[24:]))
	r.pos = binary.LittleEndian.Uint64(b[32:])
	return r
}
