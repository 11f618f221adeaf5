package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	eventsv1 "k8s.io/api/events/v1"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/k8sevent"
)

// Annotations that name an item's tenant. eventgate's own pair wins over the
// design doc's scope pair; when both name a tenant they must agree.
const (
	ScopeTypeAnnotation  = "platform.miloapis.com/scope.type"
	ScopeNameAnnotation  = "platform.miloapis.com/scope.name"
	TenantTypeAnnotation = "eventgate.io/tenant-type"
	TenantNameAnnotation = "eventgate.io/tenant-name"
)

// IdempotencyKeyHeader, on an EventList, gives the items without a uid one
// derived from the key, the item's index and its tenant, so that a retried
// list stores them once.
const IdempotencyKeyHeader = "Idempotency-Key"

// uidNamespace scopes the uids derived from an Idempotency-Key.
var uidNamespace = uuid.MustParse("5f0c1f9e-8a0e-4d67-9b8e-0c6a4e2b7d13")

// ItemResult is what happened to one item of an EventList.
type ItemResult struct {
	// Index is the item's position in the list.
	Index int `json:"index"`
	// Uid, Name, ResourceVersion, Outcome and SeriesUid are Emit's result
	// for a stored item (outcome as EMIT_OUTCOME_*).
	UID             string `json:"uid,omitempty"`
	Name            string `json:"name,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Outcome         string `json:"outcome,omitempty"`
	SeriesUID       string `json:"seriesUid,omitempty"`
	// Tenant is the tenant the item's annotations named; absent for the
	// caller's default tenant.
	Tenant *Tenant `json:"tenant,omitempty"`
	// Error says why the item was not stored.
	Error *ItemError `json:"error,omitempty"`
}

// Tenant is a tenant in a result.
type Tenant struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
}

// ItemError is the EmitError of an item that was not stored: the gRPC code
// name, a message and the offending fields named as in the request
// ("items[3].regarding.kind"), plus the HTTP status the code maps to.
type ItemError struct {
	Code            string           `json:"code"`
	HTTPStatus      int              `json:"httpStatus"`
	Message         string           `json:"message"`
	FieldViolations []FieldViolation `json:"fieldViolations,omitempty"`
}

// FieldViolation names one invalid field.
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// ListResult answers an EventList: one result per item, in order.
type ListResult struct {
	// Code is the gRPC code when every item failed the same way (the HTTP
	// status is then that code's); absent otherwise.
	Code int `json:"code,omitempty"`
	// Message summarizes the failures, when there are any.
	Message  string       `json:"message,omitempty"`
	Accepted int          `json:"accepted"`
	Failed   int          `json:"failed"`
	Items    []ItemResult `json:"items"`
}

// listEnvelope is an EventList with items left raw, so that one bad item is
// refused alone.
type listEnvelope struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	var env listEnvelope
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxBodyBytes))).Decode(&env); err != nil {
		writeBodyError(w, err, "")
		return
	}
	var vs []event.Violation
	if env.APIVersion != "" && env.APIVersion != eventsv1.SchemeGroupVersion.String() {
		vs = append(vs, event.Violation{Field: "apiVersion", Description: fmt.Sprintf("must be %q, got %q", eventsv1.SchemeGroupVersion.String(), env.APIVersion)})
	}
	if env.Kind != "" && env.Kind != "EventList" {
		vs = append(vs, event.Violation{Field: "kind", Description: fmt.Sprintf("must be \"EventList\", got %q", env.Kind)})
	}
	switch {
	case len(env.Items) == 0:
		vs = append(vs, event.Violation{Field: "items", Description: "at least one item is required"})
	case len(env.Items) > h.opts.MaxBatch:
		vs = append(vs, event.Violation{Field: "items", Description: fmt.Sprintf("at most %d items per list, got %d", h.opts.MaxBatch, len(env.Items))})
	}
	idemKey := r.Header.Get(IdempotencyKeyHeader)
	if len(idemKey) > 256 {
		vs = append(vs, event.Violation{Field: "header " + IdempotencyKeyHeader, Description: "must be at most 256 bytes"})
	}
	if len(vs) > 0 {
		writeStatus(w, badRequest(vs...))
		return
	}

	items := make([]*item, len(env.Items))
	for i, raw := range env.Items {
		items[i] = listItem(i, raw, idemKey)
	}
	ctx, err := h.outgoing(r, EventsPath)
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	if st := h.k8s.emit(ctx, items); st != nil {
		writeStatus(w, st)
		return
	}
	code, res := listResult(items)
	writeJSON(w, code, res)
}

// listItem decodes and converts item i of a list; an item that cannot be
// is decided as refused.
func listItem(i int, raw json.RawMessage, idemKey string) *item {
	prefix := fmt.Sprintf("items[%d]", i)
	it := &item{index: i}
	var in eventsv1.Event
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&in); err != nil {
		v := decodeViolation(err, prefix)
		it.fail(codes.InvalidArgument, "invalid "+v.Field+": "+v.Description, &eventgatev1.FieldViolation{Field: v.Field, Description: v.Description})
		return it
	}
	var vs []*eventgatev1.FieldViolation
	if in.APIVersion != "" && in.APIVersion != eventsv1.SchemeGroupVersion.String() {
		vs = append(vs, &eventgatev1.FieldViolation{Field: prefix + ".apiVersion", Description: fmt.Sprintf("must be %q, got %q", eventsv1.SchemeGroupVersion.String(), in.APIVersion)})
	}
	if in.Kind != "" && in.Kind != "Event" {
		vs = append(vs, &eventgatev1.FieldViolation{Field: prefix + ".kind", Description: fmt.Sprintf("must be \"Event\", got %q", in.Kind)})
	}
	tenant, typeKey, nameKey, tvs := tenantFromAnnotations(in.Annotations, prefix+".metadata.annotations")
	vs = append(vs, tvs...)
	if len(vs) > 0 {
		it.fail(codes.InvalidArgument, "invalid "+vs[0].Field+": "+vs[0].Description, vs...)
		return it
	}
	it.tenant = tenant
	it.ev = fromEventsV1(&in)
	it.ev.Tenant = tenant
	if it.ev.Uid == "" && idemKey != "" {
		it.ev.Uid = uuid.NewSHA1(uidNamespace, []byte(tenant.GetType()+"\x00"+tenant.GetName()+"\x00"+idemKey+"\x00"+prefix)).String()
	}
	if s := in.Series; s != nil && in.UID != "" {
		it.version = fmt.Sprintf("series/%d/%s", s.Count, s.LastObservedTime.UTC().Format(time.RFC3339Nano))
	}
	it.field = func(rel string) string { return prefix + listField(rel, typeKey, nameKey) }
	return it
}

// listField names, in events.k8s.io/v1 terms, the field Emit calls rel.
func listField(rel, typeKey, nameKey string) string {
	for _, m := range [...]struct{ from, to string }{
		{".uid", ".metadata.uid"},
		{".name", ".metadata.name"},
		{".namespace", ".metadata.namespace"},
		{".labels", ".metadata.labels"},
		{".annotations", ".metadata.annotations"},
		{".tenant.type", ".metadata.annotations[" + typeKey + "]"},
		{".tenant.name", ".metadata.annotations[" + nameKey + "]"},
	} {
		if rel == m.from || strings.HasPrefix(rel, m.from+".") || strings.HasPrefix(rel, m.from+"[") {
			return m.to + rel[len(m.from):]
		}
	}
	return rel
}

// tenantFromAnnotations reads the tenant an item's annotations name: nil
// when they name none. typeKey and nameKey are the annotations it came from.
func tenantFromAnnotations(ann map[string]string, field string) (t *eventgatev1.Tenant, typeKey, nameKey string, vs []*eventgatev1.FieldViolation) {
	bad := func(key, format string, args ...any) {
		vs = append(vs, &eventgatev1.FieldViolation{Field: field + "[" + key + "]", Description: fmt.Sprintf(format, args...)})
	}
	read := func(tk, nk string) *eventgatev1.Tenant {
		typ, name := ann[tk], ann[nk]
		if typ == "" {
			if name != "" {
				bad(tk, "is required when %s is set", nk)
			}
			return nil
		}
		tn := &eventgatev1.Tenant{Type: strings.ToLower(typ), Name: name}
		if tn.Type == "platform" {
			tn.Type = event.TenantGlobal // Milo's name for the platform-wide scope
		}
		for _, v := range event.ValidateTenant(tn) {
			if v.Field == "type" {
				bad(tk, "%s", v.Description)
			} else {
				bad(nk, "%s", v.Description)
			}
		}
		return tn
	}
	own := read(TenantTypeAnnotation, TenantNameAnnotation)
	scope := read(ScopeTypeAnnotation, ScopeNameAnnotation)
	switch {
	case len(vs) > 0:
		return nil, "", "", vs
	case own != nil && scope != nil && (own.Type != scope.Type || own.Name != scope.Name):
		bad(TenantTypeAnnotation, "names tenant %s/%s but %s names %s/%s", own.Type, own.Name, ScopeTypeAnnotation, scope.Type, scope.Name)
		return nil, "", "", vs
	case own != nil:
		return own, TenantTypeAnnotation, TenantNameAnnotation, nil
	case scope != nil:
		return scope, ScopeTypeAnnotation, ScopeNameAnnotation, nil
	}
	return nil, TenantTypeAnnotation, TenantNameAnnotation, nil
}

// fromEventsV1 converts an EventList item as the Kubernetes API does,
// without the tenant annotations (they became the tenant).
func fromEventsV1(in *eventsv1.Event) *eventgatev1.Event {
	out := k8sevent.FromEventsV1(in)
	for _, k := range []string{ScopeTypeAnnotation, ScopeNameAnnotation, TenantTypeAnnotation, TenantNameAnnotation} {
		delete(out.Annotations, k)
	}
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out
}

// retryable codes are failures of the gateway or its store, not of the item.
func retryable(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// listResult builds the answer and its HTTP status: 200 when every item was
// stored; when items failed, 503 if any failed for a retryable reason (so a
// webhook backend retries the list; stored items with a uid are then
// DUPLICATE), else the failures' own status when every item failed the same
// way (403, 400), else 207 Multi-Status.
func listResult(items []*item) (int, ListResult) {
	res := ListResult{Items: make([]ItemResult, len(items))}
	var codesSeen []codes.Code
	anyRetryable := false
	for i, it := range items {
		ir := ItemResult{Index: it.index}
		if it.tenant != nil {
			ir.Tenant = &Tenant{Type: it.tenant.GetType(), Name: it.tenant.GetName()}
		}
		switch {
		case it.err != nil:
			c := codeOf(it.err.GetCode())
			ir.Error = &ItemError{Code: it.err.GetCode(), HTTPStatus: runtime.HTTPStatusFromCode(c), Message: it.err.GetMessage()}
			for _, v := range it.err.GetFieldViolations() {
				ir.Error.FieldViolations = append(ir.Error.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
			res.Failed++
			codesSeen = append(codesSeen, c)
			anyRetryable = anyRetryable || retryable(c)
		case it.res != nil:
			ir.UID, ir.Name, ir.ResourceVersion, ir.SeriesUID = it.res.GetUid(), it.res.GetName(), it.res.GetResourceVersion(), it.res.GetSeriesUid()
			ir.Outcome = it.res.GetOutcome().String()
			res.Accepted++
		}
		res.Items[i] = ir
	}
	if res.Failed == 0 {
		return http.StatusOK, res
	}
	res.Message = fmt.Sprintf("%d of %d items not stored", res.Failed, len(items))
	uniform := res.Accepted == 0
	for _, c := range codesSeen {
		uniform = uniform && c == codesSeen[0]
	}
	switch {
	case uniform:
		res.Code = int(codesSeen[0])
		return runtime.HTTPStatusFromCode(codesSeen[0]), res
	case anyRetryable:
		res.Code = int(codes.Unavailable)
		return http.StatusServiceUnavailable, res
	}
	return http.StatusMultiStatus, res
}

func codeOf(name string) codes.Code {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return codes.Unknown
}
