package gateway

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/service"
)

func randomEmit(rng *rand.Rand) *eventgatev1.EmitStreamRequest {
	req := &eventgatev1.EmitStreamRequest{BatchId: strconv.Itoa(rng.IntN(1000)), IdempotencyKey: "k" + strconv.Itoa(rng.IntN(3)),
		Tenant: &eventgatev1.Tenant{Type: "project", Name: "p" + strconv.Itoa(rng.IntN(9))}, ClientCounted: rng.IntN(2) == 0}
	for range rng.IntN(4) {
		i := strconv.Itoa(rng.IntN(1e6))
		ev := &eventgatev1.Event{
			Name: "e" + i, EventTime: timestamppb.New(time.Unix(int64(rng.IntN(2e9)), 0)), Reason: "BackOff", Type: "Warning",
			ReportingController: "example.com/ctl", Note: "naïve note " + i,
			Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p" + i},
			Labels:    map[string]string{"app": "x" + i, "ünï": "cödé"},
		}
		if rng.IntN(2) == 0 {
			ev.Series = &eventgatev1.EventSeries{Count: int32(rng.IntN(9))}
			ev.Annotations = map[string]string{"a": i}
		}
		req.Events = append(req.Events, ev)
	}
	return req
}

// randomEvents returns at least n events of randomEmit's.
func randomEvents(seed uint64, n int) []*eventgatev1.Event {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var evs []*eventgatev1.Event
	for len(evs) < n {
		evs = append(evs, randomEmit(rng).Events...)
	}
	return evs
}

// decodeWithGuard decodes b as the server's codec does.
func decodeWithGuard(t testing.TB, b []byte, m proto.Message) error {
	g := newDecodeGuard(0)
	if err := g.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
		t.Fatalf("the guard's Unmarshal returned %v: it records errors against the message", err)
	}
	return g.check(m)
}

// TestDecodeOfEmitRequestsAgreesWithProtobuf: an emit request decodes to
// what protobuf-go decodes it to, and so does an emit stream's batch
// decoded into the message of the batch before (service.StreamBatch).
func TestDecodeOfEmitRequestsAgreesWithProtobuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	reused := service.NewStreamBatch()
	for i := 0; i < 500; i++ {
		want := randomEmit(rng)
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got := &eventgatev1.EmitStreamRequest{}
		if err := decodeWithGuard(t, b, got); err != nil || !proto.Equal(got, want) {
			t.Fatalf("request %d decoded to %v (%v), want %v", i, got, err, want)
		}
		if err := decodeWithGuard(t, b, reused); err != nil || !proto.Equal(reused.EmitStreamRequest, want) {
			t.Fatalf("request %d decoded into the batch before to %v (%v), want %v", i, reused.EmitStreamRequest, err, want)
		}
		ub, err := proto.Marshal(&eventgatev1.EmitRequest{Events: want.Events, IdempotencyKey: want.IdempotencyKey, Tenant: want.Tenant, ClientCounted: want.ClientCounted})
		if err != nil {
			t.Fatal(err)
		}
		unary := &eventgatev1.EmitRequest{}
		if err := decodeWithGuard(t, ub, unary); err != nil {
			t.Fatalf("request %d as an EmitRequest: %v", i, err)
		}
		viaProto := &eventgatev1.EmitRequest{}
		if err := proto.Unmarshal(ub, viaProto); err != nil || !proto.Equal(unary, viaProto) {
			t.Fatalf("request %d as an EmitRequest: %v, protobuf-go: %v", i, unary, viaProto)
		}
	}
}

// TestDecodeRefusesInvalidUTF8InEveryStringOfAnEmit: invalid UTF-8 in any
// string field of an emit request, at any depth (the event, its
// references, its maps' keys and values), is refused as protobuf-go
// refuses it. The fields are found from the descriptors, so a string field
// added later is covered.
func TestDecodeRefusesInvalidUTF8InEveryStringOfAnEmit(t *testing.T) {
	var paths [][]protoreflect.FieldDescriptor
	var walk func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor)
	walk = func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor) {
		if len(path) > 4 {
			return
		}
		for i := 0; i < md.Fields().Len(); i++ {
			fd := md.Fields().Get(i)
			p := append(append([]protoreflect.FieldDescriptor(nil), path...), fd)
			switch fd.Kind() {
			case protoreflect.StringKind:
				paths = append(paths, p)
			case protoreflect.MessageKind:
				walk(fd.Message(), p)
			}
		}
	}
	walk((&eventgatev1.EmitStreamRequest{}).ProtoReflect().Descriptor(), nil)
	if len(paths) < 20 {
		t.Fatalf("found %d string fields in an emit request; the walk is broken", len(paths))
	}
	for _, p := range paths {
		// The innermost field holds the bad string; each level around it is
		// a message field holding the level inside.
		b := protowire.AppendBytes(protowire.AppendTag(nil, p[len(p)-1].Number(), protowire.BytesType), []byte{'o', 'k', 0xff})
		for i := len(p) - 2; i >= 0; i-- {
			b = protowire.AppendBytes(protowire.AppendTag(nil, p[i].Number(), protowire.BytesType), b)
		}
		if err := proto.Unmarshal(b, &eventgatev1.EmitStreamRequest{}); err == nil {
			t.Fatalf("%v: protobuf-go accepts invalid UTF-8 there; the test builds the wrong bytes", p)
		}
		if err := decodeWithGuard(t, b, &eventgatev1.EmitStreamRequest{}); err == nil {
			var names []string
			for _, fd := range p {
				names = append(names, string(fd.Name()))
			}
			t.Errorf("invalid UTF-8 in %v was accepted", names)
		}
	}
}

// FuzzDecodeAgreesWithProtobuf: on any bytes, the guard accepts an emit
// request exactly when protobuf-go does, with the same content (unknown
// fields aside, see known).
func FuzzDecodeAgreesWithProtobuf(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		b, _ := proto.Marshal(randomEmit(rng))
		f.Add(b)
	}
	f.Add([]byte{0x12, 0x03, 0x7a, 0x01, 0xff})
	before, _ := proto.Marshal(randomEmit(rng))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := &eventgatev1.EmitStreamRequest{}
		err := decodeWithGuard(t, b, got)
		want := &eventgatev1.EmitStreamRequest{}
		werr := proto.Unmarshal(b, want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("guard: %v, protobuf-go: %v", err, werr)
		}
		if err == nil && !proto.Equal(known(t, got), known(t, want)) {
			t.Fatalf("guard decoded %v, protobuf-go %v", got, want)
		}
		// Into an emit stream's message of the batch before.
		reused := service.NewStreamBatch()
		if err := decodeWithGuard(t, before, reused); err != nil {
			t.Fatal(err)
		}
		err = decodeWithGuard(t, b, reused)
		if (err == nil) != (werr == nil) {
			t.Fatalf("guard into the batch before: %v, protobuf-go: %v", err, werr)
		}
		if err == nil && !proto.Equal(known(t, reused.EmitStreamRequest), known(t, want)) {
			t.Fatalf("guard decoded into the batch before %v, protobuf-go %v", reused.EmitStreamRequest, want)
		}
	})
}

// known is m without unknown fields: the generated code keeps those of the
// request and the event, but drops any inside a google.protobuf.Timestamp,
// which says nothing an event can store.
func known(t *testing.T, m *eventgatev1.EmitStreamRequest) *eventgatev1.EmitStreamRequest {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := &eventgatev1.EmitStreamRequest{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func BenchmarkDecodeEmitStreamBatch(b *testing.B) {
	buf, _ := proto.Marshal(&eventgatev1.EmitStreamRequest{Events: randomEvents(5, 100)})
	reused := service.NewStreamBatch()
	for name, decode := range map[string]func() error{
		"guard":        func() error { return decodeWithGuard(b, buf, &eventgatev1.EmitStreamRequest{}) },
		"guard-reused": func() error { return decodeWithGuard(b, buf, reused) },
		"protobuf-go":  func() error { return proto.Unmarshal(buf, &eventgatev1.EmitStreamRequest{}) },
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := decode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRESTBodyDecode: a REST emit of 10 events, decoded as the REST
// gateway decodes a request body.
func BenchmarkRESTBodyDecode(b *testing.B) {
	body, err := protojson.Marshal(&eventgatev1.EmitRequest{Events: randomEvents(7, 10)})
	if err != nil {
		b.Fatal(err)
	}
	m := &strictJSON{JSONPb: &runtime.JSONPb{}}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.NewDecoder(bytes.NewReader(body)).Decode(&eventgatev1.EmitRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
