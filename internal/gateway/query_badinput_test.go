package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// TestQueryAbsurdTimeRange: a query bound outside the times events may have
// answers as its meaning says (until year 1: nothing; since year 1 or until
// year 9999: no bound), not what ClickHouse made of a time it cannot hold
// (until=0001-01-01 matched every event).
func TestQueryAbsurdTimeRange(t *testing.T) {
	tg := startGateway(t, nil)
	r := emit(t, tg.client, testEvent("Range", "Pod", "ns", "r"))
	count := func(q string) int {
		t.Helper()
		code, _, m := restDo(t, http.MethodGet, tg.httpURL+"/v1/events?"+q, "", nil)
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

// TestQueryFilterErrorNamesField: a query filter the store cannot take (a
// label with an empty key, more values in one filter than a query may
// bind) is InvalidArgument naming the request's field, on Query and on
// analytics alike; it named "query" (and the store's labels[0], not the
// request's labels map).
func TestQueryFilterErrorNamesField(t *testing.T) {
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
		code, _, m := restDo(t, http.MethodGet, tg.httpURL+path, "", nil)
		if f := violationFields(m); code != http.StatusBadRequest || len(f) != 1 || f[0] != field {
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
