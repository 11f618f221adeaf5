package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// qa3EmitStream sends batches on one EmitStream, closes it and returns the
// acks, in order.
func qa3EmitStream(t *testing.T, tg *testGateway, batches []*eventgatev1.EmitStreamRequest) []*eventgatev1.EmitStreamResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := tg.client.EmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := s.Send(b); err != nil {
			t.Fatalf("send %s: %v", b.BatchId, err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var acks []*eventgatev1.EmitStreamResponse
	for {
		a, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stream ended with %v after %d acks", err, len(acks))
		}
		acks = append(acks, a)
	}
	if len(acks) != len(batches) {
		t.Fatalf("%d acks for %d batches", len(acks), len(batches))
	}
	return acks
}

// TestQA3EmitStreamBatchOrderPerSeriesKey: isomorphic events sent one per
// batch on one EmitStream are folded in the order they were sent ("Order is
// kept per series key"): the first batch's event is the one stored
// (CREATED, its note kept), the second starts the series, the rest count.
// The batches were submitted concurrently, so a later batch was often
// stored first: its ack said CREATED and the first batch's SERIES_STARTED,
// and the stored event carried the last batch's note.
func TestQA3EmitStreamBatchOrderPerSeriesKey(t *testing.T) {
	tg := startGateway(t, nil)
	for round := 0; round < 3; round++ {
		name := fmt.Sprint("ord-", round)
		var batches []*eventgatev1.EmitStreamRequest
		for i := 0; i < 6; i++ {
			ev := testEvent("Ordered", "Pod", "ns", name)
			ev.Note = fmt.Sprint("occurrence ", i)
			batches = append(batches, &eventgatev1.EmitStreamRequest{BatchId: fmt.Sprint(i), Events: []*eventgatev1.Event{ev}})
		}
		acks := qa3EmitStream(t, tg, batches)
		var got []string
		for _, a := range acks {
			if a.Error != nil || len(a.Results) != 1 {
				t.Fatalf("round %d: ack %v", round, a)
			}
			got = append(got, strings.TrimPrefix(a.Results[0].Outcome.String(), "EMIT_OUTCOME_"))
		}
		want := "CREATED SERIES_STARTED SERIES_COUNTED SERIES_COUNTED SERIES_COUNTED SERIES_COUNTED"
		if strings.Join(got, " ") != want {
			t.Errorf("round %d: outcomes of batches 0..5 %v, want %s", round, got, want)
		}
		// The stored event is the first occurrence.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0", Kind: "Pod", Name: name})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		first := recvN(t, w, 1)[0]
		cancel()
		if first.Type != "ADDED" || first.Object.Note != "occurrence 0" {
			t.Errorf("round %d: first stored version is %s with note %q, want ADDED with %q", round, first.Type, first.Object.Note, "occurrence 0")
		}
	}
}

// TestQA3EmitStreamRetryInNextBatch: an event resent with its uid in the
// next batch of the same EmitStream (a retry before the first ack came) is
// stored once; the first batch's ack is CREATED and the retry's DUPLICATE
// with the stored event's name and resourceVersion (README, "Idempotent
// retries"). The first batch was often answered DUPLICATE, with neither a
// name nor a resourceVersion, and the retry CREATED.
func TestQA3EmitStreamRetryInNextBatch(t *testing.T) {
	tg := startGateway(t, nil)
	for round := 0; round < 3; round++ {
		ev := func() *eventgatev1.Event {
			e := testEvent("Retried", "Pod", "ns", fmt.Sprint("retry-", round))
			e.Uid = fmt.Sprint("retry-uid-", round)
			return e
		}
		acks := qa3EmitStream(t, tg, []*eventgatev1.EmitStreamRequest{
			{BatchId: "first", Events: []*eventgatev1.Event{ev()}},
			{BatchId: "retry", Events: []*eventgatev1.Event{ev()}},
		})
		f, r := acks[0].GetResults(), acks[1].GetResults()
		if len(f) != 1 || len(r) != 1 {
			t.Fatalf("round %d: acks %v", round, acks)
		}
		if f[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || f[0].ResourceVersion == "" {
			t.Errorf("round %d: first batch %v, want CREATED with a resourceVersion", round, f[0])
		}
		if r[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || r[0].Name == "" || r[0].ResourceVersion == "" {
			t.Errorf("round %d: retry %v, want DUPLICATE naming the stored event and its resourceVersion", round, r[0])
		} else if r[0].ResourceVersion != f[0].ResourceVersion || r[0].Name != f[0].Name {
			t.Errorf("round %d: retry %v names another event than the first %v", round, r[0], f[0])
		}
	}
}

// TestQA3RESTEmitQueryParameters: POST /v1/events takes its request in the
// body, and its query parameters were ignored: an event posted to
// ?tenant.type=project&tenant.name=shop was stored in the global tenant and
// answered 200, and ?bogus=1 was 200 too. The README: a REST query
// parameter must name a field of the request; any other is a 400 naming
// it. A parameter naming a field is either taken (the event is the shop
// project's) or refused naming it, never dropped.
func TestQA3RESTEmitQueryParameters(t *testing.T) {
	tg := startGateway(t, nil)
	body := `{"events":[{"reason":"Scoped","regarding":{"kind":"Pod","namespace":"ns","name":"q"}}]}`
	code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events?bogus=1", "application/json", strings.NewReader(body))
	if f := qa2Fields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != "bogus" {
		t.Errorf("POST /v1/events?bogus=1: %d %v, want 400 naming bogus", code, m)
	}
	body = strings.Replace(body, "Scoped", "Tenanted", 1)
	code, _, m = qaDo(t, http.MethodPost, tg.httpURL+"/v1/events?tenant.type=project&tenant.name=shop", "application/json", strings.NewReader(body))
	switch code {
	case http.StatusBadRequest:
		if f := qa2Fields(m); len(f) == 0 || !strings.HasPrefix(f[0], "tenant") {
			t.Errorf("POST /v1/events?tenant.type=project&tenant.name=shop: 400 %v, want it to name tenant.type", m)
		}
	case http.StatusOK:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0", Reasons: []string{"Tenanted"}})
		if err != nil {
			t.Fatal(err)
		}
		got := recvN(t, w, 1)[0].Object
		if got.GetTenant().GetType() != "project" || got.GetTenant().GetName() != "shop" {
			t.Errorf("POST /v1/events?tenant.type=project&tenant.name=shop stored the event in tenant %v, want project/shop (or a 400)", got.GetTenant())
		}
	default:
		t.Errorf("POST /v1/events?tenant.type=project&tenant.name=shop: %d %v", code, m)
	}
}

// TestQA3RESTBodyWrongTypeNamesField: a JSON body whose value has the wrong
// JSON type for a message, list, map or timestamp field is a 400 whose
// google.rpc.BadRequest names that field, as a wrong scalar does
// (events[0].reason: 5 names "reason"). These named "body" (events: {},
// regarding: "Pod", labels: [], eventTime: 5, tenant: "shop", events: [5]),
// or "value" for a label value that is not a string.
func TestQA3RESTBodyWrongTypeNamesField(t *testing.T) {
	tg := startGateway(t, nil)
	for _, c := range []struct{ body, field string }{
		{`{"events":{}}`, "events"},
		{`{"events":"x"}`, "events"},
		{`{"events":[5]}`, "events"},
		{`{"tenant":"shop","events":[]}`, "tenant"},
		{`{"events":[{"reason":"R","regarding":"Pod"}]}`, "regarding"},
		{`{"events":[{"reason":"R","labels":[],"regarding":{"kind":"Pod","name":"a"}}]}`, "labels"},
		{`{"events":[{"reason":"R","labels":{"app":1},"regarding":{"kind":"Pod","name":"a"}}]}`, "labels"},
		{`{"events":[{"reason":"R","eventTime":5,"regarding":{"kind":"Pod","name":"a"}}]}`, "eventTime"},
		{`{"events":[{"reason":"R","eventTime":"yesterday","regarding":{"kind":"Pod","name":"a"}}]}`, "eventTime"},
	} {
		code, _, m := qaDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(c.body))
		f := qa2Fields(m)
		if code != http.StatusBadRequest || len(f) != 1 || !qa3NamesField(f[0], c.field) {
			t.Errorf("body %s: %d fields %v, want 400 naming %s", c.body, code, f, c.field)
		}
	}
}

// qa3NamesField reports whether a reported field path ends in field, map
// keys and list indexes aside (events[0].labels[app] names labels).
func qa3NamesField(got, field string) bool {
	segs := strings.Split(qa3Index.ReplaceAllString(got, ""), ".")
	return segs[len(segs)-1] == field
}

var qa3Index = regexp.MustCompile(`\[[^\]]*\]`)

// TestQA3RESTFormPostNotAllowed: POST to a GET-only path is 405 with Allow
// whatever the body; with a form body (curl -d a=b) the form's keys were
// taken for query parameters and the answer was a 400 about them.
func TestQA3RESTFormPostNotAllowed(t *testing.T) {
	tg := startGateway(t, nil)
	for _, p := range []string{"/v1/events/abc", "/v1/namespaces/ns/events/abc", "/v1/analytics/top"} {
		code, allow, m := qaDo(t, http.MethodPost, tg.httpURL+p, "application/x-www-form-urlencoded", strings.NewReader("a=b"))
		if code != http.StatusMethodNotAllowed || allow != "GET, HEAD" {
			t.Errorf("POST %s with a form body: %d Allow %q %v, want 405 Allow GET, HEAD", p, code, allow, m)
		}
	}
}

// TestQA3RESTHeadOnGetPaths: HEAD on a path that serves GET answers as GET
// would, without a body (RFC 9110 9.1: general-purpose servers MUST support
// GET and HEAD; /healthz does). The REST API's GET paths answered 405 with
// "Allow: GET", and /v1/events "Allow: GET, POST".
func TestQA3RESTHeadOnGetPaths(t *testing.T) {
	tg := startGateway(t, nil)
	for _, p := range []string{"/v1/events?pageSize=1", "/v1/events/abc", "/v1/namespaces/ns/events/x", "/v1/analytics/top?dimension=reason"} {
		get, _, _ := qaDo(t, http.MethodGet, tg.httpURL+p, "", nil)
		head, allow, _ := qaDo(t, http.MethodHead, tg.httpURL+p, "", nil)
		if head != get {
			t.Errorf("HEAD %s: %d (Allow %q), GET: %d; want the same status", p, head, allow, get)
		}
	}
}

// TestQA3OpenAPIWatchLines: the OpenAPI document describes the lines GET
// /v1/events:watch sends. They are {"type":"ADDED","object":{…}} (README),
// but the document said each line is grpc-gateway's envelope
// {"result":{…},"error":{…}}: a client generated from it finds no result.
func TestQA3OpenAPIWatchLines(t *testing.T) {
	tg := startGateway(t, nil)
	code, _, doc := qaDo(t, http.MethodGet, tg.httpURL+"/openapi.json", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d", code)
	}
	paths, _ := doc["paths"].(map[string]any)
	watch, _ := paths["/v1/events:watch"].(map[string]any)
	get, _ := watch["get"].(map[string]any)
	responses, _ := get["responses"].(map[string]any)
	ok, _ := responses["200"].(map[string]any)
	schema, _ := ok["schema"].(map[string]any)
	if ref, _ := schema["$ref"].(string); ref == "#/definitions/v1StreamWatchResponse" {
		return
	}
	props, _ := schema["properties"].(map[string]any)
	if props["type"] == nil || props["object"] == nil {
		t.Errorf("the watch's 200 lines are documented as %v, want their own type and object", schema)
	}
	// The lines really are so.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	emit(t, tg.client, testEvent("Doc", "Pod", "ns", "d"))
	resp, lines := ndjsonWatch(t, ctx, tg.httpURL+"/v1/events:watch?resourceVersion=0")
	defer resp.Body.Close()
	if l := <-lines; l["type"] != "ADDED" || l["object"] == nil || l["result"] != nil {
		t.Fatalf("watch line %v", l)
	}
}
