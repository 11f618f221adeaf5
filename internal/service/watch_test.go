package service

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
)

// serve runs s on a real in-process gRPC server whose callers are p, and
// returns a client of it.
func serve(t *testing.T, s *Events, p *authz.Principal) eventgatev1.EventServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &withContext{ss, authz.NewContext(ss.Context(), p)})
	}))
	eventgatev1.RegisterEventServiceServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return eventgatev1.NewEventServiceClient(conn)
}

type withContext struct {
	grpc.ServerStream
	ctx context.Context
}

func (w *withContext) Context() context.Context { return w.ctx }

// TestStreamWatchDeliversOnlyTheCallersTenant: a watcher granted one
// tenant receives that tenant's new events, as ADDED, and none of
// another's emitted meanwhile.
func TestStreamWatchDeliversOnlyTheCallersTenant(t *testing.T) {
	s := newEvents(false)
	watcher := &authz.Principal{Name: "watcher", Grants: []authz.Grant{{TenantType: event.TenantProject, TenantName: "svc-watch-a", Verbs: []authz.Verb{authz.VerbWatch}}}}
	c := serve(t, s, watcher)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := c.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil { // the watch is established
		t.Fatal(err)
	}
	for _, project := range []string{"svc-watch-b", "svc-watch-a"} {
		if _, err := s.Emit(caller(ctx, project), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{scaled("web")}}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetType() == event.WatchBookmark {
			continue
		}
		if resp.GetType() != event.WatchAdded || resp.GetObject().GetTenant().GetName() != "svc-watch-a" {
			t.Fatalf("watch of project svc-watch-a received %s of %v", resp.GetType(), resp.GetObject().GetTenant())
		}
		return
	}
}
