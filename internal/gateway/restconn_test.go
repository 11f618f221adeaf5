package gateway

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// The REST gateway's unary calls run the interceptors in the order the
// gRPC server chains them, the first outermost, each seeing the next's
// answer.
func TestChainUnaryRunsInterceptorsInServerOrder(t *testing.T) {
	var order []string
	mark := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			order = append(order, name+">")
			resp, err := h(ctx, req)
			order = append(order, "<"+name)
			return resp.(string) + name, err
		}
	}
	resp, err := chainUnary(mark("a"), mark("b"), mark("c"))(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/x/Y"},
		func(ctx context.Context, req any) (any, error) {
			order = append(order, "handler")
			return "", nil
		})
	if err != nil || resp != "cba" {
		t.Fatalf("answer %v, %v; want cba", resp, err)
	}
	if want := []string{"a>", "b>", "c>", "handler", "<c", "<b", "<a"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

// A message crosses between the REST gateway and a handler as a copy:
// equal, and sharing nothing (the handler normalizes the events it is
// given in place). Messages with generated encoding and those without are
// both copied.
func TestCopierCopiesWithoutSharing(t *testing.T) {
	in := &eventgatev1.EmitRequest{Events: randomEvents(3, 20)}
	out := &eventgatev1.EmitRequest{}
	if err := (copier{}).Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(out, in) {
		t.Fatalf("copy differs:\n%v\n%v", out, in)
	}
	out.Events[0].Reason, out.Events[0].Regarding.Name = "Changed", "changed"
	out.Events[0].Labels["app"] = "changed"
	if in.Events[0].Reason == "Changed" || in.Events[0].Regarding.Name == "changed" || in.Events[0].Labels["app"] == "changed" {
		t.Fatal("the copy shares fields with the original")
	}

	hin := &eventgatev1.HistogramRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "p"}}
	hout := &eventgatev1.HistogramRequest{}
	if err := (copier{}).Copy(hout, hin); err != nil || !proto.Equal(hout, hin) {
		t.Fatalf("copy of a message without generated encoding: %v, %v", hout, err)
	}
	hout.Tenant.Name = "q"
	if hin.Tenant.Name != "p" {
		t.Fatal("the copy shares fields with the original")
	}
}

// A request the REST gateway hands off (restConn.handOff) reaches the
// handler as it was decoded: the handler's message holds the same events,
// and nothing of what the handler's message held before.
func TestCopierMovesAHandedOffRequest(t *testing.T) {
	in := &eventgatev1.EmitRequest{Events: randomEvents(3, 20), IdempotencyKey: "k"}
	want := proto.Clone(in)
	out := &eventgatev1.EmitRequest{Events: randomEvents(1, 21), ClientCounted: true}
	if err := (copier{}).Copy(out, handedOff{in}); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(out, want) {
		t.Fatalf("moved request differs:\n%v\n%v", out, want)
	}
	for i := range in.Events {
		if out.Events[i] != in.Events[i] {
			t.Fatalf("event %d was copied, not handed off", i)
		}
	}

	// A response goes back as a copy.
	resp := &eventgatev1.EmitResponse{Results: []*eventgatev1.EmitResult{{ResourceVersion: "7"}}}
	got := &eventgatev1.EmitResponse{}
	if err := (copier{}).Copy(got, resp); err != nil || !proto.Equal(got, resp) || got.Results[0] == resp.Results[0] {
		t.Fatalf("response: %v, %v; want an equal copy", got, err)
	}
}
