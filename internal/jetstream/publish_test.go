package jetstream

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

// TestReusedMessagesCarryOnlyTheirWritesHeaders: a write's message is
// taken back once acknowledged and reused for a later write; each stored
// message carries exactly its own write's subject, data and headers, none
// left from the write before it.
func TestReusedMessagesCarryOnlyTheirWritesHeaders(t *testing.T) {
	ns := natstest.StartServer(t)
	nc, js := natstest.Connect(t, ns.ClientURL())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	p := NewPublisher(js)
	var written []wire.Write
	for i := range 200 {
		ev := testEvent("u" + strconv.Itoa(i))
		ev.Tenant.Name = "p" + strconv.Itoa(i%3)
		w := wire.Write{Event: ev}
		// Every combination of headers, one write after another.
		if i%2 == 0 {
			w.ID = "id-" + strconv.Itoa(i)
		}
		if i%3 == 0 {
			w.Reason = "started"
		}
		if i%5 == 0 {
			w.Minutes = []wire.Minute{{Start: t0, Count: uint32(i)}}
		}
		if i%7 == 0 {
			w.Trace = trace.ContextWithRemoteSpanContext(context.Background(), sc)
		}
		wait, err := p.Start([]wire.Write{w})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wait(ctx); err != nil {
			t.Fatal(err)
		}
		written = append(written, w)
	}
	for i, w := range written {
		stored, err := s.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Msg(w)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Subject != want.Subject || !bytes.Equal(stored.Data, want.Data) {
			t.Errorf("write %d stored on %q with %d bytes, want %q with %d", i, stored.Subject, len(stored.Data), want.Subject, len(want.Data))
		}
		if diff := cmp.Diff(map[string][]string(want.Header), map[string][]string(stored.Header), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("write %d headers (-want +stored):\n%s", i, diff)
		}
	}
}
