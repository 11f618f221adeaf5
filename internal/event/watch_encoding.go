package event

import (
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Field numbers the encoding of a watch event is built from, read from the
// descriptors so that a renumbering cannot go unnoticed.
var (
	eventFields       = (&eventgatev1.Event{}).ProtoReflect().Descriptor().Fields()
	seriesField       = eventFields.ByName("series").Number()
	resourceVersionNo = eventFields.ByName("resource_version").Number()
	watchFields       = (&eventgatev1.StreamWatchResponse{}).ProtoReflect().Descriptor().Fields()
	watchTypeField    = watchFields.ByName("type").Number()
	watchObjectField  = watchFields.ByName("object").Number()
)

// EncodedHasSeries reports whether raw, an encoded event, has its series
// set, without decoding it; false when raw is not a valid encoding.
func EncodedHasSeries(raw []byte) bool {
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return false
		}
		raw = raw[n:]
		n = protowire.ConsumeFieldValue(num, typ, raw)
		if n < 0 {
			return false
		}
		if num == seriesField && typ == protowire.BytesType {
			return true
		}
		raw = raw[n:]
	}
	return false
}

// WatchTypeOf is the watch event type of a stored event: MODIFIED for a
// series, ADDED otherwise. ev, when not nil, is raw decoded.
func WatchTypeOf(ev *eventgatev1.Event, raw []byte) string {
	if ev != nil {
		if ev.GetSeries() != nil {
			return WatchModified
		}
		return WatchAdded
	}
	if EncodedHasSeries(raw) {
		return WatchModified
	}
	return WatchAdded
}

// EncodeWatchEvent is the protobuf encoding of the StreamWatchResponse of
// type typ whose object is the stored event raw at stream sequence seq:
// raw with its resourceVersion appended (the last value of a field is the
// one that counts), the same message as encoding the decoded event with
// its ResourceVersion set. One copy of raw, no encoding of the event.
func EncodeWatchEvent(typ string, raw []byte, seq uint64) []byte {
	head, tail := WatchEventFrame(typ, raw, seq)
	b := make([]byte, 0, len(head)+len(raw)+len(tail))
	return append(append(append(b, head...), raw...), tail...)
}

// WatchEventFrame is what EncodeWatchEvent puts before and after raw: a
// sender that writes head, raw and tail in turn sends the response without
// copying raw.
func WatchEventFrame(typ string, raw []byte, seq uint64) (head, tail []byte) {
	var rv [20]byte
	rvb := strconv.AppendUint(rv[:0], seq, 10)
	obj := len(raw) + protowire.SizeTag(resourceVersionNo) + protowire.SizeBytes(len(rvb))
	hs := protowire.SizeTag(watchTypeField) + protowire.SizeBytes(len(typ)) +
		protowire.SizeTag(watchObjectField) + protowire.SizeVarint(uint64(obj))
	b := make([]byte, 0, hs+protowire.SizeTag(resourceVersionNo)+protowire.SizeBytes(len(rvb)))
	b = protowire.AppendTag(b, watchTypeField, protowire.BytesType)
	b = protowire.AppendString(b, typ)
	b = protowire.AppendTag(b, watchObjectField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(obj))
	b = protowire.AppendTag(b, resourceVersionNo, protowire.BytesType)
	b = protowire.AppendBytes(b, rvb)
	return b[:hs:hs], b[hs:]
}

// EncodedWellFormed reports whether raw reads as an encoded event, UTF-8
// strings included, without decoding it (see ValidUTF8).
func EncodedWellFormed(raw []byte) bool { return ValidUTF8(raw, eventDescriptor) }
