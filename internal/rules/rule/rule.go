// Package rule is the domain of eventgate's rules: what a rule is (a
// tenant, a filter, a condition, a destination), how it is validated and
// keyed, and how its message template is compiled. It has no transport:
// package rules stores and evaluates rules on JetStream, and the API
// service speaks these types only.
package rule

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/query"
)

// Errors of a rule store.
var (
	ErrNotFound = errors.New("rule not found")
	ErrExists   = errors.New("rule already exists")
	ErrConflict = errors.New("rule changed since the given revision")
)

// Condition kinds.
const (
	KindEvery    = "every"
	KindCount    = "count"
	KindSeries   = "series"
	KindAbsence  = "absence"
	KindRecovery = "recovery"
)

// Destination kinds.
const (
	DestWebhook     = "webhook"
	DestSlack       = "slack"
	DestCloudEvents = "cloudevents"
	DestNATS        = "nats"
)

// Tenant names a rule's tenant; Name is "" for the global tenant.
type Tenant struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// GroupKind is a kind of regarding object a rule may see.
type GroupKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
}

// Rule is a stored rule. Filter and Resolve are the parsed forms of the
// selectors, kept beside their text so that every replica evaluates what
// the service validated.
type Rule struct {
	// UID is new at every creation: a rule deleted and created again
	// shares neither state nor queue with its predecessor.
	UID                  string        `json:"uid"`
	Tenant               Tenant        `json:"tenant"`
	Name                 string        `json:"name"`
	Description          string        `json:"description,omitempty"`
	FieldSelector        string        `json:"fieldSelector,omitempty"`
	LabelSelector        string        `json:"labelSelector,omitempty"`
	Filter               query.Filter  `json:"filter"`
	ResolveFieldSelector string        `json:"resolveFieldSelector,omitempty"`
	Resolve              *query.Filter `json:"resolve,omitempty"`
	// Kinds are the kinds the rule's author could watch in the tenant;
	// empty: every kind.
	Kinds        []GroupKind   `json:"kinds,omitempty"`
	Condition    Condition     `json:"condition"`
	Renotify     time.Duration `json:"renotify,omitempty"`
	SkipResolved bool          `json:"skipResolved,omitempty"`
	Destination  Destination   `json:"destination"`
	Template     string        `json:"template,omitempty"`
	Paused       bool          `json:"paused,omitempty"`
	PausedReason string        `json:"pausedReason,omitempty"`
	Created      time.Time     `json:"created"`
	Updated      time.Time     `json:"updated"`
	// Revision is the KV revision the rule was read at, Written when the
	// server stored that revision.
	Revision uint64    `json:"-"`
	Written  time.Time `json:"-"`
}

// Condition says when a rule fires.
type Condition struct {
	Kind      string        `json:"kind"`
	Threshold int           `json:"threshold,omitempty"`
	Window    time.Duration `json:"window,omitempty"`
	GroupBy   []string      `json:"groupBy,omitempty"`
}

// Destination is where a rule's notifications go. Secret and the URL's
// secret parts are write-only at the API.
type Destination struct {
	Kind    string `json:"kind"`
	URL     string `json:"url,omitempty"`
	Secret  string `json:"secret,omitempty"`
	Mode    string `json:"mode,omitempty"` // cloudevents: "structured" or "binary"
	Subject string `json:"subject,omitempty"`
}

// Key is the rule's KV key.
func (r *Rule) Key() string { return Key(r.Tenant, r.Name) }

// ID names the rule in notifications and logs: "type/name/rule" (the
// global tenant's name is empty: "global//rule").
func (r *Rule) ID() string { return r.Tenant.Type + "/" + r.Tenant.Name + "/" + r.Name }

// Limits of a rule.
const (
	MinWindow        = time.Second
	MaxCountWindow   = 24 * time.Hour
	MaxAbsenceWindow = 7 * 24 * time.Hour
	MinRenotify      = time.Minute
	MaxThreshold     = 100000
	MaxGroupBy       = 8
	MaxTemplate      = 4096
	MinSecret        = 16
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// FieldError is an invalid field of a rule.
type FieldError struct {
	Field, Description string
}

func (e *FieldError) Error() string { return "invalid " + e.Field + ": " + e.Description }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Description: fmt.Sprintf(format, args...)}
}

// ValidateName checks a rule name.
func ValidateName(field, name string) error {
	if !nameRE.MatchString(name) {
		return fieldErr(field, "must be a DNS label (lowercase letters, digits and '-', at most 63), got %q", name)
	}
	return nil
}

// groupFields are the fields group_by may name, besides "labels.<key>".
var groupFields = []string{"regarding", "regarding.apiVersion", "regarding.kind", "regarding.namespace",
	"regarding.name", "regarding.uid", "reason", "type", "namespace", "reportingController", "reportingInstance", "action"}

// Validate checks what the parsed selectors do not: the condition, the
// suppression and the destination (but not the template: see Compile).
func (r *Rule) Validate() error {
	if err := ValidateName("name", r.Name); err != nil {
		return err
	}
	c := &r.Condition
	switch c.Kind {
	case KindEvery:
	case KindCount:
		if c.Threshold < 1 || c.Threshold > MaxThreshold {
			return fieldErr("condition.count.threshold", "must be between 1 and %d, got %d", MaxThreshold, c.Threshold)
		}
		if c.Window < MinWindow || c.Window > MaxCountWindow {
			return fieldErr("condition.count.window", "must be between %s and %s, got %s", MinWindow, MaxCountWindow, c.Window)
		}
	case KindSeries:
		if c.Threshold == 0 {
			c.Threshold = 2
		}
		if c.Threshold < 2 || c.Threshold > MaxThreshold {
			return fieldErr("condition.series.threshold", "must be between 2 and %d, got %d", MaxThreshold, c.Threshold)
		}
	case KindAbsence:
		if c.Window < MinWindow || c.Window > MaxAbsenceWindow {
			return fieldErr("condition.absence.window", "must be between %s and %s, got %s", MinWindow, MaxAbsenceWindow, c.Window)
		}
	case KindRecovery:
	default:
		return fieldErr("condition", "one of every, count, series, absence or recovery is required")
	}
	if len(c.GroupBy) > MaxGroupBy {
		return fieldErr("condition."+c.Kind+".groupBy", "must have at most %d fields", MaxGroupBy)
	}
	for i, g := range c.GroupBy {
		if !slices.Contains(groupFields, g) && !(strings.HasPrefix(g, "labels.") && len(g) > len("labels.")) {
			return fieldErr(fmt.Sprintf("condition.%s.groupBy[%d]", c.Kind, i), "unknown field %q; one of %s or labels.<key>", g, strings.Join(groupFields, ", "))
		}
	}
	if r.Renotify != 0 && r.Renotify < MinRenotify {
		return fieldErr("suppression.renotifyInterval", "must be at least %s, got %s", MinRenotify, r.Renotify)
	}
	if len(r.Template) > MaxTemplate {
		return fieldErr("template", "must be at most %d bytes", MaxTemplate)
	}
	return r.Destination.validate()
}

func (d *Destination) validate() error {
	switch d.Kind {
	case DestWebhook:
		if err := checkURL("destination.webhook.url", d.URL); err != nil {
			return err
		}
		if len(d.Secret) < MinSecret {
			return fieldErr("destination.webhook.secret", "must be at least %d bytes", MinSecret)
		}
	case DestSlack:
		return checkURL("destination.slack.url", d.URL)
	case DestCloudEvents:
		if d.Mode != "structured" && d.Mode != "binary" {
			return fieldErr("destination.cloudevents.mode", "must be structured or binary")
		}
		return checkURL("destination.cloudevents.url", d.URL)
	case DestNATS:
		return checkSubject("destination.nats.subject", d.Subject)
	default:
		return fieldErr("destination", "one of webhook, slack, cloudevents or nats is required")
	}
	return nil
}

// Groups: the condition's group_by, or the regarding object by default.
func (c Condition) Groups() []string {
	if len(c.GroupBy) == 0 {
		return []string{"regarding"}
	}
	return c.GroupBy
}

// GroupValue is the value of one group_by field of ev.
func GroupValue(ev *eventgatev1.Event, field string) string {
	reg := ev.GetRegarding()
	switch field {
	case "regarding":
		return reg.GetApiVersion() + "/" + reg.GetKind() + "/" + reg.GetNamespace() + "/" + reg.GetName()
	case "regarding.apiVersion":
		return reg.GetApiVersion()
	case "regarding.kind":
		return reg.GetKind()
	case "regarding.namespace":
		return reg.GetNamespace()
	case "regarding.name":
		return reg.GetName()
	case "regarding.uid":
		return reg.GetUid()
	case "reason":
		return ev.GetReason()
	case "type":
		return ev.GetType()
	case "namespace":
		return ev.GetNamespace()
	case "reportingController":
		return ev.GetReportingController()
	case "reportingInstance":
		return ev.GetReportingInstance()
	case "action":
		return ev.GetAction()
	}
	if k, ok := strings.CutPrefix(field, "labels."); ok {
		return ev.GetLabels()[k]
	}
	return ""
}

func checkURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr(field, "must be an absolute http or https URL")
	}
	if len(raw) > 2048 {
		return fieldErr(field, "must be at most 2048 bytes")
	}
	return nil
}

var subjectTokenRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func checkSubject(field, subj string) error {
	if subj == "" || len(subj) > 255 {
		return fieldErr(field, "is required, at most 255 bytes")
	}
	toks := strings.Split(subj, ".")
	for _, t := range toks {
		if !subjectTokenRE.MatchString(t) {
			return fieldErr(field, "must be a literal subject: dot-separated tokens of letters, digits, '_' and '-', got %q", subj)
		}
	}
	if toks[0] == "events" || toks[0] == "eventgate" || strings.HasPrefix(toks[0], "$") || strings.HasPrefix(toks[0], "_") {
		return fieldErr(field, "must not be under the gateway's own subjects (events., eventgate., _, $), got %q", subj)
	}
	return nil
}

// Key is the KV key of the rule name in tenant t. Tenant names are caller
// text; KV keys take only [-/_=.A-Za-z0-9], hence the encoding.
func Key(t Tenant, name string) string {
	return t.Type + "." + encodeName(t.Name) + "." + name
}

// TenantPrefix is the KV key filter of every rule of t.
func TenantPrefix(t Tenant) string { return t.Type + "." + encodeName(t.Name) + ".*" }

func encodeName(s string) string {
	if s == "" {
		return "_"
	}
	return "n" + base64.RawURLEncoding.EncodeToString([]byte(s))
}
