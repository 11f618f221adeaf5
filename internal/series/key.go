package series

import (
	"encoding/binary"
	"fmt"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Key identifies a class of isomorphic events. It is comparable; two keys are
// equal exactly when their events are isomorphic (it holds the full canonical
// encoding, not only a hash, so it cannot collide).
type Key struct{ s string }

// keyVersion starts every canonical encoding, so that a future change of the
// tuple cannot be mistaken for the current one.
const keyVersion = 1

// KeyOf returns the isomorphism key of ev: its tenant and its regarding,
// related, action, reason, reportingController, reportingInstance and type.
// That is the KEP's tuple plus type (as client-go's events recorder keys it)
// and the tenant. The references are compared field by field, resourceVersion
// and fieldPath included (as client-go does), and an absent related equals an
// empty one. note, labels, annotations, metadata, name, uid, namespace and
// eventTime are not part of it.
func KeyOf(ev *eventgatev1.Event) Key {
	var buf [256]byte
	return Key{string(appendKey(buf[:0], ev))}
}

// appendKey appends the canonical encoding of ev's key to b: every field
// length-prefixed, so that no two tuples share an encoding.
func appendKey(b []byte, ev *eventgatev1.Event) []byte {
	b = append(b, keyVersion)
	b = appendField(b, ev.GetTenant().GetType())
	b = appendField(b, ev.GetTenant().GetName())
	b = appendRef(b, ev.GetRegarding())
	b = appendRef(b, ev.GetRelated())
	b = appendField(b, ev.GetAction())
	b = appendField(b, ev.GetReason())
	b = appendField(b, ev.GetReportingController())
	b = appendField(b, ev.GetReportingInstance())
	return appendField(b, ev.GetType())
}

func appendRef(b []byte, r *eventgatev1.ObjectReference) []byte {
	b = appendField(b, r.GetApiVersion())
	b = appendField(b, r.GetKind())
	b = appendField(b, r.GetNamespace())
	b = appendField(b, r.GetName())
	b = appendField(b, r.GetUid())
	b = appendField(b, r.GetFieldPath())
	return appendField(b, r.GetResourceVersion())
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Hash is a 64-bit FNV-1a hash of the key, the same in every process and
// release with the same key encoding: use it to partition keys (for example
// as the subject token a NATS subject mapping partitions on). Unlike the
// key itself it may collide.
func (k Key) Hash() uint64 { return fnv1a(k.s) }

// HashOf is KeyOf(ev).Hash() without making the key: what the intake
// partitions every occurrence by.
func HashOf(ev *eventgatev1.Event) uint64 {
	var buf [256]byte
	return fnv1a(appendKey(buf[:0], ev))
}

func fnv1a[T string | []byte](s T) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

// String is the hash in hex, for logs.
func (k Key) String() string { return fmt.Sprintf("%016x", k.Hash()) }

// IsZero reports whether k is the zero Key (which no event has).
func (k Key) IsZero() bool { return k.s == "" }
