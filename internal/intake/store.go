package intake

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"
)

// Errors of the checkpoint store.
var (
	// ErrFenced: a checkpoint's compare-and-set failed: another replica
	// wrote the partition's head since this one read it.
	ErrFenced = errors.New("partition checkpoint was taken over")
	// ErrCorruptCheckpoint: a head or its chunks do not decode or do not
	// match.
	ErrCorruptCheckpoint = errors.New("corrupt partition checkpoint")
	// ErrPartitionsChanged: the bucket holds checkpoints of a different
	// partition count.
	ErrPartitionsChanged = errors.New("intake partition count differs from the checkpoints'")
)

// store keeps every partition's latest checkpoint in a KV bucket: the key
// "head.<p>" holds the snapshot itself when it fits in one message, or
// names its chunks, "chunk.<p>.<gen>.<i>", written before the head. Only the
// head is compare-and-set: chunks of a generation no head names are garbage,
// purged from the bucket's stream by sequence after a later head is set.
type store struct {
	kv        jetstream.KeyValue
	js        jetstream.JetStream
	bucket    string
	chunkSize int
}

// head is a partition's checkpoint record. Schema (protobuf wire format):
//
//	message Head {
//	  uint64 position  = 1; // snapshot's series.Aggregator.Position
//	  string owner     = 2; // pin id of the replica that wrote it (for humans)
//	  bytes  inline    = 3; // the snapshot, when it fits
//	  string gen       = 4; // chunk generation, when chunked
//	  uint32 chunks    = 5;
//	  uint64 first_seq = 6; // bucket sequence of chunk 0
//	  uint64 size      = 7; // snapshot bytes
//	  fixed32 crc      = 8; // CRC-32C of the snapshot
//	}
type head struct {
	position uint64
	owner    string
	inline   []byte
	gen      string
	chunks   uint32
	firstSeq uint64
	size     uint64
	crc      uint32
}

const (
	hPosition protowire.Number = 1
	hOwner    protowire.Number = 2
	hInline   protowire.Number = 3
	hGen      protowire.Number = 4
	hChunks   protowire.Number = 5
	hFirstSeq protowire.Number = 6
	hSize     protowire.Number = 7
	hCRC      protowire.Number = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (h head) marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, hPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, h.position)
	b = protowire.AppendTag(b, hOwner, protowire.BytesType)
	b = protowire.AppendString(b, h.owner)
	if h.gen == "" {
		b = protowire.AppendTag(b, hInline, protowire.BytesType)
		b = protowire.AppendBytes(b, h.inline)
	} else {
		b = protowire.AppendTag(b, hGen, protowire.BytesType)
		b = protowire.AppendString(b, h.gen)
		b = protowire.AppendTag(b, hChunks, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(h.chunks))
		b = protowire.AppendTag(b, hFirstSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, h.firstSeq)
	}
	b = protowire.AppendTag(b, hSize, protowire.VarintType)
	b = protowire.AppendVarint(b, h.size)
	b = protowire.AppendTag(b, hCRC, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, h.crc)
}

func unmarshalHead(b []byte) (head, error) {
	var h head
	bad := fmt.Errorf("%w: head", ErrCorruptCheckpoint)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return h, bad
		}
		b = b[n:]
		var v uint64
		var s []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			s, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type:
			var f uint32
			f, n = protowire.ConsumeFixed32(b)
			v = uint64(f)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return h, bad
		}
		b = b[n:]
		switch num {
		case hPosition:
			h.position = v
		case hOwner:
			h.owner = string(s)
		case hInline:
			h.inline = s
		case hGen:
			h.gen = string(s)
		case hChunks:
			h.chunks = uint32(v)
		case hFirstSeq:
			h.firstSeq = v
		case hSize:
			h.size = v
		case hCRC:
			h.crc = uint32(v)
		}
	}
	return h, nil
}

func headKey(p int) string { return "head." + strconv.Itoa(p) }

func chunkKey(p int, gen string, i int) string {
	return "chunk." + strconv.Itoa(p) + "." + gen + "." + strconv.Itoa(i)
}

const metaKey = "meta"

// checkMeta records the partition count in a fresh bucket, or checks it
// against the recorded one.
func (s *store) checkMeta(ctx context.Context, partitions int) error {
	want := "partitions=" + strconv.Itoa(partitions)
	_, err := s.kv.Create(ctx, metaKey, []byte(want))
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("checkpoint bucket meta: %w", err)
	}
	e, err := s.kv.Get(ctx, metaKey)
	if err != nil {
		return fmt.Errorf("checkpoint bucket meta: %w", err)
	}
	if got := string(e.Value()); got != want {
		return fmt.Errorf("%w: bucket %s has %q, config has %q", ErrPartitionsChanged, s.bucket, got, want)
	}
	return nil
}

// load returns partition p's latest checkpoint: its snapshot (nil when
// there is none), its head and the head's revision (0 when none).
func (s *store) load(ctx context.Context, p int) ([]byte, head, uint64, error) {
	e, err := s.kv.Get(ctx, headKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, head{}, 0, nil
	}
	if err != nil {
		return nil, head{}, 0, fmt.Errorf("read checkpoint head %d: %w", p, err)
	}
	h, err := unmarshalHead(e.Value())
	if err != nil {
		return nil, head{}, 0, err
	}
	snap := h.inline
	if h.gen != "" {
		snap = make([]byte, 0, h.size)
		for i := 0; i < int(h.chunks); i++ {
			c, err := s.kv.Get(ctx, chunkKey(p, h.gen, i))
			if err != nil {
				// A missing chunk means a newer head replaced this one and
				// purged it: the caller reads the head again.
				return nil, head{}, 0, fmt.Errorf("%w: chunk %d of %s: %w", ErrFenced, i, h.gen, err)
			}
			snap = append(snap, c.Value()...)
		}
	}
	if uint64(len(snap)) != h.size || crc32.Checksum(snap, castagnoli) != h.crc {
		return nil, head{}, 0, fmt.Errorf("%w: partition %d: snapshot size or checksum mismatch", ErrCorruptCheckpoint, p)
	}
	if len(snap) == 0 {
		snap = nil
	}
	return snap, h, e.Revision(), nil
}

// putHead compare-and-sets partition p's head: it must still be at rev (0:
// absent). It returns the new revision; ErrFenced when another replica
// moved it.
func (s *store) putHead(ctx context.Context, p int, h head, rev uint64) (uint64, error) {
	var n uint64
	var err error
	if rev == 0 {
		n, err = s.kv.Create(ctx, headKey(p), h.marshal())
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("%w: partition %d head created meanwhile", ErrFenced, p)
		}
	} else {
		n, err = s.kv.Update(ctx, headKey(p), h.marshal(), rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, fmt.Errorf("%w: partition %d head is past revision %d", ErrFenced, p, rev)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("write checkpoint head %d: %w", p, err)
	}
	return n, nil
}

// save writes snapshot snap of partition p at position pos, then sets the
// head, compare-and-set on rev. It returns the new head and revision.
func (s *store) save(ctx context.Context, p int, snap []byte, pos uint64, owner string, rev uint64) (head, uint64, error) {
	h := head{position: pos, owner: owner, size: uint64(len(snap)), crc: crc32.Checksum(snap, castagnoli)}
	if len(snap) <= s.chunkSize {
		h.inline = snap
	} else {
		h.gen = uuid.NewString()
		for i := 0; len(snap) > 0; i++ {
			n := min(len(snap), s.chunkSize)
			seq, err := s.kv.Put(ctx, chunkKey(p, h.gen, i), snap[:n])
			if err != nil {
				return head{}, 0, fmt.Errorf("write checkpoint chunk: %w", err)
			}
			if i == 0 {
				h.firstSeq = seq
			}
			h.chunks++
			snap = snap[n:]
		}
	}
	n, err := s.putHead(ctx, p, h, rev)
	if err != nil {
		return head{}, 0, err
	}
	return h, n, nil
}

// purgeChunks removes partition p's chunks stored before sequence below
// (all of them when below is 0): those of heads that are no longer current
// and of checkpoints that never got a head.
func (s *store) purgeChunks(ctx context.Context, p int, below uint64) error {
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return fmt.Errorf("purge checkpoint chunks: %w", err)
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject("$KV." + s.bucket + ".chunk." + strconv.Itoa(p) + ".>")}
	if below > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(below))
	}
	if err := st.Purge(ctx, opts...); err != nil {
		return fmt.Errorf("purge checkpoint chunks: %w", err)
	}
	return nil
}
