package event

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestPeekEncodedReadsWhatUnmarshalDecodes: the type and the tenant read
// without decoding are the decoded event's, also when a field comes twice
// (the last wins, a tenant is merged), and a malformed encoding is refused.
func TestPeekEncodedReadsWhatUnmarshalDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(name string, b []byte) {
		t.Helper()
		ev, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, ok := PeekEncoded(b)
		want := EncodedHead{Type: ev.GetType(), TenantType: ev.GetTenant().GetType(), TenantName: ev.GetTenant().GetName()}
		if !ok || h != want {
			t.Fatalf("%s: peeked %+v (ok %v), decoded %+v", name, h, ok, want)
		}
	}
	eachStoredVariant(t, rng, 500, func(i int, ev *eventgatev1.Event) {
		switch i % 4 {
		case 1:
			ev.Tenant = nil
		case 2:
			ev.Type = ""
		case 3:
			ev.Tenant.Name = ""
		}
	}, func(b []byte) { check("stored", b) })
	// A second type and a second, partial tenant after the first.
	b := mustMarshal(t, storedLike(rng))
	b = protowire.AppendTag(b, typeField, protowire.BytesType)
	b = protowire.AppendString(b, "Normal")
	b = protowire.AppendTag(b, tenantField, protowire.BytesType)
	b = protowire.AppendBytes(b, mustMarshal(t, &eventgatev1.Tenant{Name: "other"}))
	check("repeated fields", b)
	if h, _ := PeekEncoded(b); h.Type != "Normal" || h.TenantType != "project" || h.TenantName != "other" {
		t.Fatalf("repeated fields: %+v", h)
	}
	for _, bad := range [][]byte{b[:len(b)-1], {0xff}, protowire.AppendTag(nil, typeField, protowire.BytesType)} {
		if _, ok := PeekEncoded(bad); ok {
			t.Fatalf("malformed %x peeked", bad)
		}
	}
}

// TestPeekWatchFieldsReadsWhatUnmarshalDecodes: the fields a watch filters
// on, read without decoding, are the decoded event's, also when a field
// comes twice (the last wins, a regarding object is merged: a second one
// without a name keeps the first's), and a malformed encoding is refused.
func TestPeekWatchFieldsReadsWhatUnmarshalDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	check := func(name string, b []byte) WatchFields {
		t.Helper()
		ev, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f, ok := PeekWatchFields(b)
		want := WatchFields{Type: ev.GetType(), Reason: ev.GetReason(), ReportingController: ev.GetReportingController(),
			RegardingName: ev.GetRegarding().GetName()}
		if !ok || f != want {
			t.Fatalf("%s: peeked %+v (ok %v), decoded %+v", name, f, ok, want)
		}
		return f
	}
	eachStoredVariant(t, rng, 500, func(i int, ev *eventgatev1.Event) {
		switch i % 5 {
		case 1:
			ev.Regarding = nil
		case 2:
			ev.Type, ev.Reason = "", ""
		case 3:
			ev.Regarding.Name = ""
		case 4:
			ev.ReportingController = ""
		}
	}, func(b []byte) { check("stored", b) })
	b := mustMarshal(t, storedLike(rng))
	ref := func(r *eventgatev1.ObjectReference) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, regardingField, protowire.BytesType), mustMarshal(t, r))
	}
	// A second regarding object without a name keeps the first's.
	merged := append(append([]byte(nil), b...), ref(&eventgatev1.ObjectReference{Kind: "Pod"})...)
	if f := check("a merged reference without a name", merged); f.RegardingName == "" {
		t.Fatal("the first reference's name was lost")
	}
	// With one, and a second reason and controller, the last ones win.
	merged = append(merged, ref(&eventgatev1.ObjectReference{Name: "other"})...)
	merged = protowire.AppendString(protowire.AppendTag(merged, reasonField, protowire.BytesType), "Again")
	merged = protowire.AppendString(protowire.AppendTag(merged, controllerField, protowire.BytesType), "")
	if f := check("repeated fields", merged); f.RegardingName != "other" || f.Reason != "Again" || f.ReportingController != "" {
		t.Fatalf("repeated fields: %+v", f)
	}
	for _, bad := range [][]byte{b[:len(b)-1], {0xff}, protowire.AppendTag(nil, reasonField, protowire.BytesType),
		append(protowire.AppendTag(nil, regardingField, protowire.BytesType), 2, 0x22, 5)} {
		if _, ok := PeekWatchFields(bad); ok {
			t.Fatalf("malformed %x peeked", bad)
		}
	}
}

// eachStoredVariant encodes n events like stored ones, each changed by
// vary first, and hands check each encoding.
func eachStoredVariant(t *testing.T, rng *rand.Rand, n int, vary func(i int, ev *eventgatev1.Event), check func(b []byte)) {
	t.Helper()
	for i := range n {
		ev := storedLike(rng)
		vary(i, ev)
		check(mustMarshal(t, ev))
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPeekLabelReadsWhatUnmarshalDecodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 300; i++ {
		ev := storedLike(rng)
		switch i % 3 {
		case 1:
			ev.Labels = nil
		case 2:
			ev.Labels = map[string]string{"team": "", "app": "web-" + strconv.Itoa(i)}
		}
		b, err := Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"team", "app", "absent"} {
			v, found, ok := PeekLabel(b, key)
			want, has := ev.Labels[key]
			if !ok || found != has || v != want {
				t.Fatalf("event %d, label %q: peeked %q (found %v, ok %v), decoded %q (found %v)", i, key, v, found, ok, want, has)
			}
		}
	}
	// A later entry of a key overrides the earlier one, as in Unmarshal.
	b, err := Marshal(&eventgatev1.Event{Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	entry := protowire.AppendTag(nil, labelKeyField, protowire.BytesType)
	entry = protowire.AppendString(entry, "team")
	entry = protowire.AppendTag(entry, labelValueField, protowire.BytesType)
	entry = protowire.AppendString(entry, "b")
	b = protowire.AppendTag(b, labelsField, protowire.BytesType)
	b = protowire.AppendBytes(b, entry)
	ev, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if v, found, ok := PeekLabel(b, "team"); !ok || !found || v != ev.Labels["team"] || v != "b" {
		t.Fatalf("repeated key: peeked %q (found %v, ok %v), decoded %q", v, found, ok, ev.Labels["team"])
	}
	for _, bad := range [][]byte{b[:len(b)-1], {0xff}, protowire.AppendTag(nil, labelsField, protowire.BytesType)} {
		if _, _, ok := PeekLabel(bad, "team"); ok {
			t.Fatalf("malformed %x peeked", bad)
		}
	}
}

func BenchmarkPeekEncoded(b *testing.B) {
	raw, err := Marshal(storedLike(rand.New(rand.NewPCG(1, 2))))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := PeekEncoded(raw); !ok {
			b.Fatal("not peeked")
		}
	}
}
