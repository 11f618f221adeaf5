package event

import (
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

var (
	typeField       = eventFields.ByName("type").Number()
	tenantField     = eventFields.ByName("tenant").Number()
	tenantFields    = eventFields.ByName("tenant").Message().Fields()
	tenantTypeField = tenantFields.ByName("type").Number()
	tenantNameField = tenantFields.ByName("name").Number()
	labelsField     = eventFields.ByName("labels").Number()
	labelKeyField   = eventFields.ByName("labels").MapKey().Number()
	labelValueField = eventFields.ByName("labels").MapValue().Number()
	reasonField     = eventFields.ByName("reason").Number()
	controllerField = eventFields.ByName("reporting_controller").Number()
	refNameField    = eventFields.ByName("regarding").Message().Fields().ByName("name").Number()
)

// EncodedHead is what a reader learns of a stored event without decoding
// it: enough to route it and to skip it when nothing of interest can
// match.
type EncodedHead struct {
	Type       string // Normal, Warning
	TenantType string
	TenantName string
}

// PeekEncoded reads the type and the tenant of raw, an encoded event,
// skipping every other field; ok is false when raw is not a well-formed
// encoding. The values are what Unmarshal would decode (the last of a
// repeated field, a repeated tenant merged), but they share raw's memory:
// they are for a lookup or a comparison, and raw must not change while
// they are in use; clone one to keep it (strings.Clone).
func PeekEncoded(raw []byte) (h EncodedHead, ok bool) {
	fs := bytesFields{b: raw}
	for num, v, more := fs.next(); more; num, v, more = fs.next() {
		switch num {
		case typeField:
			h.Type = aliased(v)
		case tenantField:
			ts := bytesFields{b: v}
			for num, v, more := ts.next(); more; num, v, more = ts.next() {
				switch num {
				case tenantTypeField:
					h.TenantType = aliased(v)
				case tenantNameField:
					h.TenantName = aliased(v)
				}
			}
			if ts.bad {
				return EncodedHead{}, false
			}
		}
	}
	if fs.bad {
		return EncodedHead{}, false
	}
	return h, true
}

// WatchFields are the fields of a stored event a watch may filter on
// besides its subject: what a reader learns of them without decoding it.
type WatchFields struct {
	Type                string
	Reason              string
	ReportingController string
	RegardingName       string
}

// PeekWatchFields reads raw's WatchFields, skipping every other field; ok
// is false when raw is not a well-formed encoding. The values are what
// Unmarshal would decode (the last of a repeated field, a repeated
// regarding object merged) and share raw's memory, as PeekEncoded's do.
func PeekWatchFields(raw []byte) (f WatchFields, ok bool) {
	fs := bytesFields{b: raw}
	for num, v, more := fs.next(); more; num, v, more = fs.next() {
		switch num {
		case typeField:
			f.Type = aliased(v)
		case reasonField:
			f.Reason = aliased(v)
		case controllerField:
			f.ReportingController = aliased(v)
		case regardingField:
			// A later reference merged into an earlier one keeps the
			// earlier's name unless it has one.
			rs := bytesFields{b: v}
			for num, v, more := rs.next(); more; num, v, more = rs.next() {
				if num == refNameField {
					f.RegardingName = aliased(v)
				}
			}
			if rs.bad {
				return WatchFields{}, false
			}
		}
	}
	if fs.bad {
		return WatchFields{}, false
	}
	return f, true
}

// PeekLabel reads the value of the label key of raw, an encoded event,
// skipping every other field: found is false when the event has no such
// label, ok false when raw is not a well-formed encoding. The value is what
// Unmarshal would decode (the last entry of the key), sharing raw's memory
// as PeekEncoded's do.
func PeekLabel(raw []byte, key string) (value string, found, ok bool) {
	fs := bytesFields{b: raw}
	for num, entry, more := fs.next(); more; num, entry, more = fs.next() {
		if num != labelsField {
			continue
		}
		// A map entry: its key and value, empty when left out (as
		// Unmarshal reads them).
		var k, v string
		es := bytesFields{b: entry}
		for num, b, more := es.next(); more; num, b, more = es.next() {
			switch num {
			case labelKeyField:
				k = aliased(b)
			case labelValueField:
				v = aliased(b)
			}
		}
		if es.bad {
			return "", false, false
		}
		if k == key {
			value, found = v, true
		}
	}
	if fs.bad {
		return "", false, false
	}
	return value, found, true
}

// bytesFields reads the length-delimited fields of an encoded message in
// order, skipping the other fields; bad is set when it met one that is
// not well formed (and next then returns no more).
type bytesFields struct {
	b   []byte
	bad bool
}

func (r *bytesFields) next() (num protowire.Number, v []byte, more bool) {
	for len(r.b) > 0 {
		num, typ, n := protowire.ConsumeTag(r.b)
		if n < 0 {
			r.bad = true
			return 0, nil, false
		}
		r.b = r.b[n:]
		if typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(r.b)
			if n < 0 {
				r.bad = true
				return 0, nil, false
			}
			r.b = r.b[n:]
			return num, v, true
		}
		if n = protowire.ConsumeFieldValue(num, typ, r.b); n < 0 {
			r.bad = true
			return 0, nil, false
		}
		r.b = r.b[n:]
	}
	return 0, nil, false
}

// aliased is b as a string without a copy.
func aliased(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
