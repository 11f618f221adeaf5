package k8sapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// watchEvent is a Kubernetes watch event on the wire.
type watchEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

// watch serves ?watch=true: optional initial events (resourceVersion "" or
// "0", or sendInitialEvents=true, which ends them with the
// k8s.io/initial-events-end bookmark), then StreamWatch from the listing's
// resourceVersion, or from the one the caller gave.
func (a *API) watch(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request, o listOptions) {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	initial, st := initialWanted(rq, o)
	if st != nil {
		writeStatus(w, st)
		return
	}
	from := o.rv
	var init []*eventgatev1.Event
	if initial {
		if init, from, st = a.initialEvents(ctx, rq, o); st != nil {
			writeStatus(w, st)
			return
		}
	} else if o.rv == "" {
		from = "" // live events from now on
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.startWatch(ctx, a.watchRequest(rq, o, from))
	if err != nil {
		writeStatus(w, watchStartStatus(err, rq))
		return
	}

	table := asTable(r)
	ww := &watchWriter{w: w, rc: http.NewResponseController(w), r: r, rq: rq, table: table}
	ct := "application/json"
	if table {
		ct = tableContentType
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_ = ww.rc.Flush()
	for _, ev := range init {
		if ww.send(event.WatchAdded, ev) != nil {
			return
		}
	}
	if o.sendInitial != nil && *o.sendInitial {
		if ww.bookmark(from, true) != nil {
			return
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return // timeoutSeconds ran out, or the client left
			}
			switch status.Code(err) {
			case codes.OutOfRange:
				ww.errorEvent(fromGRPC(err, rq, "", nil))
			case codes.ResourceExhausted, codes.Unavailable:
				// A slow watcher, or a gateway shutting down: the client
				// watches again from the last resourceVersion it got.
			default:
				ww.errorEvent(fromGRPC(err, rq, "", nil))
			}
			return
		}
		if resp.GetType() == event.WatchBookmark {
			if o.bookmarks && ww.bookmark(resp.GetObject().GetResourceVersion(), false) != nil {
				return
			}
			continue
		}
		if !o.filter.matches(resp.GetObject()) {
			continue
		}
		if ww.send(resp.GetType(), resp.GetObject()) != nil {
			return
		}
	}
}

// initialWanted reports whether a watch starts with the initial events,
// or the status refusing its options.
func initialWanted(rq request, o listOptions) (bool, *statusError) {
	if o.sendInitial == nil {
		if o.rvMatch != "" {
			return false, invalid(rq, "", metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "resourceVersionMatch",
				Message: "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"})
		}
		return o.rv == "" || o.rv == "0", nil
	}
	if *o.sendInitial && (o.rvMatch != string(metav1.ResourceVersionMatchNotOlderThan) || !o.bookmarks) {
		return false, invalid(rq, "", metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: "sendInitialEvents",
			Message: "sendInitialEvents=true requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true"})
	}
	return *o.sendInitial, nil
}

// initialEvents lists every matching event (in pages) at the current
// state, at least as new as the resourceVersion asked for, and the
// resourceVersion the watch goes on from.
func (a *API) initialEvents(ctx context.Context, rq request, o listOptions) ([]*eventgatev1.Event, string, *statusError) {
	var minRV uint64
	if o.rv != "" {
		minRV, _ = strconv.ParseUint(o.rv, 10, 64)
	}
	lo := o
	lo.limit = 0
	l, st := a.fresh(ctx, rq, lo, minRV)
	for st == nil && l.cont != "" {
		var more listing
		more, err := a.collect(ctx, rq, lo, l.cont, 0)
		if err != nil {
			st = fromGRPC(err, rq, "", nil)
			break
		}
		l.events, l.cont = append(l.events, more.events...), more.cont
	}
	if st != nil {
		return nil, "", st
	}
	return l.events, l.rv, nil
}

// watchRequest is the StreamWatch of a watch from from: the field
// selector's equalities the gRPC watch can filter on are passed on (the
// rest are matched here).
func (a *API) watchRequest(rq request, o listOptions, from string) *eventgatev1.StreamWatchRequest {
	req := &eventgatev1.StreamWatchRequest{
		Tenant:          rq.tenant,
		Namespace:       rq.namespace,
		ResourceVersion: from,
		Types:           equals(o.filter.fields, "type"),
		Reasons:         equals(o.filter.fields, "reason"),
	}
	if ns := equals(o.filter.fields, "metadata.namespace"); req.Namespace == "" && len(ns) == 1 {
		req.Namespace = ns[0]
	}
	if k := equals(o.filter.fields, "regarding.kind"); len(k) == 1 {
		req.Kind = k[0]
	}
	if n := equals(o.filter.fields, "regarding.name"); len(n) == 1 {
		req.Name = n[0]
	}
	if c := equals(o.filter.fields, "reportingController"); len(c) > 0 {
		req.ReportingControllers = c
	}
	if o.bookmarks {
		req.BookmarkInterval = durationpb.New(a.cfg.BookmarkInterval)
	}
	return req
}

// startWatch starts req and returns the stream once the watch is
// established (its header says so), or the error that kept it from
// starting.
func (a *API) startWatch(ctx context.Context, req *eventgatev1.StreamWatchRequest) (eventgatev1.EventService_StreamWatchClient, error) {
	stream, err := a.client.StreamWatch(ctx, req)
	if err == nil {
		md, herr := stream.Header()
		if herr != nil || len(md.Get(event.WatchEstablishedHeader)) == 0 {
			err = herr
			if _, rerr := stream.Recv(); rerr != nil {
				err = rerr
			}
			if err == nil {
				err = status.Error(codes.Unavailable, "watch did not start")
			}
		}
	}
	return stream, err
}

// watchWriter writes watch events, one JSON object per line, flushed.
type watchWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	r       *http.Request
	rq      request
	table   bool
	columns bool // column definitions were sent
}

func (ww *watchWriter) write(v watchEvent) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := ww.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return ww.rc.Flush()
}

func (ww *watchWriter) send(typ string, ev *eventgatev1.Event) error {
	if ww.table {
		t := newTable(ww.r, ww.rq.gv, []*eventgatev1.Event{ev}, metav1.ListMeta{ResourceVersion: ev.GetResourceVersion()}, !ww.columns)
		ww.columns = true
		return ww.write(watchEvent{Type: typ, Object: t})
	}
	return ww.write(watchEvent{Type: typ, Object: toObject(ww.rq.gv, ev)})
}

// bookmark sends a BOOKMARK at rv; initialEnd marks the end of the initial
// events of sendInitialEvents.
func (ww *watchWriter) bookmark(rv string, initialEnd bool) error {
	meta := metav1.ObjectMeta{ResourceVersion: rv}
	if initialEnd {
		meta.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	var obj any
	switch {
	case ww.table:
		obj = &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ListMeta: metav1.ListMeta{ResourceVersion: rv}, Rows: []metav1.TableRow{}}
	case ww.rq.gv == coreV1:
		obj = &corev1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: coreV1.apiVersion}, ObjectMeta: meta}
	default:
		obj = &eventsv1.Event{TypeMeta: metav1.TypeMeta{Kind: "Event", APIVersion: eventsV1.apiVersion}, ObjectMeta: meta}
	}
	return ww.write(watchEvent{Type: event.WatchBookmark, Object: obj})
}

func (ww *watchWriter) errorEvent(st *statusError) {
	_ = ww.write(watchEvent{Type: "ERROR", Object: st.s})
}

// watchStartStatus is the answer to a watch that did not start because of
// err. A gateway shutting down (Unavailable) answers 429 with Retry-After,
// as kube-apiserver does while it shuts down: client-go's reflector then
// watches again from the same resourceVersion, where on a 503 it would
// list (or ask for the initial events) again.
func watchStartStatus(err error, rq request) *statusError {
	if status.Code(err) == codes.Unavailable {
		st := newStatus(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "the gateway is shutting down; watch again: "+status.Convert(err).Message())
		st.s.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return st
	}
	return fromGRPC(err, rq, "", nil)
}
