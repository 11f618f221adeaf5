package chtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Latencies records per-call latencies for a benchmark.
type Latencies []time.Duration

// Report reports l's p50 and p99 in milliseconds (and no ns/op).
func (l Latencies) Report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	q := func(p float64) float64 {
		i := int(p * float64(len(l)-1))
		return float64(l[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(0, "ns/op")
}

// RealisticEvent is a ~600-byte event of one of `tenants` tenants.
func RealisticEvent(i, tenants int, at time.Time) *eventgatev1.Event {
	obj := i % 10_000
	ns := fmt.Sprintf("ns-%d", obj%10)
	name := fmt.Sprintf("api-%d-7d4f8b9c5-x%04d", obj, i%7919)
	return &eventgatev1.Event{
		Uid:                 fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i*7919),
		Name:                name + fmt.Sprintf(".%016x", i),
		Namespace:           ns,
		EventTime:           timestamppb.New(at.Add(time.Duration(i) * time.Millisecond).Truncate(time.Microsecond)),
		Series:              &eventgatev1.EventSeries{Count: int32(i%5 + 1), LastObservedTime: timestamppb.New(at.Truncate(time.Microsecond)), State: "Ongoing"},
		ReportingController: "example.com/payment-operator", ReportingInstance: fmt.Sprintf("payment-operator-%d", i%20),
		Action: "Reconcile", Reason: fmt.Sprintf("Reason%d", i%50), Type: "Warning",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: name,
			Uid: fmt.Sprintf("%08x-0000-4000-8000-%012x", obj, obj), ResourceVersion: "123456"},
		Related: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name + "-pod"},
		Note: "Back-off restarting failed container payment in pod " + name + ": exit code 137 (OOMKilled); " +
			"memory limit 512Mi exceeded while processing the settlement batch, retrying in 40s",
		Tenant:      &eventgatev1.Tenant{Type: "project", Name: fmt.Sprintf("tenant-%d", i%tenants)},
		Labels:      map[string]string{"app": "payment", "tier": "backend", "team": fmt.Sprintf("team-%d", obj%30)},
		Annotations: map[string]string{"example.com/trace-id": fmt.Sprintf("%032x", i)},
		Metadata:    map[string]string{"revision": "v1.42.0"},
	}
}
