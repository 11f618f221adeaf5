package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	eventsv1 "k8s.io/api/events/v1"
)

func TestMicroTimes(t *testing.T) {
	for in, want := range map[string]string{
		`{"eventTime":"2026-11-22T09:08:06Z"}`:                          `{"eventTime":"2026-11-22T09:08:06.000000Z"}`,
		`{"eventTime": "2026-11-22T09:08:06.241Z","x":1}`:               `{"eventTime": "2026-11-22T09:08:06.241000Z","x":1}`,
		`{"series":{"lastObservedTime":"2026-11-22T09:08:06.123456Z"}}`: `{"series":{"lastObservedTime":"2026-11-22T09:08:06.123456Z"}}`,
		`{"lastObservedTime":"2026-11-22T09:08:06.123456789Z"}`:         `{"lastObservedTime":"2026-11-22T09:08:06.123456Z"}`,
		// Not a time field, or a time inside a string: as it is.
		`{"start":"2026-11-22T09:08:06Z"}`:                  `{"start":"2026-11-22T09:08:06Z"}`,
		`{"note":"\"eventTime\":\"2026-11-22T09:08:06Z\""}`: `{"note":"\"eventTime\":\"2026-11-22T09:08:06Z\""}`,
	} {
		if got := string(microTimes([]byte(in))); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

// The native REST API's events decode as Kubernetes events.k8s.io/v1
// Events with client-go's own types: their MicroTimes have six digits.
func TestRESTEventsDecodeAsKubernetes(t *testing.T) {
	tg := startGateway(t, nil)
	ev := testEvent("Timed", "Pod", "ns", "micro")
	at := time.Date(2026, 11, 22, 9, 8, 6, 241000000, time.UTC) // protojson would write .241
	ev.EventTime = timestamppb.New(at)
	res := emit(t, tg.client, ev)
	waitIngested(t, tg, res[0].ResourceVersion)

	var got eventsv1.Event
	code := getJSON(t, tg.httpURL+"/v1/events/"+res[0].Uid, &got)
	if code != http.StatusOK || !got.EventTime.Time.Equal(at) || got.Regarding.Name != "micro" {
		t.Fatalf("GET: %d, eventTime %v, regarding %v", code, got.EventTime, got.Regarding)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, lines := ndjsonWatch(t, ctx, tg.httpURL+"/v1/events:watch?resourceVersion=0")
	defer resp.Body.Close()
	line := <-lines
	b, err := json.Marshal(line["object"])
	if err != nil {
		t.Fatal(err)
	}
	var watched eventsv1.Event
	if err := json.Unmarshal(b, &watched); err != nil || !watched.EventTime.Time.Equal(at) {
		t.Fatalf("watched %s: %v, eventTime %v", b, err, watched.EventTime)
	}
}
