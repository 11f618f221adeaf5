package gateway

import (
	"context"

	"github.com/fullstorydev/grpchan/inprocgrpc"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// restConn is the connection of the REST gateway (and the Kubernetes API
// and the webhooks) to the gRPC services. A unary call goes to the handler
// in process, through the same interceptors as a gRPC call (call tracking,
// metrics, recovery, the request guard, authentication from the forwarded
// metadata) and the same stats handler: no encoding, no HTTP/2 framing, no
// hop between goroutines of two transports. A stream (a watch) goes over
// the in-memory connection to the in-process gRPC server, where flow
// control and cancellation are grpc-go's.
type restConn struct {
	unary  *inprocgrpc.Channel
	stream *grpc.ClientConn
}

func (c restConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.unary.Invoke(ctx, method, args, reply, opts...)
}

func (c restConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.stream.NewStream(ctx, desc, method, opts...)
}

// chainUnary is interceptors as one, the first outermost (as
// grpc.ChainUnaryInterceptor chains them).
func chainUnary(interceptors ...grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		next := handler
		for i := len(interceptors) - 1; i >= 0; i-- {
			ic, h := interceptors[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, h) }
		}
		return next(ctx, req)
	}
}

// copier copies a request to the handler and a response back, so that
// neither side shares a message with the other: with the generated
// encoding when the message has it (the event service's), else with
// protobuf-go.
type copier struct{}

type generatedCopy interface {
	proto.Message
	MarshalVT() ([]byte, error)
	UnmarshalVT([]byte) error
}

func (copier) Copy(out, in any) error {
	o, ok1 := out.(generatedCopy)
	i, ok2 := in.(generatedCopy)
	if ok1 && ok2 {
		b, err := i.MarshalVT()
		if err == nil {
			proto.Reset(o)
			if err = o.UnmarshalVT(b); err == nil {
				return nil
			}
		}
	}
	return inprocgrpc.ProtoCloner{}.Copy(out, in)
}

func (copier) Clone(in any) (any, error) {
	return inprocgrpc.ProtoCloner{}.Clone(in)
}
