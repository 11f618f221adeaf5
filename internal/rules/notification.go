package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// The notifications queue's wire contract: this file owns it; the
// evaluator writes it and package notify reads it.
const (
	// NotifyStream holds the notifications, one subject per rule.
	NotifyStream = "EVENTGATE_NOTIFY"
	// NotifySubjects is the stream's subject space.
	NotifySubjects = "eventgate.notify.>"
	// HeaderNotificationID carries the notification's id on the queue.
	HeaderNotificationID = "Eventgate-Notification-Id"
)

// NotifySubject is the queue subject of the rule with uid.
func NotifySubject(ruleUID string) string { return "eventgate.notify." + ruleUID }

// Notification is what a destination receives (as JSON for webhooks, NATS
// and the data of a CloudEvent).
type Notification struct {
	// ID is the idempotency id: rule, trigger event uid, state. The same
	// decision always gets the same id, on whichever replica makes it.
	ID        string            `json:"id"`
	Rule      string            `json:"rule"`
	RuleUID   string            `json:"ruleUid"`
	Tenant    Tenant            `json:"tenant"`
	State     string            `json:"state"`
	Condition string            `json:"condition"`
	Group     map[string]string `json:"group,omitempty"`
	Count     int               `json:"count,omitempty"`
	Time      time.Time         `json:"time"`
	Message   string            `json:"message"`
	// Event is the triggering event (the last one seen, for an absence or
	// a resolve that time made), in the API's JSON form.
	Event json.RawMessage `json:"event,omitempty"`
}

// EventUID is the uid of the notification's event, if any.
func (n *Notification) EventUID() string {
	var ev struct {
		UID string `json:"uid"`
	}
	_ = json.Unmarshal(n.Event, &ev)
	return ev.UID
}

// templateData is what a rule's template sees.
type templateData struct {
	Rule      string
	Tenant    Tenant
	State     string
	Condition string
	Group     map[string]string
	Count     int
	Time      time.Time
	Event     *eventgatev1.Event
}

// DefaultTemplate is the message of a rule without one.
const DefaultTemplate = `[{{.State}}] {{.Rule}}: {{with .Event}}{{.Type}} {{.Reason}} on {{.Regarding.Kind}} {{with .Regarding.Namespace}}{{.}}/{{end}}{{.Regarding.Name}}: {{.Note}}{{end}}{{if gt .Count 1}} ({{.Count}} times){{end}}`

// CompileTemplate parses a rule's template; the error names what is wrong.
func CompileTemplate(text string) (*template.Template, error) {
	if text == "" {
		text = DefaultTemplate
	}
	t, err := template.New("message").Option("missingkey=zero").Funcs(safeFuncs).Parse(text)
	if err != nil {
		return nil, fieldErr("template", "%v", strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, nil
}

var eventJSON = protojson.MarshalOptions{}

// notification builds the notification of f.
func (r *Rule) notification(f Fired, tmpl *template.Template) *Notification {
	n := &Notification{
		ID: f.ID, Rule: r.ID(), RuleUID: r.UID, Tenant: r.Tenant, State: f.State, Condition: r.Condition.Kind,
		Group: f.Group, Count: f.Count, Time: f.Time.UTC(),
	}
	if f.Event != nil {
		if b, err := eventJSON.Marshal(f.Event); err == nil {
			n.Event = b
		}
	}
	var buf limitedBuffer
	ev := f.Event
	if ev == nil {
		ev = &eventgatev1.Event{}
	}
	if tmpl != nil {
		if err := tmpl.Execute(&buf, templateData{Rule: r.ID(), Tenant: r.Tenant, State: f.State, Condition: r.Condition.Kind,
			Group: f.Group, Count: f.Count, Time: f.Time, Event: ev}); err != nil {
			buf.Reset()
			fmt.Fprintf(&buf.Buffer, "[%s] %s (template failed: %v)", f.State, r.ID(), err)
		}
	}
	n.Message = buf.String()
	return n
}

func marshalEvent(ev *eventgatev1.Event) []byte {
	b, _ := proto.Marshal(ev)
	return b
}

func unmarshalEvent(b []byte) *eventgatev1.Event {
	ev := &eventgatev1.Event{}
	_ = proto.Unmarshal(b, ev)
	return ev
}

// MaxMessage bounds a rendered message.
const MaxMessage = 16 << 10

var errTooLong = fmt.Errorf("message longer than %d bytes", MaxMessage)

// limitedBuffer refuses to grow past MaxMessage: a rule's template is
// tenant input and must not make the gateway allocate without bound.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxMessage {
		return 0, errTooLong
	}
	return b.Buffer.Write(p)
}

// safeFuncs replace the printing builtins with ones that refuse a width
// or precision over 1024 (or taken from an argument): "%999999999d" would
// allocate a gigabyte before a single byte reached the buffer.
var safeFuncs = template.FuncMap{
	"printf": func(format string, args ...any) (string, error) {
		if err := checkFormat(format); err != nil {
			return "", err
		}
		return fmt.Sprintf(format, args...), nil
	},
}

func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		n := 0
		for i++; i < len(format); i++ {
			c := format[i]
			switch {
			case c == '*':
				return errors.New("printf: widths from arguments are not allowed")
			case c >= '0' && c <= '9':
				n = n*10 + int(c-'0')
				if n > 1024 {
					return errors.New("printf: widths and precisions are at most 1024")
				}
				continue
			case c == '.':
				n = 0
				continue
			case strings.ContainsRune("+-# ", rune(c)):
				continue
			}
			break
		}
	}
	return nil
}
