package k8sapi

import (
	"strings"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/k8sevent"
)

// groupVersion is one of the two Event APIs.
type groupVersion struct {
	group      string // "" for core
	apiVersion string // k8sevent.CoreV1 or k8sevent.EventsV1
}

var (
	coreV1   = groupVersion{group: "", apiVersion: k8sevent.CoreV1}
	eventsV1 = groupVersion{group: "events.k8s.io", apiVersion: k8sevent.EventsV1}
)

// toObject renders ev in gv.
func toObject(gv groupVersion, ev *eventgatev1.Event) any {
	if gv == coreV1 {
		return k8sevent.ToCoreV1(ev)
	}
	return k8sevent.ToEventsV1(ev)
}

// renameField turns a violation's eventgate field path into the caller's
// API: "events[0].regarding.kind" is "involvedObject.kind" in core/v1.
func renameField(gv groupVersion) func(string) string {
	return func(f string) string {
		if i := strings.Index(f, "]."); strings.HasPrefix(f, "events[") && i > 0 {
			f = f[i+2:]
		}
		switch {
		case f == "name", f == "namespace", f == "uid", strings.HasPrefix(f, "labels"), strings.HasPrefix(f, "annotations"):
			return "metadata." + f
		}
		if gv != coreV1 {
			return f
		}
		switch {
		case strings.HasPrefix(f, "regarding"):
			return "involvedObject" + strings.TrimPrefix(f, "regarding")
		case f == "note":
			return "message"
		case f == "reportingController":
			return "reportingComponent"
		case f == "eventTime":
			return "firstTimestamp"
		case strings.HasPrefix(f, "series."):
			return "count"
		}
		return f
	}
}
