package intake

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/series"
)

// Headers of intake messages. The events stream's are package wire's.
const (
	// HeaderReply, on an intake entry, is where its owner sends the decision.
	HeaderReply = "Eventgate-Reply"
	// HeaderIndex, on an intake entry, is its index in the Submit batch.
	HeaderIndex = "Eventgate-Index"
	// HeaderBatch, on an intake entry that carries several occurrences, lists
	// their indexes in the Submit batch, comma-separated; the entry's data
	// is their encodings, each preceded by its length (a protobuf varint).
	// An entry without it carries one occurrence, whose index is HeaderIndex.
	HeaderBatch = "Eventgate-Batch"
	// HeaderEncoding, on a batched entry, names how its data is compressed:
	// EncodingS2 (Snappy's S2 block format). Without it the data is as
	// HeaderBatch describes; earlier versions never compress.
	HeaderEncoding = "Eventgate-Encoding"
	// EncodingS2 is HeaderEncoding's one value.
	EncodingS2 = "s2"
	// HeaderTick marks an intake entry that carries no occurrence: it only
	// advances its partition's log clock.
	HeaderTick = "Eventgate-Tick"
	// HeaderAsIs, on an intake entry, says that its emitter counts its own
	// series: the occurrence is stored as it is, never aggregated.
	HeaderAsIs = "Eventgate-As-Is"
	// pinHeader is the JetStream header naming the pinned client.
	pinHeader = "Nats-Pin-Id"
)

// wireMinutes is a write's minutes as the events stream carries them.
func wireMinutes(ms []series.MinuteCount) []wire.Minute {
	if len(ms) == 0 {
		return nil
	}
	out := make([]wire.Minute, len(ms))
	for i, m := range ms {
		out[i] = wire.Minute{Start: m.Start, Count: uint32(m.Count)}
	}
	return out
}

// decision is what an owner tells the Submit that logged an entry.
type decision struct {
	index   uint32
	outcome series.Outcome
	uid     string
	rv      uint64 // events sequence of the entry's own write, 0 if none
}

// Decision messages are protobuf wire format:
//
//	message Decisions { repeated Decision d = 1; }
//	message Decision { uint32 index = 1; uint32 outcome = 2; string uid = 3; uint64 rv = 4; }
const (
	wireDecision protowire.Number = 1
	decIndex     protowire.Number = 1
	decOutcome   protowire.Number = 2
	decUID       protowire.Number = 3
	decRV        protowire.Number = 4
)

func appendDecision(b []byte, d decision) []byte {
	var m []byte
	m = protowire.AppendTag(m, decIndex, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(d.index))
	m = protowire.AppendTag(m, decOutcome, protowire.VarintType)
	m = protowire.AppendVarint(m, uint64(d.outcome))
	m = protowire.AppendTag(m, decUID, protowire.BytesType)
	m = protowire.AppendString(m, d.uid)
	if d.rv != 0 {
		m = protowire.AppendTag(m, decRV, protowire.VarintType)
		m = protowire.AppendVarint(m, d.rv)
	}
	b = protowire.AppendTag(b, wireDecision, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

var errBadDecisions = errors.New("malformed decisions message")

// parseDecisions decodes a decisions message, calling f for each.
func parseDecisions(b []byte, f func(decision)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadDecisions
		}
		b = b[n:]
		if num != wireDecision || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errBadDecisions
			}
			b = b[n:]
			continue
		}
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errBadDecisions
		}
		b = b[n:]
		var d decision
		for len(m) > 0 {
			num, typ, n := protowire.ConsumeTag(m)
			if n < 0 {
				return errBadDecisions
			}
			m = m[n:]
			switch {
			case num == decIndex && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(m)
				if n < 0 || v > 1<<31 {
					return errBadDecisions
				}
				d.index, m = uint32(v), m[n:]
			case num == decOutcome && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(m)
				if n < 0 || v > 255 {
					return errBadDecisions
				}
				d.outcome, m = series.Outcome(v), m[n:]
			case num == decUID && typ == protowire.BytesType:
				v, n := protowire.ConsumeString(m)
				if n < 0 {
					return errBadDecisions
				}
				d.uid, m = v, m[n:]
			case num == decRV && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(m)
				if n < 0 {
					return errBadDecisions
				}
				d.rv, m = v, m[n:]
			default:
				n := protowire.ConsumeFieldValue(num, typ, m)
				if n < 0 {
					return errBadDecisions
				}
				m = m[n:]
			}
		}
		f(d)
	}
	return nil
}

// Batched entries. An occurrence's log position, as the aggregator sees it,
// is its entry's stream sequence shifted left by posShift, plus its index
// in the entry: positions grow with the log, occurrence by occurrence, and
// every position of an entry maps back to the entry's sequence.
const (
	posShift = 12
	// maxBatch is the most occurrences one entry carries.
	maxBatch = 1<<posShift - 1
	// maxBatchBytes bounds an entry's data (half the connection's maximum
	// payload if that is less); a single occurrence may exceed it.
	maxBatchBytes = 256 << 10
)

// position is the aggregator's position of occurrence k of entry seq.
func position(seq uint64, k int) uint64 { return seq<<posShift | uint64(k) }

func formatIndexes(idxs []int) string {
	b := make([]byte, 0, 4*len(idxs))
	for k, i := range idxs {
		if k > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i), 10)
	}
	return string(b)
}

// parseIndexes decodes HeaderBatch.
func parseIndexes(s string) ([]uint32, error) {
	var out []uint32
	for part := range strings.SplitSeq(s, ",") {
		i, err := strconv.ParseUint(part, 10, 32)
		if err != nil {
			return nil, errors.New("batch indexes: bad index")
		}
		out = append(out, uint32(i))
	}
	if len(out) > maxBatch {
		return nil, errors.New("batch indexes: too many")
	}
	return out, nil
}

// compressBatch compresses a batched entry's data in place of it when that
// saves at least an eighth: the occurrences of one call are alike (tenant,
// source, labels, notes), so a batch of a few compresses two to three times,
// and the stream, its write cache and its consumers carry that much less.
// A batch of one occurrence is left as it is. It reports whether it
// replaced m.Data (with a buffer of entryBufs).
func compressBatch(m *nats.Msg, occurrences int) bool {
	if occurrences < 2 {
		return false
	}
	n := s2.MaxEncodedLen(len(m.Data))
	if n < 0 {
		return false
	}
	// Encoded into scratch space (the bound is a sixth over the input),
	// then copied at its size: the entry keeps it until acknowledged.
	sp := s2Scratch.Get().(*[]byte)
	defer s2Scratch.Put(sp)
	if cap(*sp) < n {
		*sp = make([]byte, n)
	}
	c := s2.Encode((*sp)[:n], m.Data)
	if len(c) > len(m.Data)-len(m.Data)/8 {
		return false
	}
	m.Data = append(getEntryBuf(len(c)), c...)
	m.Header.Set(HeaderEncoding, EncodingS2)
	return true
}

var s2Scratch = sync.Pool{New: func() any { return new([]byte) }}

// batchData returns a batched entry's data as HeaderBatch describes it:
// decompressed when HeaderEncoding says it was compressed, into a buffer
// of entryBufs just large enough (pooled reports it), which the caller
// gives back with putEntryBuf once nothing aliases it any more. A fixed
// buffer for the largest entry (288 KiB) taken for every entry, small or
// large, was 3% of the gateway's allocation under a paced EmitStream load:
// entries of a paced batch hold a few KiB, and each in flight held one.
func batchData(hdr nats.Header, data []byte) (out []byte, pooled bool, err error) {
	switch enc := hdr.Get(HeaderEncoding); enc {
	case "":
		return data, false, nil
	case EncodingS2:
		n, err := s2.DecodedLen(data)
		if err != nil || n > maxDecodedBatch {
			return nil, false, fmt.Errorf("batch: bad s2 data (%d bytes decoded)", n)
		}
		buf := getEntryBuf(n)
		out, err := s2.Decode(buf, data)
		if err != nil {
			putEntryBuf(buf)
			return nil, false, fmt.Errorf("batch: %w", err)
		}
		return out, true, nil
	default:
		return nil, false, fmt.Errorf("batch: unknown encoding %q", enc)
	}
}

// maxDecodedBatch bounds what a compressed entry may decode to: a batch
// holds at most maxBatchBytes, or one occurrence larger than that, which
// the server's payload limit bounds.
const maxDecodedBatch = 64 << 20

// splitBatch returns the n occurrence encodings of a batched entry's data.
func splitBatch(data []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	for len(data) > 0 {
		b, k := protowire.ConsumeBytes(data)
		if k < 0 {
			return nil, errors.New("batch: truncated occurrence")
		}
		out = append(out, b)
		data = data[k:]
	}
	if len(out) != n {
		return nil, fmt.Errorf("batch: %d occurrences for %d indexes", len(out), n)
	}
	return out, nil
}
