package event

import (
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
	// Event is the event; its columns are taken from it.
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
