package webhook

import (
	"strings"
	"testing"

	cloudevent "github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/go-cmp/cmp"
)

// TestFromCloudEventData: text data (JSON compacted, text/*, XML, or no
// declared type and not base64) becomes the note, cut to the note limit;
// other data is not stored and its size is annotated.
func TestFromCloudEventData(t *testing.T) {
	h := &handler{opts: Options{MaxNoteBytes: 16}}
	tests := []struct {
		name     string
		set      func(e *cloudevent.Event)
		note     string
		omitted  string
		truncate string
	}{
		{"JSON compacted", func(e *cloudevent.Event) { e.SetData("application/json", []byte(`{ "a" : 1 }`)) }, `{"a":1}`, "", ""},
		{"JSON-suffixed type", func(e *cloudevent.Event) { e.SetData("application/vnd.x+json", []byte("[1, 2]")) }, "[1,2]", "", ""},
		{"text cut to the limit", func(e *cloudevent.Event) { e.SetData("text/plain; charset=utf-8", []byte(strings.Repeat("é", 10))) }, strings.Repeat("é", 8), "", "20"},
		{"binary type", func(e *cloudevent.Event) { e.SetData("application/octet-stream", []byte("abc")) }, "", "3", ""},
		{"base64 of no declared type", func(e *cloudevent.Event) { e.DataEncoded, e.DataBase64 = []byte("abc"), true }, "", "3", ""},
		{"invalid UTF-8", func(e *cloudevent.Event) { e.DataEncoded = []byte{0xff, 0xfe} }, "", "2", ""},
		{"no data", func(e *cloudevent.Event) {}, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := cloudevent.New()
			e.SetID("1")
			e.SetSource("/s")
			e.SetType("T")
			tc.set(&e)
			ev, _ := h.fromCloudEvent(&e, nil)
			if ev.Note != tc.note || ev.Annotations[CEDataOmittedAnnotation] != tc.omitted || ev.Annotations[NoteTruncatedAnnotation] != tc.truncate {
				t.Errorf("note %q omitted %q truncated %q, want %q %q %q", ev.Note, ev.Annotations[CEDataOmittedAnnotation], ev.Annotations[NoteTruncatedAnnotation], tc.note, tc.omitted, tc.truncate)
			}
		})
	}
}

// TestControllerOf: a source that fits reportingController is kept; a
// longer one is cut and suffixed with its hash, so two long sources with
// the same beginning stay apart.
func TestControllerOf(t *testing.T) {
	if got := controllerOf("https://shop.example/orders"); got != "https://shop.example/orders" {
		t.Errorf("short source became %q", got)
	}
	a, b := controllerOf(strings.Repeat("s", 200)+"a"), controllerOf(strings.Repeat("s", 200)+"b")
	if len(a) != maxController || len(b) != maxController || a == b || !strings.HasPrefix(a, strings.Repeat("s", 111)+"~") {
		t.Errorf("long sources became %q and %q", a, b)
	}
}

// TestCEField names Emit's fields in CloudEvents terms.
func TestCEField(t *testing.T) {
	got := map[string]string{}
	for _, rel := range []string{".reason", ".regarding.name", ".regarding.kind", ".namespace", ".eventTime", ".metadata[region]", ".annotations[" + CESourceAnnotation + "]", ".note", ".type"} {
		got[rel] = ceField(rel, false)
	}
	got["source:.regarding.name"] = ceField(".regarding.name", true)
	want := map[string]string{
		".reason": "type", ".regarding.name": "subject", ".regarding.kind": ExtRegardingKind, ".namespace": ExtRegardingNamespace,
		".eventTime": "time", ".metadata[region]": "region", ".annotations[" + CESourceAnnotation + "]": "source", ".note": "data",
		".type": ExtEventType, "source:.regarding.name": "source",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("fields (-want +got):\n%s", d)
	}
}
