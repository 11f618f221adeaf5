package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestEmitRefusesEventTimeOutOfRange: a negative (before 1970) or absurd (year 1, year
// 9999) eventTime or series.lastObservedTime is refused naming the field;
// ClickHouse cannot keep them (its retention would drop such a row at once).
func TestEmitRefusesEventTimeOutOfRange(t *testing.T) {
	tg := startGateway(t, nil)
	at := func(ts *timestamppb.Timestamp) *eventgatev1.Event {
		ev := testEvent("Time", "Pod", "ns", "t")
		ev.EventTime = ts
		return ev
	}
	for name, tc := range map[string]struct {
		ev    *eventgatev1.Event
		field string
	}{
		"negative":      {at(&timestamppb.Timestamp{Seconds: -1}), "events[0].eventTime"},
		"year 1":        {at(timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC))), "events[0].eventTime"},
		"year 9999":     {at(timestamppb.New(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))), "events[0].eventTime"},
		"nanos invalid": {at(&timestamppb.Timestamp{Seconds: 1, Nanos: 2e9}), "events[0].eventTime"},
		"beyond proto":  {at(&timestamppb.Timestamp{Seconds: math.MaxInt64}), "events[0].eventTime"},
		"series negative": {func() *eventgatev1.Event {
			e := testEvent("Time", "Pod", "ns", "t")
			e.Series = &eventgatev1.EventSeries{Count: 2, LastObservedTime: &timestamppb.Timestamp{Seconds: -86400}}
			return e
		}(), "events[0].series.lastObservedTime"},
	} {
		_, err := tg.client.Emit(context.Background(), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{tc.ev}})
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != tc.field {
			t.Errorf("%s: fields %v, want %s", name, f, tc.field)
		}
	}
	code, m := postJSON(t, tg.httpURL+"/v1/events", `{"events":[{"reason":"T","regarding":{"kind":"Pod","name":"t"},"eventTime":"1969-12-31T23:59:59Z"}]}`)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["details"]), "events[0].eventTime") {
		t.Errorf("REST 1969: %d %v, want 400 naming events[0].eventTime", code, m)
	}
	// Times in range are kept as sent (to the microsecond).
	ok := time.Date(2001, 2, 3, 4, 5, 6, 7008000, time.UTC)
	r := emit(t, tg.client, at(timestamppb.New(ok)))
	if r[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Fatalf("in-range time: %v", r[0])
	}
}

// TestEmitUIDAndNameArePathSegments: a caller's uid or name must be one REST path
// segment (Kubernetes' rule: no "/" or "%", not "." or ".."), or the event
// could never be read back with GET /v1/events/{uid}; a name derived from a
// regarding name with "/" replaces it. Other characters round-trip escaped.
func TestEmitUIDAndNameArePathSegments(t *testing.T) {
	tg := startGateway(t, nil)
	for field, ev := range map[string]*eventgatev1.Event{
		"events[0].uid":  {Uid: "a/b", Reason: "U", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "p"}},
		"events[0].name": {Name: "x%y", Reason: "U", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "p"}},
	} {
		_, err := tg.client.Emit(context.Background(), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}})
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != field {
			t.Errorf("fields %v, want %s", f, field)
		}
	}
	for _, uid := range []string{".", ".."} {
		_, err := tg.client.Emit(context.Background(), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{{Uid: uid, Reason: "U", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Name: "p"}}}})
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != "events[0].uid" {
			t.Errorf("uid %q: fields %v", uid, f)
		}
	}
	r := emit(t, tg.client,
		&eventgatev1.Event{Uid: "odd uid?#1", Reason: "U", Regarding: &eventgatev1.ObjectReference{Kind: "Bucket", Namespace: "ns", Name: "s3://bucket/key"}},
		&eventgatev1.Event{Reason: "U", Regarding: &eventgatev1.ObjectReference{Kind: "Bucket", Namespace: "ns", Name: "50%/off"}})
	if strings.ContainsAny(r[0].Name, "/%") || strings.ContainsAny(r[1].Name, "/%") {
		t.Fatalf("derived names %q, %q hold a path separator", r[0].Name, r[1].Name)
	}
	for _, p := range []string{
		"/v1/events/" + url.PathEscape(r[0].Uid),
		"/v1/namespaces/ns/events/" + url.PathEscape(r[0].Name),
		"/v1/events/" + url.PathEscape(r[1].Uid),
	} {
		var code int
		var m map[string]any
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if code, _, m = restDo(t, http.MethodGet, tg.httpURL+p, "", nil); code == http.StatusOK {
				break
			}
		}
		if code != http.StatusOK || m["regarding"] == nil {
			t.Errorf("GET %s: %d %v", p, code, m)
		}
	}
}

// TestEmitStreamUndecodableBatchGetsErrorAck: a batch that does not decode (invalid
// UTF-8 in a string) gets an InvalidArgument error ack in its place and the
// stream goes on: the batches before and after it are stored and acked.
func TestEmitStreamUndecodableBatchGetsErrorAck(t *testing.T) {
	tg := startGateway(t, nil)
	batch := func(id string, reason []byte) []byte {
		var ev []byte
		ev = protowire.AppendTag(ev, 9, protowire.BytesType) // reason
		ev = protowire.AppendBytes(ev, reason)
		ref, _ := proto.Marshal(&eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"})
		ev = protowire.AppendTag(ev, 10, protowire.BytesType) // regarding
		ev = protowire.AppendBytes(ev, ref)
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType) // batch_id
		b = protowire.AppendString(b, id)
		b = protowire.AppendTag(b, 2, protowire.BytesType) // events
		return protowire.AppendBytes(b, ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := tg.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/eventgate.v1.EventService/EmitStream", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{batch("one", []byte("First")), batch("two", []byte{'B', 0xff, 0xfe}), batch("three", []byte("Third"))} {
		if err := s.SendMsg(&b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var acks []*eventgatev1.EmitStreamResponse
	for {
		var raw []byte
		if err := s.RecvMsg(&raw); err != nil {
			if err != io.EOF {
				t.Fatalf("stream ended with %v after %d acks", err, len(acks))
			}
			break
		}
		a := &eventgatev1.EmitStreamResponse{}
		if err := proto.Unmarshal(raw, a); err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	if len(acks) != 3 {
		t.Fatalf("%d acks, want 3: %v", len(acks), acks)
	}
	if acks[0].BatchId != "one" || len(acks[0].Results) != 1 || acks[2].BatchId != "three" || len(acks[2].Results) != 1 {
		t.Fatalf("good batches acked %v, %v", acks[0], acks[2])
	}
	if acks[1].Error.GetCode() != codes.InvalidArgument.String() {
		t.Fatalf("undecodable batch acked %v, want an InvalidArgument error", acks[1])
	}
	// The REST proxy and other callers are unaffected.
	if code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", bytes.NewReader([]byte(`{"events":[{"reason":"After","regarding":{"kind":"Pod","name":"p"}}]}`))); code != http.StatusOK {
		t.Fatalf("REST emit after: %d %v", code, m)
	}
}

// TestEmitStreamOversizedBatchGetsErrorAck: a batch over --max-request-bytes gets a
// ResourceExhausted error ack in its place and the stream goes on; grpc-go's
// own limit ended the stream, and the acks of the batches before it (stored)
// never reached the caller.
func TestEmitStreamOversizedBatchGetsErrorAck(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxRequestBytes = 32 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := tg.client.EmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := testEvent("Big", "Pod", "ns", "p")
	big.Labels = map[string]string{}
	for i := 0; i < 12; i++ {
		big.Labels[fmt.Sprint("key-", i)] = strings.Repeat("v", 4000)
	}
	for i, ev := range []*eventgatev1.Event{testEvent("One", "Pod", "ns", "p1"), big, testEvent("Three", "Pod", "ns", "p3")} {
		if err := s.Send(&eventgatev1.EmitStreamRequest{BatchId: fmt.Sprint("b", i), Events: []*eventgatev1.Event{ev}}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var acks []*eventgatev1.EmitStreamResponse
	for {
		r, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream ended with %v after acks %v", err, acks)
		}
		acks = append(acks, r)
	}
	if len(acks) != 3 || len(acks[0].Results) != 1 || len(acks[2].Results) != 1 || acks[1].Error.GetCode() != codes.ResourceExhausted.String() {
		t.Fatalf("acks %v: want b0 and b2 stored, b1 ResourceExhausted", acks)
	}
	// Unary calls over the limit are still refused, before decoding.
	if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{big}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized Emit: %v", err)
	}
	// Far beyond the limit grpc-go refuses it itself; the gateway still serves.
	huge := proto.Clone(big).(*eventgatev1.Event)
	for i := 12; i < 40; i++ {
		huge.Labels[fmt.Sprint("key-", i)] = strings.Repeat("v", 4000)
	}
	if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{huge}}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("huge Emit: %v", err)
	}
	emit(t, tg.client, testEvent("After", "Pod", "ns", "p"))
}
