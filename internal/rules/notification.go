package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
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

var eventJSON = protojson.MarshalOptions{}

// notification builds the notification of f.
func notification(r *Rule, f Fired, tmpl *template.Template) *Notification {
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
