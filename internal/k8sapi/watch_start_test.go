package k8sapi

import (
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A watch refused by a gateway that shuts down is answered 429 with
// Retry-After, as kube-apiserver answers while it shuts down, so that
// client-go watches again from the same resourceVersion instead of
// listing again; other refusals keep their usual Status.
func TestAWatchRefusedWhileShuttingDownIsRetriedNotRelisted(t *testing.T) {
	st := watchStartStatus(status.Error(codes.Unavailable, "watch feed stopped"), request{gv: eventsV1})
	if st.s.Code != http.StatusTooManyRequests || st.s.Details == nil || st.s.Details.RetryAfterSeconds != 1 {
		t.Fatalf("shutting down: %+v, want 429 with Retry-After 1", st.s)
	}
	if st := watchStartStatus(status.Error(codes.OutOfRange, "gone"), request{gv: eventsV1}); st.s.Code != http.StatusGone {
		t.Fatalf("too old a resourceVersion: %d, want 410", st.s.Code)
	}
	if st := watchStartStatus(status.Error(codes.PermissionDenied, "no"), request{gv: eventsV1}); st.s.Code != http.StatusForbidden {
		t.Fatalf("forbidden: %d, want 403", st.s.Code)
	}
}
