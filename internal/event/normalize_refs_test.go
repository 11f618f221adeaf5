package event

import (
	"slices"
	"strings"
	"testing"

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
