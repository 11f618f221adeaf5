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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// TestRESTBodyStrict: a body with data after its JSON value is refused (and
// nothing of it stored); a body without Content-Length over the limit is 413,
// like one with; a body that does not decode names the field.
func TestRESTBodyStrict(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.MaxRequestBytes = 64 << 10 })
	good := `{"events":[{"reason":"Strict","regarding":{"kind":"Pod","namespace":"ns","name":"s"}}]}`
	for _, body := range []string{good + " trailing", good + good, good + "{}", good + "]"} {
		code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest {
			t.Errorf("body %q: %d %v, want 400", body, code, m)
		}
	}
	if code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader("\n "+good+" \n\t")); code != http.StatusOK {
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
	if err := watchErr(t, tg.client, &eventgatev1.StreamWatchRequest{ResourceVersion: "2"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a refused body was stored: watch from 2 answered %v", err)
	}

	// Over the limit without a Content-Length (chunked): 413, as with one.
	big := `{"events":[{"reason":"Big","regarding":{"kind":"Pod","name":"b"},"note":"` + strings.Repeat("a", 70<<10) + `"}]}`
	code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", io.MultiReader(strings.NewReader(big)))
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
		code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(body))
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["details"]), "field:"+field) {
			t.Errorf("body %s: %d %v, want 400 naming %s", body, code, m, field)
		}
	}
}

// TestRESTMethodNotAllowed: a known path asked with a method it does not
// take is 405 with Allow (grpc-gateway said 501; the fixed handlers 404).
func TestRESTMethodNotAllowed(t *testing.T) {
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
		code, allow, m := restDo(t, c.method, tg.httpURL+c.path, "application/json", strings.NewReader("{}"))
		if code != http.StatusMethodNotAllowed || allow != c.allow || m["message"] == nil {
			t.Errorf("%s %s: %d Allow %q %v, want 405 Allow %q with a Status body", c.method, c.path, code, allow, m, c.allow)
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if code, _, _ := restDo(t, http.MethodGet, tg.httpURL+p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s: %d", p, code)
		}
	}
}

// TestRESTRefusesInvalidUTF8URL: a path or query parameter that is not UTF-8 once
// unescaped is 400 naming it, not a 500 from marshaling the gRPC request.
func TestRESTRefusesInvalidUTF8URL(t *testing.T) {
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
		code, _, m := restDo(t, http.MethodGet, tg.httpURL+u, "", nil)
		if code != http.StatusBadRequest || m["message"] == nil {
			t.Errorf("GET %s: %d %v, want 400 with a message", u, code, m)
		}
	}
	// The Kubernetes API's paths, tenant-scoped ones included, answer with
	// a Kubernetes Status.
	for _, u := range []string{"/api/v1/namespaces/%ff/events", "/tenants/project/p1/api/v1/namespaces/%ff/events"} {
		if code, _, m := restDo(t, http.MethodGet, tg.httpURL+u, "", nil); code != http.StatusBadRequest || m["kind"] != "Status" || m["reason"] != "BadRequest" {
			t.Errorf("GET %s: %d %v, want a 400 Kubernetes Status", u, code, m)
		}
	}
	// Valid non-ASCII is fine.
	if code, _, m := restDo(t, http.MethodGet, tg.httpURL+"/v1/events?reason=%C3%BC", "", nil); code != http.StatusOK {
		t.Errorf("GET with ü: %d %v", code, m)
	}
}

// TestRESTRefusesUnknownQueryParameter: a query parameter that is no field of the
// request (Query's "reason" on the watch, which spells it "reasons"; a
// misspelled selector field; "pageSize" on the timeline, which says "limit")
// is 400 naming it. It was ignored: the watch streamed every event, the query
// answered every event, as if no filter had been asked for.
func TestRESTRefusesUnknownQueryParameter(t *testing.T) {
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
		wantBadParam(t, tg, c.path, c.field)
	}
	// Both spellings of a field, path parameters, map entries and nested
	// fields are parameters; one field set twice is refused.
	for _, p := range []string{
		"/v1/events?page_size=5&regarding.kind=Pod&labels[app]=web&tenant.type=global",
		"/v1/events?pageSize=5&reporting_controller=x&field_selector=type%3DNormal",
		"/v1/events?since=2026-01-01T00:00:00Z&order=ORDER_OLDEST_FIRST",
		"/v1/analytics/top?dimension=reason&limit=3",
	} {
		if code, _, m := restDo(t, http.MethodGet, tg.httpURL+p, "", nil); code != http.StatusOK {
			t.Errorf("GET %s: %d %v, want 200", p, code, m)
		}
	}
	if code, _, m := restDo(t, http.MethodGet, tg.httpURL+"/v1/events?pageSize=5&page_size=6", "", nil); code != http.StatusBadRequest || len(violationFields(m)) != 1 {
		t.Errorf("pageSize and page_size: %d %v, want 400 naming one", code, m)
	}
}

// TestRESTQueryParameterDecodeErrorNamesIt: a query parameter whose value does
// not decode (a page size that is no number, an unknown order, a time or
// duration in another format) is 400 with a google.rpc.BadRequest naming the
// parameter, as every other invalid request; the body had only a message.
func TestRESTQueryParameterDecodeErrorNamesIt(t *testing.T) {
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
		wantBadParam(t, tg, c.path, c.field)
	}
}

// wantBadParam checks that GET path is a 400 naming field.
func wantBadParam(t *testing.T, tg *testGateway, path, field string) {
	t.Helper()
	code, _, m := restDo(t, http.MethodGet, tg.httpURL+path, "", nil)
	if f := violationFields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != field {
		t.Errorf("GET %s: %d %v, want 400 naming %s", path, code, m, field)
	}
}

// TestRESTEmitQueryParametersTakenOrRefused: POST /v1/events takes its request in the
// body, and its query parameters were ignored: an event posted to
// ?tenant.type=project&tenant.name=shop was stored in the global tenant and
// answered 200, and ?bogus=1 was 200 too. The README: a REST query
// parameter must name a field of the request; any other is a 400 naming
// it. A parameter naming a field is either taken (the event is the shop
// project's) or refused naming it, never dropped.
func TestRESTEmitQueryParametersTakenOrRefused(t *testing.T) {
	tg := startGateway(t, nil)
	body := `{"events":[{"reason":"Scoped","regarding":{"kind":"Pod","namespace":"ns","name":"q"}}]}`
	code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events?bogus=1", "application/json", strings.NewReader(body))
	if f := violationFields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != "bogus" {
		t.Errorf("POST /v1/events?bogus=1: %d %v, want 400 naming bogus", code, m)
	}
	body = strings.Replace(body, "Scoped", "Tenanted", 1)
	code, _, m = restDo(t, http.MethodPost, tg.httpURL+"/v1/events?tenant.type=project&tenant.name=shop", "application/json", strings.NewReader(body))
	switch code {
	case http.StatusBadRequest:
		if f := violationFields(m); len(f) == 0 || !strings.HasPrefix(f[0], "tenant") {
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

// TestRESTBodyWrongTypeNamesField: a JSON body whose value has the wrong
// JSON type for a message, list, map or timestamp field is a 400 whose
// google.rpc.BadRequest names that field, as a wrong scalar does
// (events[0].reason: 5 names "reason"). These named "body" (events: {},
// regarding: "Pod", labels: [], eventTime: 5, tenant: "shop", events: [5]),
// or "value" for a label value that is not a string.
func TestRESTBodyWrongTypeNamesField(t *testing.T) {
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
		code, _, m := restDo(t, http.MethodPost, tg.httpURL+"/v1/events", "application/json", strings.NewReader(c.body))
		f := violationFields(m)
		if code != http.StatusBadRequest || len(f) != 1 || !namesField(f[0], c.field) {
			t.Errorf("body %s: %d fields %v, want 400 naming %s", c.body, code, f, c.field)
		}
	}
}

// namesField reports whether a reported field path ends in field, map
// keys and list indexes aside (events[0].labels[app] names labels).
func namesField(got, field string) bool {
	segs := strings.Split(fieldIndex.ReplaceAllString(got, ""), ".")
	return segs[len(segs)-1] == field
}

var fieldIndex = regexp.MustCompile(`\[[^\]]*\]`)

// TestRESTFormPostToGetPathNotAllowed: POST to a GET-only path is 405 with Allow
// whatever the body; with a form body (curl -d a=b) the form's keys were
// taken for query parameters and the answer was a 400 about them.
func TestRESTFormPostToGetPathNotAllowed(t *testing.T) {
	tg := startGateway(t, nil)
	for _, p := range []string{"/v1/events/abc", "/v1/namespaces/ns/events/abc", "/v1/analytics/top"} {
		code, allow, m := restDo(t, http.MethodPost, tg.httpURL+p, "application/x-www-form-urlencoded", strings.NewReader("a=b"))
		if code != http.StatusMethodNotAllowed || allow != "GET, HEAD" {
			t.Errorf("POST %s with a form body: %d Allow %q %v, want 405 Allow GET, HEAD", p, code, allow, m)
		}
	}
}

// TestRESTHeadOnGetPaths: HEAD on a path that serves GET answers as GET
// would, without a body (RFC 9110 9.1: general-purpose servers MUST support
// GET and HEAD; /healthz does). The REST API's GET paths answered 405 with
// "Allow: GET", and /v1/events "Allow: GET, POST".
func TestRESTHeadOnGetPaths(t *testing.T) {
	tg := startGateway(t, nil)
	for _, p := range []string{"/v1/events?pageSize=1", "/v1/events/abc", "/v1/namespaces/ns/events/x", "/v1/analytics/top?dimension=reason"} {
		get, _, _ := restDo(t, http.MethodGet, tg.httpURL+p, "", nil)
		head, allow, _ := restDo(t, http.MethodHead, tg.httpURL+p, "", nil)
		if head != get {
			t.Errorf("HEAD %s: %d (Allow %q), GET: %d; want the same status", p, head, allow, get)
		}
	}
}
