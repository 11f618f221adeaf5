package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

func TestCombineMetadata(t *testing.T) {
	const ks = "kustomize.toolkit.fluxcd.io/v1"
	tests := []struct {
		name       string
		in         map[string]string
		apiVersion string
		tenant     map[string]string
		want       map[string]string
		conflicts  []Conflict
	}{
		{
			name:       "annotation prefix stripped, other keys dropped",
			in:         map[string]string{"event.toolkit.fluxcd.io/deploymentID": "e076", "unrelated": "x", "helm.toolkit.fluxcd.io/revision": "other group"},
			apiVersion: ks,
			want:       map[string]string{"deploymentID": "e076"},
		},
		{
			name:       "controller keys of the object's group stripped; checksum, digest and token dropped",
			in:         map[string]string{"kustomize.toolkit.fluxcd.io/revision": "main@sha1:abc", "kustomize.toolkit.fluxcd.io/token": "secret", "kustomize.toolkit.fluxcd.io/checksum": "c", "kustomize.toolkit.fluxcd.io/digest": "d"},
			apiVersion: ks,
			want:       map[string]string{"revision": "main@sha1:abc"},
		},
		{
			name:       "precedence: annotations < tenant < controller, conflicts named with their sources",
			in:         map[string]string{"event.toolkit.fluxcd.io/revision": "from-annotation", "event.toolkit.fluxcd.io/cluster": "from-annotation", "event.toolkit.fluxcd.io/image": "img", "kustomize.toolkit.fluxcd.io/revision": "from-controller"},
			apiVersion: ks,
			tenant:     map[string]string{"cluster": "prod", "revision": "from-tenant", "region": "eu"},
			want:       map[string]string{"revision": "from-controller", "cluster": "prod", "image": "img", "region": "eu"},
			conflicts: []Conflict{
				{Key: "cluster", Sources: []string{SourceObjectAnnotations, SourceTenantMetadata}},
				{Key: "revision", Sources: []string{SourceObjectAnnotations, SourceTenantMetadata, SourceControllerMetadata}},
			},
		},
		{
			name:       "controller over annotation without tenant metadata",
			in:         map[string]string{"event.toolkit.fluxcd.io/revision": "a", "kustomize.toolkit.fluxcd.io/revision": "c"},
			apiVersion: ks,
			want:       map[string]string{"revision": "c"},
			conflicts:  []Conflict{{Key: "revision", Sources: []string{SourceObjectAnnotations, SourceControllerMetadata}}},
		},
		{
			name:       "a bare prefix is no key",
			in:         map[string]string{"event.toolkit.fluxcd.io/": "x", "kustomize.toolkit.fluxcd.io/": "y"},
			apiVersion: ks,
		},
		{
			name:       "tenant metadata alone",
			tenant:     map[string]string{"cluster": "prod"},
			apiVersion: ks,
			want:       map[string]string{"cluster": "prod"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, conflicts := CombineMetadata(tt.in, tt.apiVersion, tt.tenant)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("metadata (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.conflicts, conflicts); d != "" {
				t.Errorf("conflicts (-want +got):\n%s", d)
			}
		})
	}
}

func TestTenantMetadataLookup(t *testing.T) {
	tm, err := newTenantMetadata(map[string]map[string]string{
		"project/*":    {"env": "any", "cluster": "default"},
		"project/shop": {"cluster": "prod"},
		"global":       {"cluster": "mgmt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tenant *eventgatev1.Tenant
		want   map[string]string
	}{
		{&eventgatev1.Tenant{Type: "project", Name: "shop"}, map[string]string{"env": "any", "cluster": "prod"}},
		{&eventgatev1.Tenant{Type: "project", Name: "blog"}, map[string]string{"env": "any", "cluster": "default"}},
		{&eventgatev1.Tenant{Type: "global"}, map[string]string{"cluster": "mgmt"}},
		{&eventgatev1.Tenant{Type: "organization", Name: "shop"}, nil},
		{nil, nil},
	} {
		if d := cmp.Diff(tt.want, tm.lookup(tt.tenant)); d != "" {
			t.Errorf("lookup(%v) (-want +got):\n%s", tt.tenant, d)
		}
	}
	for _, bad := range []string{"team/x", "project", "project/", "global/x", "project/a\x00b"} {
		if _, err := newTenantMetadata(map[string]map[string]string{bad: {"k": "v"}}); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
}

func TestTenantFromAnnotations(t *testing.T) {
	const f = "items[0].metadata.annotations"
	tests := []struct {
		name    string
		ann     map[string]string
		want    *eventgatev1.Tenant
		typeKey string
		bad     []string
	}{
		{name: "none: the caller's default", ann: map[string]string{"x": "y"}},
		{name: "scope annotations", ann: map[string]string{ScopeTypeAnnotation: "project", ScopeNameAnnotation: "prod-cluster"}, want: &eventgatev1.Tenant{Type: "project", Name: "prod-cluster"}, typeKey: ScopeTypeAnnotation},
		{name: "capitalized scope type", ann: map[string]string{ScopeTypeAnnotation: "Organization", ScopeNameAnnotation: "acme"}, want: &eventgatev1.Tenant{Type: "organization", Name: "acme"}, typeKey: ScopeTypeAnnotation},
		{name: "global with the placeholder name", ann: map[string]string{ScopeTypeAnnotation: "global", ScopeNameAnnotation: "_"}, want: &eventgatev1.Tenant{Type: "global"}, typeKey: ScopeTypeAnnotation},
		{name: "Milo's platform scope is global", ann: map[string]string{ScopeTypeAnnotation: "platform"}, want: &eventgatev1.Tenant{Type: "global"}, typeKey: ScopeTypeAnnotation},
		{name: "eventgate's own", ann: map[string]string{TenantTypeAnnotation: "user", TenantNameAnnotation: "alice"}, want: &eventgatev1.Tenant{Type: "user", Name: "alice"}, typeKey: TenantTypeAnnotation},
		{name: "both agreeing", ann: map[string]string{TenantTypeAnnotation: "user", TenantNameAnnotation: "alice", ScopeTypeAnnotation: "user", ScopeNameAnnotation: "alice"}, want: &eventgatev1.Tenant{Type: "user", Name: "alice"}, typeKey: TenantTypeAnnotation},
		{name: "both disagreeing", ann: map[string]string{TenantTypeAnnotation: "user", TenantNameAnnotation: "alice", ScopeTypeAnnotation: "user", ScopeNameAnnotation: "bob"}, bad: []string{f + "[" + TenantTypeAnnotation + "]"}},
		{name: "unknown type", ann: map[string]string{ScopeTypeAnnotation: "team", ScopeNameAnnotation: "x"}, bad: []string{f + "[" + ScopeTypeAnnotation + "]"}},
		{name: "project without name", ann: map[string]string{ScopeTypeAnnotation: "project"}, bad: []string{f + "[" + ScopeNameAnnotation + "]"}},
		{name: "name without type", ann: map[string]string{TenantNameAnnotation: "x"}, bad: []string{f + "[" + TenantTypeAnnotation + "]"}},
		{name: "wildcard name", ann: map[string]string{ScopeTypeAnnotation: "project", ScopeNameAnnotation: "*"}, bad: []string{f + "[" + ScopeNameAnnotation + "]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, typeKey, _, vs := tenantFromAnnotations(tt.ann, f)
			var fields []string
			for _, v := range vs {
				fields = append(fields, v.Field)
			}
			if d := cmp.Diff(tt.bad, fields); d != "" {
				t.Fatalf("violations (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.want, got, protocmp.Transform()); d != "" {
				t.Fatalf("tenant (-want +got):\n%s", d)
			}
			if tt.want != nil && typeKey != tt.typeKey {
				t.Fatalf("type annotation %q, want %q", typeKey, tt.typeKey)
			}
		})
	}
}

func TestFromEventsV1(t *testing.T) {
	at := time.Date(2024, 1, 15, 10, 30, 0, 123456000, time.UTC)
	in := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name: "nginx.17a2", Namespace: "default", UID: "550e8400-e29b-41d4-a716-446655440000",
			Labels:      map[string]string{"app": "nginx"},
			Annotations: map[string]string{ScopeTypeAnnotation: "project", ScopeNameAnnotation: "prod", "keep": "me"},
		},
		EventTime:         metav1.NewMicroTime(at),
		Series:            &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))},
		ReportingInstance: "",
		Action:            "Scale",
		Reason:            "ScalingReplicaSet",
		Regarding:         corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "nginx", UID: "d-uid", FieldPath: "spec", ResourceVersion: "7"},
		Related:           &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "nginx-7d"},
		Note:              "Scaled up",
		Type:              "Normal",
		DeprecatedSource:  corev1.EventSource{Component: "deployment-controller", Host: "cp-1"},
	}
	want := &eventgatev1.Event{
		Uid: "550e8400-e29b-41d4-a716-446655440000", Name: "nginx.17a2", Namespace: "default",
		EventTime:           timestamppb.New(at),
		Series:              &eventgatev1.EventSeries{Count: 3, LastObservedTime: timestamppb.New(at.Add(time.Minute))},
		ReportingController: "deployment-controller",
		ReportingInstance:   "cp-1",
		Action:              "Scale",
		Reason:              "ScalingReplicaSet",
		Regarding:           &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "nginx", Uid: "d-uid", FieldPath: "spec", ResourceVersion: "7"},
		Related:             &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "nginx-7d"},
		Note:                "Scaled up",
		Type:                "Normal",
		Labels:              map[string]string{"app": "nginx"},
		Annotations:         map[string]string{"keep": "me"},
	}
	if d := cmp.Diff(want, fromEventsV1(in), protocmp.Transform()); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestListField(t *testing.T) {
	for rel, want := range map[string]string{
		".regarding.kind":          ".regarding.kind",
		".uid":                     ".metadata.uid",
		".name":                    ".metadata.name",
		".namespace":               ".metadata.namespace",
		".labels[a]":               ".metadata.labels[a]",
		".tenant.type":             ".metadata.annotations[T]",
		".tenant.name":             ".metadata.annotations[N]",
		".note":                    ".note",
		".reportingController":     ".reportingController",
		".nameless.future.field":   ".nameless.future.field",
		".annotations[x/y]":        ".metadata.annotations[x/y]",
		".series.lastObservedTime": ".series.lastObservedTime",
	} {
		if got := listField(rel, "T", "N"); got != want {
			t.Errorf("listField(%q) = %q, want %q", rel, got, want)
		}
	}
	for rel, want := range map[string]string{
		".regarding.kind": "involvedObject.kind",
		".note":           "message",
		".eventTime":      "timestamp",
		".metadata[k]":    "metadata[k]",
		".reason":         "reason",
		".tenant.name":    "tenant.name",
	} {
		if got := fluxField(rel); got != want {
			t.Errorf("fluxField(%q) = %q, want %q", rel, got, want)
		}
	}
}

func TestViolationsByIndex(t *testing.T) {
	st := status.New(codes.InvalidArgument, "bad")
	st, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: "events[1].regarding.kind", Description: "is required"},
		{Field: "events[1].reason", Description: "is required"},
		{Field: "events[3].note", Description: "too long"},
		{Field: "events[9].note", Description: "out of range"},
		{Field: "tenant.type", Description: "not an event"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := violationsByIndex(st, 4)
	want := map[int][]*eventgatev1.FieldViolation{
		1: {{Field: ".regarding.kind", Description: "is required"}, {Field: ".reason", Description: "is required"}},
		3: {{Field: ".note", Description: "too long"}},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestListResultStatus: 200 all stored; uniform failure → its status; a
// retryable failure → 503; otherwise 207.
func TestListResultStatus(t *testing.T) {
	ok := func() *item {
		return &item{res: &eventgatev1.EmitResult{Uid: "u", Outcome: eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED}}
	}
	failed := func(c codes.Code) *item { it := &item{}; it.fail(c, "x"); return it }
	for _, tt := range []struct {
		name  string
		items []*item
		want  int
		code  int
	}{
		{"all stored", []*item{ok(), ok()}, http.StatusOK, 0},
		{"all denied", []*item{failed(codes.PermissionDenied), failed(codes.PermissionDenied)}, http.StatusForbidden, int(codes.PermissionDenied)},
		{"all invalid", []*item{failed(codes.InvalidArgument)}, http.StatusBadRequest, int(codes.InvalidArgument)},
		{"partial", []*item{ok(), failed(codes.InvalidArgument), failed(codes.PermissionDenied)}, http.StatusMultiStatus, 0},
		{"mixed refusals", []*item{failed(codes.InvalidArgument), failed(codes.PermissionDenied)}, http.StatusMultiStatus, 0},
		{"store unavailable for some", []*item{ok(), failed(codes.Unavailable)}, http.StatusServiceUnavailable, int(codes.Unavailable)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for i, it := range tt.items {
				it.index = i
			}
			got, res := listResult(tt.items)
			if got != tt.want || res.Code != tt.code {
				t.Fatalf("status %d code %d, want %d code %d", got, res.Code, tt.want, tt.code)
			}
			if res.Accepted+res.Failed != len(tt.items) || len(res.Items) != len(tt.items) {
				t.Fatalf("counts %d+%d, items %d, want %d", res.Accepted, res.Failed, len(res.Items), len(tt.items))
			}
			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			var back ListResult
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBodyLimits: a body over the limit is 413 even without a
// Content-Length (the gateway's own check sees only that header); bad JSON
// is 400 naming the body. Neither reaches Emit.
func TestBodyLimits(t *testing.T) {
	mux := http.NewServeMux()
	if err := Register(mux, Options{MaxBodyBytes: 1024}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, path := range []string{EventsPath, FluxPath} {
		big := `{"items":["` + strings.Repeat("x", 4096) + `"]}`
		// A reader without a length: sent chunked.
		resp, err := http.Post(srv.URL+path, "application/json", io.MultiReader(strings.NewReader(big)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: oversized body answered %d, want 413", path, resp.StatusCode)
		}
		resp, err = http.Post(srv.URL+path, "application/json", strings.NewReader(`{"items": [`))
		if err != nil {
			t.Fatal(err)
		}
		var st map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(fmt.Sprint(st), "field:body") {
			t.Errorf("%s: bad JSON answered %d %v, want 400 naming the body", path, resp.StatusCode, st)
		}
	}
}
