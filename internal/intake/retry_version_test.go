package intake

import (
	"context"
	"testing"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Subjects do not name the object, so the last version on a retried event's
// subject is often another object's: the retry still answers the version its
// first try was stored at.
func TestRetryAnswersItsStoredVersionAfterOtherObjectsOnItsSubject(t *testing.T) {
	ns := startServer(t)
	r := startReplica(t, ns, "", "a", testConfig())

	first := occurrence(1, "first object")
	r1 := submitOne(t, r.in, context.Background(), first, "id-1")
	if r1.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r1.ResourceVersion == 0 {
		t.Fatalf("first try: %+v, want CREATED with a resourceVersion", r1)
	}
	other := occurrence(2, "another object, same tenant, kind and namespace")
	r2 := submitOne(t, r.in, context.Background(), other, "id-2")
	if r2.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r2.ResourceVersion <= r1.ResourceVersion {
		t.Fatalf("other object: %+v, want CREATED after %d", r2, r1.ResourceVersion)
	}

	retry := submitOne(t, r.in, context.Background(), first, "id-1")
	if retry.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || retry.UID != first.Uid || retry.ResourceVersion != r1.ResourceVersion {
		t.Errorf("retry: %+v, want DUPLICATE of %s at %d", retry, first.Uid, r1.ResourceVersion)
	}
	if v := readEvents(t, r.js)[first.Uid]; len(v) != 1 || v[0].seq != r1.ResourceVersion {
		t.Errorf("first object stored as %+v, want once at %d", v, r1.ResourceVersion)
	}
}

func TestRecentCreatedForgetsTheOldestFirst(t *testing.T) {
	r := newRecentCreated(2)
	r.put("a", 1)
	r.put("b", 2)
	r.put("a", 3) // an update keeps its slot
	r.put("c", 4) // evicts the oldest slot: a's
	if _, ok := r.get("a"); ok {
		t.Error("a is still remembered after two newer ids filled the ring")
	}
	for id, want := range map[string]uint64{"b": 2, "c": 4} {
		if got, ok := r.get(id); !ok || got != want {
			t.Errorf("get(%q) = %d, %v; want %d", id, got, ok, want)
		}
	}
}
