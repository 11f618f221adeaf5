package service

import (
	"sync"

	"google.golang.org/protobuf/encoding/protowire"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// StreamBatch is an EmitStream request received into a message an emit
// stream reuses once the batch before it is acknowledged: decoding a batch
// of new events allocated each event and its label and annotation maps
// again (a tenth of the gateway's allocation under an EmitStream load),
// while a stream's batches are alike. UnmarshalVT decodes into the events
// the message held, their maps cleared and kept; every other field, and
// what the events point to (regarding, tenant, times), is decoded anew, so
// nothing of the batch before shows through.
//
// A StreamBatch is the request message as far as the server's codec
// knows: the generated code's decoding (UnmarshalVT) and protobuf-go's
// reflection (ProtoReflect) both reach the embedded request.
type StreamBatch struct {
	*eventgatev1.EmitStreamRequest
	rest []byte // the request's fields but its events, decoded by the generated code
}

// NewStreamBatch returns an empty batch.
func NewStreamBatch() *StreamBatch {
	return &StreamBatch{EmitStreamRequest: &eventgatev1.EmitStreamRequest{}}
}

// Reuse bounds: a batch kept for the next holds at most this many events,
// and an event keeps a map of at most this many entries.
const (
	maxReusedEvents  = 4096
	maxReusedMapSize = 64
)

// UnmarshalVT decodes b as an EmitStreamRequest into r (what r held before
// is gone): the events field (2) into r's events, reused; the rest, and an
// events field that is not length-delimited (which the generated code
// refuses), by the generated code. The result is what the generated code
// would decode from b, field by field: the fields but the events keep
// their order among themselves, and the events theirs.
func (r *StreamBatch) UnmarshalVT(b []byte) error {
	evs := r.Events[:0]
	r.EmitStreamRequest.Reset()
	r.Events = evs
	rest := r.rest[:0]
	defer func() { r.rest = rest[:0] }()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return protowire.ParseError(m)
		}
		field := b[:n+m]
		b = b[n+m:]
		if num != 2 || typ != protowire.BytesType {
			rest = append(rest, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		if err := r.nextEvent().UnmarshalVT(v); err != nil {
			return err
		}
	}
	return r.EmitStreamRequest.UnmarshalVT(rest)
}

// nextEvent appends an empty event to r.Events: the one the slot held in
// an earlier batch, reset, when there is one.
func (r *StreamBatch) nextEvent() *eventgatev1.Event {
	n := len(r.Events)
	var ev *eventgatev1.Event
	if n < cap(r.Events) {
		ev = r.Events[:n+1][n]
	}
	if ev == nil {
		ev = &eventgatev1.Event{}
	} else {
		resetKeepingMaps(ev)
	}
	r.Events = append(r.Events, ev)
	return ev
}

// resetKeepingMaps empties ev but keeps its label and annotation maps
// (emptied) for the next event decoded into it.
func resetKeepingMaps(ev *eventgatev1.Event) {
	labels, annotations := ev.Labels, ev.Annotations
	ev.Reset()
	ev.Labels, ev.Annotations = emptied(labels), emptied(annotations)
}

// emptied is m cleared, or nil when it grew too large to keep.
func emptied(m map[string]string) map[string]string {
	if len(m) > maxReusedMapSize {
		return nil
	}
	clear(m)
	return m
}

// streamBatches are the batches emit streams have acknowledged.
var streamBatches = sync.Pool{New: func() any { return NewStreamBatch() }}

// getStreamBatch returns a batch to receive into.
func getStreamBatch() *StreamBatch { return streamBatches.Get().(*StreamBatch) }

// putStreamBatch lets the next Recv of any stream decode into r, once
// nothing holds r's events any more (its acknowledgement is sent).
func putStreamBatch(r *StreamBatch) {
	if r == nil || cap(r.Events) > maxReusedEvents {
		return
	}
	streamBatches.Put(r)
}
