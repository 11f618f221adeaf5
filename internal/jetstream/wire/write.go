package wire

import (
	"context"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Write is one version of a stored event, as the events stream takes it:
// the message's subject comes from the event (event.SubjectOf), its
// headers from the other fields. internal/jetstream's Publisher is the one
// writer of the stream.
type Write struct {
	Event *eventgatev1.Event
	// Data is Event's encoding when at hand (nil: it is encoded).
	Data []byte
	// ID deduplicates the write (Nats-Msg-Id): a retry or a replay under the
	// same id is stored once. Empty: not deduplicated.
	ID string
	// Reason is HeaderWriteReason: a series.Reason name or ReasonClient;
	// empty for an event stored as it was emitted, without aggregation.
	Reason string
	// Minutes is HeaderSeriesMinutes: the occurrences the write adds.
	Minutes []Minute
	// Trace, when not nil, holds the trace context the write carries on.
	Trace context.Context
}

// Ack is the stream's acknowledgement of a Write.
type Ack struct {
	// Sequence is the write's stream sequence: its resourceVersion.
	Sequence uint64
	// Duplicate: a write with the same ID was stored before; Sequence is
	// that one's.
	Duplicate bool
}
