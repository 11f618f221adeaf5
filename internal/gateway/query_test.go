package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// maxRV is the highest resourceVersion of a batch's results: events of
// different series keys may be stored in any order.
func maxRV(res []*eventgatev1.EmitResult) string {
	var m uint64
	for _, r := range res {
		if v, _ := strconv.ParseUint(r.ResourceVersion, 10, 64); v > m {
			m = v
		}
	}
	return strconv.FormatUint(m, 10)
}

// waitIngested waits until ClickHouse holds every event up to rv.
func waitIngested(t testing.TB, tg *testGateway, rv string) {
	t.Helper()
	want, _ := strconv.ParseUint(rv, 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		floor, err := tg.ingest.AckFloor(ctx)
		if err == nil && floor >= want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ClickHouse did not reach resourceVersion %s (at %d, %v)", rv, floor, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func reasons(evs []*eventgatev1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason+"/"+e.Tenant.GetName())
	}
	return out
}

func TestQueryAndGet(t *testing.T) {
	tg := startGateway(t, nil)
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	at := func(m int) *timestamppb.Timestamp { return timestamppb.New(base.Add(time.Duration(m) * time.Minute)) }
	a := &eventgatev1.Tenant{Type: "project", Name: "a"}
	b := &eventgatev1.Tenant{Type: "project", Name: "b"}
	pod := &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0"}
	evs := []*eventgatev1.Event{
		{Tenant: a, Reason: "BackOff", Type: "Warning", EventTime: at(1), Regarding: pod, ReportingController: "kubelet", Labels: map[string]string{"app": "api"}},
		{Tenant: a, Reason: "ScaledUp", EventTime: at(2), Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "web", Name: "api"}, Related: pod, ReportingController: "deployer", Action: "Scale"},
		{Tenant: b, Reason: "BackOff", EventTime: at(3), Regarding: pod, ReportingController: "kubelet"},
		{Reason: "NodeReady", EventTime: at(4), Regarding: &eventgatev1.ObjectReference{Kind: "Node", Name: "ip-10-0-0-1.ec2.internal"}, ReportingController: "kubelet"},
		{Tenant: a, Reason: "'; DROP TABLE events; --", EventTime: at(5), Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "x'y", Name: `a\b{c:String}`}},
	}
	res := emit(t, tg.client, evs...)
	waitIngested(t, tg, maxRV(res))
	ctx := context.Background()

	tests := []struct {
		name string
		req  *eventgatev1.QueryRequest
		want []string
	}{
		{"all newest first", &eventgatev1.QueryRequest{}, []string{"'; DROP TABLE events; --/a", "NodeReady/", "BackOff/b", "ScaledUp/a", "BackOff/a"}},
		{"oldest first", &eventgatev1.QueryRequest{Order: eventgatev1.Order_ORDER_OLDEST_FIRST, PageSize: 2}, []string{"BackOff/a", "ScaledUp/a"}},
		{"tenant", &eventgatev1.QueryRequest{Tenant: a, Reason: []string{"BackOff", "ScaledUp"}}, []string{"ScaledUp/a", "BackOff/a"}},
		{"every project", &eventgatev1.QueryRequest{Tenant: &eventgatev1.Tenant{Type: "project"}, Reason: []string{"BackOff"}}, []string{"BackOff/b", "BackOff/a"}},
		{"global", &eventgatev1.QueryRequest{Tenant: &eventgatev1.Tenant{Type: "global"}}, []string{"NodeReady/"}},
		{"reason set", &eventgatev1.QueryRequest{Reason: []string{"BackOff", "NodeReady"}}, []string{"NodeReady/", "BackOff/b", "BackOff/a"}},
		{"regarding", &eventgatev1.QueryRequest{Regarding: &eventgatev1.ObjectSelector{Kind: "Pod", Namespace: "web", Name: "api-0"}}, []string{"BackOff/b", "BackOff/a"}},
		{"related", &eventgatev1.QueryRequest{Related: &eventgatev1.ObjectSelector{Name: "api-0"}}, []string{"ScaledUp/a"}},
		{"involving", &eventgatev1.QueryRequest{Tenant: a, Involving: &eventgatev1.ObjectSelector{Kind: "Pod", Namespace: "web", Name: "api-0"}}, []string{"ScaledUp/a", "BackOff/a"}},
		{"field selector", &eventgatev1.QueryRequest{FieldSelector: "reason in (BackOff, ScaledUp),type!=Warning"}, []string{"BackOff/b", "ScaledUp/a"}},
		{"field selector notin", &eventgatev1.QueryRequest{FieldSelector: "involvedObject.kind notin (Pod,Node)"}, []string{"ScaledUp/a"}},
		{"field selector and field intersect", &eventgatev1.QueryRequest{Reason: []string{"BackOff"}, FieldSelector: "reason=ScaledUp"}, nil},
		{"label selector", &eventgatev1.QueryRequest{LabelSelector: "app in (api,web)"}, []string{"BackOff/a"}},
		{"labels map", &eventgatev1.QueryRequest{Labels: map[string]string{"app": "api"}}, []string{"BackOff/a"}},
		{"no label", &eventgatev1.QueryRequest{LabelSelector: "!app", Tenant: a}, []string{"'; DROP TABLE events; --/a", "ScaledUp/a"}},
		{"time range", &eventgatev1.QueryRequest{Since: at(2), Until: at(4)}, []string{"BackOff/b", "ScaledUp/a"}},
		{"controller and action", &eventgatev1.QueryRequest{ReportingController: []string{"deployer"}, Action: []string{"Scale"}}, []string{"ScaledUp/a"}},
		{"hostile reason", &eventgatev1.QueryRequest{Reason: []string{"'; DROP TABLE events; --"}}, []string{"'; DROP TABLE events; --/a"}},
		{"hostile object", &eventgatev1.QueryRequest{Regarding: &eventgatev1.ObjectSelector{Namespace: "x'y", Name: `a\b{c:String}`}}, []string{"'; DROP TABLE events; --/a"}},
		{"hostile nothing", &eventgatev1.QueryRequest{Namespace: "' OR 1=1 --"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := tg.client.Query(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, reasons(resp.Events)); diff != "" {
				t.Fatalf("(-want +got)\n%s", diff)
			}
			if resp.ResourceVersion != "5" {
				t.Fatalf("resourceVersion %q, want 5", resp.ResourceVersion)
			}
		})
	}

	// Pages of one walk the whole list once.
	var seen []string
	req := &eventgatev1.QueryRequest{PageSize: 1}
	for {
		resp, err := tg.client.Query(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.Events {
			seen = append(seen, e.Uid)
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	if len(seen) != 5 || len(slices.Compact(slices.Sorted(slices.Values(seen)))) != 5 {
		t.Fatalf("paging returned %v", seen)
	}

	// Get, by uid and by namespace/name, over gRPC and REST.
	got, err := tg.client.Get(ctx, &eventgatev1.GetRequest{Uid: res[1].Uid})
	if err != nil || got.Event.Reason != "ScaledUp" || got.Event.ResourceVersion != res[1].ResourceVersion || got.Event.Related.GetName() != "api-0" {
		t.Fatalf("Get by uid: %v, %v", got, err)
	}
	got, err = tg.client.Get(ctx, &eventgatev1.GetRequest{Namespace: "web", Name: res[0].Name})
	if err != nil || got.Event.Uid != res[0].Uid {
		t.Fatalf("Get by name: %v, %v", got, err)
	}
	if _, err := tg.client.Get(ctx, &eventgatev1.GetRequest{Uid: "no-such-uid"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of a missing uid: %v", err)
	}
	if _, err := tg.client.Get(ctx, &eventgatev1.GetRequest{Uid: res[2].Uid, Tenant: a}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of another tenant's uid: %v, want NotFound", err)
	}
	for path, wantUID := range map[string]string{
		"/v1/events/" + res[3].Uid:                                 res[3].Uid,
		"/v1/namespaces/web/events/" + url.PathEscape(res[1].Name): res[1].Uid,
	} {
		var ev map[string]any
		if code := getJSON(t, tg.httpURL+path, &ev); code != 200 || ev["uid"] != wantUID {
			t.Fatalf("GET %s = %d %v", path, code, ev)
		}
	}
	var errBody map[string]any
	if code := getJSON(t, tg.httpURL+"/v1/events/nope", &errBody); code != 404 || errBody["message"] == nil {
		t.Fatalf("GET of a missing event = %d %v", code, errBody)
	}

	// REST query parameters are the request's own fields.
	var list struct {
		Events          []map[string]any `json:"events"`
		ResourceVersion string           `json:"resourceVersion"`
	}
	q := "/v1/events?reason=BackOff&regarding.kind=Pod&tenant.type=project&tenant.name=a&since=2026-11-20T00:00:00Z&pageSize=10"
	if code := getJSON(t, tg.httpURL+q, &list); code != 200 || len(list.Events) != 1 || list.Events[0]["uid"] != res[0].Uid || list.ResourceVersion != "5" {
		t.Fatalf("GET %s = %d %+v", q, code, list)
	}
	q = "/v1/events?fieldSelector=" + url.QueryEscape("reason=BackOff,involvedObject.name=api-0") + "&order=ORDER_OLDEST_FIRST"
	if code := getJSON(t, tg.httpURL+q, &list); code != 200 || len(list.Events) != 2 || list.Events[0]["uid"] != res[0].Uid {
		t.Fatalf("GET %s = %d %+v", q, code, list)
	}

	// Bad queries name the offending field.
	for _, bad := range []struct {
		req   *eventgatev1.QueryRequest
		field string
	}{
		{&eventgatev1.QueryRequest{PageSize: 5000}, "pageSize"},
		{&eventgatev1.QueryRequest{FieldSelector: "bogus=1"}, "fieldSelector"},
		{&eventgatev1.QueryRequest{FieldSelector: "reason in (A"}, "fieldSelector"},
		{&eventgatev1.QueryRequest{LabelSelector: "a b"}, "labelSelector"},
		{&eventgatev1.QueryRequest{PageToken: "garbage"}, "pageToken"},
		{&eventgatev1.QueryRequest{Since: at(5), Until: at(1)}, "until"},
		{&eventgatev1.QueryRequest{Tenant: &eventgatev1.Tenant{Type: "team"}}, "tenant.type"},
	} {
		_, err := tg.client.Query(ctx, bad.req)
		if fields := fieldViolations(t, err); !slices.Contains(fields, bad.field) {
			t.Errorf("query %v: violations %v do not name %s", bad.req, fields, bad.field)
		}
	}
	for _, q := range []string{"pageSize=abc", "since=yesterday", "pageSize=5000"} {
		if code := getJSON(t, tg.httpURL+"/v1/events?"+q, &errBody); code != 400 {
			t.Errorf("GET /v1/events?%s = %d, want 400", q, code)
		}
	}
}

func getJSON(t testing.TB, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: body: %v", u, err)
	}
	return resp.StatusCode
}

// TestListThenWatch is the informer pattern: list, then watch from the
// list's resourceVersion while events keep arriving; together they hold
// every event exactly once.
func TestListThenWatch(t *testing.T) {
	tg := startGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const total = 300
	emitted := make(chan string, total)
	third := make(chan struct{})
	go func() {
		for i := 0; i < total; i += 10 {
			var evs []*eventgatev1.Event
			for j := i; j < i+10; j++ {
				evs = append(evs, testEvent("Tick", "Job", "ns", fmt.Sprintf("j%d", j)))
			}
			resp, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs})
			if err != nil {
				t.Errorf("Emit: %v", err)
				return
			}
			for _, r := range resp.Results {
				emitted <- r.Uid
			}
			if i+10 == total/3 {
				close(third)
			}
		}
		close(emitted)
	}()
	// List in the middle of the emission.
	<-third
	seen := map[string]int{}
	req := &eventgatev1.QueryRequest{PageSize: 50}
	var rv string
	for {
		resp, err := tg.client.Query(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if rv == "" {
			rv = resp.ResourceVersion
		} else if resp.ResourceVersion != rv {
			t.Fatalf("pages at resourceVersions %s and %s", rv, resp.ResourceVersion)
		}
		for _, e := range resp.Events {
			seen[e.Uid]++
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	listed := len(seen)
	w, err := tg.client.StreamWatch(ctx, &eventgatev1.StreamWatchRequest{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for uid := range emitted {
		all = append(all, uid)
	}
	for _, r := range recvN(t, w, total-listed) {
		seen[r.Object.Uid]++
	}
	for _, uid := range all {
		if seen[uid] != 1 {
			t.Fatalf("event %s seen %d times (listed %d at resourceVersion %s)", uid, seen[uid], listed, rv)
		}
	}
}
