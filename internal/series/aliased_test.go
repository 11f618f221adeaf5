package series

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/eventgate/eventgate/internal/event"
)

// TestASeriesKeepsNothingOfAnOccurrenceDecodedInPlace: the intake's owner
// decodes occurrences in place (event.UnmarshalAliased). A series that
// kept a string of one would keep the whole intake entry's buffer alive,
// and would write whatever that memory held later. The buffers here are
// overwritten after each occurrence: the series' writes still carry what
// was observed.
func TestASeriesKeepsNothingOfAnOccurrenceDecodedInPlace(t *testing.T) {
	cfg := Config{Window: 6 * time.Minute, FlushInterval: 30 * time.Second, Heartbeat: 2 * time.Minute, FinishAfter: 3 * time.Minute}
	a := mustNew(t, cfg)
	clock := newLog()
	observe := func(uid, note string) Decision {
		t.Helper()
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(mkEvent(uid, withNote(note)))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := event.UnmarshalAliased(raw)
		if err != nil {
			t.Fatal(err)
		}
		at, pos := clock.next(10 * time.Second)
		d := must(a.ObserveEncoded(ev, raw, at, pos))
		for _, w := range d.Writes {
			if w.Raw == nil {
				if _, err := proto.Marshal(w.Event); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range raw {
			raw[i] = 'X' // the buffer reused for something else
		}
		return d
	}
	a.SetReader(func(uint64) ([]byte, error) {
		return proto.MarshalOptions{Deterministic: true}.Marshal(mkEvent("u1", withNote("first")))
	})
	observe("u1", "first")
	if d := observe("u2", "second"); d.Outcome != SeriesStarted {
		t.Fatalf("second occurrence: %v, want the series started", d.Outcome)
	}
	observe("u3", "third")
	at, pos := clock.next(time.Minute)
	ws := a.Tick(at, pos)
	if len(ws) != 1 || ws[0].Reason != ReasonFlush {
		t.Fatalf("writes after the flush interval: %+v, want one flush", ws)
	}
	if got := ws[0].Event.GetNote(); got != "third" {
		t.Fatalf("the flushed series' note is %q, want the last occurrence's %q", got, "third")
	}
	if got := ws[0].Event.GetSeries().GetCount(); got != 3 {
		t.Fatalf("the flushed series' count is %d, want 3", got)
	}
}
