package intake

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protowire"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/series"
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
	// errChunkMissing: a chunk a head names is not in the bucket.
	errChunkMissing = errors.New("checkpoint chunk missing")
)

// damaged reports whether err says a checkpoint cannot be read as it is
// stored: a chunk it names is missing, or it does not decode or match.
// Read again under the same head revision, it is for good.
func damaged(err error) bool {
	return errors.Is(err, errChunkMissing) || errors.Is(err, ErrCorruptCheckpoint) || errors.Is(err, series.ErrCorruptSnapshot)
}

// store keeps every partition's latest checkpoint in a KV bucket (see
// series.Checkpoint): the key "head.<p>" holds the checkpoint's head
// snapshot itself when it fits in one message, or names its chunks, and it
// names the checkpoint's segments. Every value too large for one message
// (a head snapshot, a segment) is a blob: chunks "chunk.<p>.<gen>.<i>" with
// a fresh gen, written before the head that names them. Only the head is
// compare-and-set: blobs no head names are garbage, purged from the
// bucket's stream after a later head is set (see garbage and purgeUnnamed).
type store struct {
	kv        jetstream.KeyValue
	js        jetstream.JetStream
	bucket    string
	chunkSize int
}

// blob names a value stored in chunks.
type blob struct {
	gen      string
	chunks   uint32
	firstSeq uint64 // bucket sequence of chunk 0
	size     uint64
	crc      uint32 // CRC-32C of the value
}

// segRef names a checkpoint segment.
type segRef struct {
	id uint64
	blob
}

// head is a partition's checkpoint record. Schema (protobuf wire format):
//
//	message Head {
//	  uint64 position  = 1; // the checkpoint's series.Aggregator.Position
//	  uint64 log_seq   = 10; // intake sequence of the last entry folded (absent in
//	                        // heads written before batched entries: position)
//	  string owner     = 2; // pin id of the replica that wrote it (for humans)
//	  bytes  inline    = 3; // the head snapshot, when it fits
//	  string gen       = 4; // its chunks' generation, when chunked
//	  uint32 chunks    = 5;
//	  uint64 first_seq = 6; // bucket sequence of chunk 0
//	  uint64 size      = 7; // head snapshot bytes
//	  fixed32 crc      = 8; // CRC-32C of the head snapshot
//	  repeated Segment segments = 9;
//	}
//	message Segment {
//	  uint64 id = 1;
//	  string gen = 4; uint32 chunks = 5; uint64 first_seq = 6; uint64 size = 7; fixed32 crc = 8; // as in Head
//	}
type head struct {
	position uint64
	logSeq   uint64
	// eventsSeq (when hasEventsSeq) is a sequence of the events stream
	// before any write of the entries after logSeq: a new owner reads the
	// writes stored after it (see partition_replay.go).
	eventsSeq    uint64
	hasEventsSeq bool
	owner        string
	inline       []byte
	blob         // of the head snapshot, when gen is set
	segments     []segRef
}

const (
	hPosition protowire.Number = 1
	hOwner    protowire.Number = 2
	hInline   protowire.Number = 3
	hSegment  protowire.Number = 9
	hLogSeq   protowire.Number = 10
	hEvents   protowire.Number = 11
	sID       protowire.Number = 1

	// A blob's fields, in a head and in a segment alike.
	bGen      protowire.Number = 4
	bChunks   protowire.Number = 5
	bFirstSeq protowire.Number = 6
	bSize     protowire.Number = 7
	bCRC      protowire.Number = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (h head) marshal() []byte {
	var b []byte
	b = protowire.AppendTag(b, hPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, h.position)
	b = protowire.AppendTag(b, hOwner, protowire.BytesType)
	b = protowire.AppendString(b, h.owner)
	b = protowire.AppendTag(b, hLogSeq, protowire.VarintType)
	b = protowire.AppendVarint(b, h.logSeq)
	if h.hasEventsSeq {
		b = protowire.AppendTag(b, hEvents, protowire.VarintType)
		b = protowire.AppendVarint(b, h.eventsSeq)
	}
	if h.gen == "" {
		b = protowire.AppendTag(b, hInline, protowire.BytesType)
		b = protowire.AppendBytes(b, h.inline)
	}
	b = h.blob.append(b)
	var sb []byte
	for _, sg := range h.segments {
		sb = protowire.AppendTag(sb[:0], sID, protowire.VarintType)
		sb = protowire.AppendVarint(sb, sg.id)
		sb = sg.blob.append(sb)
		b = protowire.AppendTag(b, hSegment, protowire.BytesType)
		b = protowire.AppendBytes(b, sb)
	}
	return b
}

// append appends the blob's fields (only size and crc when it has no
// generation: an inline value).
func (bl blob) append(b []byte) []byte {
	if bl.gen != "" {
		b = protowire.AppendTag(b, bGen, protowire.BytesType)
		b = protowire.AppendString(b, bl.gen)
		b = protowire.AppendTag(b, bChunks, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(bl.chunks))
		b = protowire.AppendTag(b, bFirstSeq, protowire.VarintType)
		b = protowire.AppendVarint(b, bl.firstSeq)
	}
	b = protowire.AppendTag(b, bSize, protowire.VarintType)
	b = protowire.AppendVarint(b, bl.size)
	b = protowire.AppendTag(b, bCRC, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, bl.crc)
}

// set sets the blob field num, if it is one.
func (bl *blob) set(num protowire.Number, v uint64, s []byte) {
	switch num {
	case bGen:
		bl.gen = string(s)
	case bChunks:
		bl.chunks = uint32(v)
	case bFirstSeq:
		bl.firstSeq = v
	case bSize:
		bl.size = v
	case bCRC:
		bl.crc = uint32(v)
	}
}

// fields calls f for every field of a protobuf message: varint and fixed32
// values in v, bytes in s. It fails on malformed input.
func fields(b []byte, f func(num protowire.Number, v uint64, s []byte)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
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
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			v = uint64(x)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
		f(num, v, s)
	}
	return true
}

func unmarshalHead(b []byte) (head, error) {
	var h head
	okSegs, hasLogSeq := true, false
	ok := fields(b, func(num protowire.Number, v uint64, s []byte) {
		switch num {
		case hPosition:
			h.position = v
		case hLogSeq:
			h.logSeq, hasLogSeq = v, true
		case hEvents:
			h.eventsSeq, h.hasEventsSeq = v, true
		case hOwner:
			h.owner = string(s)
		case hInline:
			h.inline = s
		case hSegment:
			var sg segRef
			okSegs = fields(s, func(num protowire.Number, v uint64, s []byte) {
				if num == sID {
					sg.id = v
				} else {
					sg.blob.set(num, v, s)
				}
			}) && okSegs && sg.gen != ""
			h.segments = append(h.segments, sg)
		default:
			h.blob.set(num, v, s)
		}
	})
	if !ok || !okSegs {
		return h, fmt.Errorf("%w: head", ErrCorruptCheckpoint)
	}
	if !hasLogSeq {
		// Written when every entry carried one occurrence at position seq.
		h.logSeq = h.position
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
	v, _, err := s.get(ctx, metaKey)
	if err != nil {
		return fmt.Errorf("checkpoint bucket meta: %w", err)
	}
	if got := string(v); got != want {
		return fmt.Errorf("%w: bucket %s has %q, config has %q", ErrPartitionsChanged, s.bucket, got, want)
	}
	return nil
}

// load returns partition p's latest checkpoint: its head snapshot (nil
// when there is none), its head and the head's revision (0 when none).
// When the head reads but its snapshot does not, the error comes with the
// head and its revision (see damaged).
func (s *store) load(ctx context.Context, p int) ([]byte, head, uint64, error) {
	v, rev, err := s.get(ctx, headKey(p))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, head{}, 0, nil
	}
	if err != nil {
		return nil, head{}, 0, fmt.Errorf("read checkpoint head %d: %w", p, err)
	}
	h, err := unmarshalHead(v)
	if err != nil {
		return nil, head{}, 0, err
	}
	snap := h.inline
	if h.gen != "" {
		if snap, err = s.readBlob(ctx, p, h.blob); err != nil {
			return nil, h, rev, err
		}
	} else if uint64(len(snap)) != h.size || crc32.Checksum(snap, castagnoli) != h.crc {
		return nil, h, rev, fmt.Errorf("%w: partition %d: snapshot size or checksum mismatch", ErrCorruptCheckpoint, p)
	}
	if len(snap) == 0 {
		snap = nil
	}
	return snap, h, rev, nil
}

// get reads key as the bucket's leader holds it: a replica of the bucket
// that lags (one restarted, catching up) would answer a direct get with a
// head older than the one that replaced it, or without the chunks the
// current head names, and a takeover would retry on it in vain.
func (s *store) get(ctx context.Context, key string) ([]byte, uint64, error) {
	return ejs.LeaderKVGet(ctx, s.js, s.bucket, key)
}

// segment reads segment id of head h of partition p.
func (s *store) segment(ctx context.Context, p int, h head, id uint64) ([]byte, error) {
	for _, sg := range h.segments {
		if sg.id == id {
			return s.readBlob(ctx, p, sg.blob)
		}
	}
	return nil, fmt.Errorf("%w: partition %d: the head does not name segment %d", ErrCorruptCheckpoint, p, id)
}

// readBlob reads a chunked value of partition p.
func (s *store) readBlob(ctx context.Context, p int, b blob) ([]byte, error) {
	v := make([]byte, 0, b.size)
	for i := 0; i < int(b.chunks); i++ {
		c, _, err := s.get(ctx, chunkKey(p, b.gen, i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// A newer head replaced the one naming it and purged it: the
			// caller reads the head again. (Unless the head it read is
			// still the latest: then the checkpoint is damaged.)
			return nil, fmt.Errorf("%w: %w: chunk %d of %s: %w", ErrFenced, errChunkMissing, i, b.gen, err)
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoint chunk %d of %s: %w", i, b.gen, err)
		}
		v = append(v, c...)
	}
	if uint64(len(v)) != b.size || crc32.Checksum(v, castagnoli) != b.crc {
		return nil, fmt.Errorf("%w: partition %d: %s: size or checksum mismatch", ErrCorruptCheckpoint, p, b.gen)
	}
	return v, nil
}

// writeBlob stores v in chunks of partition p under a fresh generation.
func (s *store) writeBlob(ctx context.Context, p int, v []byte) (blob, error) {
	b := blob{gen: uuid.NewString(), size: uint64(len(v)), crc: crc32.Checksum(v, castagnoli)}
	for i := 0; i == 0 || len(v) > 0; i++ {
		n := min(len(v), s.chunkSize)
		seq, err := s.kv.Put(ctx, chunkKey(p, b.gen, i), v[:n])
		if err != nil {
			return blob{}, fmt.Errorf("write checkpoint chunk: %w", err)
		}
		if i == 0 {
			b.firstSeq = seq
		}
		b.chunks++
		v = v[n:]
	}
	return b, nil
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

// save writes checkpoint cp of partition p at position pos: its new
// segment, its head snapshot when it does not fit in the head, then the
// head, compare-and-set on rev. prev is the head cp follows: the segments
// of prev that cp still needs are carried over. It returns the new head and
// revision.
func (s *store) save(ctx context.Context, p int, cp series.Checkpoint, prev head, pos, logSeq, eventsSeq uint64, owner string, rev uint64) (head, uint64, error) {
	snap := cp.Head
	h := head{position: pos, logSeq: logSeq, eventsSeq: eventsSeq, hasEventsSeq: true, owner: owner}
	for _, id := range cp.Live {
		if cp.Segment != nil && id == cp.Segment.ID {
			b, err := s.writeBlob(ctx, p, cp.Segment.Data)
			if err != nil {
				return head{}, 0, err
			}
			h.segments = append(h.segments, segRef{id: id, blob: b})
			continue
		}
		i := slices.IndexFunc(prev.segments, func(sg segRef) bool { return sg.id == id })
		if i < 0 {
			return head{}, 0, fmt.Errorf("%w: partition %d: checkpoint needs segment %d, which its previous head does not name", ErrCorruptCheckpoint, p, id)
		}
		h.segments = append(h.segments, prev.segments[i])
	}
	if len(snap) <= s.chunkSize {
		h.inline, h.size, h.crc = snap, uint64(len(snap)), crc32.Checksum(snap, castagnoli)
	} else {
		b, err := s.writeBlob(ctx, p, snap)
		if err != nil {
			return head{}, 0, err
		}
		h.blob = b
	}
	n, err := s.putHead(ctx, p, h, rev)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			// The chunks written above are named by no head, and no other
			// replica knows their fresh generations: remove them now.
			// (Those of a crash before the head are purged by the next
			// takeover, purgeUnnamed.)
			if perr := s.purgeGens(ctx, p, garbage(h, prev)); perr != nil {
				err = errors.Join(err, perr)
			}
		}
		return head{}, 0, err
	}
	return h, n, nil
}

// gens is the set of chunk generations h names.
func (h head) gens() map[string]bool {
	g := make(map[string]bool, len(h.segments)+1)
	if h.gen != "" {
		g[h.gen] = true
	}
	for _, sg := range h.segments {
		g[sg.gen] = true
	}
	return g
}

// garbage lists the generations prev names and next does not.
func garbage(prev, next head) []string {
	keep := next.gens()
	var gone []string
	for g := range prev.gens() {
		if !keep[g] {
			gone = append(gone, g)
		}
	}
	return gone
}

// purgeGens removes partition p's chunks of generations gens.
func (s *store) purgeGens(ctx context.Context, p int, gens []string) error {
	if len(gens) == 0 {
		return nil
	}
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return fmt.Errorf("purge checkpoint chunks: %w", err)
	}
	for _, g := range gens {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.chunkSubject(p, g))); err != nil {
			return fmt.Errorf("purge checkpoint chunks %s: %w", g, err)
		}
	}
	return nil
}

// purgeUnnamed removes every chunk of partition p stored before bucket
// sequence before that h does not name: those of heads replaced meanwhile
// and of checkpoints that never got a head (a failed compare-and-set, a
// crash). before is the revision of the claim of h: a replica that takes
// the partition over after that claim starts from h or a later head and
// writes the chunks its checkpoints name after it, and they are not
// garbage, however long this purge takes to start.
func (s *store) purgeUnnamed(ctx context.Context, p int, h head, before uint64) error {
	st, err := s.js.Stream(ctx, "KV_"+s.bucket)
	if err != nil {
		return fmt.Errorf("purge checkpoint chunks: %w", err)
	}
	prefix := "$KV." + s.bucket + ".chunk." + strconv.Itoa(p) + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return fmt.Errorf("purge checkpoint chunks: %w", err)
	}
	keep := h.gens()
	var gone []string
	seen := map[string]bool{}
	for subj := range info.State.Subjects {
		g, _, ok := strings.Cut(strings.TrimPrefix(subj, prefix), ".")
		if ok && !keep[g] && !seen[g] {
			seen[g] = true
			gone = append(gone, g)
		}
	}
	for _, g := range gone {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.chunkSubject(p, g)), jetstream.WithPurgeSequence(before)); err != nil {
			return fmt.Errorf("purge checkpoint chunks %s: %w", g, err)
		}
	}
	return nil
}

func (s *store) chunkSubject(p int, gen string) string {
	return "$KV." + s.bucket + ".chunk." + strconv.Itoa(p) + "." + gen + ".>"
}
