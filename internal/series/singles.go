package series

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash/fnv"
	"slices"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Lean singleton tracking.
//
// Nearly every tracked key is a singleton: a distinct event that waits,
// for Window, for an isomorphic one that will usually never come. What
// decides that next occurrence is only the key and where the first one is
// in the log, so a singleton is tracked as a 128-bit hash of its key and
// its log position and time, in structures without pointers (the
// collector never scans them): a ring of (hash, tenant, time, position)
// records in log order, in chunks of fixed size, which expires them as
// their window closes, and an open-addressing index from hash to record
// of 8 bytes a slot. Their events are not kept: when a second occurrence
// comes, the first is read back from the log by its position (Reader), or
// from a small ring of the most recent encodings, which serves the common
// case of an event repeated within seconds without I/O. About 60 bytes a
// singleton in all (BenchmarkTrackedSingletonBytes).
//
// A hash collision (two different keys with one hash, about 2^-128 per
// pair) is caught: the first occurrence read back must have the same key,
// or the tracked singleton is forgotten (as if evicted; Stats.Collisions)
// and the new occurrence becomes a singleton of its own.

// hash128 is the first 128 bits of the SHA-256 of a key's canonical
// encoding: the same in every process and release with that encoding, as
// checkpoints require. The zero hash marks a forgotten record, so a key
// whose hash would be zero (never seen: 2^-128) takes another.
type hash128 [16]byte

func hashKey(key []byte) hash128 {
	s := sha256.Sum256(key)
	h := hash128(s[:16])
	if h == (hash128{}) {
		h[15] = 1
	}
	return h
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

// single is a tracked singleton: its log position and its record's index
// in the ring (see singles.at).
type single struct {
	pos uint64
	idx uint64
}

// ringRec is a singleton in log order. A record with the zero hash is
// stale (the singleton started a series, was evicted, or collided): it
// only waits to be popped or compacted away.
type ringRec struct {
	h      hash128
	tenant uint64
	last   int64 // log time of the occurrence, unix ns
	pos    uint64
}

func (r *ringRec) live() bool { return r.h != hash128{} }

// ringChunk is how many records a chunk of the ring holds.
const ringChunk = 1024

// Bytes per singleton, for the memory budget, at the worst the structures
// reach between two compactions: its record (a ring holds at most
// compactAt of stale records per live one, and one chunk not yet full),
// its index slot at the index's lowest load, and its place in its
// tenant's list of records (a slice that grows by doubling).
const (
	ringRecBytes = 40 * compactAt / compactPer
	slotBytes    = 8 * 8 / 3 // a load of at least 3/8 (see hashIndex)
	tenantBytes  = 8 * 2
	singleBytes  = ringRecBytes + slotBytes + tenantBytes
	// fixedBytes: the ring's chunk being filled, and the index's smallest
	// size, once anything is tracked.
	fixedBytes = 40*ringChunk + 8*minSlots
	// The ring is compacted once it holds compactAt/compactPer records
	// per live singleton (plus a chunk).
	compactAt, compactPer = 5, 4
)

// singles is the set of tracked singletons.
type singles struct {
	// chunks hold the ring's records: record i (from the oldest) is
	// chunks[(first+i)/ringChunk][(first+i)%ringChunk].
	chunks [][]ringRec
	first  int // offset of the oldest record in chunks[0]
	n      int // records, live and stale
	// headIdx is the index of the oldest record: record indexes grow by
	// one per record ever added (compaction renumbers them).
	headIdx uint64
	index   hashIndex
	// Per tenant, its singletons in log order, and the tenants by how
	// many they track: when the budget is reached, the tenant that tracks
	// the most gives up its oldest (see evictable).
	tenants map[uint64]*tenantSingles
	largest tenantHeap
	recent  recent
	// recentAt locates the recent ring's encodings by record index, in
	// the order they were put (a prefix may have been overwritten).
	recentAt []recentLoc
}

// recentLoc is where record idx's encoding is in the recent ring.
type recentLoc struct {
	idx uint64
	off uint64
	n   uint32
}

// tenantSingles is one tenant's tracked singletons: their record indexes
// in log order (some stale), and how many are live.
type tenantSingles struct {
	id   uint64
	idxs []uint64
	live int
	hi   int // index in the heap
}

func newSingles(recentBytes int) singles {
	return singles{tenants: make(map[uint64]*tenantSingles), recent: recent{max: recentBytes}}
}

func (s *singles) live() int { return s.index.n }

// bytes is the memory the singletons account for in the budget.
// overhead is what bytes counts besides the singletons' records: the ring
// of recent encodings and the fixed structures.
func (s *singles) overhead() int64 { return int64(s.recent.max) + fixedBytes }

func (s *singles) bytes() int64 {
	b := int64(s.live())*singleBytes + int64(s.recent.max)
	if s.n > 0 {
		b += fixedBytes
	}
	return b
}

// get returns the tracked singleton of hash h.
func (s *singles) get(h hash128) (single, bool) {
	idx, ok := s.index.find(s, h)
	if !ok {
		return single{}, false
	}
	return single{pos: s.at(int(idx - s.headIdx)).pos, idx: idx}, true
}

// add tracks a new singleton; pos is above every tracked one's.
func (s *singles) add(h hash128, tenant uint64, last int64, pos uint64, raw []byte) {
	if _, ok := s.index.find(s, h); ok {
		s.remove(h)
	}
	if s.n >= compactAt*s.live()/compactPer+ringChunk {
		s.compact()
	}
	idx := s.headIdx + uint64(s.n)
	if off, n := s.recent.put(raw); n > 0 {
		s.recentAt = append(s.recentAt, recentLoc{idx: idx, off: off, n: n})
		s.trimRecent()
	}
	t := s.tenants[tenant]
	if t == nil {
		t = &tenantSingles{id: tenant}
		s.tenants[tenant] = t
		s.largest.push(t)
	}
	t.idxs = append(t.idxs, idx)
	t.live++
	s.largest.fix(t)
	if c := (s.first + s.n) / ringChunk; c == len(s.chunks) {
		s.chunks = append(s.chunks, make([]ringRec, ringChunk))
	}
	*s.at(s.n) = ringRec{h: h, tenant: tenant, last: last, pos: pos}
	s.n++
	s.index.insert(s, h, idx)
}

// encoding returns a copy of the first occurrence's encoding of the
// singleton, if the recent ring still holds it.
func (s *singles) encoding(v single) ([]byte, bool) {
	i, ok := slices.BinarySearchFunc(s.recentAt, v.idx, func(l recentLoc, idx uint64) int { return cmp.Compare(l.idx, idx) })
	if !ok {
		return nil, false
	}
	l := s.recentAt[i]
	return s.recent.get(l.off, l.n)
}

// trimRecent forgets the locations of encodings the recent ring no longer
// holds, or of records no longer in the ring: they are a prefix.
func (s *singles) trimRecent() {
	k := 0
	for k < len(s.recentAt) && (s.recentAt[k].off < s.recent.lo || s.recentAt[k].idx < s.headIdx) {
		k++
	}
	s.recentAt = s.recentAt[k:]
}

// compact drops the stale records from the ring (and the tenants' lists
// and the recent locations), keeping the live ones in order, renumbered
// from 0: stale records pile up behind a live one that stays at the head
// (a quiet tenant's, while another's are evicted).
func (s *singles) compact() {
	chunks := make([][]ringRec, 0, s.live()/ringChunk+1)
	for _, t := range s.tenants {
		t.idxs = t.idxs[:0]
	}
	renum := make([]recentLoc, 0, len(s.recentAt))
	ri := 0
	n := 0
	for i := range s.n {
		r := s.at(i)
		idx := s.headIdx + uint64(i)
		for ri < len(s.recentAt) && s.recentAt[ri].idx < idx {
			ri++
		}
		if !r.live() {
			continue
		}
		if ri < len(s.recentAt) && s.recentAt[ri].idx == idx && s.recentAt[ri].off >= s.recent.lo {
			l := s.recentAt[ri]
			l.idx = uint64(n)
			renum = append(renum, l)
		}
		if n%ringChunk == 0 {
			chunks = append(chunks, make([]ringRec, ringChunk))
		}
		chunks[n/ringChunk][n%ringChunk] = *r
		t := s.tenants[r.tenant]
		t.idxs = append(t.idxs, uint64(n))
		n++
	}
	s.chunks, s.first, s.n, s.headIdx, s.recentAt = chunks, 0, n, 0, renum
	s.index.rebuild(s)
}

// at returns the i-th record from the oldest.
func (s *singles) at(i int) *ringRec {
	j := s.first + i
	return &s.chunks[j/ringChunk][j%ringChunk]
}

// isLive reports whether r is a tracked singleton.
func (s *singles) isLive(r *ringRec) bool { return r.live() }

// oldest returns the oldest tracked singleton, popping stale records.
func (s *singles) oldest() (ringRec, bool) {
	for s.n > 0 {
		r := s.at(0)
		if r.live() {
			return *r, true
		}
		s.pop()
	}
	return ringRec{}, false
}

// pop drops the oldest record, which must be stale.
func (s *singles) pop() {
	r := s.at(0)
	if t := s.tenants[r.tenant]; t != nil && len(t.idxs) > 0 && t.idxs[0] == s.headIdx {
		t.idxs = t.idxs[1:]
	}
	*r = ringRec{}
	s.headIdx++
	s.n--
	if s.first++; s.first == ringChunk {
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.first = 0
	}
	if s.n == 0 {
		s.chunks, s.first = s.chunks[:0], 0
	}
}

// remove stops tracking the singleton of hash h (its record goes stale).
func (s *singles) remove(h hash128) {
	idx, ok := s.index.remove(s, h)
	if !ok {
		return
	}
	r := s.at(int(idx - s.headIdx))
	r.h = hash128{}
	t := s.tenants[r.tenant]
	if t.live--; t.live == 0 {
		s.largest.remove(t.hi)
		delete(s.tenants, r.tenant)
		return
	}
	s.largest.fix(t)
}

// evictable is the singleton the budget gives up first: the oldest one,
// unless the tenant that tracks the most (ties: the lowest tenant id)
// floods: it tracks more than an eighth of the singletons and more than
// twice as many as the other tenants do on average; then its own oldest.
// So one tenant's flood of distinct events forgets its own singletons, not
// the other tenants' (once it holds an eighth), and a storm of a few keys
// more than the other tenants track is folded: the oldest go first.
// Before, the tenant that tracked the most always gave up its own: with
// many tenants tracking a few each, a storm of a few more keys than that
// made its tenant the largest, and each new key pushed out the storm key
// that recurred next, so the storm was never folded.
func (s *singles) evictable() (ringRec, bool) {
	if len(s.largest) == 0 {
		return ringRec{}, false
	}
	t := s.largest[0].t
	live, others := s.live(), len(s.tenants)-1
	if others == 0 || t.live*others <= 2*(live-t.live) || 8*t.live <= live {
		return s.oldest()
	}
	for len(t.idxs) > 0 {
		i := t.idxs[0]
		if i >= s.headIdx {
			if r := s.at(int(i - s.headIdx)); r.live() {
				return *r, true
			}
		}
		t.idxs[0] = 0
		t.idxs = t.idxs[1:]
	}
	return ringRec{}, false // unreachable: a tenant in the heap has a live singleton
}

// hashIndex maps the hash of every live record to the record's index: an
// open-addressing table with linear probing, of record index + 1 per slot
// (0: empty), the hash read from the record itself.
type hashIndex struct {
	slots []uint64
	n     int
}

// The index grows past a load of maxLoadNum/maxLoadDen (3/4) to twice its
// size, so its load is at least 3/8 once it grew.
const (
	maxLoadNum, maxLoadDen = 3, 4
	minSlots               = 64
)

func (x *hashIndex) home(h hash128) int {
	return int(binary.LittleEndian.Uint64(h[:8]) & uint64(len(x.slots)-1))
}

// find returns the index of the record of hash h.
func (x *hashIndex) find(s *singles, h hash128) (uint64, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	for i := x.home(h); ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			return 0, false
		}
		if s.at(int(v-1-s.headIdx)).h == h {
			return v - 1, true
		}
	}
}

// insert adds record idx of hash h, which the index does not hold.
func (x *hashIndex) insert(s *singles, h hash128, idx uint64) {
	if len(x.slots) == 0 || (x.n+1)*maxLoadDen > len(x.slots)*maxLoadNum {
		x.resize(s, max(minSlots, 2*len(x.slots)))
	}
	mask := len(x.slots) - 1
	i := x.home(h)
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = idx + 1
	x.n++
}

// remove drops the record of hash h and returns its index; the slots after
// it move back so that every probe sequence stays unbroken.
func (x *hashIndex) remove(s *singles, h hash128) (uint64, bool) {
	if x.n == 0 {
		return 0, false
	}
	mask := len(x.slots) - 1
	i := x.home(h)
	for {
		v := x.slots[i]
		if v == 0 {
			return 0, false
		}
		if s.at(int(v-1-s.headIdx)).h == h {
			break
		}
		i = (i + 1) & mask
	}
	idx := x.slots[i] - 1
	for j := i; ; {
		j = (j + 1) & mask
		v := x.slots[j]
		if v == 0 {
			break
		}
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		k := x.home(s.at(int(v - 1 - s.headIdx)).h)
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			x.slots[i] = v
			i = j
		}
	}
	x.slots[i] = 0
	x.n--
	return idx, true
}

// resize rebuilds the index with size slots (a power of two).
func (x *hashIndex) resize(s *singles, size int) {
	old := x.slots
	x.slots, x.n = make([]uint64, size), 0
	mask := size - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := x.home(s.at(int(v - 1 - s.headIdx)).h)
		for x.slots[i] != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = v
		x.n++
	}
}

// rebuild indexes every live record anew (after the ring was renumbered),
// at the smallest size that holds them.
func (x *hashIndex) rebuild(s *singles) {
	size := minSlots
	for (s.n+1)*maxLoadDen > size*maxLoadNum {
		size *= 2
	}
	x.slots, x.n = make([]uint64, size), 0
	mask := size - 1
	for i := range s.n {
		r := s.at(i)
		if !r.live() {
			continue
		}
		j := x.home(r.h)
		for x.slots[j] != 0 {
			j = (j + 1) & mask
		}
		x.slots[j] = s.headIdx + uint64(i) + 1
		x.n++
	}
}

// tenantHeap orders tenants by tracked singletons, most first (ties: the
// lowest id). Its entries hold the order's keys beside the tenant, so that
// comparisons read the array alone; the operations are container/heap's,
// on the concrete type (no interface calls: a change of a tenant's count
// at the memory budget, one eviction and one new singleton per event,
// sifts through the heap of every tenant of the partition).
type tenantHeap []tenantRank

type tenantRank struct {
	live int
	id   uint64
	t    *tenantSingles
}

func (h tenantHeap) less(i, j int) bool {
	if h[i].live != h[j].live {
		return h[i].live > h[j].live
	}
	return h[i].id < h[j].id
}

func (h tenantHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].t.hi = i
	h[j].t.hi = j
}

func (h tenantHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h tenantHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// push adds t, which the heap does not hold.
func (h *tenantHeap) push(t *tenantSingles) {
	t.hi = len(*h)
	*h = append(*h, tenantRank{live: t.live, id: t.id, t: t})
	h.up(t.hi)
}

// fix restores the order after t.live changed.
func (h tenantHeap) fix(t *tenantSingles) {
	i := t.hi
	h[i].live = t.live
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

// remove drops the entry at i.
func (h *tenantHeap) remove(i int) {
	n := len(*h) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	(*h)[n] = tenantRank{}
	*h = (*h)[:n]
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
