package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/notify/delivery"
	"github.com/eventgate/eventgate/internal/rules"
)

// The delivery log's wire contract.
const (
	// LogStream records every delivery attempt, one subject per rule.
	LogStream   = "EVENTGATE_DELIVERIES"
	logSubjects = "eventgate.deliveries.>"
	// maxLogPerRule bounds a rule's delivery log (attempts, oldest dropped).
	maxLogPerRule = 10000
)

func logSubject(ruleUID string) string { return "eventgate.deliveries." + ruleUID }

// Statuses of a delivery, re-exported from package delivery.
const (
	StatusDelivered = delivery.StatusDelivered
	StatusRetrying  = delivery.StatusRetrying
	StatusDead      = delivery.StatusDead
)

// Record is one attempt in the delivery log.
type Record struct {
	NotificationID string        `json:"notificationId"`
	Seq            uint64        `json:"seq"` // in the notifications stream
	State          string        `json:"state"`
	EventUID       string        `json:"eventUid,omitempty"`
	Status         string        `json:"status"`
	Created        time.Time     `json:"created"`
	Time           time.Time     `json:"time"`
	Latency        time.Duration `json:"latency"`
	Code           int           `json:"code,omitempty"`
	Error          string        `json:"error,omitempty"`
	// Floor: every notification of the rule up to this sequence was
	// settled (delivered or given up on) when the attempt was recorded.
	Floor uint64 `json:"floor,omitempty"`
}

// The delivery log's domain, re-exported from package delivery.
type (
	Attempt  = delivery.Attempt
	Delivery = delivery.Delivery
)

func ensureLog(ctx context.Context, js jetstream.JetStream, retention time.Duration, replicas int, log *slog.Logger) (jetstream.Stream, error) {
	s, err := ejs.CreateOrUpdateStream(ctx, js, jetstream.StreamConfig{
		Name:              LogStream,
		Description:       "delivery attempts of eventgate rules' notifications, one subject per rule",
		Subjects:          []string{logSubjects},
		MaxAge:            retention,
		MaxMsgsPerSubject: maxLogPerRule,
		Storage:           jetstream.FileStorage,
		Replicas:          max(replicas, 1),
	}, log)
	if err != nil {
		return nil, fmt.Errorf("delivery log stream: %w", err)
	}
	return s, nil
}

// readSubject calls fn with every message of subj in s, oldest first,
// from those stored at since on (zero: all).
func readSubject(ctx context.Context, s jetstream.Stream, subj string, since time.Time, fn func(jetstream.Msg) error) error {
	last, err := s.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if last.Time.Before(since) {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if meta.Sequence.Stream >= last.Sequence {
			return nil
		}
	}
}

// Deliveries lists a rule's notifications with their attempts, newest
// first, at most limit.
func (d *Dispatcher) Deliveries(ctx context.Context, ruleUID string, limit int) ([]Delivery, error) {
	byID := map[string]*Delivery{}
	var order []string
	err := readSubject(ctx, d.logS, logSubject(ruleUID), time.Time{}, func(m jetstream.Msg) error {
		var r Record
		if json.Unmarshal(m.Data(), &r) != nil {
			return nil
		}
		dl := byID[r.NotificationID]
		if dl == nil {
			dl = &Delivery{NotificationID: r.NotificationID, State: r.State, EventUID: r.EventUID, Created: r.Created}
			byID[r.NotificationID] = dl
			order = append(order, r.NotificationID)
		}
		dl.Status = r.Status
		dl.Attempts = append(dl.Attempts, Attempt{Time: r.Time, Latency: r.Latency, Code: r.Code, Error: r.Error})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read delivery log: %w", err)
	}
	slices.Reverse(order)
	out := make([]Delivery, 0, min(len(order), limit))
	for _, id := range order {
		if len(out) == limit {
			break
		}
		out = append(out, *byID[id])
	}
	return out, nil
}

// ErrNoNotification: the rule has no notification with the id (or it is
// past the retention).
var ErrNoNotification = delivery.ErrNoNotification

// Redeliver queues a rule's notification again, under a new queue id (the
// queue's duplicate window would drop the same one) but with the same
// notification id, which receivers deduplicate by if they wish.
func (d *Dispatcher) Redeliver(ctx context.Context, ruleUID, notificationID string) error {
	var found *nats.Msg
	err := readSubject(ctx, d.notify, rules.NotifySubject(ruleUID), time.Time{}, func(m jetstream.Msg) error {
		if m.Headers().Get(rules.HeaderNotificationID) == notificationID {
			found = &nats.Msg{Subject: m.Subject(), Data: m.Data(), Header: nats.Header{}}
			found.Header.Set(rules.HeaderNotificationID, notificationID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	if found == nil {
		return fmt.Errorf("%w: %s", ErrNoNotification, notificationID)
	}
	_, err = d.js.PublishMsg(ctx, found, jetstream.WithMsgID(fmt.Sprintf("%s/%s/redeliver/%d", ruleUID, notificationID, time.Now().UnixNano())))
	if err != nil {
		return fmt.Errorf("queue notification: %w", err)
	}
	d.engine.NoteQueued(ruleUID)
	return nil
}
