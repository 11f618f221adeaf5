package gateway

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// decodeGuard turns a request that does not decode (invalid wire format,
// invalid UTF-8 in a string field) into InvalidArgument. grpc-go answers a
// codec error with Internal, which blames the server for the caller's bytes;
// so the server codec records the error against the message instead of
// failing, and the first interceptor reports it.
type decodeGuard struct {
	base encoding.CodecV2
	errs sync.Map // message pointer → decode error
}

func newDecodeGuard() *decodeGuard {
	return &decodeGuard{base: encoding.GetCodecV2(proto.Name)}
}

func (d *decodeGuard) Marshal(v any) (mem.BufferSlice, error) { return d.base.Marshal(v) }
func (d *decodeGuard) Name() string                           { return d.base.Name() }

func (d *decodeGuard) Unmarshal(data mem.BufferSlice, v any) error {
	if err := d.base.Unmarshal(data, v); err != nil {
		d.errs.Store(v, err)
	}
	return nil
}

func (d *decodeGuard) check(v any) error {
	if err, ok := d.errs.LoadAndDelete(v); ok {
		return status.Errorf(codes.InvalidArgument, "request is not a valid message: %v", err)
	}
	return nil
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
