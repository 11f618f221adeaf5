package chdb

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// rowBinaryEvents encodes n rows of (id UInt64, s String, ts DateTime64(6),
// lc LowCardinality(String), m Map(String, String)) as RowBinary.
func rowBinaryEvents(n, offset int) []byte {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := 0; i < n; i++ {
		b = binary.LittleEndian.AppendUint64(b, uint64(offset+i))
		str(fmt.Sprintf("event %d with a payload\n\nthat has blank lines and a NUL \x00 byte", i))
		b = binary.LittleEndian.AppendUint64(b, uint64(base+int64(i)*1000))
		str(fmt.Sprintf("reason-%d", i%7))
		b = binary.AppendUvarint(b, 2)
		str("k")
		str(fmt.Sprint(i))
		str("ns")
		str("default")
	}
	return b
}

// BenchmarkInsertFile10k measures InsertFile of 10,000-row RowBinary batches.
func BenchmarkInsertFile10k(b *testing.B) {
	e := engine(b)
	ctx := context.Background()
	mustExec(b, e, `CREATE TABLE bench_insert (id UInt64, s String, ts DateTime64(6, 'UTC'),
		lc LowCardinality(String), m Map(String, String)) ENGINE = MergeTree ORDER BY id`)
	defer mustExec(b, e, "DROP TABLE bench_insert")
	const rows = 10_000
	data := rowBinaryEvents(rows, 0)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := e.InsertFile(ctx, "bench_insert", nil, "RowBinary", data); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
	out, err := e.Query(ctx, "SELECT count() FROM bench_insert", "TSV")
	if err != nil || string(out) != fmt.Sprintf("%d\n", b.N*rows) {
		b.Fatalf("count = %q, %v; want %d", out, err, b.N*rows)
	}
}
