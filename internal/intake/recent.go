package intake

import (
	"crypto/sha256"
	"sync"
)

// recentCreated remembers the resourceVersion of the last occurrences with a
// message id that this replica's calls stored as events of their own, so
// that a retry (a duplicate in the intake's log) answers with it. Before,
// the retry read the last version on the event's subject; subjects no longer
// name the object, so that version is most often another object's.
//
// It is a fixed ring of ids hashed to 128 bits beside their versions: no
// per-entry pointers for the collector to scan, about 40 bytes an entry. A
// collision of two ids within the ring (odds about n²/2¹²⁹) would answer one
// retry with the other's version; the outcome, DUPLICATE, stays right. A
// retry that reaches another replica, or comes after the ring has moved on,
// falls back to the subject's last version.
type recentCreated struct {
	mu    sync.Mutex
	slot  map[[16]byte]int32
	ids   [][16]byte
	rvs   []uint64
	next  int
	inUse int
}

func newRecentCreated(n int) *recentCreated {
	if n < 1 {
		n = 1
	}
	return &recentCreated{slot: make(map[[16]byte]int32, n), ids: make([][16]byte, n), rvs: make([]uint64, n)}
}

func recentKey(msgID string) [16]byte {
	s := sha256.Sum256([]byte(msgID))
	var k [16]byte
	copy(k[:], s[:16])
	return k
}

// put remembers that msgID was stored at resourceVersion rv.
func (r *recentCreated) put(msgID string, rv uint64) {
	k := recentKey(msgID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.slot[k]; ok {
		r.rvs[i] = rv
		return
	}
	if r.inUse == len(r.ids) {
		delete(r.slot, r.ids[r.next])
	} else {
		r.inUse++
	}
	r.ids[r.next], r.rvs[r.next] = k, rv
	r.slot[k] = int32(r.next)
	r.next = (r.next + 1) % len(r.ids)
}

// get returns the resourceVersion msgID was stored at, if remembered.
func (r *recentCreated) get(msgID string) (uint64, bool) {
	k := recentKey(msgID)
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.slot[k]
	if !ok {
		return 0, false
	}
	return r.rvs[i], true
}
