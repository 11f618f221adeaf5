package k8sapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/k8sevent"
)

// uidNamespace scopes the uids of events created through the Kubernetes API.
var uidNamespace = uuid.MustParse("3f0c1f43-7c6e-4b61-9d0e-6a2f3c8e5d21")

// uidFor is the uid of the event named name in namespace ns of tenant t.
func uidFor(t *eventgatev1.Tenant, ns, name string) string {
	return uuid.NewSHA1(uidNamespace, []byte(t.GetType()+"\x00"+t.GetName()+"\x00"+ns+"\x00"+name)).String()
}

// scheme knows the two Event types, for protobuf request bodies.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := eventsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

var protoSerializer = protobuf.NewSerializer(scheme, scheme)

// decodeObject decodes a request body of gv (JSON, or Kubernetes protobuf as
// client-go sends built-in types) into an eventgate event and the object's
// metadata.
func decodeObject(gv groupVersion, body []byte, ct string) (*eventgatev1.Event, metav1.ObjectMeta, *statusError) {
	var e runtime.Object = &eventsv1.Event{}
	gvk := eventsv1.SchemeGroupVersion.WithKind("Event")
	if gv == coreV1 {
		e, gvk = &corev1.Event{}, corev1.SchemeGroupVersion.WithKind("Event")
	}
	if ct == "application/vnd.kubernetes.protobuf" {
		obj, got, err := protoSerializer.Decode(body, &gvk, e)
		if err != nil {
			return nil, metav1.ObjectMeta{}, badRequest("decoding the protobuf Event: " + err.Error())
		}
		if *got != gvk {
			return nil, metav1.ObjectMeta{}, badRequest(fmt.Sprintf("the body is %s, this endpoint takes %s", got, gvk))
		}
		e = obj
	} else {
		var tm metav1.TypeMeta
		if err := json.Unmarshal(body, &tm); err != nil {
			return nil, metav1.ObjectMeta{}, badRequest("the body is not a JSON object: " + err.Error())
		}
		if (tm.APIVersion != "" && tm.APIVersion != gv.apiVersion) || (tm.Kind != "" && tm.Kind != "Event") {
			return nil, metav1.ObjectMeta{}, badRequest(fmt.Sprintf("the body is %s %s, this endpoint takes %s Event", tm.APIVersion, tm.Kind, gv.apiVersion))
		}
		if err := json.Unmarshal(body, e); err != nil {
			return nil, metav1.ObjectMeta{}, badRequest("decoding the Event: " + err.Error())
		}
	}
	switch e := e.(type) {
	case *corev1.Event:
		return k8sevent.FromCoreV1(e), e.ObjectMeta, nil
	case *eventsv1.Event:
		return k8sevent.FromEventsV1(e), e.ObjectMeta, nil
	}
	return nil, metav1.ObjectMeta{}, badRequest("the body is not an Event")
}

func readBody(r *http.Request) ([]byte, *statusError) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newStatus(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, err.Error())
		}
		return nil, badRequest("reading the body: " + err.Error())
	}
	return b, nil
}

func contentType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

// checkJSON refuses a body that is neither JSON nor Kubernetes protobuf.
func checkJSON(r *http.Request) *statusError {
	switch ct := contentType(r); ct {
	case "", "application/json", "application/vnd.kubernetes.protobuf":
		return nil
	default:
		return newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("the body of a request has to be application/json, got %q", ct))
	}
}

// emit stores ev (named, in rq's tenant) and answers with the stored object.
// idemKey names this write: a retry with the same key is stored once.
// counted: stored as sent (EmitRequest.clientCounted), not folded.
func (a *API) emit(ctx context.Context, rq request, ev *eventgatev1.Event, idemKey string, counted bool) (*eventgatev1.Event, *eventgatev1.EmitResult, *statusError) {
	ev.Tenant = proto.Clone(rq.tenant).(*eventgatev1.Tenant)
	ev.ResourceVersion = ""
	resp, err := a.client.Emit(ctx, &eventgatev1.EmitRequest{Events: []*eventgatev1.Event{ev}, Tenant: rq.tenant, IdempotencyKey: idemKey, ClientCounted: counted})
	if err != nil {
		return nil, nil, fromGRPC(err, rq, ev.GetName(), renameField(rq.gv))
	}
	if len(resp.GetResults()) != 1 {
		return nil, nil, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error")
	}
	res := resp.GetResults()[0]
	out := proto.Clone(ev).(*eventgatev1.Event)
	out.ResourceVersion = res.GetResourceVersion()
	if res.GetOutcome() == eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_STARTED || res.GetOutcome() == eventgatev1.EmitOutcome_EMIT_OUTCOME_SERIES_COUNTED {
		// The server folded this occurrence into the series of an
		// isomorphic event: say so on the answer.
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations["eventgate.io/series-uid"] = res.GetSeriesUid()
	}
	return out, res, nil
}

// readObject reads and decodes the request's object (JSON or Kubernetes
// protobuf).
func readObject(r *http.Request, rq request) (*eventgatev1.Event, metav1.ObjectMeta, *statusError) {
	if st := checkJSON(r); st != nil {
		return nil, metav1.ObjectMeta{}, st
	}
	body, st := readBody(r)
	if st != nil {
		return nil, metav1.ObjectMeta{}, st
	}
	return decodeObject(rq.gv, body, contentType(r))
}

func (a *API) create(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	ev, meta, st := readObject(r, rq)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if ev.Namespace != "" && ev.Namespace != rq.namespace {
		writeStatus(w, badRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	ev.Namespace = rq.namespace
	if ev.Name == "" {
		if meta.GenerateName == "" {
			writeStatus(w, invalid(rq, "", metav1.StatusCause{Type: metav1.CauseTypeFieldValueRequired, Field: "metadata.name", Message: "name or generateName is required"}))
			return
		}
		ev.Name = meta.GenerateName + randomSuffix()
	}
	if ev.EventTime == nil {
		ev.EventTime = timestamppb.New(a.now())
	}
	// Kubernetes clients count their own series (client-go's recorders
	// patch the event they created), as kube-apiserver expects: a create is
	// stored as sent, never folded; except with client-go's older
	// EventCorrelator grouping on, whose aggregates fold into series on
	// the server.
	counted := true
	if rq.gv == coreV1 && a.correlate != nil {
		ev.Tenant = rq.tenant
		ev = a.correlate(ev, a.now())
		counted = false
	}
	// The server owns the uid: derived from the name, so that a later
	// update of this name finds this event even before it is stored.
	ev.Uid = uidFor(rq.tenant, rq.namespace, ev.Name)
	if _, err := a.client.Get(ctx, &eventgatev1.GetRequest{Namespace: rq.namespace, Name: ev.Name, Tenant: rq.tenant}); err == nil {
		writeStatus(w, alreadyExists(rq, ev.Name))
		return
	} else if status.Code(err) != codes.NotFound {
		writeStatus(w, fromGRPC(err, rq, ev.Name, nil))
		return
	}
	out, res, st := a.emit(ctx, rq, ev, "", counted)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if res.GetOutcome() == eventgatev1.EmitOutcome_EMIT_OUTCOME_DUPLICATE {
		writeStatus(w, alreadyExists(rq, ev.Name))
		return
	}
	a.recent.put(rq, out)
	writeJSON(w, http.StatusCreated, "", toObject(rq.gv, out))
}

func alreadyExists(rq request, name string) *statusError {
	st := newStatus(http.StatusConflict, metav1.StatusReasonAlreadyExists, fmt.Sprintf("events %q already exists", name))
	st.s.Details = &metav1.StatusDetails{Name: name, Group: rq.gv.group, Kind: "events"}
	return st
}

func randomSuffix() string {
	const chars = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b)
}

// current is the latest version of the named event: the newer of what the
// store answers and what this gateway wrote last (which the store may not
// have ingested yet).
func (a *API) current(ctx context.Context, rq request, name string) (*eventgatev1.Event, bool, *statusError) {
	var stored *eventgatev1.Event
	resp, err := a.client.Get(ctx, &eventgatev1.GetRequest{Namespace: rq.namespace, Name: name, Tenant: rq.tenant})
	switch {
	case err == nil:
		stored = resp.GetEvent()
	case status.Code(err) == codes.NotFound:
	default:
		return nil, false, fromGRPC(err, rq, name, nil)
	}
	if mine := a.recent.get(rq, name); mine != nil && (stored == nil || rvOf(mine) > rvOf(stored)) {
		stored = mine
	}
	return stored, stored != nil, nil
}

func rvOf(ev *eventgatev1.Event) uint64 {
	n, _ := strconv.ParseUint(ev.GetResourceVersion(), 10, 64)
	return n
}

// writeUpdate stores next as the new version of base (same uid and name).
func (a *API) writeUpdate(ctx context.Context, w http.ResponseWriter, rq request, base, next *eventgatev1.Event, created bool) {
	if next.Namespace != "" && next.Namespace != rq.namespace {
		writeStatus(w, badRequest("the namespace of the provided object does not match the namespace sent on the request"))
		return
	}
	if next.Name != "" && next.Name != rq.name {
		writeStatus(w, badRequest("the name of the object ("+next.Name+") does not match the name on the URL ("+rq.name+")"))
		return
	}
	next.Namespace, next.Name = rq.namespace, rq.name
	if base != nil {
		next.Uid = base.Uid
		next.Metadata = base.Metadata // no Kubernetes field carries it
		if next.Series != nil && base.Series != nil && next.Series.State == "" &&
			proto.Equal(next.Series.LastObservedTime, base.Series.LastObservedTime) && next.Series.Count == base.Series.Count {
			next.Series.State = base.Series.State
		}
	} else {
		next.Uid = uidFor(rq.tenant, rq.namespace, rq.name)
	}
	if next.EventTime == nil {
		next.EventTime = timestamppb.New(a.now())
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(next)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error"))
		return
	}
	sum := sha256.Sum256(b)
	// An update is a new version, not an occurrence to count.
	out, _, st := a.emit(ctx, rq, next, "k8s-write-"+hex.EncodeToString(sum[:16]), true)
	if st != nil {
		writeStatus(w, st)
		return
	}
	a.recent.put(rq, out)
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, "", toObject(rq.gv, out))
}

// update serves PUT: the whole object replaced. Events allow create on
// update, as kube-apiserver's do.
func (a *API) update(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	next, meta, st := readObject(r, rq)
	if st != nil {
		writeStatus(w, st)
		return
	}
	base, found, st := a.current(ctx, rq, rq.name)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if want := meta.ResourceVersion; want != "" && (!found || want != base.GetResourceVersion()) {
		st := newStatus(http.StatusConflict, metav1.StatusReasonConflict,
			fmt.Sprintf("Operation cannot be fulfilled on events %q: the object has been modified; please apply your changes to the latest version and try again", rq.name))
		st.s.Details = &metav1.StatusDetails{Name: rq.name, Group: rq.gv.group, Kind: "events"}
		writeStatus(w, st)
		return
	}
	a.writeUpdate(ctx, w, rq, base, next, !found)
}

// patch serves PATCH with a JSON patch, a JSON merge patch or a strategic
// merge patch (what client-go's event recorders send for series).
func (a *API) patch(ctx context.Context, w http.ResponseWriter, r *http.Request, rq request) {
	body, st := readBody(r)
	if st != nil {
		writeStatus(w, st)
		return
	}
	base, found, st := a.current(ctx, rq, rq.name)
	if st != nil {
		writeStatus(w, st)
		return
	}
	if !found {
		writeStatus(w, fromGRPC(status.Error(codes.NotFound, "not found"), rq, rq.name, nil))
		return
	}
	orig, err := json.Marshal(toObject(rq.gv, base))
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, "internal error"))
		return
	}
	var patched []byte
	switch ct := contentType(r); ct {
	case "application/strategic-merge-patch+json":
		var schema any = eventsv1.Event{}
		if rq.gv == coreV1 {
			schema = corev1.Event{}
		}
		patched, err = strategicpatch.StrategicMergePatch(orig, body, schema)
	case "application/merge-patch+json":
		patched, err = jsonpatch.MergePatch(orig, body)
	case "application/json-patch+json":
		var p jsonpatch.Patch
		if p, err = jsonpatch.DecodePatch(body); err == nil {
			patched, err = p.Apply(orig)
		}
	default:
		writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType,
			fmt.Sprintf("the patch content type %q is not supported: use application/strategic-merge-patch+json, application/merge-patch+json or application/json-patch+json", ct)))
		return
	}
	if err != nil {
		writeStatus(w, badRequest("applying the patch: "+err.Error()))
		return
	}
	next, _, st := decodeObject(rq.gv, patched, "application/json")
	if st != nil {
		writeStatus(w, st)
		return
	}
	if u := next.GetUid(); u != "" && u != base.GetUid() {
		writeStatus(w, invalid(rq, rq.name, field("metadata.uid", "field is immutable")))
		return
	}
	a.writeUpdate(ctx, w, rq, base, next, false)
}

// recentWrites remembers the last version this gateway wrote of each event
// for a while, so that an update right after a write finds it before the
// store has ingested it (client-go's recorder patches a series right after
// creating its first event).
type recentWrites struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	items map[string]recentItem
}

type recentItem struct {
	ev *eventgatev1.Event
	at time.Time
}

func newRecentWrites(max int, ttl time.Duration) *recentWrites {
	return &recentWrites{max: max, ttl: ttl, items: map[string]recentItem{}}
}

func recentKey(rq request, name string) string {
	return rq.cred + "\x00" + rq.tenant.GetType() + "\x00" + rq.tenant.GetName() + "\x00" + rq.namespace + "\x00" + name
}

func (c *recentWrites) put(rq request, ev *eventgatev1.Event) {
	if ev.GetResourceVersion() == "" {
		return // undecided: the store will have it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(c.items) >= c.max {
		for k, it := range c.items {
			if now.Sub(it.at) > c.ttl || len(c.items) >= c.max {
				delete(c.items, k)
			}
		}
	}
	c.items[recentKey(rq, ev.GetName())] = recentItem{ev: proto.Clone(ev).(*eventgatev1.Event), at: now}
}

func (c *recentWrites) get(rq request, name string) *eventgatev1.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	it, ok := c.items[recentKey(rq, name)]
	if !ok || time.Since(it.at) > c.ttl {
		return nil
	}
	return proto.Clone(it.ev).(*eventgatev1.Event)
}
