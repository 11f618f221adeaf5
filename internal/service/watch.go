package service

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// Watcher serves live watches.
type Watcher interface {
	Watch(ctx context.Context, o event.WatchOptions, send func(event.WatchItem) error) error
}

// StreamWatch implements EventService.StreamWatch.
func (s *Events) StreamWatch(req *eventgatev1.StreamWatchRequest, stream eventgatev1.EventService_StreamWatchServer) error {
	ctx := stream.Context()
	p, err := principal(ctx)
	if err != nil {
		return toStatus(s.log, "StreamWatch", err)
	}
	o, f, err := s.watchOptions(req)
	if err != nil {
		return toStatus(s.log, "StreamWatch", err)
	}
	if o.Subjects, err = p.WatchSubjects(f); err != nil {
		return toStatus(s.log, "StreamWatch", err)
	}
	release, err := watchQuota(s.cfg.Limits, p, req)
	if err != nil {
		return toStatus(s.log, "StreamWatch", err)
	}
	defer release()
	o.Ready = func() { _ = stream.SendHeader(metadata.Pairs(event.WatchEstablishedHeader, "true")) }
	o.Encoded = s.cfg.SendEncoded
	err = s.watch.Watch(ctx, o, func(it event.WatchItem) error {
		if it.Bookmark {
			return stream.Send(&eventgatev1.StreamWatchResponse{Type: event.WatchBookmark,
				Object: &eventgatev1.Event{ResourceVersion: strconv.FormatUint(it.Seq, 10)}})
		}
		if it.Trace.IsValid() {
			_, span := s.tracer.Start(trace.ContextWithRemoteSpanContext(ctx, it.Trace), "eventgate.watch.deliver",
				trace.WithSpanKind(trace.SpanKindProducer))
			defer span.End()
		}
		typ := event.WatchTypeOf(it.Event, it.Raw)
		if s.cfg.SendEncoded && it.Raw != nil {
			head, tail := event.WatchEventFrame(typ, it.Raw, it.Seq)
			return stream.SendMsg(EncodedParts{head, it.Raw, tail})
		}
		return stream.Send(&eventgatev1.StreamWatchResponse{Type: typ, Object: it.Event})
	})
	if err != nil && ctx.Err() != nil {
		return nil // the client went away
	}
	return toStatus(s.log, "StreamWatch", err)
}

// watchOptions validates a watch request and returns its options and its
// subject filter; authorization turns the filter into subjects.
func (s *Events) watchOptions(req *eventgatev1.StreamWatchRequest) (event.WatchOptions, subject.Filter, error) {
	o := event.WatchOptions{Buffer: s.cfg.WatchBuffer}
	var f subject.Filter
	if err := checkWatchFilter(req); err != nil {
		return o, f, err
	}
	if t := req.GetTenant(); t != nil && (t.Type != "" || t.Name != "") {
		ref, err := tenantRef(t)
		if err != nil {
			return o, f, err
		}
		f.TenantType = &ref.Type
		if ref.Name != "*" {
			f.TenantName = &ref.Name
		}
	}
	var group *string
	if req.ApiGroup != nil {
		g := req.GetApiGroup()
		if g == "core" {
			g = ""
		}
		group = &g
	}
	kind := req.GetKind()
	f.Group = group
	if kind != "" {
		f.Kind = &kind
	}
	if req.GetNamespace() != "" {
		f.Namespace = subject.Ptr(req.GetNamespace())
	}
	// A group or a kind alone is half of the group_Kind token, which no
	// filter subject can select: it is matched on each event's subject,
	// which needs no decoding.
	if (kind != "") != (group != nil) {
		o.MatchSubject = subject.MatchGroupKind(f.Group, f.Kind)
	}
	// The object's name is no subject token (see package subject): a watch
	// of one object is matched in process, as the other fields are, on the
	// event's encoding without decoding it.
	name := req.GetName()
	types, reasons, controllers := req.GetTypes(), req.GetReasons(), req.GetReportingControllers()
	if name != "" || len(types) > 0 || len(reasons) > 0 || len(controllers) > 0 {
		o.MatchEncoded = func(raw []byte) bool {
			f, ok := event.PeekWatchFields(raw)
			return ok && (name == "" || f.RegardingName == name) &&
				(len(types) == 0 || slices.Contains(types, f.Type)) &&
				(len(reasons) == 0 || slices.Contains(reasons, f.Reason)) &&
				(len(controllers) == 0 || slices.Contains(controllers, f.ReportingController))
		}
	}
	if rv := req.GetResourceVersion(); rv != "" {
		after, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			return o, f, invalid("resourceVersion", "must be a stream sequence (a non-negative integer), got %q", rv)
		}
		if after == math.MaxUint64 {
			// No stream reaches it; it is ahead of every stream, not too old
			// (after+1 would wrap to 0).
			return o, f, invalid("resourceVersion", "is ahead of the stream: %s", rv)
		}
		o.After = &after
	}
	if bi := req.GetBookmarkInterval(); bi != nil {
		d := bi.AsDuration()
		if !bi.IsValid() || d < time.Second || d > time.Hour {
			return o, f, invalid("bookmarkInterval", "must be between 1s and 1h")
		}
		o.Bookmarks = d
	}
	return o, f, nil
}

// Watch filter limits: a value no event can carry is refused, not watched.
const (
	maxFilterName   = 253 // kind, apiGroup, namespace, name (event validation's limit)
	maxFilterShort  = 128 // type, reason, reportingController
	maxFilterValues = 100 // values of one repeated filter
)

// checkWatchFilter refuses filter values that are not printable text or are
// longer than any event's field can be.
func checkWatchFilter(req *eventgatev1.StreamWatchRequest) error {
	var vs []event.Violation
	one := func(field, v string, max int) {
		switch {
		case len(v) > max:
			vs = append(vs, event.Violation{Field: field, Description: fmt.Sprintf("must be at most %d bytes, got %d", max, len(v))})
		case !event.Printable(v):
			vs = append(vs, event.Violation{Field: field, Description: "must be printable text without control characters"})
		}
	}
	one("apiGroup", req.GetApiGroup(), maxFilterName)
	one("kind", req.GetKind(), maxFilterName)
	one("namespace", req.GetNamespace(), maxFilterName)
	one("name", req.GetName(), maxFilterName)
	for field, vals := range map[string][]string{"types": req.GetTypes(), "reasons": req.GetReasons(), "reportingControllers": req.GetReportingControllers()} {
		if len(vals) > maxFilterValues {
			vs = append(vs, event.Violation{Field: field, Description: fmt.Sprintf("must have at most %d values, got %d", maxFilterValues, len(vals))})
			continue
		}
		for i, v := range vals {
			one(fmt.Sprintf("%s[%d]", field, i), v, maxFilterShort)
		}
	}
	if len(vs) > 0 {
		slices.SortFunc(vs, func(a, b event.Violation) int { return strings.Compare(a.Field, b.Field) })
		return &InvalidError{Violations: vs}
	}
	return nil
}
