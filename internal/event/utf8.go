package event

import (
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

var eventDescriptor = (&eventgatev1.Event{}).ProtoReflect().Descriptor()

// ValidUTF8 reports whether b, an encoding of a message md describes, holds
// valid UTF-8 in every string field, in it and in the messages (map entries
// included) inside it, and is well formed as far as it had to read.
// protobuf-go refuses to decode or encode a proto3 string that is not
// UTF-8; the code vtprotobuf generates does not check, so its callers ask
// this. It reads the wire format with a plan made once per message type
// from its descriptor: no reflection on a message, no allocation, and a
// string field added to the API later is covered.
func ValidUTF8(b []byte, md protoreflect.MessageDescriptor) bool {
	return planOf(md).valid(b, 0)
}

// A stringPlan says, by field number, which fields of a message hold a
// string and which a message.
type stringPlan struct {
	kind []uint8 // by field number: 0 other or unknown, kindString, kindMessage
	msg  []*stringPlan
}

const (
	kindString = 1 + iota
	kindMessage
)

var plans sync.Map // protoreflect.MessageDescriptor → *stringPlan

func planOf(md protoreflect.MessageDescriptor) *stringPlan {
	if p, ok := plans.Load(md); ok {
		return p.(*stringPlan)
	}
	p := buildPlan(md, map[protoreflect.FullName]*stringPlan{})
	plans.Store(md, p)
	return p
}

func buildPlan(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*stringPlan) *stringPlan {
	if p := seen[md.FullName()]; p != nil {
		return p
	}
	p := &stringPlan{}
	seen[md.FullName()] = p
	fields := md.Fields()
	top := 0
	for i := 0; i < fields.Len(); i++ {
		top = max(top, int(fields.Get(i).Number()))
	}
	p.kind, p.msg = make([]uint8, top+1), make([]*stringPlan, top+1)
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch fd.Kind() {
		case protoreflect.StringKind:
			p.kind[fd.Number()] = kindString
		case protoreflect.MessageKind:
			p.kind[fd.Number()], p.msg[fd.Number()] = kindMessage, buildPlan(fd.Message(), seen)
		}
	}
	return p
}

func (p *stringPlan) valid(b []byte, depth int) bool {
	if depth > protowire.DefaultRecursionLimit {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num > protowire.MaxValidNumber {
			return false
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		if typ == protowire.BytesType && int(num) < len(p.kind) && p.kind[num] != 0 {
			v, _ := protowire.ConsumeBytes(b[:m])
			if p.kind[num] == kindString && !utf8.Valid(v) || p.kind[num] == kindMessage && !p.msg[num].valid(v, depth+1) {
				return false
			}
		}
		b = b[m:]
	}
	return true
}
