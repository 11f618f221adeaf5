package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

func TestEmitWatchRoundTripGRPC(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := watchEstablished(t, ctx, tg.client, &eventgatev1.StreamWatchRequest{})
	ev := testEvent("ScaledUp", "Deployment", "default", "nginx")
	ev.Labels = map[string]string{"app": "nginx"}
	ev.Metadata = map[string]string{"revision": "42"}
	res := emit(t, tg.client, ev)
	if len(res) != 1 || res[0].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || res[0].Uid == "" || res[0].ResourceVersion != "1" {
		t.Fatalf("unexpected result %v", res)
	}
	got := recvN(t, w, 1)[0]
	if got.Type != "ADDED" {
		t.Fatalf("type %q, want ADDED", got.Type)
	}
	want := testEvent("ScaledUp", "Deployment", "default", "nginx")
	want.Labels, want.Metadata = ev.Labels, ev.Metadata
	want.Uid, want.Name, want.ResourceVersion = res[0].Uid, res[0].Name, "1"
	want.Namespace, want.Type = "default", "Normal"
	want.Tenant = &eventgatev1.Tenant{Type: "global"}
	want.EventTime = got.Object.EventTime
	if diff := cmp.Diff(want, got.Object, protocmp.Transform()); diff != "" {
		t.Fatalf("watched event (-want +got):\n%s", diff)
	}
	if got.Object.EventTime.AsTime().Nanosecond()%1000 != 0 {
		t.Fatalf("eventTime %v is not microsecond precision", got.Object.EventTime.AsTime())
	}
	if !strings.HasPrefix(got.Object.Name, "nginx.") {
		t.Fatalf("name %q does not start with the regarding name", got.Object.Name)
	}
	// The live feed timed the event from the stream to its watchers.
	if n := metricValue(t, tg.httpURL, "eventgate_watch_feed_lag_seconds_count"); n < 1 {
		t.Errorf("eventgate_watch_feed_lag_seconds_count = %v after a delivered event, want at least 1", n)
	}
	// And the watch timed it from the stream to its send.
	if n := metricValue(t, tg.httpURL, "eventgate_watch_send_lag_seconds_count"); n != 1 {
		t.Errorf("eventgate_watch_send_lag_seconds_count = %v after one delivered event, want 1", n)
	}
}

// A gRPC watcher gets a series as MODIFIED, with its count and the
// resourceVersion its emit answered: the watch sends each event as the
// stream stores it, with its resourceVersion added.
func TestAWatchSeesASeriesAsModifiedWithItsVersion(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := watchEstablished(t, ctx, tg.client, &eventgatev1.StreamWatchRequest{})
	first := emit(t, tg.client, testEvent("BackOff", "Pod", "default", "web-0"))[0]
	second := emit(t, tg.client, testEvent("BackOff", "Pod", "default", "web-0"))[0]
	if second.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED {
		t.Fatalf("second occurrence: %v, want a series started", second.Outcome)
	}
	got := recvN(t, w, 2)
	if got[0].Type != "ADDED" || got[0].Object.GetSeries() != nil || got[0].Object.GetResourceVersion() != first.ResourceVersion {
		t.Fatalf("first: %s %v, want ADDED at %s without a series", got[0].Type, got[0].Object, first.ResourceVersion)
	}
	if got[1].Type != "MODIFIED" || got[1].Object.GetSeries().GetCount() != 2 || got[1].Object.GetUid() != first.Uid ||
		got[1].Object.GetResourceVersion() != second.ResourceVersion {
		t.Fatalf("second: %s %v, want MODIFIED, %s at %s with a series of 2", got[1].Type, got[1].Object, first.Uid, second.ResourceVersion)
	}
}

// metricValue scrapes /metrics for the value of an unlabelled sample.
func metricValue(t testing.TB, baseURL, name string) float64 {
	t.Helper()
	code, body := restGet(t, baseURL+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("%s not in /metrics", name)
	return 0
}

func TestEmitWatchRoundTripREST(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, lines := ndjsonWatch(t, ctx, tg.httpURL+"/v1/events:watch?tenant.type=project&tenant.name=shop&kind=Pod")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("watch answered %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// One event for another tenant, one for another kind, then the match.
	for _, body := range []string{
		`{"tenant":{"type":"project","name":"other"},"events":[{"reason":"BackOff","regarding":{"kind":"Pod","name":"a"}}]}`,
		`{"tenant":{"type":"project","name":"shop"},"events":[{"reason":"BackOff","regarding":{"kind":"Node","name":"a"}}]}`,
		`{"tenant":{"type":"project","name":"shop"},"events":[{"reason":"BackOff","note":"restarting","type":"Warning","regarding":{"apiVersion":"v1","kind":"Pod","namespace":"web","name":"api-0"}}]}`,
	} {
		if code, m := postJSON(t, tg.httpURL+"/v1/events", body); code != http.StatusOK {
			t.Fatalf("POST /v1/events = %d %v", code, m)
		}
	}
	line := <-lines
	obj, _ := line["object"].(map[string]any)
	if line["type"] != "ADDED" || obj["reason"] != "BackOff" || obj["namespace"] != "web" || obj["resourceVersion"] != "3" || obj["type"] != "Warning" {
		t.Fatalf("unexpected watch line %v", line)
	}
	if reg := obj["regarding"].(map[string]any); reg["name"] != "api-0" || reg["apiVersion"] != "v1" {
		t.Fatalf("regarding %v", reg)
	}
	if _, ok := obj["eventTime"].(string); !ok {
		t.Fatalf("eventTime missing in %v", obj)
	}
}

// TestResumeNoGapNoDuplicate resumes watches from every earlier
// resourceVersion while events keep arriving, and checks each sees exactly
// the events after its resourceVersion, in order.
func TestResumeNoGapNoDuplicate(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.WatchBuffer = 64 })
	const first, more = 60, 60
	for i := 0; i < first; i += 10 {
		var evs []*eventgatev1.Event
		for j := i; j < i+10; j++ {
			evs = append(evs, testEvent("Tick", "Job", "ns", fmt.Sprintf("job-%d", j)))
		}
		emit(t, tg.client, evs...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keep emitting while the watches catch up
		defer wg.Done()
		for i := 0; i < more; i++ {
			if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{testEvent("Tick", "Job", "ns", fmt.Sprintf("late-%d", i))}}); err != nil {
				t.Errorf("Emit: %v", err)
				return
			}
		}
	}()
	for _, from := range []int{0, 1, 17, 33, 59, 60} {
		t.Run(fmt.Sprintf("after-%d", from), func(t *testing.T) {
			w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: strconv.Itoa(from)})
			if err != nil {
				t.Fatal(err)
			}
			got := recvN(t, w, first+more-from)
			for i, r := range got {
				if want := strconv.Itoa(from + 1 + i); r.Object.ResourceVersion != want {
					t.Fatalf("event %d has resourceVersion %s, want %s", i, r.Object.ResourceVersion, want)
				}
			}
		})
	}
	wg.Wait()
}

func TestWatchExpiredResourceVersion(t *testing.T) {
	tg := startGateway(t, nil)
	for i := 0; i < 10; i++ {
		emit(t, tg.client, testEvent("Tick", "Job", "ns", fmt.Sprintf("j%d", i)))
	}
	// Retention removes the oldest events, as max-age or max-bytes would.
	s, err := tg.js.Stream(context.Background(), "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(context.Background(), jetstream.WithPurgeKeep(3)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rv := range []string{"0", "5", "6"} {
		w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: rv})
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) != codes.OutOfRange {
			t.Fatalf("watch from %s: %v, want OutOfRange", rv, err)
		}
		resp, err := http.Get(tg.httpURL + "/v1/events:watch?resourceVersion=" + rv)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGone {
			t.Fatalf("REST watch from %s: %d, want 410", rv, resp.StatusCode)
		}
	}
	// The oldest kept is 8: resuming after 7 works and sees 8, 9, 10.
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "7"})
	if err != nil {
		t.Fatal(err)
	}
	got := recvN(t, w, 3)
	if got[0].Object.ResourceVersion != "8" || got[2].Object.ResourceVersion != "10" {
		t.Fatalf("resume after 7 got %s..%s", got[0].Object.ResourceVersion, got[2].Object.ResourceVersion)
	}
	// A resourceVersion beyond the stream is refused.
	w, err = tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "1000"})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("watch from the future: %v, want InvalidArgument", err)
	}
}

func fieldViolations(t *testing.T, err error) []string {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.FieldViolations {
				fields = append(fields, v.Field)
			}
		}
	}
	return fields
}

func TestEmitValidation(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxBatch = 5 })
	long := strings.Repeat("x", 129)
	valid := func(mut func(*eventgatev1.Event)) *eventgatev1.Event {
		ev := testEvent("Ok", "Pod", "ns", "p")
		mut(ev)
		return ev
	}
	tests := []struct {
		name  string
		req   *eventgatev1.EmitRequest
		field string
	}{
		{"no events", &eventgatev1.EmitRequest{}, "events"},
		{"too many events", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(*eventgatev1.Event) {}), valid(func(*eventgatev1.Event) {}), valid(func(*eventgatev1.Event) {}), valid(func(*eventgatev1.Event) {}), valid(func(*eventgatev1.Event) {}), valid(func(*eventgatev1.Event) {})}}, "events"},
		{"no regarding", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Regarding = nil })}}, "events[0].regarding"},
		{"no kind", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Regarding.Kind = "" })}}, "events[0].regarding.kind"},
		{"no name", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Regarding.Name = "" })}}, "events[0].regarding.name"},
		{"no reason", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Reason = "" })}}, "events[0].reason"},
		{"long reason", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Reason = long })}}, "events[0].reason"},
		{"long action", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Action = long })}}, "events[0].action"},
		{"long controller", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.ReportingController = long })}}, "events[0].reportingController"},
		{"long instance", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.ReportingInstance = long })}}, "events[0].reportingInstance"},
		{"long note", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Note = strings.Repeat("n", 1025) })}}, "events[0].note"},
		{"bad type", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Type = "Error" })}}, "events[0].type"},
		{"bad tenant type", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Tenant = &eventgatev1.Tenant{Type: "team", Name: "a"} })}}, "events[0].tenant.type"},
		{"project without name", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Tenant = &eventgatev1.Tenant{Type: "project"} })}}, "events[0].tenant.name"},
		{"global with name", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Tenant = &eventgatev1.Tenant{Type: "global", Name: "x"} })}}, "events[0].tenant.name"},
		{"control chars", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Regarding.Name = "a\nb" })}}, "events[0].regarding.name"},
		{"bad series state", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(e *eventgatev1.Event) { e.Series = &eventgatev1.EventSeries{Count: 2, State: "Maybe"} })}}, "events[0].series.state"},
		{"second event bad", &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{valid(func(*eventgatev1.Event) {}), valid(func(e *eventgatev1.Event) { e.Regarding.Kind = "" })}}, "events[1].regarding.kind"},
		{"bad default tenant", &eventgatev1.EmitRequest{Tenant: &eventgatev1.Tenant{Type: "*"}, Events: []*eventgatev1.Event{valid(func(*eventgatev1.Event) {})}}, "tenant.type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tg.client.Emit(context.Background(), tt.req)
			fields := fieldViolations(t, err)
			found := false
			for _, f := range fields {
				found = found || f == tt.field
			}
			if !found {
				t.Fatalf("violations %v do not name %s", fields, tt.field)
			}
		})
	}
	// Nothing of a refused batch was stored: the first good event of the
	// "second event bad" batch is not in the stream.
	s, _ := tg.js.Stream(context.Background(), "EVENTS")
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("stream holds %d messages after refused batches, want 0", info.State.Msgs)
	}
}

func TestRESTBadInput(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxRequestBytes = 64 << 10 })
	tests := []struct {
		name, body string
		code       int
		field      string
	}{
		{"not json", `{"events":[`, 400, ""},
		{"unknown field", `{"events":[{"reason":"A","regarding":{"kind":"Pod","name":"p"},"bogus":1}]}`, 400, ""},
		{"wrong type", `{"events":[{"reason":5}]}`, 400, ""},
		{"missing kind", `{"events":[{"reason":"A","regarding":{"name":"p"}}]}`, 400, "events[0].regarding.kind"},
		{"too large", `{"events":[{"note":"` + strings.Repeat("a", 70<<10) + `"}]}`, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, m := postJSON(t, tg.httpURL+"/v1/events", tt.body)
			if code != tt.code {
				t.Fatalf("status %d, want %d: %v", code, tt.code, m)
			}
			if msg, _ := m["message"].(string); msg == "" {
				t.Fatalf("error body without message: %v", m)
			}
			if tt.field != "" && !strings.Contains(fmt.Sprint(m["details"]), tt.field) {
				t.Fatalf("error body %v does not name %s", m, tt.field)
			}
		})
	}
	for _, q := range []string{"resourceVersion=-1", "resourceVersion=abc", "bookmarkInterval=1ms", "tenant.type=team"} {
		resp, err := http.Get(tg.httpURL + "/v1/events:watch?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("watch ?%s answered %d, want 400", q, resp.StatusCode)
		}
	}
}

func TestOversizedGRPCRequest(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxRequestBytes = 32 << 10 })
	ev := testEvent("Big", "Pod", "ns", "p")
	ev.Annotations = map[string]string{}
	for i := 0; i < 20; i++ {
		ev.Annotations[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 4000)
	}
	_, err := tg.client.Emit(context.Background(), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized Emit: %v, want ResourceExhausted", err)
	}
	emit(t, tg.client, testEvent("Small", "Pod", "ns", "p")) // the gateway still serves
}

func TestIdempotentRetry(t *testing.T) {
	tg := startGateway(t, nil)
	req := func() *eventgatev1.EmitRequest {
		return &eventgatev1.EmitRequest{IdempotencyKey: "batch-7", Events: []*eventgatev1.Event{testEvent("A", "Pod", "ns", "a"), testEvent("B", "Pod", "ns", "b")}}
	}
	first, err := tg.client.Emit(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	again, err := tg.client.Emit(context.Background(), req())
	if err != nil {
		t.Fatal(err)
	}
	for i := range first.Results {
		f, a := first.Results[i], again.Results[i]
		// A duplicate names the stored event and its resourceVersion.
		if f.Uid != a.Uid || a.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE ||
			a.ResourceVersion != f.ResourceVersion || a.Name != f.Name {
			t.Fatalf("retry result %v, first %v", a, f)
		}
	}
	// A caller-supplied uid is idempotent too, and scoped to its tenant.
	ev := func(tenant string) *eventgatev1.Event {
		e := testEvent("C", "Pod", "ns", "c")
		e.Uid = "caller-uid-1"
		e.Tenant = &eventgatev1.Tenant{Type: "project", Name: tenant}
		return e
	}
	a := emit(t, tg.client, ev("a"))[0]
	b := emit(t, tg.client, ev("a"))[0]
	c := emit(t, tg.client, ev("b"))[0]
	if b.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE || b.Uid != a.Uid || b.ResourceVersion != a.ResourceVersion || b.Name != a.Name {
		t.Fatalf("uid retry %v, first %v", b, a)
	}
	if c.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED {
		t.Fatalf("same uid in another tenant was %v", c.Outcome)
	}
	s, _ := tg.js.Stream(context.Background(), "EVENTS")
	info, _ := s.Info(context.Background())
	if info.State.Msgs != 4 {
		t.Fatalf("stream holds %d events, want 4", info.State.Msgs)
	}
}

// TestSlowWatcherIsolation: a watcher that stops reading is ended with the
// resourceVersion to resume from, while a reading watcher gets everything.
func TestSlowWatcherIsolation(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.WatchBuffer = 256 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := watchEstablished(t, ctx, tg.client, &eventgatev1.StreamWatchRequest{})
	fast := watchEstablished(t, ctx, tg.client, &eventgatev1.StreamWatchRequest{})
	const total, batch = 3000, 100
	note := strings.Repeat("x", 1000) // fill the slow client's flow-control window quickly
	// The emitter is paced by the fast watcher: it never lags more than one
	// batch, which its buffer holds; the slow one never reads.
	for i := 0; i < total; i += batch {
		var evs []*eventgatev1.Event
		for j := i; j < i+batch; j++ {
			e := testEvent("Tick", "Job", "ns", fmt.Sprintf("j%d", j))
			e.Note = note
			evs = append(evs, e)
		}
		emit(t, tg.client, evs...)
		got := recvN(t, fast, batch)
		if want := strconv.Itoa(i + batch); got[batch-1].Object.ResourceVersion != want {
			t.Fatalf("fast watcher at %s, want %s", got[batch-1].Object.ResourceVersion, want)
		}
	}
	// The slow watcher now reads: it finds what it had been sent, then the error.
	var last uint64
	for {
		r, err := slow.Recv()
		if err != nil {
			st := status.Convert(err)
			if st.Code() != codes.ResourceExhausted {
				t.Fatalf("slow watcher ended with %v, want ResourceExhausted", err)
			}
			var resume string
			for _, d := range st.Details() {
				if ei, ok := d.(*errdetails.ErrorInfo); ok {
					resume = ei.Metadata["resourceVersion"]
				}
			}
			if resume != strconv.FormatUint(last, 10) || !strings.Contains(st.Message(), resume) {
				t.Fatalf("resume from %q (message %q), but the last event received was %d", resume, st.Message(), last)
			}
			break
		}
		last, _ = strconv.ParseUint(r.Object.ResourceVersion, 10, 64)
	}
	if last >= total {
		t.Fatalf("slow watcher received all %d events; it was never slow", last)
	}
	// Resuming from there delivers the rest, exactly.
	rest, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: strconv.FormatUint(last, 10)})
	if err != nil {
		t.Fatal(err)
	}
	got := recvN(t, rest, total-int(last))
	if got[0].Object.ResourceVersion != strconv.FormatUint(last+1, 10) || got[len(got)-1].Object.ResourceVersion != strconv.Itoa(total) {
		t.Fatalf("resume got %s..%s", got[0].Object.ResourceVersion, got[len(got)-1].Object.ResourceVersion)
	}
}

func TestWatchFilters(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type watch struct {
		req  *eventgatev1.StreamWatchRequest
		want []string // reasons expected, in order
	}
	group := func(s string) *string { return &s }
	watches := []watch{
		{&eventgatev1.StreamWatchRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "a.b"}}, []string{"R1", "R2", "R3"}},
		{&eventgatev1.StreamWatchRequest{Kind: "Deployment"}, []string{"R1", "R4"}},
		{&eventgatev1.StreamWatchRequest{ApiGroup: group("apps")}, []string{"R1"}},
		{&eventgatev1.StreamWatchRequest{ApiGroup: group("core")}, []string{"R2", "R3", "R5", "R6"}},
		{&eventgatev1.StreamWatchRequest{ApiGroup: group("apps"), Kind: "Deployment", Namespace: "prod"}, []string{"R1"}},
		{&eventgatev1.StreamWatchRequest{ApiGroup: group("core"), Kind: "Node", Name: "ip-10-0-0-1.ec2.internal"}, []string{"R5"}},
		{&eventgatev1.StreamWatchRequest{Name: "*"}, []string{"R6"}},
		{&eventgatev1.StreamWatchRequest{Reasons: []string{"R2", "R3"}, Types: []string{"Warning"}}, []string{"R3"}},
		{&eventgatev1.StreamWatchRequest{ReportingControllers: []string{"other"}}, []string{"R4"}},
		{&eventgatev1.StreamWatchRequest{Tenant: &eventgatev1.Tenant{Type: "project"}}, []string{"R1", "R2", "R3", "R4"}},
		{&eventgatev1.StreamWatchRequest{Tenant: &eventgatev1.Tenant{Type: "global", Name: "_"}}, []string{"R5", "R6"}},
	}
	streams := make([]grpc.ServerStreamingClient[eventgatev1.StreamWatchResponse], len(watches))
	for i, w := range watches {
		s := watchEstablished(t, ctx, tg.client, w.req)
		streams[i] = s
	}
	ab := &eventgatev1.Tenant{Type: "project", Name: "a.b"}
	mk := func(reason string, tenant *eventgatev1.Tenant, apiVersion, kind, ns, name, typ, ctrl string) *eventgatev1.Event {
		return &eventgatev1.Event{Reason: reason, Tenant: tenant, Type: typ, ReportingController: ctrl,
			Regarding: &eventgatev1.ObjectReference{ApiVersion: apiVersion, Kind: kind, Namespace: ns, Name: name}}
	}
	emit(t, tg.client,
		mk("R1", ab, "apps/v1", "Deployment", "prod", "web", "", "c"),
		mk("R2", ab, "v1", "Pod", "prod", "web-0", "", "c"),
		mk("R3", ab, "v1", "Pod", "prod", "web-1", "Warning", "c"),
		mk("R4", &eventgatev1.Tenant{Type: "project", Name: "a_b"}, "extensions/v1", "Deployment", "dev", "x", "", "other"),
		mk("R5", nil, "v1", "Node", "", "ip-10-0-0-1.ec2.internal", "", "c"),
		mk("R6", nil, "v1", "Node", "", "*", "", "c"),
	)
	// A sentinel every watch would see if it saw too much: close the streams
	// after the wanted count and check the next event is not a leak by
	// emitting a final marker only the catch-all sees.
	for i, w := range watches {
		got := recvN(t, streams[i], len(w.want))
		// Events of different objects may be stored in any order (each
		// series key has its own intake partition); compare them as sets.
		var reasons []string
		for _, r := range got {
			reasons = append(reasons, r.Object.Reason)
		}
		slices.Sort(reasons)
		if diff := cmp.Diff(w.want, reasons); diff != "" {
			t.Errorf("watch %d (%v): (-want +got)\n%s", i, w.req, diff)
		}
	}
	// Nothing else is queued for any of them: a bookmark watch shows the
	// position has moved past every event without more deliveries.
	for i := range watches {
		streams[i].CloseSend()
	}
	// The same filters on a watch resumed from the start: the replay of the
	// stored events selects the same ones.
	for i, w := range watches {
		req := proto.Clone(w.req).(*eventgatev1.StreamWatchRequest)
		req.ResourceVersion = "0"
		got := recvN(t, watchEstablished(t, ctx, tg.client, req), len(w.want))
		var reasons []string
		for _, r := range got {
			reasons = append(reasons, r.Object.Reason)
		}
		slices.Sort(reasons)
		if diff := cmp.Diff(w.want, reasons); diff != "" {
			t.Errorf("resumed watch %d (%v): (-want +got)\n%s", i, req, diff)
		}
	}
}

func TestBookmarks(t *testing.T) {
	tg := startGateway(t, nil)
	emit(t, tg.client, testEvent("A", "Pod", "ns", "a"), testEvent("B", "Pod", "ns", "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{Kind: "Node", BookmarkInterval: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if r.Type != "BOOKMARK" || r.Object.ResourceVersion != "2" {
		t.Fatalf("got %v, want a BOOKMARK at 2", r)
	}
}

func TestEmitStream(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := tg.client.EmitStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const batches = 50
	go func() {
		for b := 0; b < batches; b++ {
			req := &eventgatev1.EmitStreamRequest{BatchId: strconv.Itoa(b)}
			for i := 0; i < 20; i++ {
				req.Events = append(req.Events, testEvent("Tick", "Job", "ns", fmt.Sprintf("b%d-%d", b, i)))
			}
			if b == 7 {
				req.Events[3].Regarding.Kind = "" // a bad batch does not end the stream
			}
			if err := s.Send(req); err != nil {
				t.Errorf("Send: %v", err)
				return
			}
		}
		s.CloseSend()
	}()
	var stored int
	for b := 0; b < batches; b++ {
		ack, err := s.Recv()
		if err != nil {
			t.Fatalf("Recv ack %d: %v", b, err)
		}
		if ack.BatchId != strconv.Itoa(b) {
			t.Fatalf("ack %d for batch %s: acks out of order", b, ack.BatchId)
		}
		if b == 7 {
			if ack.Error == nil || ack.Error.Code != "InvalidArgument" || len(ack.Error.FieldViolations) != 1 || ack.Error.FieldViolations[0].Field != "events[3].regarding.kind" {
				t.Fatalf("bad batch ack %v", ack)
			}
			continue
		}
		if ack.Error != nil || len(ack.Results) != 20 {
			t.Fatalf("ack %d: %v", b, ack)
		}
		stored += len(ack.Results)
	}
	if _, err := s.Recv(); err == nil {
		t.Fatal("stream did not end after the last ack")
	}
	st, _ := tg.js.Stream(context.Background(), "EVENTS")
	info, _ := st.Info(context.Background())
	if int(info.State.Msgs) != stored || stored != (batches-1)*20 {
		t.Fatalf("stream holds %d, acked %d", info.State.Msgs, stored)
	}
}

// TestTraceContextFlowsToWatchers: the span of a watcher's delivery belongs
// to the trace of the Emit that stored the event, through JetStream headers.
func TestTraceContextFlowsToWatchers(t *testing.T) {
	delivered := make(chan sdktrace.ReadOnlySpan, 16)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(endNotifier{name: "eventgate.watch.deliver", ch: delivered}))
	tg := startGateway(t, nil, WithTracerProvider(tp))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := watchEstablished(t, ctx, tg.client, &eventgatev1.StreamWatchRequest{})
	// The caller starts a trace and sends it in traceparent.
	tctx, span := tp.Tracer("test").Start(context.Background(), "client")
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(tctx, carrier)
	span.End()
	md := metadata.New(map[string]string{"traceparent": carrier["traceparent"]})
	if _, err := tg.client.Emit(metadata.NewOutgoingContext(ctx, md), &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{testEvent("T", "Pod", "ns", "p")}}); err != nil {
		t.Fatal(err)
	}
	recvN(t, w, 1)
	select {
	case d := <-delivered:
		if d.SpanContext().TraceID() != span.SpanContext().TraceID() {
			t.Fatalf("delivery span in trace %s, want the emitter's trace %s", d.SpanContext().TraceID(), span.SpanContext().TraceID())
		}
	case <-ctx.Done():
		t.Fatal("no delivery span ended")
	}
}

// TestWithoutAnExporterOnlyACallersTraceIsCarried: a gateway with no trace
// exporter records no spans, so an event emitted without a traceparent is
// stored without one, and a caller's trace still reaches the events stream.
func TestWithoutAnExporterOnlyACallersTraceIsCarried(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const callerTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	emit := func(ctx context.Context, name string) string {
		t.Helper()
		resp, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{testEvent("T", "Pod", "ns", name)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResults()[0].GetResourceVersion()
	}
	untraced := emit(ctx, "untraced")
	traced := emit(metadata.NewOutgoingContext(ctx, metadata.Pairs("traceparent", callerTrace)), "traced")
	st, err := tg.js.Stream(ctx, tg.cfg.NATS.Stream)
	if err != nil {
		t.Fatal(err)
	}
	header := func(rv string) string {
		t.Helper()
		seq, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			t.Fatalf("resourceVersion %q: %v", rv, err)
		}
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		return propagation.HeaderCarrier(m.Header).Get("traceparent")
	}
	if tp := header(untraced); tp != "" {
		t.Errorf("untraced event stored with traceparent %q", tp)
	}
	if tp := header(traced); !strings.HasPrefix(tp, "00-0af7651916cd43dd8448eb211c80319c-") {
		t.Errorf("traced event stored with traceparent %q, want the caller's trace", tp)
	}
}

// endNotifier sends every ended span with the given name to ch.
type endNotifier struct {
	name string
	ch   chan sdktrace.ReadOnlySpan
}

func (e endNotifier) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endNotifier) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == e.name {
		e.ch <- s
	}
}
func (e endNotifier) Shutdown(context.Context) error   { return nil }
func (e endNotifier) ForceFlush(context.Context) error { return nil }

func TestHealthReadyMetricsReflection(t *testing.T) {
	tg := startGateway(t, nil)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/openapi.json": 200} {
		resp, err := http.Get(tg.httpURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	hc := grpc_health_v1.NewHealthClient(tg.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{Service: "eventgate.v1.EventService"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		r, err := hs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == grpc_health_v1.HealthCheckResponse_SERVING {
			break
		}
	}
}

// TestDataSurvivesRestart: a gateway restarted on the same data directory
// keeps its events and continues their resourceVersions.
func TestDataSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run := func(f func(tg *testGateway)) {
		tg := startGatewayIn(t, dir)
		defer tg.stop()
		f(tg)
	}
	run(func(tg *testGateway) {
		emit(t, tg.client, testEvent("A", "Pod", "ns", "a"), testEvent("B", "Pod", "ns", "b"))
	})
	run(func(tg *testGateway) {
		w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		got := recvN(t, w, 2)
		if r := []string{got[0].Object.Reason, got[1].Object.Reason}; !slices.Contains(r, "A") || !slices.Contains(r, "B") {
			t.Fatalf("after restart the stream holds %v", r)
		}
		if r := emit(t, tg.client, testEvent("C", "Pod", "ns", "c")); r[0].ResourceVersion != "3" {
			t.Fatalf("resourceVersion after restart %s, want 3", r[0].ResourceVersion)
		}
	})
}

// rawCodec sends bytes as they are, to put undecodable requests on the wire.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*(v.(*[]byte)))}, nil
}
func (rawCodec) Unmarshal(d mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = d.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestUndecodableRequests: bytes that are not a valid message (bad wire
// format, invalid UTF-8 in a string) are InvalidArgument, not Internal, on
// unary and streaming calls, and the gateway keeps serving.
func TestUndecodableRequests(t *testing.T) {
	tg := startGateway(t, nil)
	var ev []byte
	ev = protowire.AppendTag(ev, 9, protowire.BytesType) // reason
	ev = protowire.AppendBytes(ev, []byte{0xff, 0xfe})
	badEmit := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), ev)
	badWatch := protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), []byte{0xff, 0xfe}) // name
	garbage := []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}
	call := func(method string, req []byte, stream bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out []byte
		if !stream {
			return tg.conn.Invoke(ctx, method, &req, &out, grpc.ForceCodecV2(rawCodec{}))
		}
		s, err := tg.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return err
		}
		if err := s.SendMsg(&req); err != nil {
			return err
		}
		_ = s.CloseSend()
		return s.RecvMsg(&out)
	}
	for _, c := range []struct {
		name, method string
		req          []byte
		stream       bool
	}{
		{"emit invalid utf-8", "/eventgate.v1.EventService/Emit", badEmit, false},
		{"emit bad wire format", "/eventgate.v1.EventService/Emit", garbage, false},
		{"watch invalid utf-8", "/eventgate.v1.EventService/StreamWatch", badWatch, true},
		{"watch bad wire format", "/eventgate.v1.EventService/StreamWatch", garbage, true},
	} {
		if err := call(c.method, c.req, c.stream); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", c.name, err)
		}
	}
	emit(t, tg.client, testEvent("Still", "Pod", "ns", "p"))
}

// TestEmitClientCounted: an emitter that counts its own series (a Kubernetes
// client) has every event stored as sent; the same isomorphic events from
// an emitter that does not are folded into a series by the server.
func TestEmitClientCounted(t *testing.T) {
	tg := startGateway(t, nil)
	ctx := context.Background()
	twice := func(counted bool, name string) []*eventgatev1.EmitResult {
		t.Helper()
		var out []*eventgatev1.EmitResult
		for range 2 {
			resp, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{
				Events:        []*eventgatev1.Event{testEvent("BackOff", "Deployment", "web", name)},
				ClientCounted: counted,
			})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, resp.Results...)
		}
		return out
	}
	folded := twice(false, "folded")
	if folded[1].Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || folded[1].SeriesUid != folded[0].Uid {
		t.Fatalf("without clientCounted the second occurrence should start a series on the first: %v", folded)
	}
	counted := twice(true, "counted")
	for _, r := range counted {
		if r.Outcome != eventgatev1.EmitOutcome_EMIT_OUTCOME_CREATED || r.ResourceVersion == "" {
			t.Fatalf("clientCounted events should each be created: %v", counted)
		}
	}
	if counted[0].Uid == counted[1].Uid {
		t.Fatalf("clientCounted events share a uid: %v", counted)
	}
	waitIngested(t, tg, maxRV(counted))
	for _, r := range counted {
		got, err := tg.client.Get(ctx, &eventgatev1.GetRequest{Uid: r.Uid})
		if err != nil {
			t.Fatal(err)
		}
		if got.Event.Series != nil {
			t.Errorf("event %s stored with series %v, want as sent", r.Uid, got.Event.Series)
		}
	}
}
