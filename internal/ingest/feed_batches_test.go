package ingest

import (
	"testing"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// TestFeedRefillsAnInsertedBatchsRowsEmptied: the rows of an inserted
// batch are filled again by a later batch, emptied first (no event or
// message of the earlier batch stays referenced or reappears), and the
// feed keeps no more of them than it can use.
func TestFeedRefillsAnInsertedBatchsRowsEmptied(t *testing.T) {
	f := &Feed{cfg: Config{BatchSize: 4}, spare: make(chan []event.Stored, spareBatches)}
	b := f.newBatch()
	if len(b.rows) != 0 || cap(b.rows) != 4 {
		t.Fatalf("new batch: len %d cap %d, want 0 and the batch size 4", len(b.rows), cap(b.rows))
	}
	for i := range 3 {
		b.rows = append(b.rows, event.Stored{Seq: uint64(i + 1), Subject: "events.x", Raw: []byte("raw"), Event: &eventgatev1.Event{Uid: "u"}})
	}
	first := &b.rows[0]
	f.recycle(b.rows)

	again := f.newBatch()
	if len(again.rows) != 0 || cap(again.rows) != 4 {
		t.Fatalf("refilled batch: len %d cap %d, want 0 and 4", len(again.rows), cap(again.rows))
	}
	if &again.rows[:1][0] != first {
		t.Error("a new batch did not reuse the inserted batch's rows")
	}
	for i, row := range again.rows[:cap(again.rows)] {
		if row.Seq != 0 || row.Subject != "" || row.Raw != nil || row.Event != nil {
			t.Errorf("row %d of the refilled batch still holds %+v", i, row)
		}
	}

	// More inserted batches than the feed can use are let go, without
	// waiting for a producer.
	for range spareBatches + 2 {
		f.recycle(make([]event.Stored, 1, 4))
	}
	if n := len(f.spare); n != spareBatches {
		t.Errorf("kept %d inserted batches, want %d", n, spareBatches)
	}
	// With none to spare, a batch is made.
	for range spareBatches {
		f.newBatch()
	}
	if b := f.newBatch(); cap(b.rows) != 4 {
		t.Errorf("made batch cap %d, want 4", cap(b.rows))
	}
}
