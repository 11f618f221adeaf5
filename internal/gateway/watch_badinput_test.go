package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// watchErr starts a gRPC watch and returns the error it ends with first.
func watchErr(t *testing.T, c eventgatev1.EventServiceClient, req *eventgatev1.StreamWatchRequest) error {
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

// TestWatchResourceVersionMaxUint64IsAhead: the largest uint64 resourceVersion is
// ahead of the stream (InvalidArgument, 400), not "too old" (OutOfRange, 410)
// because after+1 wrapped to 0.
func TestWatchResourceVersionMaxUint64IsAhead(t *testing.T) {
	tg := startGateway(t, nil)
	emit(t, tg.client, testEvent("A", "Pod", "ns", "a"))
	for _, rv := range []string{strconv.FormatUint(math.MaxUint64, 10), strconv.FormatUint(math.MaxUint64-1, 10)} {
		err := watchErr(t, tg.client, &eventgatev1.StreamWatchRequest{ResourceVersion: rv})
		if f := fieldViolations(t, err); len(f) != 1 || f[0] != "resourceVersion" {
			t.Errorf("watch from %s: fields %v, want resourceVersion", rv, f)
		}
		code, _, m := restDo(t, http.MethodGet, tg.httpURL+"/v1/events:watch?resourceVersion="+rv, "", nil)
		if code != http.StatusBadRequest {
			t.Errorf("REST watch from %s: %d %v, want 400", rv, code, m)
		}
	}
}

// TestWatchRefusesFilterNoEventCarries: watch filter values no event can carry
// (control characters, over the field limits, too many values) are
// InvalidArgument naming the filter; wildcard characters are literal.
func TestWatchRefusesFilterNoEventCarries(t *testing.T) {
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
		if f := fieldViolations(t, watchErr(t, tg.client, req)); len(f) != 1 || f[0] != field {
			t.Errorf("watch %v: fields %v, want %s", req, f, field)
		}
	}
	if code, _, m := restDo(t, http.MethodGet, tg.httpURL+"/v1/events:watch?namespace=%00", "", nil); code != http.StatusBadRequest {
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
