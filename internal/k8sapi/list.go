package k8sapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/k8sevent"
)

// Bounds of a listing.
const (
	// queryPage is the page size asked of Query (its maximum).
	queryPage = 1000
	// maxUnpaged bounds a list without limit; past it the list carries a
	// continue token.
	maxUnpaged = 50_000
	// freshWait bounds the wait for the store to reach a resourceVersion a
	// request asked for (NotOlderThan), like kube-apiserver's 3 s.
	freshWait = 3 * time.Second
)

// listOptions are the query parameters of a list or watch.
type listOptions struct {
	filter        filter
	querySelector string // pushed down to Query
	labelSelector string
	limit         int64
	cont          string
	rv            string
	rvMatch       string
	watch         bool
	bookmarks     bool
	sendInitial   *bool
	timeout       time.Duration
}

func parseListOptions(gv groupVersion, q url.Values) (listOptions, *statusError) {
	var o listOptions
	var err error
	if o.filter.fields, err = parseFieldSelector(gv, q.Get("fieldSelector")); err != nil {
		return o, badRequest(err.Error())
	}
	o.querySelector = queryFieldSelector(o.filter.fields)
	o.labelSelector = q.Get("labelSelector")
	if o.filter.labels, err = labels.Parse(o.labelSelector); err != nil {
		return o, badRequest("invalid labelSelector: " + err.Error())
	}
	boolParam := func(name string) (bool, *statusError) {
		v := q.Get(name)
		if v == "" {
			return false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, badRequest(fmt.Sprintf("%s: must be true or false, got %q", name, v))
		}
		return b, nil
	}
	var st *statusError
	if o.watch, st = boolParam("watch"); st != nil {
		return o, st
	}
	if o.bookmarks, st = boolParam("allowWatchBookmarks"); st != nil {
		return o, st
	}
	if q.Has("sendInitialEvents") {
		b, st := boolParam("sendInitialEvents")
		if st != nil {
			return o, st
		}
		o.sendInitial = &b
	}
	if v := q.Get("limit"); v != "" {
		if o.limit, err = strconv.ParseInt(v, 10, 64); err != nil || o.limit < 0 {
			return o, badRequest(fmt.Sprintf("limit: must be a non-negative integer, got %q", v))
		}
	}
	if v := q.Get("timeoutSeconds"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return o, badRequest(fmt.Sprintf("timeoutSeconds: must be a non-negative integer, got %q", v))
		}
		o.timeout = time.Duration(min(n, 1<<31)) * time.Second
	}
	o.cont = q.Get("continue")
	o.rv = q.Get("resourceVersion")
	if o.rv != "" {
		if _, err := strconv.ParseUint(o.rv, 10, 64); err != nil {
			return o, badRequest(fmt.Sprintf("resourceVersion: must be an eventgate resourceVersion (a non-negative integer), got %q", o.rv))
		}
	}
	o.rvMatch = q.Get("resourceVersionMatch")
	switch o.rvMatch {
	case "", string(metav1.ResourceVersionMatchNotOlderThan), string(metav1.ResourceVersionMatchExact):
	default:
		return o, badRequest(fmt.Sprintf("resourceVersionMatch: must be NotOlderThan or Exact, got %q", o.rvMatch))
	}
	if o.rvMatch != "" && o.rv == "" && !o.watch {
		return o, badRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
	}
	if o.cont != "" && o.rv != "" && o.rv != "0" {
		return o, badRequest("specifying resource version is not allowed when using continue")
	}
	return o, nil
}

// continueToken is the continue parameter: eventgate's page token, the
// listing's resourceVersion and when it was issued.
type continueToken struct {
	V      int    `json:"v"`
	Token  string `json:"t"`
	RV     string `json:"rv"`
	Issued int64  `json:"at"`
}

func encodeContinue(tok, rv string, at time.Time) string {
	b, _ := json.Marshal(continueToken{V: 1, Token: tok, RV: rv, Issued: at.Unix()})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeContinue(s string) (continueToken, error) {
	var c continueToken
	if len(s) > 8192 {
		return c, errors.New("too long")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, err
	}
	if c.V != 1 || c.Token == "" {
		return c, errors.New("unknown version")
	}
	return c, nil
}

// rebaseToken returns eventgate's page token tok moved to resourceVersion
// rv: the same position in the same order at a newer snapshot, which is
// what kube-apiserver's fresh continue token after a 410 is. The page token
// is base64url JSON whose "rv" field is its snapshot (internal/clickhouse);
// false when it does not look like one.
func rebaseToken(tok string, rv uint64) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(tok, "="))
	if err != nil {
		return "", false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return "", false
	}
	if _, ok := m["rv"]; !ok {
		return "", false
	}
	m["rv"] = json.RawMessage(strconv.FormatUint(rv, 10))
	out, err := json.Marshal(m)
	if err != nil {
		return "", false
	}
	return base64.RawURLEncoding.EncodeToString(out), true
}

// listing is one answer to a list.
type listing struct {
	events []*eventgatev1.Event
	rv     string
	cont   string
}

func (a *API) queryRequest(rq request, o listOptions) *eventgatev1.QueryRequest {
	return &eventgatev1.QueryRequest{
		Tenant:        rq.tenant,
		Namespace:     rq.namespace,
		FieldSelector: o.querySelector,
		LabelSelector: o.labelSelector,
		Order:         eventgatev1.Order_ORDER_OLDEST_FIRST,
	}
}

// collect lists up to max matching events (0: up to maxUnpaged) from page
// token tok ("" for the first page), following Query's pages.
func (a *API) collect(ctx context.Context, rq request, o listOptions, tok string, max int64) (listing, error) {
	if max <= 0 {
		max = maxUnpaged
	}
	var l listing
	for {
		req := a.queryRequest(rq, o)
		req.PageSize = int32(min(max-int64(len(l.events)), queryPage))
		req.PageToken = tok
		resp, err := a.client.Query(ctx, req)
		if err != nil {
			return l, err
		}
		if l.rv == "" {
			l.rv = resp.GetResourceVersion()
		}
		for _, ev := range resp.GetEvents() {
			if o.filter.matches(ev) {
				l.events = append(l.events, ev)
			}
		}
		tok = resp.GetNextPageToken()
		if tok == "" {
			return l, nil
		}
		if int64(len(l.events)) >= max {
			l.cont = tok
			return l, nil
		}
	}
}

// fresh lists the first page, waiting (bounded) until the store has reached
// resourceVersion min.
func (a *API) fresh(ctx context.Context, rq request, o listOptions, minRV uint64) (listing, *statusError) {
	deadline := a.now().Add(freshWait)
	for {
		l, err := a.collect(ctx, rq, o, "", o.limit)
		if err != nil {
			return l, fromGRPC(err, rq, "", nil)
		}
		got, _ := strconv.ParseUint(l.rv, 10, 64)
		if got >= minRV {
			return l, nil
		}
		if a.now().After(deadline) {
			st := newStatus(http.StatusGatewayTimeout, metav1.StatusReasonTimeout,
				fmt.Sprintf("Too large resource version: %d, current: %d", minRV, got))
			st.s.Details = &metav1.StatusDetails{
				Causes:            []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}},
				RetryAfterSeconds: 1,
			}
			return l, st
		}
		select {
		case <-ctx.Done():
			return l, fromGRPC(ctx.Err(), rq, "", nil)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// snapshot answers a list's resourceVersion semantics: "" and "0" are the
// latest state; N with NotOlderThan (or no match) is the latest state once
// it includes N; N with Exact must be the latest state.
func (a *API) snapshot(ctx context.Context, rq request, o listOptions) (listing, *statusError) {
	if o.cont != "" {
		c, err := decodeContinue(o.cont)
		if err != nil {
			return listing{}, badRequest("continue: not a token this server issued")
		}
		if a.now().Sub(time.Unix(c.Issued, 0)) > a.cfg.ContinueTTL {
			// Too old: answer 410 with a token that goes on from the same
			// position at the current resourceVersion.
			st := expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
			cur, err := a.collect(ctx, rq, listOptions{filter: o.filter, querySelector: o.querySelector, labelSelector: o.labelSelector}, "", 1)
			if err == nil {
				now, _ := strconv.ParseUint(cur.rv, 10, 64)
				if tok, ok := rebaseToken(c.Token, now); ok {
					st.s.ListMeta.Continue = encodeContinue(tok, cur.rv, a.now())
				}
			}
			return listing{}, st
		}
		l, err := a.collect(ctx, rq, o, c.Token, o.limit)
		if err != nil {
			st := fromGRPC(err, rq, "", nil)
			if st.s.Code == http.StatusBadRequest {
				st = badRequest("continue: the token does not belong to this list (its selectors or namespace differ)")
			}
			return l, st
		}
		l.rv = c.RV
		if l.cont != "" {
			l.cont = encodeContinue(l.cont, l.rv, time.Unix(c.Issued, 0))
		}
		return l, nil
	}
	var minRV uint64
	if o.rv != "" {
		minRV, _ = strconv.ParseUint(o.rv, 10, 64)
	}
	l, st := a.fresh(ctx, rq, o, minRV)
	if st != nil {
		return l, st
	}
	if o.rvMatch == string(metav1.ResourceVersionMatchExact) && l.rv != o.rv {
		return l, expired(fmt.Sprintf("too old resource version: %s (%s): eventgate lists at the current resourceVersion only", o.rv, l.rv))
	}
	if l.cont != "" {
		l.cont = encodeContinue(l.cont, l.rv, a.now())
	}
	return l, nil
}

func (a *API) list(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	o, st := parseListOptions(rq.gv, r.URL.Query())
	if st != nil {
		writeStatus(w, st)
		return
	}
	if o.watch {
		a.watch(ctx, w, r, rq, o)
		return
	}
	l, st := a.snapshot(ctx, rq, o)
	if st != nil {
		writeStatus(w, st)
		return
	}
	meta := metav1.ListMeta{ResourceVersion: l.rv, Continue: l.cont}
	if asTable(r) {
		writeJSON(w, http.StatusOK, tableContentType, newTable(r, rq.gv, l.events, meta, true))
		return
	}
	if rq.gv == coreV1 {
		out := &corev1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: "v1"}, ListMeta: meta, Items: []corev1.Event{}}
		for _, ev := range l.events {
			out.Items = append(out.Items, *k8sevent.ToCoreV1(ev))
		}
		writeJSON(w, http.StatusOK, "", out)
		return
	}
	out := &eventsv1.EventList{TypeMeta: metav1.TypeMeta{Kind: "EventList", APIVersion: eventsV1.apiVersion}, ListMeta: meta, Items: []eventsv1.Event{}}
	for _, ev := range l.events {
		out.Items = append(out.Items, *k8sevent.ToEventsV1(ev))
	}
	writeJSON(w, http.StatusOK, "", out)
}

func (a *API) get(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	resp, err := a.client.Get(ctx, &eventgatev1.GetRequest{Namespace: rq.namespace, Name: rq.name, Tenant: rq.tenant})
	if err != nil {
		writeStatus(w, fromGRPC(err, rq, rq.name, nil))
		return
	}
	ev := resp.GetEvent()
	if asTable(r) {
		writeJSON(w, http.StatusOK, tableContentType, newTable(r, rq.gv, []*eventgatev1.Event{ev}, metav1.ListMeta{ResourceVersion: ev.GetResourceVersion()}, true))
		return
	}
	writeJSON(w, http.StatusOK, "", toObject(rq.gv, ev))
}
