package clickhouse

import (
	"fmt"
	"slices"
	"time"

	chproto "github.com/ClickHouse/ch-go/proto"

	"github.com/eventgate/eventgate/internal/event"
)

// eventBatch is one INSERT into the events table. A transport's encode does
// the client-side work (building and encoding the rows in its wire form)
// and insert sends the result; a Writer runs encode on its
// low-priority thread (see niceThread).
type eventBatch struct {
	rows []Row
	ttls *ttlTable
	// native is the chDB transport's encoding: a Native block, held in
	// block (and, for the columns kept by reference, in rows); encoded
	// says it is set.
	native  nativeBlock
	encoded bool
	block   *eventBlock
	// values is the clickhouse-go transport's encoding: one value per
	// column per row (rowValues).
	values [][]any
}

// release returns the batch's block to the pool.
func (b *eventBatch) release() {
	if b.block != nil {
		eventBlocks.Put(b.block)
		b.block, b.native, b.encoded = nil, nativeBlock{}, false
	}
}

// eventBlock builds a Native block of the events table column by column
// with ch-go's typed columns: no per-value interface boxing, and the
// columns' memory is reused from one batch to the next (eventBlocks).
// Its columns follow eventColumns; TestEventBlockMatchesColumns checks
// that they cannot drift apart.
type eventBlock struct {
	tenantType, tenantName                    *chproto.ColLowCardinality[string]
	regardingKind, regardingNamespace         *chproto.ColLowCardinality[string]
	regardingName                             chproto.ColStr
	eventTime                                 chproto.ColDateTime64
	uid                                       chproto.ColStr
	seq                                       chproto.ColUInt64
	name                                      chproto.ColStr
	namespace, typ, reason, action            *chproto.ColLowCardinality[string]
	note                                      refColumn[string]
	regardingAPIVersion                       *chproto.ColLowCardinality[string]
	regardingUID, regardingFieldPath          chproto.ColStr
	relatedAPIVersion, relatedKind            *chproto.ColLowCardinality[string]
	relatedNamespace                          *chproto.ColLowCardinality[string]
	relatedName, relatedUID, relatedFieldPath chproto.ColStr
	reportingController, reportingInstance    *chproto.ColLowCardinality[string]
	labels, annotations, metadata             *chproto.ColMap[string, string]
	seriesCount                               chproto.ColInt32
	seriesLast                                chproto.ColDateTime64
	seriesState                               *chproto.ColLowCardinality[string]
	subject                                   chproto.ColStr
	storedAt                                  chproto.ColDateTime64
	ttlSeconds                                chproto.ColUInt32
	raw                                       refColumn[[]byte]
	writeReason                               *chproto.ColLowCardinality[string]
	minutes                                   *chproto.ColArr[time.Time]
	minuteCounts                              *chproto.ColArr[uint32]

	// dec decodes the rows that come without their event (Row.Event nil)
	// one at a time: a row's values are copied into the columns before
	// the next is decoded. LowCardinality columns keep the strings
	// themselves until reset, and those share the row's Raw, not the
	// event.
	dec event.Decoder

	// cols are the columns in eventColumns order.
	cols []chproto.ColInput
	// keys sorts a map's keys (see appendMap).
	keys []string
	buf  chproto.Buffer
	refs []nativeRef // the reference columns' places in buf
	// slack counts the batches in a row that used less than a
	// 1/shrinkRatio of the buffer the block grew to (see blockList.Put).
	slack int
}

// eventBlocks keeps the blocks of the last batches, with their grown
// columns, for the next ones. Not a sync.Pool: the collector empties a pool
// every other cycle, and under an emit load it runs about once a second,
// so most batches grew a new block's columns from nothing (6 GB of the
// 130 GB the gateway allocated in a full-scale emit phase). At most
// keptBlocks are kept: a batch in flight and the one being built.
var eventBlocks = blockList{free: make(chan *eventBlock, keptBlocks)}

const (
	keptBlocks = 2
	// maxKeptBlockBytes: a full batch of workload events encodes to ~6 MiB.
	maxKeptBlockBytes = 64 << 20
	// A kept block holds its columns at the size of the largest batch it
	// took: after a burst of full batches (20,000 rows, ~35 MiB of columns
	// and buffer each) they stayed in the heap under the smaller batches of
	// a lighter load, 70 MiB of live heap that made the collector run more
	// often. A block whose last shrinkAfter batches each encoded to less
	// than 1/shrinkRatio of its buffer is let go, and the next batch grows
	// a new one to its own size. Blocks below shrinkFloorBytes are kept.
	shrinkRatio      = 4
	shrinkAfter      = 8
	shrinkFloorBytes = 4 << 20
)

type blockList struct{ free chan *eventBlock }

// Get returns a kept block, or a new one.
func (l blockList) Get() *eventBlock {
	select {
	case b := <-l.free:
		return b
	default:
		return newEventBlock()
	}
}

// Put keeps b for a later batch, unless keptBlocks are kept already, a
// batch of unusually large events grew it past maxKeptBlockBytes, or its
// batches have long been far smaller than it (shrinkAfter).
func (l blockList) Put(b *eventBlock) {
	if c := cap(b.buf.Buf); c > maxKeptBlockBytes {
		return
	} else if c > shrinkFloorBytes && len(b.buf.Buf)*shrinkRatio < c {
		if b.slack++; b.slack >= shrinkAfter {
			return
		}
	} else {
		b.slack = 0
	}
	select {
	case l.free <- b:
	default:
	}
}

func newEventBlock() *eventBlock {
	lc := func() *chproto.ColLowCardinality[string] { return new(chproto.ColStr).LowCardinality() }
	m := func() *chproto.ColMap[string, string] {
		return chproto.NewMap[string, string](new(chproto.ColStr), new(chproto.ColStr))
	}
	b := &eventBlock{
		tenantType: lc(), tenantName: lc(), regardingKind: lc(), regardingNamespace: lc(),
		namespace: lc(), typ: lc(), reason: lc(), action: lc(),
		regardingAPIVersion: lc(), relatedAPIVersion: lc(), relatedKind: lc(), relatedNamespace: lc(),
		reportingController: lc(), reportingInstance: lc(), seriesState: lc(), writeReason: lc(),
		labels: m(), annotations: m(), metadata: m(),
		minutes:      chproto.NewArray[time.Time](&chproto.ColDateTime{Location: time.UTC}),
		minuteCounts: chproto.NewArray[uint32](new(chproto.ColUInt32)),
	}
	for _, c := range []*chproto.ColDateTime64{&b.eventTime, &b.seriesLast, &b.storedAt} {
		c.WithPrecision(chproto.PrecisionMicro).WithLocation(time.UTC)
	}
	b.cols = []chproto.ColInput{
		b.tenantType, b.tenantName, b.regardingKind, b.regardingNamespace, &b.regardingName,
		&b.eventTime, &b.uid, &b.seq,
		&b.name, b.namespace, b.typ, b.reason, b.action, &b.note,
		b.regardingAPIVersion, &b.regardingUID, &b.regardingFieldPath,
		b.relatedAPIVersion, b.relatedKind, b.relatedNamespace, &b.relatedName, &b.relatedUID, &b.relatedFieldPath,
		b.reportingController, b.reportingInstance,
		b.labels, b.annotations, b.metadata,
		&b.seriesCount, &b.seriesLast, b.seriesState,
		&b.subject, &b.storedAt, &b.ttlSeconds, &b.raw,
		b.writeReason, b.minutes, b.minuteCounts,
	}
	if len(b.cols) != len(eventColumns) {
		panic("clickhouse: eventBlock does not match eventColumns")
	}
	return b
}

func (b *eventBlock) reset() {
	for _, c := range b.cols {
		c.(chproto.Resettable).Reset()
	}
	b.buf.Reset()
}

// appendRow appends one version of an event; the values are those
// rowValues gives the clickhouse-go transport.
func (b *eventBlock) appendRow(r Row, ttls *ttlTable) error {
	if r.Event == nil && r.Raw != nil {
		ev, err := b.dec.DecodeAliased(r.Raw)
		if err != nil {
			return &event.UndecodableError{Seq: r.Seq, Err: err}
		}
		r.Event = ev
	}
	p, err := prepareRow(r)
	if err != nil {
		return err
	}
	ev, raw, reg, rel := r.Event, p.raw, p.reg, p.rel
	tt, tn, et, seriesLast, storedAt := p.tenantType, p.tenantName, p.eventTime, p.seriesLast, p.storedAt

	b.tenantType.Append(tt)
	b.tenantName.Append(tn)
	b.regardingKind.Append(reg.GetKind())
	b.regardingNamespace.Append(reg.GetNamespace())
	b.regardingName.Append(reg.GetName())
	b.eventTime.AppendRaw(micros(et))
	b.uid.Append(ev.GetUid())
	b.seq.Append(r.Seq)
	b.name.Append(ev.GetName())
	b.namespace.Append(ev.GetNamespace())
	b.typ.Append(ev.GetType())
	b.reason.Append(ev.GetReason())
	b.action.Append(ev.GetAction())
	b.note.Append(ev.GetNote())
	b.regardingAPIVersion.Append(reg.GetApiVersion())
	b.regardingUID.Append(reg.GetUid())
	b.regardingFieldPath.Append(reg.GetFieldPath())
	b.relatedAPIVersion.Append(rel.GetApiVersion())
	b.relatedKind.Append(rel.GetKind())
	b.relatedNamespace.Append(rel.GetNamespace())
	b.relatedName.Append(rel.GetName())
	b.relatedUID.Append(rel.GetUid())
	b.relatedFieldPath.Append(rel.GetFieldPath())
	b.reportingController.Append(ev.GetReportingController())
	b.reportingInstance.Append(ev.GetReportingInstance())
	b.appendMap(b.labels, ev.GetLabels())
	b.appendMap(b.annotations, ev.GetAnnotations())
	b.appendMap(b.metadata, ev.GetMetadata())
	b.seriesCount.Append(ev.GetSeries().GetCount())
	b.seriesLast.AppendRaw(micros(seriesLast))
	b.seriesState.Append(ev.GetSeries().GetState())
	b.subject.Append(r.Subject)
	b.storedAt.AppendRaw(micros(storedAt))
	b.ttlSeconds.Append(ttls.lookup(tt, tn))
	b.raw.Append(raw)
	b.writeReason.Append(r.WriteReason)

	// minuteColumns, without its two slices.
	starts, counts := b.minutes.Data.(*chproto.ColDateTime), b.minuteCounts.Data.(*chproto.ColUInt32)
	for _, m := range r.Minutes {
		if m.Count == 0 || m.Start.Before(zeroTime) {
			continue
		}
		starts.Append(m.Start.UTC().Truncate(time.Minute))
		counts.Append(m.Count)
	}
	b.minutes.Offsets.Append(uint64(starts.Rows()))
	b.minuteCounts.Offsets.Append(uint64(counts.Rows()))
	return nil
}

// appendMap appends m in key order: a Map column keeps its pairs in the
// order given, so sorting makes the stored value independent of Go's map
// iteration order.
func (b *eventBlock) appendMap(c *chproto.ColMap[string, string], m map[string]string) {
	if len(m) == 1 {
		for k, v := range m {
			c.Keys.Append(k)
			c.Values.Append(v)
		}
		c.Offsets.Append(uint64(c.Keys.Rows()))
		return
	}
	b.keys = b.keys[:0]
	for k := range m {
		b.keys = append(b.keys, k)
	}
	slices.Sort(b.keys)
	for _, k := range b.keys {
		c.Keys.Append(k)
		c.Values.Append(m[k])
	}
	c.Offsets.Append(uint64(c.Keys.Rows()))
}

// micros is t (already clamped to DateTime64's range) in microseconds
// since the epoch. It does not go through UnixNano, which overflows after
// 2262 (clampTime allows up to 2299).
func micros(t time.Time) chproto.DateTime64 {
	return chproto.DateTime64(t.Unix()*1_000_000 + int64(t.Nanosecond()/1000))
}

// encode writes the block in the Native format as the engine reads it
// from a file (no block info, protocol revision 0) and returns it; it is
// valid until the next reset. The columns kept by reference (refColumn)
// are not copied into the block's buffer: the result's WriteTo writes
// them in their places.
func (b *eventBlock) encode() (nativeBlock, error) {
	rows := b.cols[0].Rows()
	b.buf.Reset()
	b.refs = b.refs[:0]
	b.buf.PutUVarInt(uint64(len(b.cols)))
	b.buf.PutUVarInt(uint64(rows))
	for i, c := range b.cols {
		if c.Rows() != rows {
			return nativeBlock{}, fmt.Errorf("native block: column %s has %d rows, want %d", eventColumns[i].name, c.Rows(), rows)
		}
		if p, ok := c.(chproto.Preparable); ok {
			if err := p.Prepare(); err != nil {
				return nativeBlock{}, fmt.Errorf("native block: column %s: %w", eventColumns[i].name, err)
			}
		}
		b.buf.PutString(eventColumns[i].name)
		b.buf.PutString(eventColumns[i].typ)
		if s, ok := c.(chproto.StateEncoder); ok {
			s.EncodeState(&b.buf)
		}
		if r, ok := c.(refWriter); ok {
			b.refs = append(b.refs, nativeRef{off: len(b.buf.Buf), col: r})
			continue
		}
		c.EncodeColumn(&b.buf)
	}
	return nativeBlock{buf: b.buf.Buf, refs: b.refs}, nil
}

// encodeNative builds and encodes the rows as one Native block
// (b.native). The caller releases the batch once the bytes are sent.
func (b *eventBatch) encodeNative() error {
	b.release()
	blk := eventBlocks.Get()
	blk.reset()
	b.block = blk
	for _, r := range b.rows {
		if err := blk.appendRow(r, b.ttls); err != nil {
			return fmt.Errorf("row seq %d: %w", r.Seq, err)
		}
	}
	native, err := blk.encode()
	if err != nil {
		return err
	}
	b.native, b.encoded = native, true
	return nil
}

// encodeValues gives each row its values in the columns' Go types
// (b.values), for clickhouse-go's batch API.
func (b *eventBatch) encodeValues() error {
	b.values = make([][]any, len(b.rows))
	for i, r := range b.rows {
		v, err := rowValues(r, b.ttls)
		if err != nil {
			return fmt.Errorf("row seq %d: %w", r.Seq, err)
		}
		b.values[i] = v
	}
	return nil
}
