package intake

import (
	"math/bits"
	"sync"
)

// entryBufs hold the data of batched entries, by capacity: a power of two
// from 1 KiB to 512 KiB (above maxBatchBytes and the occurrence that may
// open a batch past it). A call's occurrences of one partition are encoded
// into one (logEntries); the committer gives it back once it has merged
// the entry with other calls' or compressed it into the message it
// publishes, and gives that message's data back once the stream has
// acknowledged it. Encoding into new memory, which the compression or the
// merge made garbage at once, was about 5% of the gateway's allocation
// under an EmitStream load. An owner decompresses a compressed entry into
// one too (batchData) and its pipeline gives it back once the entry's
// writes and decisions, which alias it, are done.
const (
	minEntryBufShift = 10
	maxEntryBufShift = 19
)

var entryBufs [maxEntryBufShift - minEntryBufShift + 1]sync.Pool

// entryBufClass is the class of the smallest buffer holding n bytes, or -1
// when n is larger than any.
func entryBufClass(n int) int {
	if n > 1<<maxEntryBufShift {
		return -1
	}
	return max(bits.Len(uint(max(n, 1)-1))-minEntryBufShift, 0)
}

// getEntryBuf returns an empty buffer of at least n bytes' capacity.
func getEntryBuf(n int) []byte {
	c := entryBufClass(n)
	if c < 0 {
		return make([]byte, 0, n)
	}
	if b, ok := entryBufs[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 1<<(minEntryBufShift+c))
}

// putEntryBuf gives b back for a later getEntryBuf. Only a buffer nothing
// refers to any more may go back; one whose capacity is not a class's
// (grown by append past its class, or never from entryBufs) is left to
// the collector.
func putEntryBuf(b []byte) {
	c := entryBufClass(cap(b))
	if c < 0 || cap(b) != 1<<(minEntryBufShift+c) {
		return
	}
	b = b[:0]
	entryBufs[c].Put(&b)
}
