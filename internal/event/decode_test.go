package event

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// sampleEvent is a workload-like event; with maps, two labels and an
// annotation.
func sampleEvent(maps bool) *eventgatev1.Event {
	ev := &eventgatev1.Event{Uid: "3f1c2a9e-8b7d-4c6e-9a1b-2d3e4f5a6b7c", Type: "Warning", Reason: "BackOff", Action: "Restart",
		Note:      "Back-off restarting failed container web in pod web-1_default",
		EventTime: timestamppb.Now(), ReportingController: "example.com/controller", ReportingInstance: "instance-7",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "ns-1", Name: "web-1", Uid: "uid-1"},
		Related:   &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Node", Name: "node-3"},
		Series:    &eventgatev1.EventSeries{Count: 3, State: "Ongoing"},
		Tenant:    &eventgatev1.Tenant{Type: "project", Name: "tenant-12"}}
	if maps {
		ev.Labels = map[string]string{"team": "team-3", "app": "app-17"}
		ev.Annotations = map[string]string{"example.com/trace": "abc123"}
	}
	return ev
}

var texts = []string{"", "a", "team", "ünïcödé", "日本語", "with space", "x/y.z", "0"}

func randomEvent(rng *rand.Rand) *eventgatev1.Event {
	ev := sampleEvent(false)
	randMap := func() map[string]string {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return map[string]string{}
		}
		m := map[string]string{}
		for range rng.IntN(6) {
			m[texts[rng.IntN(len(texts))]+fmt.Sprint(rng.IntN(3))] = texts[rng.IntN(len(texts))]
		}
		return m
	}
	ev.Labels, ev.Annotations, ev.Metadata = randMap(), randMap(), randMap()
	if rng.IntN(3) == 0 {
		ev.Related = nil
	}
	return ev
}

// Unmarshal decodes the maps itself and the rest with protobuf-go: for any
// event, and for wire forms protobuf-go's own encoder does not write, it
// must answer what proto.Unmarshal answers.
func TestUnmarshalAgreesWithProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 500 {
		ev := randomEvent(rng)
		for _, opts := range []proto.MarshalOptions{{Deterministic: true}, {}} {
			b, err := opts.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			agree(t, fmt.Sprintf("event %d", i), b)
		}
	}

	base, err := proto.Marshal(sampleEvent(false))
	if err != nil {
		t.Fatal(err)
	}
	entry := func(fields ...[]byte) []byte {
		var e []byte
		for _, f := range fields {
			e = append(e, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, fieldLabels, protowire.BytesType), e)
	}
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	join := func(parts ...[]byte) []byte {
		out := append([]byte(nil), base...)
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for name, b := range map[string][]byte{
		"an entry without a key":                 join(entry(str(2, "v"))),
		"an entry without a value":               join(entry(str(1, "k"))),
		"an empty entry":                         join(entry()),
		"the same key twice: the last counts":    join(entry(str(1, "k"), str(2, "first")), entry(str(1, "k"), str(2, "second"))),
		"a key given twice in one entry":         join(entry(str(1, "a"), str(1, "b"), str(2, "v"))),
		"value before key":                       join(entry(str(2, "v"), str(1, "k"))),
		"an unknown field in an entry":           join(entry(str(1, "k"), varint(3, 9), str(2, "v"))),
		"a key of another wire type":             join(entry(varint(1, 5), str(2, "v"))),
		"a map field of another wire type":       join(varint(fieldLabels, 1), entry(str(1, "k"), str(2, "v"))),
		"invalid UTF-8 in a value":               join(entry(str(1, "k"), str(2, "\xff\xfe"))),
		"invalid UTF-8 in a key":                 join(entry(str(1, "\xc3"), str(2, "v"))),
		"a truncated entry":                      join(entry(str(1, "k"), str(2, "value"))[:8]),
		"a truncated event":                      base[:len(base)-3],
		"an unknown top-level field":             join(varint(99, 1), entry(str(1, "k"), str(2, "v"))),
		"maps between the other fields":          append(entry(str(1, "k"), str(2, "v")), base...),
		"annotations and metadata":               join(protowire.AppendBytes(protowire.AppendTag(nil, fieldAnnotations, protowire.BytesType), append(str(1, "a"), str(2, "b")...)), protowire.AppendBytes(protowire.AppendTag(nil, fieldMetadata, protowire.BytesType), str(1, "m"))),
		"an entry's length past the end":         join(protowire.AppendVarint(protowire.AppendTag(nil, fieldLabels, protowire.BytesType), 200)),
		"nothing":                                nil,
		"a group where an entry field should be": join(entry(protowire.AppendTag(nil, 3, protowire.StartGroupType), protowire.AppendTag(nil, 3, protowire.EndGroupType), str(1, "k"))),
	} {
		agree(t, name, b)
	}
}

// agree checks that Unmarshal and proto.Unmarshal both refuse b or both
// decode it to equal events.
func agree(t *testing.T, name string, b []byte) {
	t.Helper()
	got, err := Unmarshal(b)
	want := &eventgatev1.Event{}
	werr := proto.Unmarshal(b, want)
	switch {
	case (err == nil) != (werr == nil):
		t.Errorf("%s: Unmarshal error %v, proto.Unmarshal error %v", name, err, werr)
	case err == nil && !proto.Equal(got, want):
		t.Errorf("%s: Unmarshal gave %v, proto.Unmarshal %v", name, got, want)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, maps := range []bool{false, true} {
		b, err := proto.Marshal(sampleEvent(maps))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { agree(t, "fuzzed", b) })
}

// BenchmarkUnmarshal decodes a stored event with and without its maps, by
// Unmarshal and by proto.Unmarshal alone (the baseline, same run).
func BenchmarkUnmarshal(b *testing.B) {
	for _, maps := range []bool{false, true} {
		data, err := Marshal(sampleEvent(maps))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("maps=%v/decoder=eventgate", maps), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Unmarshal(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("maps=%v/decoder=proto", maps), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(data, &eventgatev1.Event{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
