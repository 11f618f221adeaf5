package event

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// storedLike is an event shaped like the bench workload's: two references,
// three labels, an annotation, a series on some.
func storedLike(rng *rand.Rand) *eventgatev1.Event {
	i := strconv.Itoa(rng.IntN(1e6))
	ev := &eventgatev1.Event{
		Uid:                 "4b6c1f0e-" + i,
		Name:                "payment-" + i + ".17f2a",
		EventTime:           timestamppb.New(time.Unix(1_790_000_000+int64(rng.IntN(1e6)), int64(rng.IntN(1e9)))),
		ReportingController: "example.com/payment-controller",
		ReportingInstance:   "payment-controller-7d4f8b9c5-x2x7q",
		Action:              "Reconcile",
		Reason:              "BackOff",
		Type:                "Warning",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "payments",
			Name: "payment-" + i, Uid: "0c1d2e3f-4a5b-4c6d-8e7f-" + i},
		Related: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "payments", Name: "payment-" + i + "-pod"},
		Note:    "Back-off restarting failed container payment in pod payment-" + i,
		Tenant:  &eventgatev1.Tenant{Type: "project", Name: "tenant-" + strconv.Itoa(rng.IntN(1000))},
		Labels:  map[string]string{"app": "payment", "tier": "backend", "team": "team-" + strconv.Itoa(rng.IntN(9))},
		Annotations: map[string]string{
			"example.com/trace-id": strconv.FormatUint(rng.Uint64(), 16),
		},
	}
	if rng.IntN(3) == 0 {
		ev.Series = &eventgatev1.EventSeries{Count: int32(2 + rng.IntN(100)), LastObservedTime: timestamppb.New(time.Unix(1_790_000_000, 0))}
		ev.Metadata = map[string]string{"k": strconv.Itoa(rng.IntN(10)), "": ""}
	}
	if rng.IntN(5) == 0 {
		ev.Labels = nil
	}
	return ev
}

// TestUnmarshalAgreesWithProto: what the stream holds decodes to the event
// protobuf-go decodes, and what Marshal stores protobuf-go reads back.
func TestUnmarshalAgreesWithProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		want := storedLike(rng)
		b, err := Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("event %d: Unmarshal gave %v, want %v", i, got, want)
		}
		viaProto := &eventgatev1.Event{}
		if err := proto.Unmarshal(b, viaProto); err != nil || !proto.Equal(viaProto, want) {
			t.Fatalf("event %d: protobuf-go reads what Marshal stored as %v (%v), want %v", i, viaProto, err, want)
		}
		b2, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got2, err := Unmarshal(b2); err != nil || !proto.Equal(got2, want) {
			t.Fatalf("event %d: Unmarshal of protobuf-go's encoding gave %v (%v)", i, got2, err)
		}
	}
}

// TestUnmarshalAliasedDecodesInPlace: UnmarshalAliased gives the event
// Unmarshal gives, with its strings in the bytes it was given rather than
// copies of them; it refuses what Unmarshal refuses.
func TestUnmarshalAliasedDecodesInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 500; i++ {
		want := storedLike(rng)
		b, err := Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalAliased(b)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("event %d: UnmarshalAliased gave %v, want %v", i, got, want)
		}
		inside := func(s string) bool {
			p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
			start := uintptr(unsafe.Pointer(&b[0]))
			return p >= start && p+uintptr(len(s)) <= start+uintptr(len(b))
		}
		for _, s := range []string{got.GetNote(), got.GetUid(), got.GetRegarding().GetName(), got.GetLabels()["app"], got.GetTenant().GetName()} {
			if s != "" && !inside(s) {
				t.Fatalf("event %d: %q is a copy, not in the decoded bytes", i, s)
			}
		}
	}
	b, err := Marshal(storedLike(rng))
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		_, errCopy := Unmarshal(b[:n])
		if _, err := UnmarshalAliased(b[:n]); (err == nil) != (errCopy == nil) {
			t.Fatalf("the first %d bytes: UnmarshalAliased error %v, Unmarshal error %v", n, err, errCopy)
		}
	}
}

// TestMarshalIsProtobufDeterministic: Marshal (and AppendMarshal, after
// other bytes) writes the very bytes of protobuf-go's deterministic
// encoding, for events with and without maps, with empty keys and values,
// with a resourceVersion (not stored) and with fields this version does not
// know; and refuses what protobuf-go refuses.
func TestMarshalIsProtobufDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	check := func(i int, ev *eventgatev1.Event) {
		t.Helper()
		c := proto.Clone(ev).(*eventgatev1.Event)
		c.ResourceVersion = ""
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d: Marshal wrote\n% x\nprotobuf-go\n% x", i, got, want)
		}
		// In place after other bytes, as the intake writes a batch.
		if n := Size(ev); n != len(want) {
			t.Fatalf("event %d: Size %d, encoding of %d bytes", i, n, len(want))
		}
		prefix := []byte("batch so far")
		appended, err := AppendMarshal(append(make([]byte, 0, 64), prefix...), ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(appended[:len(prefix)], prefix) || !bytes.Equal(appended[len(prefix):], want) {
			t.Fatalf("event %d: AppendMarshal wrote\n% x\nafter %q, want\n% x", i, appended[len(prefix):], prefix, want)
		}
	}
	for i := 0; i < 2000; i++ {
		ev := storedLike(rng)
		switch i % 5 {
		case 1:
			ev.Labels = map[string]string{}
		case 2:
			ev.Labels = map[string]string{}
			for j := range 12 {
				ev.Labels["k"+strconv.Itoa(rng.IntN(100))+strconv.Itoa(j)] = strconv.Itoa(j)
			}
			ev.Labels[""] = ""
			ev.Annotations[strconv.Itoa(i)] = ""
		case 3:
			ev.ResourceVersion = "42"
		case 4:
			ev.ProtoReflect().SetUnknown(protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "later"))
		}
		rv := ev.ResourceVersion
		check(i, ev)
		if ev.ResourceVersion != rv {
			t.Fatalf("Marshal changed the resourceVersion to %q", ev.ResourceVersion)
		}
	}
	for _, bad := range []*eventgatev1.Event{
		{Reason: "ok\xff"},
		{Labels: map[string]string{"a\xff": "b"}},
		{Metadata: map[string]string{"a": "\xffb"}},
		{Regarding: &eventgatev1.ObjectReference{Name: "\xc3"}},
	} {
		if b, err := Marshal(bad); err == nil {
			t.Errorf("Marshal(%v) = % x, want protobuf-go's refusal of invalid UTF-8", bad, b)
		}
	}
}

// TestUnmarshalRefusesWhatIsNotAnEvent: truncated and malformed input is an
// error, never a panic.
func TestUnmarshalRefusesWhatIsNotAnEvent(t *testing.T) {
	b, err := Marshal(storedLike(rand.New(rand.NewPCG(3, 4))))
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		if _, err := Unmarshal(b[:n]); err == nil {
			if err := proto.Unmarshal(b[:n], &eventgatev1.Event{}); err != nil {
				t.Fatalf("the first %d bytes decode, protobuf-go refuses them: %v", n, err)
			}
		}
	}
	for _, bad := range [][]byte{{0xff}, {0x7a, 0x05, 0x0a}, {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := Unmarshal(bad); err == nil {
			t.Errorf("Unmarshal(% x) succeeded", bad)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 8; i++ {
		b, _ := Marshal(storedLike(rng))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Unmarshal(b)
		if err != nil {
			return
		}
		// What decodes encodes again, and decodes to the same event.
		b2, err := ev.MarshalVT()
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		ev2, err := Unmarshal(b2)
		if err != nil || !proto.Equal(ev, ev2) {
			t.Fatalf("round trip: %v, %v != %v", err, ev2, ev)
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	var bufs [][]byte
	for i := 0; i < 64; i++ {
		ev := storedLike(rng)
		ev.Series, ev.Metadata = nil, nil
		buf, _ := Marshal(ev)
		bufs = append(bufs, buf)
	}
	benchEach(b, "event", func(i int) error { _, err := Unmarshal(bufs[i%len(bufs)]); return err })
	benchEach(b, "aliased", func(i int) error { _, err := UnmarshalAliased(bufs[i%len(bufs)]); return err })
	var d Decoder
	benchEach(b, "decoder", func(i int) error { _, err := d.DecodeAliased(bufs[i%len(bufs)]); return err })
	benchEach(b, "protobuf-go", func(i int) error { return proto.Unmarshal(bufs[i%len(bufs)], &eventgatev1.Event{}) })
}

// benchEach runs f(0), f(1), … as the sub-benchmark name.
func benchEach(b *testing.B, name string, f func(i int) error) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := f(i); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMarshal(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	var evs []*eventgatev1.Event
	for i := 0; i < 64; i++ {
		evs = append(evs, storedLike(rng))
	}
	benchEach(b, "event", func(i int) error { _, err := Marshal(evs[i%len(evs)]); return err })
	benchEach(b, "protobuf-go", func(i int) error {
		_, err := (proto.MarshalOptions{Deterministic: true}).Marshal(evs[i%len(evs)])
		return err
	})
}
