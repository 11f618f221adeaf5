package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	cloudevent "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
)

// CloudEventsPath serves CloudEvents over HTTP: structured, binary and batched.
const CloudEventsPath = "/webhook/cloudevents"

// CloudEvents extension attributes that set fields of the stored event
// which no context attribute carries. Every other extension is kept in the
// event's metadata under its own name.
const (
	// ExtRegardingKind, ExtRegardingAPIVersion and ExtRegardingNamespace
	// describe the object the subject names (default kind: DefaultKind).
	ExtRegardingKind       = "regardingkind"
	ExtRegardingAPIVersion = "regardingapiversion"
	ExtRegardingNamespace  = "regardingnamespace"
	// ExtEventType is the event type, "Normal" (default) or "Warning".
	ExtEventType = "eventtype"
	// ExtAction is the event's action.
	ExtAction = "action"
	// ExtReportingInstance is the instance of the source that sent it.
	ExtReportingInstance = "reportinginstance"
)

// DefaultKind is the regarding kind of a CloudEvent without a
// regardingkind extension.
const DefaultKind = "CloudEvent"

// Annotations that keep a CloudEvent's context attributes on the stored
// event, so that it can be traced back to (and sent on as) the CloudEvent
// it came from.
const (
	CEIDAnnotation              = "eventgate.io/ce-id"
	CESourceAnnotation          = "eventgate.io/ce-source"
	CETypeAnnotation            = "eventgate.io/ce-type"
	CESpecVersionAnnotation     = "eventgate.io/ce-specversion"
	CESubjectAnnotation         = "eventgate.io/ce-subject"
	CEDataContentTypeAnnotation = "eventgate.io/ce-datacontenttype"
	CEDataSchemaAnnotation      = "eventgate.io/ce-dataschema"
	// CEDataOmittedAnnotation holds the byte length of data that is not
	// text (an image, protobuf), which a note cannot hold.
	CEDataOmittedAnnotation = "eventgate.io/ce-data-omitted-bytes"
)

// maxController is the longest reportingController Emit accepts.
const maxController = 128

// ceUIDNamespace scopes the uids derived from CloudEvents ids.
var ceUIDNamespace = uuid.MustParse("0b7e6f3c-2d4a-4f19-8c5e-9a1d3b7c6e20")

// CloudEventUID is the uid of the event a CloudEvent becomes: the
// CloudEvents id is unique per source, so source and id (and the tenant the
// request names, "" for the caller's default) name the event, and a
// redelivered CloudEvent is the same event.
func CloudEventUID(tenant *eventgatev1.Tenant, source, id string) string {
	return uuid.NewSHA1(ceUIDNamespace, []byte(tenant.GetType()+"\x00"+tenant.GetName()+"\x00"+source+"\x00"+id)).String()
}

func (h *handler) cloudEvents(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxBodyBytes)))
	if err != nil {
		writeBodyError(w, err, "")
		return
	}
	var tenant *eventgatev1.Tenant
	q := r.URL.Query()
	if typ, name := q.Get("tenant.type"), q.Get("tenant.name"); typ != "" || name != "" {
		tenant = &eventgatev1.Tenant{Type: typ, Name: name}
		var vs []event.Violation
		for _, v := range event.ValidateTenant(tenant) {
			vs = append(vs, event.Violation{Field: "tenant." + v.Field, Description: v.Description})
		}
		if len(vs) > 0 {
			writeStatus(w, badRequest(vs...))
			return
		}
	}

	msg := cehttp.NewMessage(r.Header, io.NopCloser(bytes.NewReader(body)))
	var items []*item
	batch := false
	switch msg.ReadEncoding() {
	case binding.EncodingBatch:
		batch = true
		if items = h.ceBatch(w, body, tenant); items == nil {
			return
		}
	case binding.EncodingStructured, binding.EncodingBinary:
		it := &item{}
		ce, err := binding.ToEvent(r.Context(), msg)
		if err == nil {
			err = ce.Validate()
		}
		if err != nil {
			writeStatus(w, badRequest(ceViolations(err, "", msg.ReadEncoding() == binding.EncodingBinary)...))
			return
		}
		h.ceItem(it, ce, tenant, "")
		if it.err != nil {
			writeStatus(w, statusOf(it.err))
			return
		}
		items = []*item{it}
	default:
		writeStatus(w, badRequest(event.Violation{Field: "header Content-Type", Description: fmt.Sprintf(
			"%q is not a CloudEvents mode: send %s (structured), %s (batch), or the event's data with ce-specversion, ce-id, ce-source and ce-type headers (binary)",
			r.Header.Get("Content-Type"), cloudevent.ApplicationCloudEventsJSON, cloudevent.ApplicationCloudEventsBatchJSON)}))
		return
	}

	ctx, err := h.outgoing(r, CloudEventsPath)
	if err != nil {
		writeStatus(w, status.Convert(err))
		return
	}
	if st := h.em.emit(ctx, items); st != nil {
		writeStatus(w, st)
		return
	}
	retry := 0
	for _, it := range items {
		retry = max(retry, it.retryAfter)
	}
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	if !batch {
		if it := items[0]; it.err != nil {
			writeStatus(w, statusOf(it.err))
			return
		}
		_, lr := listResult(items)
		writeJSON(w, http.StatusOK, lr.Items[0])
		return
	}
	code, res := listResult(items)
	writeJSON(w, code, res)
}

// ceBatch reads a JSON batch: every element is a structured CloudEvent,
// decided alone, so that one bad element is refused with its own result. It
// answers and returns nil when the batch as a whole cannot be read.
func (h *handler) ceBatch(w http.ResponseWriter, body []byte, tenant *eventgatev1.Tenant) []*item {
	var raws []json.RawMessage
	if err := json.Unmarshal(body, &raws); err != nil {
		v := decodeViolation(err, "")
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			v = event.Violation{Field: "body", Description: "must be a JSON array of CloudEvents, got a JSON " + typeErr.Value}
		}
		writeStatus(w, badRequest(v))
		return nil
	}
	switch {
	case len(raws) == 0:
		writeStatus(w, badRequest(event.Violation{Field: "body", Description: "at least one CloudEvent is required"}))
		return nil
	case len(raws) > h.opts.MaxBatch:
		writeStatus(w, badRequest(event.Violation{Field: "body", Description: fmt.Sprintf("at most %d CloudEvents per batch, got %d", h.opts.MaxBatch, len(raws))}))
		return nil
	}
	items := make([]*item, len(raws))
	for i, raw := range raws {
		items[i] = h.ceBatchItem(i, raw, tenant)
	}
	return items
}

// ceBatchItem decodes and converts element i of a batch; an element that
// cannot be is decided as refused.
func (h *handler) ceBatchItem(i int, raw json.RawMessage, tenant *eventgatev1.Tenant) *item {
	prefix := fmt.Sprintf("[%d]", i)
	it := &item{index: i}
	var ce cloudevent.Event
	err := format.JSON.Unmarshal(raw, &ce)
	if err == nil {
		err = ce.Validate()
	}
	if err != nil {
		vs := ceViolations(err, prefix, false)
		fvs := make([]*eventgatev1.FieldViolation, len(vs))
		for j, v := range vs {
			fvs[j] = &eventgatev1.FieldViolation{Field: v.Field, Description: v.Description}
		}
		it.fail(codes.InvalidArgument, "invalid "+vs[0].Field+": "+vs[0].Description, fvs...)
		return it
	}
	h.ceItem(it, &ce, tenant, prefix)
	return it
}

// ceViolations names the attributes an SDK decoding or validation error is
// about. A binary-mode error that names none is about the ce-* headers.
func ceViolations(err error, prefix string, binary bool) []event.Violation {
	var ve cloudevent.ValidationError
	if errors.As(err, &ve) && len(ve) > 0 {
		vs := make([]event.Violation, 0, len(ve))
		for _, k := range sortedKeys(ve) {
			vs = append(vs, event.Violation{Field: join(prefix, k), Description: ve[k].Error()})
		}
		return vs
	}
	field := or(prefix, "body")
	if binary {
		field = "headers"
	}
	return []event.Violation{{Field: field, Description: "is not a valid CloudEvent: " + err.Error()}}
}

// ceItem fills it with the event ce becomes, or refuses it (a field Emit
// would refuse in other terms, named here in the CloudEvent's). prefix
// names the element of a batch ("" for a single event).
func (h *handler) ceItem(it *item, ce *cloudevent.Event, tenant *eventgatev1.Tenant, prefix string) {
	ev, fromSource := h.fromCloudEvent(ce, tenant)
	it.tenant, it.ev = tenant, ev
	it.field = func(rel string) string { return join(prefix, ceField(rel, fromSource)) }
}

// fromCloudEvent converts a valid CloudEvent by the documented rules
// (README, "CloudEvents"). fromSource tells that the regarding name is the
// source (the event has no subject).
func (h *handler) fromCloudEvent(ce *cloudevent.Event, tenant *eventgatev1.Tenant) (ev *eventgatev1.Event, fromSource bool) {
	ann := map[string]string{
		CEIDAnnotation:          ce.ID(),
		CESourceAnnotation:      ce.Source(),
		CETypeAnnotation:        ce.Type(),
		CESpecVersionAnnotation: ce.SpecVersion(),
	}
	for k, v := range map[string]string{CESubjectAnnotation: ce.Subject(), CEDataContentTypeAnnotation: ce.DataContentType(), CEDataSchemaAnnotation: ce.DataSchema()} {
		if v != "" {
			ann[k] = v
		}
	}
	name := ce.Subject()
	if name == "" {
		name, fromSource = ce.Source(), true
	}
	ev = &eventgatev1.Event{
		Uid:                 CloudEventUID(tenant, ce.Source(), ce.ID()),
		Tenant:              tenant,
		Reason:              ce.Type(),
		ReportingController: controllerOf(ce.Source()),
		Regarding:           &eventgatev1.ObjectReference{Kind: DefaultKind, Name: name},
		Annotations:         ann,
	}
	if t := ce.Time(); !t.IsZero() {
		ev.EventTime = timestamppb.New(t)
	}
	for _, k := range sortedKeys(ce.Extensions()) {
		v, err := types.Format(ce.Extensions()[k])
		if err != nil {
			continue // the SDK only keeps values of CloudEvents types
		}
		switch k {
		case ExtRegardingKind:
			ev.Regarding.Kind = v
		case ExtRegardingAPIVersion:
			ev.Regarding.ApiVersion = v
		case ExtRegardingNamespace:
			ev.Regarding.Namespace = v
		case ExtEventType:
			ev.Type = v
		case ExtAction:
			ev.Action = v
		case ExtReportingInstance:
			ev.ReportingInstance = v
		default:
			if ev.Metadata == nil {
				ev.Metadata = map[string]string{}
			}
			ev.Metadata[k] = v
		}
	}
	if data := ce.Data(); len(data) > 0 {
		note, ok := textOf(data, ce.DataContentType(), ce.DataBase64)
		if !ok {
			ann[CEDataOmittedAnnotation] = strconv.Itoa(len(data))
		} else {
			if max := h.opts.MaxNoteBytes; max > 0 && len(note) > max {
				ann[NoteTruncatedAnnotation] = strconv.Itoa(len(note))
				note = event.TruncateUTF8(note, max)
			}
			ev.Note = note
		}
	}
	return ev, fromSource
}

// controllerOf is the reportingController of a source: the source itself
// when it fits the field, else its first bytes, "~" and 16 hex digits of its
// SHA-256, so that long sources stay apart (the annotation keeps it whole).
func controllerOf(source string) string {
	if len(source) <= maxController {
		return source
	}
	sum := sha256.Sum256([]byte(source))
	return event.TruncateUTF8(source, maxController-17) + "~" + hex.EncodeToString(sum[:8])
}

// textOf returns data as a note when it is text: JSON (compacted), XML or
// text/*, or data of no declared type that is valid UTF-8 and was not sent
// as base64 (the encoding of binary data in JSON).
func textOf(data []byte, mediaType string, base64 bool) (string, bool) {
	if !utf8.Valid(data) {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(mediaType)
	switch {
	case mediaType == "" && base64:
		return "", false
	case mediaType != "" && err != nil:
		return "", false
	case mediaType == "", mt == "application/json", strings.HasSuffix(mt, "+json"):
		var b bytes.Buffer
		if json.Compact(&b, data) == nil {
			return b.String(), true
		}
		return string(data), true
	case strings.HasPrefix(mt, "text/"), mt == "application/xml", strings.HasSuffix(mt, "+xml"):
		return string(data), true
	}
	return "", false
}

// ceField names, in CloudEvents terms, the field Emit calls rel.
// fromSource: the regarding name came from the source.
func ceField(rel string, fromSource bool) string {
	name := "subject"
	if fromSource {
		name = "source"
	}
	for _, m := range [...]struct{ from, to string }{
		{".regarding.kind", ExtRegardingKind},
		{".regarding.apiVersion", ExtRegardingAPIVersion},
		{".regarding.namespace", ExtRegardingNamespace},
		{".regarding.name", name},
		{".regarding", name},
		{".namespace", ExtRegardingNamespace},
		{".name", name},
		{".reason", "type"},
		{".reportingController", "source"},
		{".reportingInstance", ExtReportingInstance},
		{".action", ExtAction},
		{".type", ExtEventType},
		{".note", "data"},
		{".eventTime", "time"},
		{".uid", "id"},
		{".tenant", "tenant"},
	} {
		if rel == m.from || strings.HasPrefix(rel, m.from+".") {
			return m.to + rel[len(m.from):]
		}
	}
	if k, ok := strings.CutPrefix(rel, ".metadata["); ok {
		return strings.TrimSuffix(k, "]") // an extension, by its name
	}
	if k, ok := strings.CutPrefix(rel, ".annotations["); ok {
		k = strings.TrimSuffix(k, "]")
		for attr, a := range map[string]string{"id": CEIDAnnotation, "source": CESourceAnnotation, "type": CETypeAnnotation, "subject": CESubjectAnnotation, "datacontenttype": CEDataContentTypeAnnotation, "dataschema": CEDataSchemaAnnotation} {
			if k == a {
				return attr
			}
		}
	}
	if slices.Contains([]string{".metadata", ".annotations"}, rel) {
		return "extensions"
	}
	return strings.TrimPrefix(rel, ".")
}
