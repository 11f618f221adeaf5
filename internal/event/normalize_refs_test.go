package event

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestNormalizeNamesEachBadReferenceField: a violation in an object
// reference names the field by its whole path (the request's prefix, the
// reference, the field), for the regarding and the related object alike.
func TestNormalizeNamesEachBadReferenceField(t *testing.T) {
	ev := &eventgatev1.Event{
		Reason:    "ScaledUp",
		Regarding: &eventgatev1.ObjectReference{Name: "api", Namespace: strings.Repeat("n", maxNameField+1)},
		Related:   &eventgatev1.ObjectReference{Kind: "Pod", Name: "api-0", Uid: "u\x01"},
	}
	vs := Normalizer{}.Normalize(ev, nil, "", "events[3]")
	var fields []string
	for _, v := range vs {
		fields = append(fields, v.Field)
	}
	for _, want := range []string{"events[3].regarding.kind", "events[3].regarding.namespace", "events[3].related.uid"} {
		if !slices.Contains(fields, want) {
			t.Errorf("violations %v: none for %s", vs, want)
		}
	}
	for _, f := range fields {
		if strings.HasPrefix(f, "events[3].related.") && f != "events[3].related.uid" {
			t.Errorf("violation for %s, which is valid: %v", f, vs)
		}
	}
}

// TestValidReferenceChecksAllocateNothing: checking a valid reference
// builds no field paths (they are built for violations only).
func TestValidReferenceChecksAllocateNothing(t *testing.T) {
	ref := &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "web", Name: "api", Uid: "8c5d", FieldPath: "spec", ResourceVersion: "12"}
	called := false
	bad := func(string, string, ...any) { called = true }
	if n := testing.AllocsPerRun(100, func() { checkRef(ref, "regarding", true, bad) }); n != 0 {
		t.Errorf("checking a valid reference allocated %.0f times, want 0", n)
	}
	if called {
		t.Error("a valid reference had a violation")
	}
}

// TestNormalizeGivesAnEventWithoutATenantACopyOfTheDefault: every field of
// the request's tenant (each set here through reflection, so that a field
// added to Tenant is set too) is the event's, and the event's is its own.
func TestNormalizeGivesAnEventWithoutATenantACopyOfTheDefault(t *testing.T) {
	def := &eventgatev1.Tenant{}
	fields := def.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		if f.Kind() != protoreflect.StringKind || f.Cardinality() == protoreflect.Repeated {
			t.Fatalf("Tenant.%s is not a string: copy it in Normalize", f.Name())
		}
		def.ProtoReflect().Set(f, protoreflect.ValueOfString("v"))
	}
	def.Type, def.Name = "project", "acme"
	ev := &eventgatev1.Event{Reason: "ScaledUp", Regarding: &eventgatev1.ObjectReference{Kind: "Deployment", Name: "api", Namespace: "web"}}
	if vs := (Normalizer{Limits: DefaultLimits()}).Normalize(ev, def, "", "events[0]"); len(vs) > 0 {
		t.Fatal(vs)
	}
	if !proto.Equal(ev.Tenant, def) || ev.Tenant == def {
		t.Fatalf("event's tenant %v (same message: %v), want a copy of %v", ev.Tenant, ev.Tenant == def, def)
	}
}
