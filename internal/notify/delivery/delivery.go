// Package delivery is the domain of a rule's delivery log: a notification
// with its delivery attempts and status, and what the API shows of a
// destination URL. It has no transport: package notify delivers the
// notifications and records the log on JetStream, and the API service
// speaks these types only.
package delivery

import (
	"errors"
	"net/url"
	"time"
)

// Statuses of a delivery.
const (
	StatusDelivered = "delivered"
	StatusRetrying  = "retrying"
	StatusDead      = "dead"
)

// Attempt is one attempt of a Delivery.
type Attempt struct {
	Time    time.Time
	Latency time.Duration
	Code    int
	Error   string
}

// Delivery is a notification and its attempts.
type Delivery struct {
	NotificationID string
	State          string
	EventUID       string
	Status         string
	Created        time.Time
	Attempts       []Attempt
}

// ErrNoNotification: the rule has no notification with the id (or it is
// past the retention).
var ErrNoNotification = errors.New("no such notification")

// RedactedURL is what the API shows of a destination URL: its scheme and
// host only, as "https://host/…" when anything followed.
func RedactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "…"
	}
	out := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		out += "/…"
	}
	return out
}
