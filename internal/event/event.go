// Package event validates events, fills the fields the server owns, and
// encodes them for the stream.
package event

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/subject"
)

// Tenant types. The model is flat: no type implies another.
const (
	TenantGlobal       = "global"
	TenantOrganization = "organization"
	TenantProject      = "project"
	TenantUser         = "user"
)

// TenantTypes lists the valid tenant types.
var TenantTypes = []string{TenantGlobal, TenantOrganization, TenantProject, TenantUser}

// Event types of Kubernetes.
const (
	TypeNormal  = "Normal"
	TypeWarning = "Warning"
)

// Series states.
const (
	SeriesOngoing  = "Ongoing"
	SeriesFinished = "Finished"
)

// Limits bound what an event may carry.
type Limits struct {
	// MaxNoteBytes bounds note (default 1 KiB, at most 64 KiB).
	MaxNoteBytes int `yaml:"maxNoteBytes"`
	// Types are the accepted event types (default Normal, Warning).
	Types []string `yaml:"types"`
}

// MaxNoteLimit is the largest note limit that may be configured.
const MaxNoteLimit = 64 << 10

// DefaultLimits returns the Kubernetes-like defaults.
func DefaultLimits() Limits {
	return Limits{MaxNoteBytes: 1 << 10, Types: []string{TypeNormal, TypeWarning}}
}

// Validate checks the limits themselves.
func (l Limits) Validate() error {
	if l.MaxNoteBytes < 1 || l.MaxNoteBytes > MaxNoteLimit {
		return fmt.Errorf("max note bytes must be in 1..%d, got %d", MaxNoteLimit, l.MaxNoteBytes)
	}
	if len(l.Types) == 0 {
		return fmt.Errorf("at least one event type must be accepted")
	}
	return nil
}

// Field length limits, from the Kubernetes events validation.
const (
	maxShortField = 128 // reason, action, reportingController, reportingInstance
	maxNameField  = 253 // names, namespaces, kinds, api versions, tenant names
	maxMapKey     = 317 // a qualified key: 253-byte prefix, '/', 63-byte name
	maxMapValue   = 4096
	maxMapEntries = 64
)

// Violation names one invalid field.
type Violation struct {
	Field       string
	Description string
}

// Normalizer fills the server's fields and validates events.
type Normalizer struct {
	Limits Limits
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
}

// uidNamespace scopes deterministic uids derived from idempotency keys.
var uidNamespace = uuid.MustParse("8b7c2f0e-5d3a-4c1e-9f6b-2a1d0e4c7b59")

// Normalize validates ev in place and fills what the server owns: tenant
// (from def, else global), namespace (from regarding), type (Normal), eventTime
// (now, microseconds), uid (derived from idemKey when given, else random) and
// name. field is the path prefix used in violations, e.g. "events[3]".
func (n Normalizer) Normalize(ev *eventgatev1.Event, def *eventgatev1.Tenant, idemKey string, field string) []Violation {
	var vs []Violation
	bad := func(f, format string, args ...any) {
		vs = append(vs, Violation{Field: field + "." + f, Description: fmt.Sprintf(format, args...)})
	}
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}

	if ev.Tenant == nil || (ev.Tenant.Type == "" && ev.Tenant.Name == "") {
		if def != nil && (def.Type != "" || def.Name != "") {
			// A copy of its two fields: proto.Clone, by reflection, was 1%
			// of the CPU of an emit stream whose batches name the tenant.
			ev.Tenant = &eventgatev1.Tenant{Type: def.Type, Name: def.Name}
		} else {
			ev.Tenant = &eventgatev1.Tenant{Type: TenantGlobal}
		}
	}
	for _, v := range ValidateTenant(ev.Tenant) {
		bad("tenant."+v.Field, "%s", v.Description)
	}

	if ev.Regarding == nil {
		bad("regarding", "is required")
	} else {
		checkRef(ev.Regarding, "regarding", true, bad)
	}
	if ev.Related != nil {
		checkRef(ev.Related, "related", false, bad)
	}
	if ev.Namespace == "" && ev.Regarding != nil {
		ev.Namespace = ev.Regarding.Namespace
	}
	checkString(ev.Namespace, "namespace", maxNameField, bad)

	if ev.Reason == "" {
		bad("reason", "is required")
	}
	checkString(ev.Reason, "reason", maxShortField, bad)
	checkString(ev.Action, "action", maxShortField, bad)
	checkString(ev.ReportingController, "reportingController", maxShortField, bad)
	checkString(ev.ReportingInstance, "reportingInstance", maxShortField, bad)
	if len(ev.Note) > n.Limits.MaxNoteBytes {
		bad("note", "must be at most %d bytes, got %d", n.Limits.MaxNoteBytes, len(ev.Note))
	}

	if ev.Type == "" {
		ev.Type = TypeNormal
	}
	if !slices.Contains(n.Limits.Types, ev.Type) {
		bad("type", "must be one of %s, got %q", strings.Join(n.Limits.Types, ", "), ev.Type)
	}

	normalizeTimes(ev, now, bad)

	checkMap(ev.Labels, "labels", bad)
	checkMap(ev.Annotations, "annotations", bad)
	checkMap(ev.Metadata, "metadata", bad)

	normalizeIdentity(ev, idemKey, field, bad)
	ev.ResourceVersion = ""

	if len(vs) == 0 {
		if s := SubjectOf(ev); len(s) > MaxSubjectBytes {
			bad("regarding", "tenant, kind, namespace and name together encode to a %d-byte subject, more than %d", len(s), MaxSubjectBytes)
		}
	}
	return vs
}

// normalizeTimes checks ev's event time (now when unset) and its series,
// and truncates their times to microseconds (Kubernetes MicroTime).
func normalizeTimes(ev *eventgatev1.Event, now func() time.Time, bad func(string, string, ...any)) {
	if ev.EventTime == nil {
		ev.EventTime = timestamppb.New(now())
	} else if err := checkTime(ev.EventTime); err != nil {
		bad("eventTime", "%v", err)
	}
	if ev.EventTime.IsValid() {
		ev.EventTime.Nanos -= ev.EventTime.Nanos % 1000 // Kubernetes MicroTime
	}

	if s := ev.Series; s != nil {
		if s.Count < 1 {
			bad("series.count", "must be at least 1, got %d", s.Count)
		}
		if s.State != "" && s.State != SeriesOngoing && s.State != SeriesFinished {
			bad("series.state", "must be %q or %q, got %q", SeriesOngoing, SeriesFinished, s.State)
		}
		if s.LastObservedTime != nil {
			if err := checkTime(s.LastObservedTime); err != nil {
				bad("series.lastObservedTime", "%v", err)
			} else {
				s.LastObservedTime.Nanos -= s.LastObservedTime.Nanos % 1000
			}
		}
	}
}

// normalizeIdentity checks ev's uid and name, and fills them when unset:
// the uid derived from idemKey (with the tenant and field) when given, else
// random; the name from the regarding object's and the uid.
func normalizeIdentity(ev *eventgatev1.Event, idemKey, field string, bad func(string, string, ...any)) {
	if ev.Uid != "" {
		checkPathSegment(ev.Uid, "uid", bad)
	}
	if ev.Name != "" {
		checkPathSegment(ev.Name, "name", bad)
	}
	if ev.Uid == "" {
		if idemKey != "" {
			ev.Uid = uuid.NewSHA1(uidNamespace, []byte(ev.Tenant.GetType()+"\x00"+ev.Tenant.GetName()+"\x00"+idemKey+"\x00"+field)).String()
		} else {
			ev.Uid = uuid.Must(uuid.NewV7()).String()
		}
	}
	checkString(ev.Uid, "uid", maxShortField, bad)
	if ev.Name == "" && ev.Regarding != nil {
		suffix := strings.ReplaceAll(ev.Uid, "-", "")
		if len(suffix) > 16 {
			suffix = suffix[:16]
		}
		ev.Name = pathSafe(ev.Regarding.Name) + "." + suffix
	}
	checkString(ev.Name, "name", maxNameField+17, bad)
}

// Event times must fall in [MinTime, MaxTime): the range every store of an
// event (ClickHouse's DateTime retention arithmetic included) represents
// exactly. A time outside it (a negative Unix time, year 9999) is a
// caller's bug, and would be stored wrongly or expire at once.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(2100, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// checkTime reports why t is not an acceptable event time.
func checkTime(t *timestamppb.Timestamp) error {
	if err := t.CheckValid(); err != nil {
		return fmt.Errorf("is not a valid time: %w", err)
	}
	if at := t.AsTime(); at.Before(MinTime) || !at.Before(MaxTime) {
		return fmt.Errorf("must be between %s and %s, got %s", MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339), at.Format(time.RFC3339Nano))
	}
	return nil
}

// Printable reports whether s is valid UTF-8 without control characters.
func Printable(s string) bool { return printable(s) }

// MaxSubjectBytes bounds an event subject, well below NATS' control-line limit.
const MaxSubjectBytes = 1024

// ValidateTenant checks a tenant; field names are relative to the tenant.
func ValidateTenant(t *eventgatev1.Tenant) []Violation {
	var vs []Violation
	if !slices.Contains(TenantTypes, t.GetType()) {
		vs = append(vs, Violation{"type", fmt.Sprintf("must be one of %s, got %q", strings.Join(TenantTypes, ", "), t.GetType())})
	}
	switch {
	case t.GetType() == TenantGlobal:
		if t.GetName() == subject.Empty {
			t.Name = "" // the design's placeholder for the global tenant
		}
		if t.GetName() != "" {
			vs = append(vs, Violation{"name", fmt.Sprintf("must be empty for the global tenant, got %q", t.GetName())})
		}
	case t.GetName() == "":
		vs = append(vs, Violation{"name", "is required"})
	case t.GetName() == "*":
		vs = append(vs, Violation{"name", `"*" is reserved: it stands for every tenant of a type in grants`})
	case len(t.GetName()) > maxNameField:
		vs = append(vs, Violation{"name", fmt.Sprintf("must be at most %d bytes", maxNameField)})
	case !printable(t.GetName()):
		vs = append(vs, Violation{"name", "must be printable text"})
	}
	return vs
}

// ValidateTenantSelector checks a tenant named in a filter: like
// ValidateTenant, except that a type without a name (other than global)
// selects every tenant of the type.
func ValidateTenantSelector(t *eventgatev1.Tenant) []Violation {
	if t.GetName() == "" && t.GetType() != TenantGlobal {
		if slices.Contains(TenantTypes, t.GetType()) {
			return nil
		}
		return ValidateTenant(&eventgatev1.Tenant{Type: t.GetType(), Name: "x"})
	}
	return ValidateTenant(t)
}

func checkRef(r *eventgatev1.ObjectReference, f string, required bool, bad func(string, string, ...any)) {
	if required && r.Kind == "" {
		bad(f+".kind", "is required")
	}
	if required && r.Name == "" {
		bad(f+".name", "is required")
	}
	checkRefField(r.ApiVersion, f, "apiVersion", maxNameField, bad)
	checkRefField(r.Kind, f, "kind", maxNameField, bad)
	checkRefField(r.Namespace, f, "namespace", maxNameField, bad)
	checkRefField(r.Name, f, "name", maxNameField, bad)
	checkRefField(r.Uid, f, "uid", maxShortField, bad)
	checkRefField(r.FieldPath, f, "fieldPath", maxNameField, bad)
	checkRefField(r.ResourceVersion, f, "resourceVersion", maxShortField, bad)
}

// checkRefField is checkString for the field ref.name, whose path is built
// only for a violation: every event has two references, and building the
// paths of their seven fields up front was 1.4% of what the gateway
// allocated under load.
func checkRefField(s, ref, name string, max int, bad func(string, string, ...any)) {
	if len(s) <= max && printable(s) {
		return
	}
	checkString(s, ref+"."+name, max, bad)
}

// checkPathSegment refuses what cannot be one segment of a REST path (GET
// /v1/events/{uid}, /v1/namespaces/{namespace}/events/{name}, the
// Kubernetes API): Kubernetes' rule for names, no "/" or "%", not "." or "..".
func checkPathSegment(s, f string, bad func(string, string, ...any)) {
	if s == "." || s == ".." || strings.ContainsAny(s, "/%") {
		bad(f, `must not contain "/" or "%%" and must not be "." or ".." (it is a REST path segment), got %q`, truncate(s))
	}
}

// pathSafe replaces the bytes a path segment cannot hold ("/" and "%").
func pathSafe(s string) string {
	if !strings.ContainsAny(s, "/%") {
		return s
	}
	return strings.NewReplacer("/", "-", "%", "-").Replace(s)
}

func checkString(s, f string, max int, bad func(string, string, ...any)) {
	switch {
	case len(s) > max:
		bad(f, "must be at most %d bytes, got %d", max, len(s))
	case !printable(s):
		bad(f, "must be printable text without control characters")
	}
}

func checkMap(m map[string]string, f string, bad func(string, string, ...any)) {
	if len(m) > maxMapEntries {
		bad(f, "must have at most %d entries, got %d", maxMapEntries, len(m))
		return
	}
	for k, v := range m {
		switch {
		case k == "":
			bad(f, "keys must not be empty")
		case len(k) > maxMapKey || !printable(k):
			bad(f+"["+truncate(k)+"]", "key must be printable and at most %d bytes", maxMapKey)
		case len(v) > maxMapValue:
			bad(f+"["+truncate(k)+"]", "value must be at most %d bytes, got %d", maxMapValue, len(v))
		}
	}
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// KeyOf returns the subject key of a normalized event.
func KeyOf(ev *eventgatev1.Event) subject.Key {
	return subject.Key{
		TenantType: ev.GetTenant().GetType(),
		TenantName: ev.GetTenant().GetName(),
		Group:      subject.GroupFromAPIVersion(ev.GetRegarding().GetApiVersion()),
		Kind:       ev.GetRegarding().GetKind(),
		Namespace:  ev.GetNamespace(),
	}
}

// SubjectOf returns the stream subject of a normalized event.
func SubjectOf(ev *eventgatev1.Event) string { return KeyOf(ev).Subject() }

// MsgID returns the JetStream message id that makes a retry idempotent, or ""
// when the caller gave neither an idempotency key nor a uid. It is scoped to
// the tenant so that one tenant's ids never collide with another's. An event
// with the caller's own uid and an idempotency key is a write of that event
// named by the key: a new version of an existing event (an update through
// the Kubernetes API) is not taken for a retry of the previous one.
func MsgID(ev *eventgatev1.Event, callerUID bool, idemKey string) string {
	if idemKey == "" && !callerUID {
		return ""
	}
	id := ev.GetTenant().GetType() + "/" + ev.GetTenant().GetName() + "/" + ev.GetUid()
	if callerUID && idemKey != "" {
		id += "/" + idemKey
	}
	return id
}

// Marshal encodes an event for the stream. The resourceVersion is not stored:
// it is the stream sequence.
//
// The bytes are protobuf-go's deterministic encoding (fields in number
// order, map entries by key), made faster: the generated code (vtprotobuf)
// encodes all but the maps, which it would write in Go's random map order,
// and the maps (the last fields stored) are appended here in key order.
// protobuf-go encodes maps through reflection and allocated 22 times per
// workload event. An event with fields this version does not know, or a
// string that is not UTF-8 (which protobuf-go refuses to encode), goes to
// protobuf-go (TestMarshalIsProtobufDeterministic).
func Marshal(ev *eventgatev1.Event) ([]byte, error) {
	return AppendMarshal(nil, ev)
}

// Size is the length of ev's encoding (Marshal).
func Size(ev *eventgatev1.Event) int {
	if len(ev.ProtoReflect().GetUnknown()) > 0 {
		rv := ev.ResourceVersion
		ev.ResourceVersion = ""
		n := proto.MarshalOptions{Deterministic: true}.Size(ev)
		ev.ResourceVersion = rv
		return n
	}
	return coreSize(ev) + mapSize(fieldLabels, ev.Labels) + mapSize(fieldAnnotations, ev.Annotations) + mapSize(fieldMetadata, ev.Metadata)
}

// coreSize is the size of ev's encoding without its maps.
func coreSize(ev *eventgatev1.Event) int {
	rv, labels, annotations, metadata := ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata
	ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata = "", nil, nil, nil
	n := ev.SizeVT()
	ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata = rv, labels, annotations, metadata
	return n
}

// AppendMarshal appends ev's encoding (Marshal) to b, in place when b has
// room for Size(ev) more bytes: the intake writes a batch's events into the
// batch this way.
func AppendMarshal(b []byte, ev *eventgatev1.Event) ([]byte, error) {
	start := len(b)
	if len(ev.ProtoReflect().GetUnknown()) > 0 {
		m, err := marshalProto(ev)
		if err != nil {
			return b, err
		}
		return append(b, m...), nil
	}
	rv, labels, annotations, metadata := ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata
	ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata = "", nil, nil, nil
	core := ev.SizeVT()
	b = slices.Grow(b, core+mapSize(fieldLabels, labels)+mapSize(fieldAnnotations, annotations)+mapSize(fieldMetadata, metadata))[:start+core]
	_, err := ev.MarshalToSizedBufferVT(b[start:])
	ev.ResourceVersion, ev.Labels, ev.Annotations, ev.Metadata = rv, labels, annotations, metadata
	if err != nil {
		return b[:start], fmt.Errorf("marshal event: %w", err)
	}
	b = appendMap(b, fieldLabels, labels)
	b = appendMap(b, fieldAnnotations, annotations)
	b = appendMap(b, fieldMetadata, metadata)
	if !ValidUTF8(b[start:], eventDescriptor) {
		m, err := marshalProto(ev) // which refuses it, saying where
		if err != nil {
			return b[:start], err
		}
		b = append(b[:start], m...)
	}
	return b, nil
}

func marshalProto(ev *eventgatev1.Event) ([]byte, error) {
	rv := ev.ResourceVersion
	ev.ResourceVersion = ""
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
	ev.ResourceVersion = rv
	if err != nil {
		return nil, fmt.Errorf("marshal event: %w", err)
	}
	return b, nil
}

// Field numbers of Event's maps: the last fields an event stores.
const (
	fieldLabels      protowire.Number = 15
	fieldAnnotations protowire.Number = 16
	fieldMetadata    protowire.Number = 17
)

func mapEntrySize(k, v string) int {
	return 1 + protowire.SizeBytes(len(k)) + 1 + protowire.SizeBytes(len(v))
}

func mapSize(num protowire.Number, m map[string]string) int {
	n := 0
	for k, v := range m {
		n += protowire.SizeTag(num) + protowire.SizeBytes(mapEntrySize(k, v))
	}
	return n
}

// appendMap appends m's entries as protobuf-go's deterministic encoding
// does: by key, each with its key and value.
func appendMap(b []byte, num protowire.Number, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	var arr [8]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := m[k]
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(mapEntrySize(k, v)))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// Unmarshal decodes an event from the stream, with the code generated for
// it (gen/eventgate/v1/event_vtproto.pb.go, buf.gen.vtproto.yaml) rather
// than protobuf-go's, which decodes map fields through reflection: every
// stored event is decoded by the intake's owner, the live feed and the
// ingest, and those decodes were a fifth of the bytes the gateway allocated
// under load. The generated code does not check that strings are UTF-8:
// what it decodes was encoded by protobuf-go (Marshal), which refuses
// anything else; untrusted input goes through protobuf-go (the gRPC codec).
func Unmarshal(b []byte) (*eventgatev1.Event, error) {
	ev := &eventgatev1.Event{}
	if err := ev.UnmarshalVT(b); err != nil {
		return nil, fmt.Errorf("unmarshal event: %w", err)
	}
	return ev, nil
}

// UnmarshalAliased is Unmarshal whose strings share b's memory instead of
// copying it: for a reader that keeps b as long as it keeps the event (the
// ingest keeps a message's bytes with its row; the intake's owner writes an
// occurrence's own bytes). b must not change afterwards, and a string kept
// longer than b is needed keeps all of b: clone it (strings.Clone).
func UnmarshalAliased(b []byte) (*eventgatev1.Event, error) {
	ev := &eventgatev1.Event{}
	if err := ev.UnmarshalVTUnsafe(b); err != nil {
		return nil, fmt.Errorf("unmarshal event: %w", err)
	}
	return ev, nil
}

// TruncateUTF8 cuts s to at most n bytes without splitting a rune.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
