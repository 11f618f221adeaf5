package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// qa2Fields are the fields of a REST error body's google.rpc.BadRequest.
func qa2Fields(m map[string]any) []string {
	var fields []string
	details, _ := m["details"].([]any)
	for _, d := range details {
		dm, _ := d.(map[string]any)
		vs, _ := dm["fieldViolations"].([]any)
		for _, v := range vs {
			vm, _ := v.(map[string]any)
			if f, ok := vm["field"].(string); ok {
				fields = append(fields, f)
			}
		}
	}
	return fields
}

// TestQA2RESTUnknownQueryParameter: a query parameter that is no field of the
// request (Query's "reason" on the watch, which spells it "reasons"; a
// misspelled selector field; "pageSize" on the timeline, which says "limit")
// is 400 naming it. It was ignored: the watch streamed every event, the query
// answered every event, as if no filter had been asked for.
func TestQA2RESTUnknownQueryParameter(t *testing.T) {
	tg := startGateway(t, nil)
	emit(t, tg.client, testEvent("Seen", "Pod", "ns", "p"))
	for _, c := range []struct{ path, field string }{
		{"/v1/events?kind=Pod", "kind"},
		{"/v1/events?regarding.kind=Pod&regarding.bogus=1", "regarding.bogus"},
		{"/v1/events?labels.app=web", "labels.app"},
		{"/v1/events?reason.x=1", "reason.x"},
		{"/v1/events?tenant[x]=1", "tenant[x]"},
		{"/v1/events/abc?reason=A", "reason"},
		{"/v1/namespaces/ns/events/abc?bogus=1", "bogus"},
		{"/v1/events:watch?resourceVersion=0&reason=Nope", "reason"},
		{"/v1/events:watch?resourceVersion=0&type=Nope", "type"},
		{"/v1/analytics/timeline?involving.kind=Pod&involving.name=p&pageSize=-3", "pageSize"},
		{"/v1/analytics/top?dimension=reason&dimensions=type", "dimensions"},
	} {
		qa2WantBadParam(t, tg, c.path, c.field)
	}
	// Both spellings of a field, path parameters, map entries and nested
	// fields are parameters; one field set twice is refused.
	for _, p := range []string{
		"/v1/events?page_size=5&regarding.kind=Pod&labels[app]=web&tenant.type=global",
		"/v1/events?pageSize=5&reporting_controller=x&field_selector=type%3DNormal",
		"/v1/events?since=2026-01-01T00:00:00Z&order=ORDER_OLDEST_FIRST",
		"/v1/analytics/top?dimension=reason&limit=3",
	} {
		if code, _, m := qaDo(t, http.MethodGet, tg.httpURL+p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s: %d %v, want 200", p, code, m)
		}
	}
	if code, _, m := qaDo(t, http.MethodGet, tg.httpURL+"/v1/events?pageSize=5&page_size=6", "", nil); code != http.StatusBadRequest || len(qa2Fields(m)) != 1 {
		t.Errorf("pageSize and page_size: %d %v, want 400 naming one", code, m)
	}
}

// TestQA2RESTQueryParameterDecodeError: a query parameter whose value does
// not decode (a page size that is no number, an unknown order, a time or
// duration in another format) is 400 with a google.rpc.BadRequest naming the
// parameter, as every other invalid request; the body had only a message.
func TestQA2RESTQueryParameterDecodeError(t *testing.T) {
	tg := startGateway(t, nil)
	for _, c := range []struct{ path, field string }{
		{"/v1/events?pageSize=abc", "pageSize"},
		{"/v1/events?page_size=99999999999", "page_size"},
		{"/v1/events?order=BOGUS", "order"},
		{"/v1/events?since=yesterday", "since"},
		{"/v1/events?regarding=Pod", "regarding"},
		{"/v1/events/abc?tenant.type=a&tenant.type=b", "tenant.type"},
		{"/v1/events:watch?bookmarkInterval=1", "bookmarkInterval"},
		{"/v1/events:watch?apiGroup=a&apiGroup=b", "apiGroup"},
		{"/v1/analytics/histogram?bucket=5", "bucket"},
		{"/v1/analytics/top?dimension=reason&limit=x", "limit"},
	} {
		qa2WantBadParam(t, tg, c.path, c.field)
	}
}

// TestQA2QueryFilterFieldNamed: a query filter the store cannot take (a
// label with an empty key, more values in one filter than a query may
// bind) is InvalidArgument naming the request's field, on Query and on
// analytics alike; it named "query" (and the store's labels[0], not the
// request's labels map).
func TestQA2QueryFilterFieldNamed(t *testing.T) {
	tg := startGateway(t, nil)
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprint("r", i)
	}
	for field, req := range map[string]*eventgatev1.QueryRequest{
		"labels":            {Labels: map[string]string{"": "x"}},
		"reason":            {Reason: many},
		"reportingInstance": {ReportingInstance: many},
		"labels, app":       {Labels: map[string]string{"app": "web", "": "y"}},
	} {
		_, err := tg.client.Query(context.Background(), req)
		want := strings.Split(field, ",")[0]
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != want {
			t.Errorf("query %s: fields %v, want %s", field, f, want)
		}
	}
	for path, field := range map[string]string{
		"/v1/events?labels[]=x":                               "labels",
		"/v1/analytics/top?dimension=reason&labels[]=x":       "labels",
		"/v1/analytics/timeline?involving.uid=u&labels[]=x":   "labels",
		"/v1/events?reason=" + strings.Join(many, "&reason="): "reason",
	} {
		code, _, m := qaDo(t, http.MethodGet, tg.httpURL+path, "", nil)
		if f := qa2Fields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != field {
			t.Errorf("GET %.80s: %d %v, want 400 naming %s", path, code, m, field)
		}
	}
	// At the bound, the query runs.
	if _, err := tg.client.Query(context.Background(), &eventgatev1.QueryRequest{Reason: many[:1000]}); err != nil {
		t.Fatalf("1000 reasons: %v", err)
	}
	// No field is over its bound but the filter as a whole is: the store
	// refuses it as "query", saying so once.
	_, err := tg.client.Query(context.Background(), &eventgatev1.QueryRequest{Reason: many[:600], Action: many[:600]})
	if f := fieldViolations(t, err); len(f) != 1 || f[0] != "query" {
		t.Errorf("600 reasons and 600 actions: fields %v, want query", f)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "1200 values") || strings.Count(msg, "invalid query") != 1 {
		t.Errorf("600 reasons and 600 actions: message %q, want the count, and \"invalid query\" once", msg)
	}
}

// qa2WantBadParam checks that GET path is a 400 naming field.
func qa2WantBadParam(t *testing.T, tg *testGateway, path, field string) {
	t.Helper()
	code, _, m := qaDo(t, http.MethodGet, tg.httpURL+path, "", nil)
	if f := qa2Fields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != field {
		t.Errorf("GET %s: %d %v, want 400 naming %s", path, code, m, field)
	}
}
