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
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return EncodedHead{}, false
		}
		raw = raw[n:]
		switch {
		case num == typeField && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(raw)
			if n < 0 {
				return EncodedHead{}, false
			}
			h.Type, raw = aliased(v), raw[n:]
		case num == tenantField && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(raw)
			if n < 0 || !peekTenant(v, &h) {
				return EncodedHead{}, false
			}
			raw = raw[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, raw)
			if n < 0 {
				return EncodedHead{}, false
			}
			raw = raw[n:]
		}
	}
	return h, true
}

func peekTenant(b []byte, h *EncodedHead) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if (num == tenantTypeField || num == tenantNameField) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			if num == tenantTypeField {
				h.TenantType = aliased(v)
			} else {
				h.TenantName = aliased(v)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
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
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return WatchFields{}, false
		}
		raw = raw[n:]
		if typ == protowire.BytesType && (num == typeField || num == reasonField || num == controllerField || num == regardingField) {
			v, n := protowire.ConsumeBytes(raw)
			if n < 0 {
				return WatchFields{}, false
			}
			raw = raw[n:]
			switch num {
			case typeField:
				f.Type = aliased(v)
			case reasonField:
				f.Reason = aliased(v)
			case controllerField:
				f.ReportingController = aliased(v)
			default:
				if !peekRefName(v, &f.RegardingName) {
					return WatchFields{}, false
				}
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, raw)
		if n < 0 {
			return WatchFields{}, false
		}
		raw = raw[n:]
	}
	return f, true
}

// peekRefName sets *name to an encoded object reference's name when it has
// one (a later reference merged into an earlier one keeps its name
// otherwise).
func peekRefName(b []byte, name *string) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == refNameField && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			*name, b = aliased(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// PeekLabel reads the value of the label key of raw, an encoded event,
// skipping every other field: found is false when the event has no such
// label, ok false when raw is not a well-formed encoding. The value is what
// Unmarshal would decode (the last entry of the key), sharing raw's memory
// as PeekEncoded's do.
func PeekLabel(raw []byte, key string) (value string, found, ok bool) {
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return "", false, false
		}
		raw = raw[n:]
		if num == labelsField && typ == protowire.BytesType {
			entry, n := protowire.ConsumeBytes(raw)
			if n < 0 {
				return "", false, false
			}
			raw = raw[n:]
			k, v, ok := peekLabelEntry(entry)
			if !ok {
				return "", false, false
			}
			if k == key {
				value, found = v, true
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, raw)
		if n < 0 {
			return "", false, false
		}
		raw = raw[n:]
	}
	return value, found, true
}

// peekLabelEntry reads a labels map entry: its key and value (empty when
// left out, as Unmarshal reads them).
func peekLabelEntry(b []byte) (key, value string, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
		if (num == labelKeyField || num == labelValueField) && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", false
			}
			if num == labelKeyField {
				key = aliased(v)
			} else {
				value = aliased(v)
			}
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", false
		}
		b = b[n:]
	}
	return key, value, true
}

// aliased is b as a string without a copy.
func aliased(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
