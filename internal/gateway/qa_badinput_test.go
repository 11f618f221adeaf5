package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
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
	"github.com/eventgate/eventgate/internal/config"
)

// qaDo sends method url with body (none when empty) and returns the status
// code, the Allow header and the decoded JSON body (nil when not JSON).
func qaDo(t *testing.T, method, url, contentType string, body io.Reader) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	// Bounded: a watch that opens instead of failing must not hang the test.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, resp.Header.Get("Allow"), m
}

// qaWatchErr starts a gRPC watch and returns the error it ends with first.
func qaWatchErr(t *testing.T, c eventgatev1.EventServiceClient, req *eventgatev1.StreamWatchRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := c.StreamWatch(ctx, req)
	if err != nil {
		return err
	}
	_, err = w.Recv()
	return err
}

// TestQAWatchResourceVersionMaxUint64: the largest uint64 resourceVersion is
// ahead of the stream (InvalidArgument, 400), not "too old" (OutOfRange, 410)
// because after+1 wrapped to 0.
func TestQAWatchResourceVersionMaxUint64(t *testing.T) {
	tg := startGateway(t, nil)
	emit(t, tg.client, testEvent("A", "Pod", "ns", "a"))
	for _, rv := range []string{strconv.FormatUint(math.MaxUint64, 10), strconv.FormatUint(math.MaxUint64-1, 10)} {
		err := qaWatchErr(t, tg.client, &eventgatev1.StreamWatchRequest{ResourceVersion: rv})
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != "resourceVersion" {
			t.Errorf("watch from %s: fields %v, want resourceVersion", rv, f)
		}
		code, _, m := qaDo(t, http.MethodGet, tg.httpURL+"/v1/events:watch?resourceVersion="+rv, "", nil)
		if code != http.StatusBadRequest {
			t.Errorf("REST watch from %s: %d %v, want 400", rv, code, m)
		}
	}
}

// TestQAEventTimeRange: a negative (before 1970) or absurd (year 1, year
// 9999) eventTime or series.lastObservedTime is refused naming the field;
// ClickHouse cannot keep them (its retention would drop such a row at once).
func TestQAEventTimeRange(t *testing.T) {
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

// TestQARESTBodyStrict: a body with data after its JSON value is refused (and
// nothing of it stored); a body without Content-Length over the limit is 413,
// like one with; a body that does not decode names the field.
func TestQARESTBodyStrict(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxRequestBytes = 64 << 10 })
	good := `{"events":[{"reason":"Strict","regarding":{"kind":"Pod","namespace":"ns","name":"s"}}]}`
	for _, body := range []string{good + " trailing", good + good, good + "{}", good + "]"} {
		code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest {
			t.Errorf("body %q: %d %v, want 400", body, code, m)
		}
	}
	if code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader("\n "+good+" \n\t")); code != http.StatusOK {
		t.Fatalf("body with surrounding whitespace: %d %v", code, m)
	}
	// Only the last emit was stored: the watch from 0 sees one event.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0", BookmarkInterval: nil})
	if err != nil {
		t.Fatal(err)
	}
	first := recvN(t, w, 1)
	if first[0].Object.ResourceVersion != "1" {
		t.Fatalf("first stored event at %s", first[0].Object.ResourceVersion)
	}
	if err := qaWatchErr(t, tg.client, &eventgatev1.StreamWatchRequest{ResourceVersion: "2"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a refused body was stored: watch from 2 answered %v", err)
	}

	// Over the limit without a Content-Length (chunked): 413, as with one.
	big := `{"events":[{"reason":"Big","regarding":{"kind":"Pod","name":"b"},"note":"` + strings.Repeat("a", 70<<10) + `"}]}`
	code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", io.MultiReader(strings.NewReader(big)))
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked oversized body: %d %v, want 413", code, m)
	}

	// Bodies that do not decode name the field in a BadRequest.
	for body, field := range map[string]string{
		`{"events":[{"reason":5,"regarding":{"kind":"Pod","name":"a"}}]}`:             "events[0].reason",
		`{"events":[{"reason":"x","bogus":1,"regarding":{"kind":"Pod","name":"a"}}]}`: "events[0].bogus",
		`{"events":[{"reason":"x","series":{"count":"abc"}}]}`:                        "events[0].series.count",
		`{"events":[`: "body",
	} {
		code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["details"]), "field:"+field) {
			t.Errorf("body %s: %d %v, want 400 naming %s", body, code, m, field)
		}
	}
}

// TestQARESTMethodNotAllowed: a known path asked with a method it does not
// take is 405 with Allow (grpc-gateway said 501; the fixed handlers 404).
func TestQARESTMethodNotAllowed(t *testing.T) {
	tg := startGateway(t, nil)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodPut, "/v1/events", "GET, HEAD, POST"},
		{http.MethodDelete, "/v1/events", "GET, HEAD, POST"},
		{http.MethodPatch, "/v1/events/abc", "GET, HEAD"},
		{http.MethodDelete, "/v1/events/abc", "GET, HEAD"},
		{http.MethodPost, "/v1/events:watch", "GET, HEAD"},
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
		{http.MethodPut, "/openapi.json", "GET, HEAD"},
	} {
		code, allow, m := qaDo(t, c.method, tg.httpURL+c.path, "application/json", strings.NewReader("{}"))
		if code != http.StatusMethodNotAllowed || allow != c.allow || m["message"] == nil {
			t.Errorf("%s %s: %d Allow %q %v, want 405 Allow %q with a Status body", c.method, c.path, code, allow, m, c.allow)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if code, _, _ := qaDo(t, http.MethodGet, tg.httpURL+p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s: %d", p, code)
		}
	}
}

// TestQARESTInvalidUTF8URL: a path or query parameter that is not UTF-8 once
// unescaped is 400 naming it, not a 500 from marshaling the gRPC request.
func TestQARESTInvalidUTF8URL(t *testing.T) {
	tg := startGateway(t, nil)
	for _, u := range []string{
		"/v1/events?reason=%ff",
		"/v1/events?fieldSelector=reason%3D%ff",
		"/v1/events/%ff",
		"/v1/events:watch?namespace=%ff",
		"/v1/events:watch?%ff=1",
		"/v1/analytics/top?dimension=reason&reason=%c3",
		"/api/v1/namespaces/%ff/events",
		"/apis/events.k8s.io/v1/events?fieldSelector=reason%3D%ff",
	} {
		code, _, m := qaDo(t, http.MethodGet, tg.httpURL+u, "", nil)
		if code != http.StatusBadRequest || m["message"] == nil {
			t.Errorf("GET %s: %d %v, want 400 with a message", u, code, m)
		}
	}
	// The Kubernetes API's paths, tenant-scoped ones included, answer with
	// a Kubernetes Status.
	for _, u := range []string{"/api/v1/namespaces/%ff/events", "/tenants/project/p1/api/v1/namespaces/%ff/events"} {
		if code, _, m := qaDo(t, http.MethodGet, tg.httpURL+u, "", nil); code != http.StatusBadRequest || m["kind"] != "Status" || m["reason"] != "BadRequest" {
			t.Errorf("GET %s: %d %v, want a 400 Kubernetes Status", u, code, m)
		}
	}
	// Valid non-ASCII is fine.
	if code, _, m := qaDo(t, http.MethodGet, tg.httpURL+"/v1/events?reason=%C3%BC", "", nil); code != http.StatusOK {
		t.Errorf("GET with ü: %d %v", code, m)
	}
}

// TestQAWatchFilterValidation: watch filter values no event can carry
// (control characters, over the field limits, too many values) are
// InvalidArgument naming the filter; wildcard characters are literal.
func TestQAWatchFilterValidation(t *testing.T) {
	tg := startGateway(t, nil)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprint("r", i)
	}
	for field, req := range map[string]*eventgatev1.StreamWatchRequest{
		"namespace":  {Namespace: "a\x00b"},
		"name":       {Name: strings.Repeat("n", 254)},
		"kind":       {Kind: "Pod\n"},
		"reasons[1]": {Reasons: []string{"ok", "bad\x7f"}},
		"reasons":    {Reasons: many},
		"types[0]":   {Types: []string{strings.Repeat("t", 129)}},
	} {
		if f := fieldViolations(t, qaWatchErr(t, tg.client, req)); len(f) != 1 || f[0] != field {
			t.Errorf("watch %v: fields %v, want %s", req, f, field)
		}
	}
	if code, _, m := qaDo(t, http.MethodGet, tg.httpURL+"/v1/events:watch?namespace=%00", "", nil); code != http.StatusBadRequest {
		t.Errorf("REST watch namespace NUL: %d %v", code, m)
	}
	// "*" and ">" are literal names: a watch on them sees only such events.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Namespace: "*", Name: ">"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Header(); err != nil {
		t.Fatal(err)
	}
	emit(t, tg.client, testEvent("Other", "Pod", "ns", "x"), testEvent("Wild", "Pod", "*", ">"))
	if got := recvN(t, w, 1); got[0].Object.Reason != "Wild" {
		t.Fatalf("wildcard-named watch got %v", got[0].Object)
	}
}

// TestQAEmitStreamUndecodableBatch: a batch that does not decode (invalid
// UTF-8 in a string) gets an InvalidArgument error ack in its place and the
// stream goes on: the batches before and after it are stored and acked.
func TestQAEmitStreamUndecodableBatch(t *testing.T) {
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
	if code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", bytes.NewReader([]byte(`{"events":[{"reason":"After","regarding":{"kind":"Pod","name":"p"}}]}`))); code != http.StatusOK {
		t.Fatalf("REST emit after: %d %v", code, m)
	}
}

// TestQAUIDAndNamePathSegments: a caller's uid or name must be one REST path
// segment (Kubernetes' rule: no "/" or "%", not "." or ".."), or the event
// could never be read back with GET /v1/events/{uid}; a name derived from a
// regarding name with "/" replaces it. Other characters round-trip escaped.
func TestQAUIDAndNamePathSegments(t *testing.T) {
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
			if code, _, m = qaDo(t, http.MethodGet, tg.httpURL+p, "", nil); code == http.StatusOK {
				break
			}
		}
		if code != http.StatusOK || m["regarding"] == nil {
			t.Errorf("GET %s: %d %v", p, code, m)
		}
	}
}

// TestQAQueryAbsurdTimeRange: a query bound outside the times events may have
// answers as its meaning says (until year 1: nothing; since year 1 or until
// year 9999: no bound), not what ClickHouse made of a time it cannot hold
// (until=0001-01-01 matched every event).
func TestQAQueryAbsurdTimeRange(t *testing.T) {
	tg := startGateway(t, nil)
	r := emit(t, tg.client, testEvent("Range", "Pod", "ns", "r"))
	count := func(q string) int {
		t.Helper()
		code, _, m := qaDo(t, http.MethodGet, tg.httpURL+"/v1/events?"+q, "", nil)
		if code != http.StatusOK {
			t.Fatalf("query %s: %d %v", q, code, m)
		}
		evs, _ := m["events"].([]any)
		return len(evs)
	}
	// Wait until ClickHouse holds the event.
	for deadline := time.Now().Add(15 * time.Second); count("reason=Range") == 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("event %s never queryable", r[0].Uid)
		}
	}
	for q, want := range map[string]int{
		"until=0001-01-01T00:00:00Z":                            0,
		"until=1969-01-01T00:00:00Z":                            0,
		"since=9999-01-01T00:00:00Z":                            0,
		"since=0001-01-01T00:00:00Z":                            1,
		"until=9999-12-31T00:00:00Z":                            1,
		"since=0001-01-01T00:00:00Z&until=9999-12-31T00:00:00Z": 1,
	} {
		if got := count("reason=Range&" + q); got != want {
			t.Errorf("query %s: %d events, want %d", q, got, want)
		}
	}
}

// TestQAEmitStreamOversizedBatch: a batch over --max-request-bytes gets a
// ResourceExhausted error ack in its place and the stream goes on; grpc-go's
// own limit ended the stream, and the acks of the batches before it (stored)
// never reached the caller.
func TestQAEmitStreamOversizedBatch(t *testing.T) {
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
