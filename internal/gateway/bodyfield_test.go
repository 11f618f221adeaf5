package gateway

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// A body that does not decode names the field the decoder stopped at, as
// the caller spelled it, wherever it is.
func TestBodyField(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`{"events":{}}`, "events"},
		{`{"events":"x"}`, "events"},
		{`{"events":[5]}`, "events[0]"},
		{`{"tenant":"shop","events":[]}`, "tenant"},
		{`{"events":[{"reason":5}]}`, "events[0].reason"},
		{`{"events":[{"reason":"R"},{"reason":"R","regarding":"Pod"}]}`, "events[1].regarding"},
		{`{"events":[{"labels":[]}]}`, "events[0].labels"},
		{`{"events":[{"labels":{"app":1}}]}`, "events[0].labels[app]"},
		{`{"events":[{"labels":{"a":"b"},"annotations":{"x":"y","z":false}}]}`, "events[0].annotations[z]"},
		{"{\n \"events\": [\n  {\"eventTime\": \"yesterday\"}\n ]\n}", "events[0].eventTime"},
		{`{"events":[{"event_time":5}]}`, "events[0].event_time"},
		{`{"events":[{"regarding":{"kind":"Pod","bogus":1}}]}`, "events[0].regarding.bogus"},
		{`{"events":[{"series":{"count":"abc"}}]}`, "events[0].series.count"},
		{`{"events":[{"note":"é","reason":["x"]}]}`, "events[0].reason"},
		{`{"idempotency_key":"a","events":[{"related":{"uid":{}}}]}`, "events[0].related.uid"},
		{`{"events":[{"reason":"R"}],"batchId":"a"}`, "batchId"},
	} {
		err := protojson.Unmarshal([]byte(c.body), &eventgatev1.EmitRequest{})
		if err == nil {
			t.Fatalf("%s decoded", c.body)
		}
		got, ok := bodyField(withBodyField([]byte(c.body), (&eventgatev1.EmitRequest{}).ProtoReflect().Descriptor(), err))
		if !ok || got != c.field {
			t.Errorf("%s (%v): field %q, want %q", c.body, err, got, c.field)
		}
	}
}
