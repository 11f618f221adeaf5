package event

import (
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestDecoderReusesItsEventWithoutCarryingFieldsOver: each event a Decoder
// decodes equals what UnmarshalAliased decodes from the same bytes, however
// the event before it was shaped: no label, annotation, metadata entry,
// series or reference of the one before is left in it, and a message
// field absent from the bytes stays nil. It refuses what UnmarshalAliased
// refuses, and decodes the next event as if nothing had failed.
func TestDecoderReusesItsEventWithoutCarryingFieldsOver(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var d Decoder
	for i := 0; i < 2000; i++ {
		want := storedLike(rng)
		switch rng.IntN(5) {
		case 0:
			want.Related = nil
		case 1:
			want.Series, want.Annotations = nil, nil
		case 2:
			want.Tenant, want.EventTime = nil, nil
		case 3:
			want.Regarding = nil
		case 4:
			if want.Series != nil {
				want.Series.LastObservedTime = nil
			}
		}
		b, err := Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := d.DecodeAliased(b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("event %d: the decoder gave %v, want %v", i, got, want)
		}
		for name, absent := range map[string]bool{
			"related": want.Related == nil && got.Related != nil, "series": want.Series == nil && got.Series != nil,
			"tenant": want.Tenant == nil && got.Tenant != nil, "eventTime": want.EventTime == nil && got.EventTime != nil,
			"regarding":        want.Regarding == nil && got.Regarding != nil,
			"lastObservedTime": want.GetSeries().GetLastObservedTime() == nil && got.GetSeries().GetLastObservedTime() != nil,
		} {
			if absent {
				t.Fatalf("event %d: %s is absent from the bytes and set in the decoded event", i, name)
			}
		}
		if rng.IntN(10) == 0 {
			if _, err := d.DecodeAliased(b[:len(b)/2]); err == nil {
				if _, errAliased := UnmarshalAliased(b[:len(b)/2]); errAliased != nil {
					t.Fatalf("event %d: half of its bytes decode with the decoder, not with UnmarshalAliased (%v)", i, errAliased)
				}
			}
		}
	}
}
