package clickhouse

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestRowBinaryScansRowsInOrder(t *testing.T) {
	var b []byte
	for _, v := range []uint64{7, 9} {
		b = binary.LittleEndian.AppendUint64(b, v)
		b = binary.AppendUvarint(b, 2)
		b = append(b, "ok"...)
	}
	r := &rowBinary{b: b}
	var got []uint64
	for r.Next() {
		var n uint64
		var s string
		if err := r.Scan(&n, &s); err != nil {
			t.Fatal(err)
		}
		if s != "ok" {
			t.Fatalf("string %q, want ok", s)
		}
		got = append(got, n)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 7 || got[1] != 9 {
		t.Fatalf("rows %v, want [7 9]", got)
	}
}

func TestRowBinaryNextWithoutScanStopsWithAnError(t *testing.T) {
	r := &rowBinary{b: binary.LittleEndian.AppendUint64(nil, 1)}
	if !r.Next() {
		t.Fatal("no first row")
	}
	for i := 0; i < 3; i++ {
		if r.Next() {
			t.Fatal("Next found a row again without a Scan")
		}
	}
	if !errors.Is(r.Err(), errRowUnscanned) {
		t.Fatalf("Err() = %v, want errRowUnscanned", r.Err())
	}
}

func TestRowBinaryShortRowIsAnError(t *testing.T) {
	r := &rowBinary{b: []byte{1, 2, 3}}
	if !r.Next() {
		t.Fatal("no row")
	}
	var n uint64
	if err := r.Scan(&n); !errors.Is(err, errShortRow) {
		t.Fatalf("Scan = %v, want errShortRow", err)
	}
	if r.Next() {
		t.Fatal("Next after a short row")
	}
}
