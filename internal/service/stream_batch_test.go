package service

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestStreamBatchDecodesIntoTheEventsAndMapsOfTheBatchBefore: a batch
// decoded into a StreamBatch takes the events and the label and
// annotation maps the batch before left, and holds nothing else of it.
func TestStreamBatchDecodesIntoTheEventsAndMapsOfTheBatchBefore(t *testing.T) {
	first := &eventgatev1.EmitStreamRequest{BatchId: "1", IdempotencyKey: "k", ClientCounted: true,
		Tenant: &eventgatev1.Tenant{Type: "project", Name: "a"},
		Events: []*eventgatev1.Event{
			{Name: "e1", Note: "first", Reason: "BackOff", Labels: map[string]string{"app": "x", "tier": "web"},
				Annotations: map[string]string{"owner": "team-a"}, Series: &eventgatev1.EventSeries{Count: 3},
				Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "p1"}, Related: &eventgatev1.ObjectReference{Kind: "Node", Name: "n1"},
				EventTime: timestamppb.Now()},
			{Name: "e2", Labels: map[string]string{"app": "y"}},
		}}
	second := &eventgatev1.EmitStreamRequest{BatchId: "2",
		Events: []*eventgatev1.Event{
			{Name: "f1", Reason: "Pulled", Labels: map[string]string{"team": "b"}},
		}}
	r := NewStreamBatch()
	decode := func(m *eventgatev1.EmitStreamRequest) {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.UnmarshalVT(b); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(r.EmitStreamRequest, m) {
			t.Fatalf("decoded %v, want %v", r.EmitStreamRequest, m)
		}
	}
	decode(first)
	ev, labels, annotations := r.Events[0], r.Events[0].Labels, r.Events[0].Annotations
	decode(second)
	if r.Events[0] != ev {
		t.Error("the batch's first event is a new one, not the batch before's")
	}
	if reflect.ValueOf(r.Events[0].Labels).UnsafePointer() != reflect.ValueOf(labels).UnsafePointer() {
		t.Error("the event's labels are a new map, not the one the batch before left")
	}
	if len(r.Events[0].Annotations) != 0 || reflect.ValueOf(r.Events[0].Annotations).UnsafePointer() != reflect.ValueOf(annotations).UnsafePointer() {
		t.Errorf("annotations %v: want the batch before's map, emptied", r.Events[0].Annotations)
	}
	if r.Events[0].Series != nil || r.Events[0].Regarding != nil || r.Events[0].Related != nil || r.Events[0].EventTime != nil || r.Tenant != nil {
		t.Errorf("fields of the batch before show through: %v", r.EmitStreamRequest)
	}
	// And back to the larger batch: the second event is new again.
	decode(first)
}

// TestStreamBatchLetsLargeMapsGo: a map that grew past maxReusedMapSize is
// not kept for the next event.
func TestStreamBatchLetsLargeMapsGo(t *testing.T) {
	big := map[string]string{}
	for i := range maxReusedMapSize + 1 {
		big[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	r := NewStreamBatch()
	for _, m := range []*eventgatev1.EmitStreamRequest{
		{Events: []*eventgatev1.Event{{Name: "e", Labels: big}}},
		{Events: []*eventgatev1.Event{{Name: "f"}}},
	} {
		b, _ := proto.Marshal(m)
		if err := r.UnmarshalVT(b); err != nil {
			t.Fatal(err)
		}
	}
	if r.Events[0].Labels != nil {
		t.Errorf("a map of %d labels was kept for the next event", len(big))
	}
}
