package event

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// A watch event built from the stored bytes is the StreamWatchResponse
// that encoding the decoded event, its resourceVersion set, gives: for
// events with and without a series, and for stored bytes that carry a
// resourceVersion of their own (another writer's), which the sequence's
// overrides.
func TestEncodeWatchEventIsTheResponseOfTheDecodedEvent(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 500 {
		ev := storedLike(rng)
		raw, err := Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 { // a writer that left a resourceVersion in the event
			raw = protowire.AppendTag(raw, resourceVersionNo, protowire.BytesType)
			raw = protowire.AppendString(raw, "12")
		}
		seq := rng.Uint64N(1 << 40)
		typ := WatchTypeOf(nil, raw)
		if want := WatchTypeOf(ev, nil); typ != want {
			t.Fatalf("event %d: type from the bytes %s, from the event %s", i, typ, want)
		}
		if (typ == WatchModified) != (ev.GetSeries() != nil) {
			t.Fatalf("event %d: type %s, series %v", i, typ, ev.GetSeries())
		}
		var got eventgatev1.StreamWatchResponse
		if err := proto.Unmarshal(EncodeWatchEvent(typ, raw, seq), &got); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		want := &eventgatev1.StreamWatchResponse{Type: typ, Object: proto.Clone(ev).(*eventgatev1.Event)}
		want.Object.ResourceVersion = strconv.FormatUint(seq, 10)
		if !proto.Equal(&got, want) {
			t.Fatalf("event %d:\n got %v\nwant %v", i, &got, want)
		}
	}
}

// The series is found in the bytes wherever it is, and not in what is not
// an event.
func TestEncodedHasSeries(t *testing.T) {
	series := protowire.AppendTag(nil, seriesField, protowire.BytesType)
	series = protowire.AppendBytes(series, nil)
	other := protowire.AppendTag(nil, 1, protowire.BytesType)
	other = protowire.AppendString(other, "uid")
	for _, c := range []struct {
		name string
		raw  []byte
		want bool
	}{
		{"empty", nil, false},
		{"series alone", series, true},
		{"series after another field", append(append([]byte{}, other...), series...), true},
		{"no series", other, false},
		{"truncated", series[:1], false},
		{"a varint where the series' number is", protowire.AppendVarint(protowire.AppendTag(nil, seriesField, protowire.VarintType), 3), false},
	} {
		if got := EncodedHasSeries(c.raw); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func BenchmarkWatchEventEncoding(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	evs := make([]*eventgatev1.Event, 256)
	raws := make([][]byte, len(evs))
	for i := range evs {
		evs[i] = storedLike(rng)
		raws[i], _ = Marshal(evs[i])
		evs[i].ResourceVersion = "123456"
	}
	benchEach(b, "stored bytes", func(i int) error {
		raw := raws[i%len(raws)]
		_ = EncodeWatchEvent(WatchTypeOf(nil, raw), raw, 123456)
		return nil
	})
	benchEach(b, "encode the event", func(i int) error {
		_, err := proto.Marshal(&eventgatev1.StreamWatchResponse{Type: WatchAdded, Object: evs[i%len(evs)]})
		return err
	})
}
