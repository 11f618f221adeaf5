package gateway

import (
	"bytes"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/service"
)

// The server codec's responses read back as the messages given: those it
// encodes with generated code (a Query's events, an emit's results, a watch
// event) and those protobuf-go encodes; a message already encoded
// (service.Encoded, or in parts: service.EncodedParts) is sent byte for
// byte, its parts not copied.
func TestEncodeOfResponsesAgreesWithProtobuf(t *testing.T) {
	g := newDecodeGuard(0)
	evs := randomEvents(5, 200)
	for i, ev := range evs {
		ev.ResourceVersion = "42"
		ev.Uid = "uid-" + strconv.Itoa(i)
	}
	for _, m := range []proto.Message{
		&eventgatev1.QueryResponse{Events: evs, ResourceVersion: "99", NextPageToken: "tok"},
		&eventgatev1.StreamWatchResponse{Type: "MODIFIED", Object: evs[0]},
		&eventgatev1.EmitResponse{Results: []*eventgatev1.EmitResult{{Uid: "u", ResourceVersion: "7"}}},
		&eventgatev1.GetResponse{Event: evs[1]},
		&eventgatev1.StreamWatchRequest{}, // empty
	} {
		bs, err := g.Marshal(m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(bs.Materialize(), got); err != nil {
			t.Fatalf("%T: the encoding does not decode: %v", m, err)
		}
		if !proto.Equal(got, m) {
			t.Fatalf("%T: decoded\n%v\nwant\n%v", m, got, m)
		}
	}
	raw := []byte{0x0a, 0x05, 'A', 'D', 'D', 'E', 'D'}
	bs, err := g.Marshal(service.Encoded(raw))
	if err != nil || !bytes.Equal(bs.Materialize(), raw) {
		t.Fatalf("encoded message: sent %q (%v), want %q", bs.Materialize(), err, raw)
	}
	parts := service.EncodedParts{raw[:2], raw[2:5], raw[5:]}
	bs, err = g.Marshal(parts)
	if err != nil || !bytes.Equal(bs.Materialize(), raw) || len(bs) != len(parts) || &bs[1].ReadOnlyData()[0] != &raw[2] {
		t.Fatalf("message encoded in parts: sent %q in %d buffers (%v), want %q in %d, the parts themselves", bs.Materialize(), len(bs), err, raw, len(parts))
	}
}

// A response with a string that is not UTF-8 is refused, as protobuf-go
// refuses it: the generated encoding does not check, the codec does.
func TestEncodeRefusesInvalidUTF8InAResponse(t *testing.T) {
	g := newDecodeGuard(0)
	bad := &eventgatev1.QueryResponse{Events: []*eventgatev1.Event{{Uid: "u", Labels: map[string]string{"k": "\xff"}}}}
	if _, err := g.Marshal(bad); err == nil {
		t.Fatal("a label value that is not UTF-8 was encoded")
	}
	if _, err := proto.Marshal(bad); err == nil {
		t.Fatal("protobuf-go encoded it too: the test no longer shows the check")
	}
}
