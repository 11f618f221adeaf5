package gateway

import (
	"context"
	"fmt"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	protov2 "google.golang.org/protobuf/proto"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/service"
)

// decodeGuard turns a request that does not decode (invalid wire format,
// invalid UTF-8 in a string field) into InvalidArgument, and one larger than
// max into ResourceExhausted without decoding it. grpc-go answers a codec
// error with Internal, which blames the server for the caller's bytes, and
// ends a stream whose message is over its own limit (losing the acks of an
// EmitStream's earlier batches); so the server codec records the error
// against the message instead of failing, and the first interceptor (or the
// stream's RecvMsg) reports it: an EmitStream batch refused so is answered
// with an error ack and the stream goes on. Both errors carry
// service.BadMessageInfo.
type decodeGuard struct {
	base encoding.CodecV2
	max  int
	errs sync.Map // message pointer → the error to report
}

// newDecodeGuard refuses messages over max bytes (0: no limit of its own).
func newDecodeGuard(max int) *decodeGuard {
	return &decodeGuard{base: encoding.GetCodecV2(proto.Name), max: max}
}

// Marshal sends a message already encoded (service.Encoded, or in parts,
// service.EncodedParts: a watch event as the stream stores it) as it is, and encodes one with generated
// encoding (the event service's responses) without reflection. What that
// encoding would send with a string that is not UTF-8, protobuf-go
// refuses, as before.
func (d *decodeGuard) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case encoded:
		return mem.BufferSlice{mem.SliceBuffer(m.EncodedMessage())}, nil
	case encodedParts:
		parts := m.EncodedParts()
		bs := make(mem.BufferSlice, len(parts))
		for i, p := range parts {
			bs[i] = mem.SliceBuffer(p)
		}
		return bs, nil
	case generatedEncoding:
		if b, err := m.MarshalVT(); err == nil && event.ValidUTF8(b, m.ProtoReflect().Descriptor()) {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
	}
	return d.base.Marshal(v)
}

// generatedEncoding is a message with generated encoding (vtprotobuf).
type generatedEncoding interface {
	protov2.Message
	MarshalVT() ([]byte, error)
}

func (d *decodeGuard) Name() string { return d.base.Name() }

// encoded is a message in the wire format already (service.Encoded).
type encoded interface{ EncodedMessage() []byte }

// encodedParts is a message in the wire format already, in parts sent in
// turn (service.EncodedParts).
type encodedParts interface{ EncodedParts() [][]byte }

func (d *decodeGuard) Unmarshal(data mem.BufferSlice, v any) error {
	if n := data.Len(); d.max > 0 && n > d.max {
		d.errs.Store(v, badMessage(status.New(codes.ResourceExhausted, fmt.Sprintf("request of %d bytes is larger than the limit of %d bytes", n, d.max))))
		return nil
	}
	if m, ok := v.(generated); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		ok := decodeGenerated(buf.ReadOnlyData(), m)
		buf.Free()
		if ok {
			return nil
		}
		// protobuf-go decides, and words the error.
		protov2.Reset(m)
	}
	if err := d.base.Unmarshal(data, v); err != nil {
		d.errs.Store(v, badMessage(status.New(codes.InvalidArgument, fmt.Sprintf("request is not a valid message: %v", err))))
	}
	return nil
}

// generated is a request with generated decoding (vtprotobuf: the emit
// requests, buf.gen.vtproto.yaml). protobuf-go decodes an event's maps
// through reflection; the generated code does not, but neither does it
// check that strings are UTF-8, which protobuf-go refuses in a proto3
// string and so must the gateway.
type generated interface {
	protov2.Message
	UnmarshalVT([]byte) error
}

// decodeGenerated decodes b into m with the generated code and reports
// whether it decoded and every string field in it, however deep, is UTF-8.
// When it did not, protobuf-go decodes b again and gives the error (or,
// where protobuf-go is more lenient, accepts it): the two agree on every
// message (FuzzDecodeAgreesWithProtobuf).
func decodeGenerated(b []byte, m generated) bool {
	return event.ValidUTF8(b, m.ProtoReflect().Descriptor()) && m.UnmarshalVT(b) == nil
}

func badMessage(st *status.Status) error {
	if d, err := st.WithDetails(service.BadMessageInfo()); err == nil {
		st = d
	}
	return st.Err()
}

func (d *decodeGuard) check(v any) error {
	if err, ok := d.errs.LoadAndDelete(v); ok {
		return err.(error)
	}
	return nil
}

// transportLimit is the largest message grpc-go itself reads: above the
// guard's limit, so that the guard answers most oversized messages (and an
// EmitStream goes on); beyond it grpc-go ends the call.
func transportLimit(max int) int {
	if max > math.MaxInt32/2 {
		return math.MaxInt32
	}
	return 2 * max
}

func (d *decodeGuard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := d.check(req); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (d *decodeGuard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &guardedStream{ServerStream: ss, guard: d})
}

type guardedStream struct {
	grpc.ServerStream
	guard *decodeGuard
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.guard.check(m)
}
