package event

import (
	"fmt"
	"time"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Stored is one version of an event as the events stream stored it: what
// the ingest reads from the stream and the store writes.
type Stored struct {
	// Seq is the stream sequence: the version and resourceVersion.
	Seq uint64
	// Subject is the stream subject the event was published to.
	Subject string
	// Event is the event; its columns are taken from it. When it is nil,
	// the writer decodes Raw (the ingest leaves that to the writer: a
	// store that copies each event into its columns decodes them one at a
	// time into one event, instead of holding a batch of them decoded),
	// and refuses the batch with an *UndecodableError if Raw is not an
	// event.
	Event *eventgatev1.Event
	// StoredAt is when the stream stored the message.
	StoredAt time.Time
	// Raw, when set, is the event's encoding as published (Marshal) and is
	// stored as is; otherwise Event is encoded with Marshal.
	Raw []byte
	// WriteReason is why the intake wrote this version (the
	// Eventgate-Write-Reason header), "" when unknown.
	WriteReason string
	// Minutes are the occurrences this version adds per minute of log time
	// (the Eventgate-Series-Minutes header): deltas since the uid's previous
	// write. Nil when the message carried none. Analytics spreads a series'
	// occurrences over them.
	Minutes []wire.Minute
}

// UndecodableError is a writer's refusal of a batch holding a version
// whose Raw does not decode (Stored.Event nil): the caller drops that
// version and writes the rest.
type UndecodableError struct {
	Seq uint64 // the version's Seq
	Err error
}

func (e *UndecodableError) Error() string {
	return fmt.Sprintf("stored event %d does not decode: %v", e.Seq, e.Err)
}

func (e *UndecodableError) Unwrap() error { return e.Err }
