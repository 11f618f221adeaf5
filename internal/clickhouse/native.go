package clickhouse

import (
	"bufio"
	"encoding/binary"
	"io"
	"sync"

	chproto "github.com/ClickHouse/ch-go/proto"
)

// refColumn is a String column that keeps its values by reference instead
// of copying them into a buffer of its own: the events' encodings (raw)
// and their notes, which are most of a batch's bytes. The rows they come
// from live until the insert is done (the ingest gives its rows back only
// after it, and a note decoded from a row aliases the row's encoding), so
// the block holds a slice header per row, and the bytes are copied once,
// into the insert's file (nativeBlock.WriteTo). Before, each went into the
// column's buffer and again into the block's: a kept block of a full batch
// (20,000 workload events) held about 50 MB.
type refColumn[T string | []byte] struct {
	vals []T
}

func (c *refColumn[T]) Append(v T)               { c.vals = append(c.vals, v) }
func (c *refColumn[T]) Type() chproto.ColumnType { return chproto.ColumnTypeString }
func (c *refColumn[T]) Rows() int                { return len(c.vals) }

// Reset empties the column and drops its references.
func (c *refColumn[T]) Reset() {
	clear(c.vals)
	c.vals = c.vals[:0]
}

// EncodeColumn appends the values to b as ColStr does.
func (c *refColumn[T]) EncodeColumn(b *chproto.Buffer) {
	for _, v := range c.vals {
		b.PutLen(len(v))
		b.Buf = append(b.Buf, v...)
	}
}

// WriteColumn writes the column as EncodeColumn encodes it.
func (c *refColumn[T]) WriteColumn(w *chproto.Writer) { w.ChainBuffer(c.EncodeColumn) }

// writeTo writes the column as EncodeColumn encodes it, to w, and returns
// how many bytes that is. A bufio.Writer keeps its first error and returns
// it from every call after it, Flush included: the caller's Flush reports
// it.
func (c *refColumn[T]) writeTo(w *bufio.Writer) int64 {
	var n [binary.MaxVarintLen64]byte
	var total int64
	switch vals := any(c.vals).(type) {
	case []string:
		for _, v := range vals {
			k, _ := w.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
			m, _ := w.WriteString(v)
			total += int64(k + m)
		}
	case [][]byte:
		for _, v := range vals {
			k, _ := w.Write(n[:binary.PutUvarint(n[:], uint64(len(v)))])
			m, _ := w.Write(v)
			total += int64(k + m)
		}
	}
	return total
}

// refWriter is a column written out at insert time (refColumn).
type refWriter interface {
	writeTo(w *bufio.Writer) int64
}

// nativeBlock is an encoded Native block: buf, with the values of the
// columns kept by reference written in their places (refs, by offset in
// buf). Valid until the block's next reset.
type nativeBlock struct {
	buf  []byte
	refs []nativeRef
}

type nativeRef struct {
	off int // in buf, where the column's values go
	col refWriter
}

// writers are the buffers the Native blocks are written through.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 256<<10) }}

// WriteTo writes the whole block to w.
func (n nativeBlock) WriteTo(w io.Writer) (int64, error) {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
	var written int64
	prev := 0
	for _, r := range n.refs {
		k, _ := bw.Write(n.buf[prev:r.off])
		written += int64(k) + r.col.writeTo(bw)
		prev = r.off
	}
	k, _ := bw.Write(n.buf[prev:])
	written += int64(k)
	return written, bw.Flush()
}
