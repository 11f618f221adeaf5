package event

import (
	"fmt"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Decoder decodes events one at a time into an Event it reuses, its maps
// included: for a reader that is done with each event before it decodes
// the next (the intake's owner folding an occurrence, the store's encoder
// copying one row into its columns). Decoding a workload event anew
// allocates the event and its three maps, which is most of what
// UnmarshalAliased allocates; the nested messages (regarding, related,
// tenant, times, series) are still decoded fresh, so that a field absent
// from the encoding stays nil. A Decoder is not safe for concurrent use.
type Decoder struct {
	ev eventgatev1.Event
}

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
	if err := ev.UnmarshalVTUnsafe(b); err != nil {
		return nil, fmt.Errorf("unmarshal event: %w", err)
	}
	return ev, nil
}
