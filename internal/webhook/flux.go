package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/k8sevent"
	"github.com/eventgate/eventgate/internal/subject"
)

// FluxEvent is the event a Flux controller posts to notification-controller
// (github.com/fluxcd/pkg/apis/event/v1 Event), field for field.
type FluxEvent struct {
	InvolvedObject      corev1.ObjectReference `json:"involvedObject"`
	Severity            string                 `json:"severity"`
	Timestamp           metav1.Time            `json:"timestamp"`
	Message             string                 `json:"message"`
	Reason              string                 `json:"reason"`
	Metadata            map[string]string      `json:"metadata,omitempty"`
	ReportingController string                 `json:"reportingController"`
	ReportingInstance   string                 `json:"reportingInstance,omitempty"`
}

// Flux severities and the event types they become.
const (
	SeverityTrace = "trace"
	SeverityInfo  = "info"
	SeverityError = "error"
)

// FluxEventGroup is the API group of RFC-0008's custom metadata keys
// (github.com/fluxcd/pkg/apis/event.Group).
const FluxEventGroup = "event.toolkit.fluxcd.io"

// Controller metadata keys (after the object's group prefix) that
// notification-controller never forwards: checksum and digest are internal,
// token is a secret.
var fluxExcludedKeys = []string{"checksum", "digest", "token"}

// Annotations eventgate adds to a stored Flux event.
const (
	// SeverityAnnotation keeps the Flux severity (trace and info are both Normal).
	SeverityAnnotation = "eventgate.io/flux-severity"
	// NoteTruncatedAnnotation holds the byte length of a message that was cut
	// to the note limit.
	NoteTruncatedAnnotation = "eventgate.io/note-truncated-from-bytes"
)

// Metadata conflicts are reported as notification-controller does: a
// Warning event with this reason, annotated with each conflicting key and its
// sources.
const (
	ConflictReason     = "MetadataAppendFailed"
	ConflictController = "eventgate.io/flux-webhook"
	conflictMessage    = "metadata key conflicts detected (please refer to Flux RFC 0008 for more information)"
)

// Sources of Flux metadata, lowest precedence first (RFC-0008; the tenant's
// configured metadata takes the place of the Alert's .spec.eventMetadata).
const (
	SourceObjectAnnotations  = "involved object annotations"
	SourceTenantMetadata     = "tenant metadata"
	SourceControllerMetadata = "involved object controller metadata"
)

// Conflict is a metadata key that more than one source set.
type Conflict struct {
	Key     string   `json:"key"`
	Sources []string `json:"sources"`
}

// CombineMetadata applies RFC-0008 to a Flux event's metadata, as
// notification-controller does: keys prefixed "event.toolkit.fluxcd.io/"
// (the object's annotations) lose the prefix; tenant's keys override them;
// keys prefixed with the involved object's API group and "/" (the
// controller's) lose the prefix and override both. Other keys, and the
// controller's checksum, digest and token, are dropped. Conflicts are sorted
// by key, their sources in precedence order.
func CombineMetadata(in map[string]string, involvedAPIVersion string, tenant map[string]string) (map[string]string, []Conflict) {
	out := map[string]string{}
	sources := map[string][]string{}
	set := func(k, v, source string) {
		out[k] = v
		sources[k] = append(sources[k], source)
	}
	const eventPrefix = FluxEventGroup + "/"
	for _, k := range sortedKeys(in) {
		if key, ok := strings.CutPrefix(k, eventPrefix); ok && key != "" {
			set(key, in[k], SourceObjectAnnotations)
		}
	}
	for _, k := range sortedKeys(tenant) {
		set(k, tenant[k], SourceTenantMetadata)
	}
	objectPrefix := subject.GroupFromAPIVersion(involvedAPIVersion) + "/"
	if objectPrefix != eventPrefix {
		for _, k := range sortedKeys(in) {
			if key, ok := strings.CutPrefix(k, objectPrefix); ok && key != "" && !slices.Contains(fluxExcludedKeys, key) {
				set(key, in[k], SourceControllerMetadata)
			}
		}
	}
	var conflicts []Conflict
	for _, k := range sortedKeys(out) {
		if len(sources[k]) > 1 {
			conflicts = append(conflicts, Conflict{Key: k, Sources: sources[k]})
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, conflicts
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// FluxConfig configures POST /webhook/flux.
type FluxConfig struct {
	// TenantMetadata is metadata added to the Flux events of a tenant, with
	// the precedence RFC-0008 gives an Alert's .spec.eventMetadata. The key
	// is "type/name" (e.g. "project/shop"), "type/*" for every tenant of a
	// type, or "global"; a "type/name" entry overrides "type/*" key by key.
	// It applies to requests that name their tenant (tenant.type and
	// tenant.name query parameters): the caller's default tenant is only
	// known inside Emit.
	TenantMetadata map[string]map[string]string `yaml:"tenantMetadata"`
}

// Validate checks the configuration.
func (c FluxConfig) Validate() error {
	_, err := newTenantMetadata(c.TenantMetadata)
	return err
}

// tenantMetadata resolves a tenant's configured metadata.
type tenantMetadata struct {
	exact  map[string]map[string]string // "type/name"
	byType map[string]map[string]string // "type"
}

const maxTenantMetadata = 64 // what an event's metadata may hold

func newTenantMetadata(m map[string]map[string]string) (*tenantMetadata, error) {
	t := &tenantMetadata{exact: map[string]map[string]string{}, byType: map[string]map[string]string{}}
	var errs []error
	for k, md := range m {
		if len(md) > maxTenantMetadata {
			errs = append(errs, fmt.Errorf("flux tenant metadata %q: at most %d keys, got %d", k, maxTenantMetadata, len(md)))
		}
		for mk := range md {
			if mk == "" {
				errs = append(errs, fmt.Errorf("flux tenant metadata %q: empty key", k))
			}
		}
		typ, name, _ := strings.Cut(k, "/")
		switch {
		case typ == event.TenantGlobal && (name == "" || name == "_"):
			t.exact[event.TenantGlobal+"/"] = md
		case name == "*" && slices.Contains(event.TenantTypes, typ) && typ != event.TenantGlobal:
			t.byType[typ] = md
		default:
			if vs := event.ValidateTenant(&eventgatev1.Tenant{Type: typ, Name: name}); len(vs) > 0 {
				errs = append(errs, fmt.Errorf("flux tenant metadata %q: want \"type/name\", \"type/*\" or \"global\": tenant %s %s", k, vs[0].Field, vs[0].Description))
				continue
			}
			t.exact[typ+"/"+name] = md
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// lookup returns the metadata configured for tenant t (nil: none).
func (t *tenantMetadata) lookup(tn *eventgatev1.Tenant) map[string]string {
	if tn == nil {
		return nil
	}
	base, exact := t.byType[tn.GetType()], t.exact[tn.GetType()+"/"+tn.GetName()]
	if len(base) == 0 {
		return exact
	}
	out := make(map[string]string, len(base)+len(exact))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range exact {
		out[k] = v
	}
	return out
}

// FluxResult answers a Flux event.
type FluxResult struct {
	// Event is the stored event's result.
	Event ItemResult `json:"event"`
	// Metadata is the metadata stored, after RFC-0008's rules.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Conflicts are the metadata keys set by more than one source.
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// ConflictEvent is the result of the Warning event that reports them.
	ConflictEvent *ItemResult `json:"conflictEvent,omitempty"`
}

// fluxUIDNamespace scopes the uids derived from Flux payloads.
var fluxUIDNamespace = uuid.MustParse("c3d5e0a2-6b1f-4e8a-9d47-1f2b3c4d5e6f")

func (h *handler) flux(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxBodyBytes)))
	if err != nil {
		writeBodyError(w, err, "")
		return
	}
	var in FluxEvent
	if err := json.Unmarshal(body, &in); err != nil {
		writeBodyError(w, err, "")
		return
	}
	tenant, typ, vs := fluxTenantAndType(r.URL.Query(), in.Severity)
	if len(vs) > 0 {
		writeStatus(w, badRequest(vs...))
		return
	}

	meta, conflicts := CombineMetadata(in.Metadata, in.InvolvedObject.APIVersion, h.meta.lookup(tenant))
	ev := &eventgatev1.Event{
		// A retried post (same body, same tenant) is stored once.
		Uid:                 uuid.NewSHA1(fluxUIDNamespace, append([]byte(tenant.GetType()+"\x00"+tenant.GetName()+"\x00"), body...)).String(),
		Tenant:              tenant,
		ReportingController: in.ReportingController,
		ReportingInstance:   in.ReportingInstance,
		Reason:              in.Reason,
		Regarding:           k8sevent.FromObjectReference(&in.InvolvedObject),
		Note:                in.Message,
		Type:                typ,
		Metadata:            meta,
		Annotations:         map[string]string{SeverityAnnotation: in.Severity},
	}
	if !in.Timestamp.IsZero() {
		ev.EventTime = timestamppb.New(in.Timestamp.Time)
	}
	if max := h.opts.MaxNoteBytes; max > 0 && len(ev.Note) > max {
		ev.Annotations[NoteTruncatedAnnotation] = strconv.Itoa(len(ev.Note))
		ev.Note = event.TruncateUTF8(ev.Note, max)
	}

	ctx, err := h.outgoing(r, FluxPath)
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	main := &item{ev: ev, tenant: tenant, field: fluxField}
	if st := h.em.emit(ctx, []*item{main}); st != nil {
		writeStatus(w, st)
		return
	}
	if main.err != nil {
		if main.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(main.retryAfter))
		}
		writeStatus(w, statusOf(main.err))
		return
	}
	res := FluxResult{Metadata: meta, Conflicts: conflicts}
	_, lr := listResult([]*item{main})
	res.Event = lr.Items[0]
	if len(conflicts) > 0 {
		h.opts.Log.Info("flux metadata key conflicts", "involvedObject", in.InvolvedObject.Kind+"/"+in.InvolvedObject.Namespace+"/"+in.InvolvedObject.Name,
			"tenant", tenant.GetType()+"/"+tenant.GetName(), "conflicts", conflicts)
		warn := &item{ev: conflictEvent(ev, conflicts, h.opts.MaxNoteBytes), tenant: tenant, field: func(rel string) string { return "metadata" }}
		if st := h.em.emit(ctx, []*item{warn}); st != nil {
			warn.fail(st.Code(), st.Message())
		}
		if warn.err != nil {
			h.opts.Log.Warn("flux metadata conflict event not stored", "code", warn.err.GetCode(), "err", warn.err.GetMessage())
		}
		_, lr := listResult([]*item{warn})
		res.ConflictEvent = &lr.Items[0]
	}
	writeJSON(w, http.StatusOK, res)
}

// fluxTenantAndType are a Flux event's tenant (from the query, nil when it
// names none) and its event type (from its severity), or what is wrong with
// them.
func fluxTenantAndType(q url.Values, severity string) (tenant *eventgatev1.Tenant, typ string, vs []event.Violation) {
	if typ, name := q.Get("tenant.type"), q.Get("tenant.name"); typ != "" || name != "" {
		tenant = &eventgatev1.Tenant{Type: typ, Name: name}
		for _, v := range event.ValidateTenant(tenant) {
			vs = append(vs, event.Violation{Field: "tenant." + v.Field, Description: v.Description})
		}
	}
	switch severity {
	case SeverityInfo, SeverityTrace:
		typ = event.TypeNormal
	case SeverityError:
		typ = event.TypeWarning
	default:
		vs = append(vs, event.Violation{Field: "severity", Description: fmt.Sprintf("must be %q, %q or %q, got %q", SeverityTrace, SeverityInfo, SeverityError, severity)})
	}
	return tenant, typ, vs
}

// conflictEvent is the Warning event that reports metadata conflicts of ev:
// about the same object, in the same tenant, annotated with each key and its
// sources.
func conflictEvent(ev *eventgatev1.Event, conflicts []Conflict, maxNote int) *eventgatev1.Event {
	ann := make(map[string]string, len(conflicts))
	parts := make([]string, len(conflicts))
	for i, c := range conflicts {
		ann[c.Key] = strings.Join(c.Sources, ", ")
		parts[i] = fmt.Sprintf("%s (%s)", c.Key, ann[c.Key])
	}
	note := conflictMessage + ": " + strings.Join(parts, "; ")
	if maxNote > 0 {
		note = event.TruncateUTF8(note, maxNote)
	}
	return &eventgatev1.Event{
		Uid:                 uuid.NewSHA1(fluxUIDNamespace, []byte(ev.GetUid()+"/"+ConflictReason)).String(),
		Tenant:              ev.GetTenant(),
		EventTime:           ev.GetEventTime(),
		ReportingController: ConflictController,
		Reason:              ConflictReason,
		Regarding:           ev.GetRegarding(),
		Note:                note,
		Type:                event.TypeWarning,
		Annotations:         ann,
	}
}

// fluxField names, in the Flux payload's terms, the field Emit calls rel.
func fluxField(rel string) string {
	for _, m := range [...]struct{ from, to string }{
		{".regarding", "involvedObject"},
		{".namespace", "involvedObject.namespace"},
		{".name", "involvedObject.name"},
		{".note", "message"},
		{".eventTime", "timestamp"},
		{".type", "severity"},
		{".tenant", "tenant"},
	} {
		if rel == m.from || strings.HasPrefix(rel, m.from+".") || strings.HasPrefix(rel, m.from+"[") {
			return m.to + rel[len(m.from):]
		}
	}
	return strings.TrimPrefix(rel, ".")
}

// statusOf turns an item's EmitError back into the status to answer.
func statusOf(e *eventgatev1.EmitError) *status.Status {
	st := status.New(codeOf(e.GetCode()), e.GetMessage())
	if len(e.GetFieldViolations()) == 0 {
		return st
	}
	br := &errdetails.BadRequest{}
	for _, v := range e.GetFieldViolations() {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
	}
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st
}
