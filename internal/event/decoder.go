package event

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Decoder decodes events one at a time into an Event it reuses, with its
// maps and its nested messages: for a reader that is done with each event
// before it decodes the next (the intake's owner folding an occurrence,
// the store's encoder copying one row into its columns). Decoding a
// workload event anew allocates the event, its three maps and four nested
// messages: 1.3 KB. A nested message is attached only when its field is
// in the encoding, so that an absent one stays nil. A Decoder is not safe
// for concurrent use.
type Decoder struct {
	ev                 eventgatev1.Event
	regarding, related eventgatev1.ObjectReference
	tenant             eventgatev1.Tenant
	eventTime          timestamppb.Timestamp
	series             eventgatev1.EventSeries
}

// The event's message fields the decoder keeps (see fieldsIn).
var (
	eventTimeField = eventFields.ByName("event_time").Number()
	regardingField = eventFields.ByName("regarding").Number()
	relatedField   = eventFields.ByName("related").Number()
)

// DecodeAliased decodes b as UnmarshalAliased does (strings share b's
// memory) into the decoder's event, and returns it. The event is valid
// until the next call: a caller that keeps it, or any of its maps or
// nested messages, past that must clone it (proto.Clone); its strings
// belong to b and stay valid as long as b.
func (d *Decoder) DecodeAliased(b []byte) (*eventgatev1.Event, error) {
	ev := &d.ev
	labels, annotations, metadata := ev.Labels, ev.Annotations, ev.Metadata
	clear(labels)
	clear(annotations)
	clear(metadata)
	ev.Reset()
	// An empty map decodes and encodes as an absent one (map fields have
	// no presence).
	ev.Labels, ev.Annotations, ev.Metadata = labels, annotations, metadata
	// Malformed bytes (ok false) decode into fresh nested messages, and
	// fail there.
	if present, ok := fieldsIn(b); ok {
		if present&(1<<eventTimeField) != 0 {
			d.eventTime.Reset()
			ev.EventTime = &d.eventTime
		}
		if present&(1<<seriesField) != 0 {
			d.series.Reset()
			ev.Series = &d.series
		}
		if present&(1<<regardingField) != 0 {
			d.regarding.Reset()
			ev.Regarding = &d.regarding
		}
		if present&(1<<relatedField) != 0 {
			d.related.Reset()
			ev.Related = &d.related
		}
		if present&(1<<tenantField) != 0 {
			d.tenant.Reset()
			ev.Tenant = &d.tenant
		}
	}
	if err := ev.UnmarshalVTUnsafe(b); err != nil {
		return nil, fmt.Errorf("unmarshal event: %w", err)
	}
	return ev, nil
}

// fieldsIn returns which of the field numbers below 64 occur in b, an
// encoded message, skipping their values; ok is false when b is not well
// formed.
func fieldsIn(b []byte) (present uint64, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num < 64 {
			present |= 1 << num
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return present, true
}
