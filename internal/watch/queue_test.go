package watch

import (
	"testing"

	"github.com/eventgate/eventgate/internal/event"
)

func TestQueue(t *testing.T) {
	q := newQueue(3)
	if items := q.take(); len(items) != 0 {
		t.Fatalf("empty queue gave %d items", len(items))
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if !q.push(event.WatchItem{Seq: seq}) {
			t.Fatalf("push %d of 3 refused", seq)
		}
	}
	if q.push(event.WatchItem{Seq: 4}) {
		t.Fatal("push past the bound accepted")
	}
	select {
	case <-q.notify:
	default:
		t.Fatal("no notification after a push")
	}
	items := q.take()
	if len(items) != 3 || items[0].Seq != 1 || items[2].Seq != 3 {
		t.Fatalf("take: %+v, want seqs 1, 2, 3", items)
	}
	// Taken items no longer count against the bound.
	if !q.push(event.WatchItem{Seq: 4}) {
		t.Fatal("push after take refused")
	}
	q.recycle(items)
	if got := q.take(); len(got) != 1 || got[0].Seq != 4 {
		t.Fatalf("take after recycle: %+v, want seq 4", got)
	}
	// The recycled slice, emptied, holds the next batch.
	if !q.push(event.WatchItem{Seq: 5}) {
		t.Fatal("push refused")
	}
	if got := q.take(); len(got) != 1 || got[0].Seq != 5 || &got[:cap(got)][0] != &items[:cap(items)][0] {
		t.Fatalf("the recycled slice was not reused: %+v", got)
	}
	// A large batch's slice is not kept.
	big := newQueue(1000)
	for seq := uint64(1); seq <= 1000; seq++ {
		big.push(event.WatchItem{Seq: seq})
	}
	big.recycle(big.take())
	if big.spare != nil {
		t.Errorf("a %d-item slice was kept for reuse", 1000)
	}
}
