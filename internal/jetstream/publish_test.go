package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
	"github.com/eventgate/eventgate/internal/natstest"
)

func testEvent(uid string) *eventgatev1.Event {
	return &eventgatev1.Event{
		Uid: uid, Name: "web." + uid, Namespace: "default", Reason: "ScaledUp", Type: event.TypeNormal,
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web"},
		Tenant:    &eventgatev1.Tenant{Type: event.TenantProject, Name: "p1"},
	}
}

// TestWriteMessageCarriesEveryHeader: a write's message is on its event's
// subject, with its id, write reason, series minutes and trace context,
// each in the one encoding the ingest reads.
func TestWriteMessageCarriesEveryHeader(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	ev := testEvent("u1")
	minutes := []wire.Minute{{Start: t0, Count: 2}, {Start: t0.Add(time.Minute), Count: 1}}
	m, err := Msg(wire.Write{Event: ev, ID: "project/p1/u1/2", Reason: "started", Minutes: minutes,
		Trace: trace.ContextWithRemoteSpanContext(context.Background(), sc)})
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != event.SubjectOf(ev) {
		t.Errorf("subject %q, want %q", m.Subject, event.SubjectOf(ev))
	}
	got, err := event.Unmarshal(m.Data)
	if err != nil || got.GetUid() != "u1" {
		t.Errorf("data decodes to %v, %v", got, err)
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "project/p1/u1/2" {
		t.Errorf("message id %q", id)
	}
	if r := m.Header.Get(wire.HeaderWriteReason); r != "started" {
		t.Errorf("write reason %q", r)
	}
	back, err := wire.ParseMinutes(m.Header.Get(wire.HeaderSeriesMinutes))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(minutes, back); diff != "" {
		t.Errorf("minutes (-written +read):\n%s", diff)
	}
	if tp := m.Header.Get("Traceparent"); tp != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Errorf("traceparent %q", tp)
	}

	bare, err := Msg(wire.Write{Event: ev})
	if err != nil {
		t.Fatal(err)
	}
	if len(bare.Header) != 0 {
		t.Errorf("a write without id, reason, minutes or trace has headers %v", bare.Header)
	}
}

// TestPublisherAcksInOrderAndDeduplicatesByID: Start's acknowledgements
// come in the order of the writes, and a write retried under its id is
// acknowledged as a duplicate of the stored one.
func TestPublisherAcksInOrderAndDeduplicatesByID(t *testing.T) {
	ns := natstest.StartServer(t)
	nc, js := natstest.Connect(t, ns.ClientURL())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}}); err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(js)
	ws := []wire.Write{{Event: testEvent("a"), ID: "a"}, {Event: testEvent("b"), ID: "b"}, {Event: testEvent("c")}}
	wait, err := p.Start(ws)
	if err != nil {
		t.Fatal(err)
	}
	acks, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []wire.Ack{{Sequence: 1}, {Sequence: 2}, {Sequence: 3}}; !cmp.Equal(acks, want) {
		t.Errorf("acks %v, want %v", acks, want)
	}
	wait, err = p.Start(ws[1:2])
	if err != nil {
		t.Fatal(err)
	}
	acks, err = wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []wire.Ack{{Sequence: 2, Duplicate: true}}; !cmp.Equal(acks, want) {
		t.Errorf("retried write: acks %v, want %v", acks, want)
	}
}
