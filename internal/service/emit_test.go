package service

import (
	"context"
	"strconv"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/event"
)

// caller is a principal allowed to emit in project name.
func caller(ctx context.Context, project string) context.Context {
	return authz.NewContext(ctx, &authz.Principal{
		Name:          "emitter",
		Grants:        []authz.Grant{{TenantType: event.TenantProject, TenantName: project, Verbs: []authz.Verb{authz.VerbEmit}}},
		DefaultTenant: &authz.Tenant{Type: event.TenantProject, Name: project},
	})
}

func scaled(name string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Reason: "ScaledUp", Note: "scaled " + name, Action: "Scale",
		ReportingController: "example.com/autoscaler", ReportingInstance: "autoscaler-1",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: name},
	}
}

// TestEmitRefusesInvalidEventsNamingTheField: an invalid event is refused
// with InvalidArgument naming its field, and nothing of the batch is
// stored.
func TestEmitRefusesInvalidEventsNamingTheField(t *testing.T) {
	s := newEvents(false)
	ctx := caller(context.Background(), "svc-invalid")
	bad := scaled("web")
	bad.Reason = ""
	before, err := env.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{scaled("ok"), bad}})
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("Emit of an event without reason: %v, want InvalidArgument", err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	if len(fields) != 1 || fields[0] != "events[1].reason" {
		t.Errorf("field violations %v, want [events[1].reason]", fields)
	}
	after, err := env.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.LastSeq != before.State.LastSeq {
		t.Errorf("a refused batch stored %d events", after.State.LastSeq-before.State.LastSeq)
	}
}

// TestEmitOutsideGrantsIsDenied: a caller cannot emit into a tenant it
// holds no grant on.
func TestEmitOutsideGrantsIsDenied(t *testing.T) {
	s := newEvents(false)
	ctx := caller(context.Background(), "svc-mine")
	_, err := s.Emit(ctx, &eventgatev1.EmitRequest{
		Tenant: &eventgatev1.Tenant{Type: event.TenantProject, Name: "svc-theirs"},
		Events: []*eventgatev1.Event{scaled("web")},
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Emit into another tenant: %v, want PermissionDenied", err)
	}
}

// TestEmitStoresEachEventOnce: without server-side series each event is
// stored as it is, under the resourceVersion its result names, and a retry
// under the same idempotency key is a duplicate of the stored one.
func TestEmitStoresEachEventOnce(t *testing.T) {
	s := newEvents(false)
	ctx := caller(context.Background(), "svc-store")
	req := &eventgatev1.EmitRequest{IdempotencyKey: "deploy-42", Events: []*eventgatev1.Event{scaled("web"), scaled("api")}}
	resp, err := s.Emit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.GetResults() {
		if r.GetOutcome() != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
			t.Fatalf("result %d: %v, want CREATED", i, r)
		}
		seq, err := strconv.ParseUint(r.GetResourceVersion(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := event.Unmarshal(stored(t, seq).Data)
		if err != nil || ev.GetUid() != r.GetUid() || ev.GetTenant().GetName() != "svc-store" {
			t.Errorf("stored at %d: %v (%v), want uid %s in project svc-store", seq, ev, err, r.GetUid())
		}
	}
	retry, err := s.Emit(ctx, &eventgatev1.EmitRequest{IdempotencyKey: "deploy-42", Events: []*eventgatev1.Event{scaled("web"), scaled("api")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range retry.GetResults() {
		first := resp.GetResults()[i]
		if r.GetOutcome() != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || r.GetUid() != first.GetUid() || r.GetResourceVersion() != first.GetResourceVersion() {
			t.Errorf("retry %d: %v, want DUPLICATE of %v", i, r, first)
		}
	}
}

// TestEmitFoldsRepeatsIntoASeries: with the intake, isomorphic repeats
// become one series: created, started, then counted, under one uid.
func TestEmitFoldsRepeatsIntoASeries(t *testing.T) {
	s := newEvents(true)
	ctx := caller(context.Background(), "svc-series")
	want := []eventgatev1.EmitOutcome{
		eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED,
		eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED,
		eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED,
	}
	var uid string
	for i, w := range want {
		resp, err := s.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{scaled("web")}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.GetResults()[0]
		if i == 0 {
			uid = r.GetUid()
		}
		if r.GetOutcome() != w || r.GetUid() != uid {
			t.Fatalf("occurrence %d: %v, want %v of uid %s", i+1, r, w, uid)
		}
	}
}
