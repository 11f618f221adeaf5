// Package subject builds and parses the NATS subjects events are stored under:
//
//	events.<tenant_type>.<tenant_name>.<group_Kind>.<namespace>._
//
// The sixth token is reserved and always "_". Streams written before it was
// reserved hold the regarding object's name there; every filter leaves the
// token open, so both forms match the same filters and grants. The name is
// not a token because the server keeps state for every distinct subject a
// stream retains: one per object grew with every object ever seen (about
// 110 MB of the gateway's heap after a million objects), while one per
// tenant, kind and namespace stays small. A watch of one object filters by
// name in process.
//
// Every token is encoded reversibly and deterministically, so that no value a
// caller sends can add a token, a wildcard or whitespace to a subject, and two
// different values never share an encoding. The encoding keeps the seed
// design's readable forms: "_" for an empty token, "." written as "_" (so a
// node "ip-10-0-0-1.ec2.internal" is "ip-10-0-0-1_ec2_internal" and the group
// "networking.k8s.io" is "networking_k8s_io"), and "core" for the core group.
// Every other byte outside [A-Za-z0-9-] is written "~XX" (upper-case hex).
package subject

import (
	"errors"
	"fmt"
	"strings"
)

// Prefix is the first token of every event subject.
const Prefix = "events"

// Tokens is the number of tokens in an event subject.
const Tokens = 6

// Token positions in an event subject.
const (
	PosPrefix = iota
	PosTenantType
	PosTenantName
	PosGroupKind
	PosNamespace
	PosReserved
)

// Empty is the token that stands for an empty value.
const Empty = "_"

// coreGroup is the group token of the core ("") API group.
const coreGroup = "core"

// ErrInvalidToken is returned when a token is not a canonical encoding.
var ErrInvalidToken = errors.New("invalid subject token")

const hexDigits = "0123456789ABCDEF"

func plain(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-'
}

// EncodeToken encodes a value as one subject token. The result is never empty
// and contains only [A-Za-z0-9_~-].
func EncodeToken(s string) string {
	if s == "" {
		return Empty
	}
	if s == "." {
		// "." would otherwise encode to "_", the empty token.
		return "~2E"
	}
	return encode(s, true)
}

// encode escapes s; dotAsUnderscore writes '.' as '_' (tokens other than kind).
func encode(s string, dotAsUnderscore bool) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '.' && dotAsUnderscore:
			b.WriteByte('_')
		default:
			b.WriteByte('~')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xF])
		}
	}
	return b.String()
}

// DecodeToken reverses EncodeToken. It rejects any token that is not the
// canonical encoding of its value.
func DecodeToken(tok string) (string, error) {
	if tok == Empty {
		return "", nil
	}
	s, err := decode(tok, true)
	if err != nil {
		return "", err
	}
	if EncodeToken(s) != tok {
		return "", fmt.Errorf("%w: %q is not canonical", ErrInvalidToken, tok)
	}
	return s, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func decode(tok string, underscoreAsDot bool) (string, error) {
	if tok == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case plain(c):
			b.WriteByte(c)
		case c == '_' && underscoreAsDot:
			b.WriteByte('.')
		case c == '~' && i+2 < len(tok):
			hi, ok1 := unhex(tok[i+1])
			lo, ok2 := unhex(tok[i+2])
			if !ok1 || !ok2 {
				return "", fmt.Errorf("%w: bad escape in %q", ErrInvalidToken, tok)
			}
			b.WriteByte(hi<<4 | lo)
			i += 2
		default:
			return "", fmt.Errorf("%w: unexpected %q in %q", ErrInvalidToken, c, tok)
		}
	}
	return b.String(), nil
}

// EncodeGroupKind encodes an API group and a kind as the single token
// "<group>_<Kind>". The core group ("") is written "core"; a group literally
// named "core" is escaped. The kind is encoded without '_' so the last '_'
// always separates the two.
func EncodeGroupKind(group, kind string) string {
	var g string
	switch group {
	case "":
		g = coreGroup
	case coreGroup:
		g = "~63ore"
	default:
		g = encode(group, true)
	}
	k := encode(kind, false)
	if kind == "" {
		k = Empty
	}
	return g + "_" + k
}

// DecodeGroupKind reverses EncodeGroupKind.
func DecodeGroupKind(tok string) (group, kind string, err error) {
	gt, kt, ok := splitGroupKind(tok)
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not group_Kind", ErrInvalidToken, tok)
	}
	if gt == coreGroup {
		group = ""
	} else if group, err = decode(gt, true); err != nil {
		return "", "", err
	}
	if kt == Empty {
		kind = ""
	} else if kind, err = decode(kt, false); err != nil {
		return "", "", err
	}
	if EncodeGroupKind(group, kind) != tok {
		return "", "", fmt.Errorf("%w: %q is not canonical", ErrInvalidToken, tok)
	}
	return group, kind, nil
}

// MatchGroupKind returns a test of an event subject's group_Kind token
// against a group and a kind (nil: any), for what no filter subject can
// select, the token being one: a kind in any group, or any kind of a group.
// The subject is built from the event's regarding object (event.KeyOf), so
// the test agrees with one on the decoded event, without decoding it.
func MatchGroupKind(group, kind *string) func(subject string) bool {
	var gt, kt string
	if group != nil {
		gt = EncodeGroupKind(*group, "")
		gt = gt[:len(gt)-len("_"+Empty)]
	}
	if kind != nil {
		kt = EncodeGroupKind("", *kind)[len(coreGroup+"_"):]
	}
	return func(subj string) bool {
		tok, ok := tokenAt(subj, PosGroupKind)
		if !ok {
			return false
		}
		g, k, ok := splitGroupKind(tok)
		return ok && (group == nil || g == gt) && (kind == nil || k == kt)
	}
}

// splitGroupKind splits a group_Kind token into its encoded group and kind
// (as DecodeGroupKind, without decoding them).
func splitGroupKind(tok string) (group, kind string, ok bool) {
	// An encoded kind holds no '_' unless it is the empty token itself.
	i := strings.LastIndexByte(tok, '_')
	if strings.HasSuffix(tok, "__") {
		i = len(tok) - 2
	}
	if i <= 0 || i == len(tok)-1 {
		return "", "", false
	}
	return tok[:i], tok[i+1:], true
}

// tokenAt is the token at pos of an event subject (Tokens tokens).
func tokenAt(subj string, pos int) (string, bool) {
	for range pos {
		i := strings.IndexByte(subj, '.')
		if i < 0 {
			return "", false
		}
		subj = subj[i+1:]
	}
	if i := strings.IndexByte(subj, '.'); i >= 0 {
		subj = subj[:i]
	} else if pos != Tokens-1 {
		return "", false
	}
	return subj, true
}

// GroupFromAPIVersion returns the API group of an apiVersion: "apps/v1" is
// "apps", "v1" is the core group "".
func GroupFromAPIVersion(apiVersion string) string {
	if i := strings.LastIndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// Key is what an event subject is made of, in decoded form.
type Key struct {
	TenantType string
	TenantName string
	Group      string
	Kind       string
	Namespace  string
}

// Subject returns the event subject for k.
func (k Key) Subject() string {
	return Prefix + "." + EncodeToken(k.TenantType) + "." + EncodeToken(k.TenantName) + "." +
		EncodeGroupKind(k.Group, k.Kind) + "." + EncodeToken(k.Namespace) + "." + Empty
}

// Parse decodes an event subject. The reserved token may hold any canonical
// token (an object's name, in streams written before it was reserved).
func Parse(subj string) (Key, error) {
	toks := strings.Split(subj, ".")
	if len(toks) != Tokens || toks[PosPrefix] != Prefix {
		return Key{}, fmt.Errorf("%w: %q is not an event subject", ErrInvalidToken, subj)
	}
	var k Key
	var err error
	if k.TenantType, err = DecodeToken(toks[PosTenantType]); err != nil {
		return Key{}, err
	}
	if k.TenantName, err = DecodeToken(toks[PosTenantName]); err != nil {
		return Key{}, err
	}
	if k.Group, k.Kind, err = DecodeGroupKind(toks[PosGroupKind]); err != nil {
		return Key{}, err
	}
	if k.Namespace, err = DecodeToken(toks[PosNamespace]); err != nil {
		return Key{}, err
	}
	if _, err = DecodeToken(toks[PosReserved]); err != nil {
		return Key{}, err
	}
	return k, nil
}

// Filter selects event subjects. A nil field matches any value; a non-nil
// field matches exactly that value (which may be empty).
type Filter struct {
	TenantType *string
	TenantName *string
	// Group and Kind form one token: both must be set for it to be literal.
	Group     *string
	Kind      *string
	Namespace *string
}

// Subject returns the NATS filter subject for f: literal tokens where f names
// a value, "*" where it does not (always for the reserved token), and a
// trailing ">" collapsed where possible.
func (f Filter) Subject() string {
	tok := func(v *string) string {
		if v == nil {
			return "*"
		}
		return EncodeToken(*v)
	}
	gk := "*"
	if f.Group != nil && f.Kind != nil {
		gk = EncodeGroupKind(*f.Group, *f.Kind)
	}
	toks := []string{Prefix, tok(f.TenantType), tok(f.TenantName), gk, tok(f.Namespace), "*"}
	// events.a.*.*.*.* is the same set as events.a.> (every event subject has 6 tokens).
	n := len(toks)
	for n > 1 && toks[n-1] == "*" {
		n--
	}
	if n == len(toks) {
		return strings.Join(toks, ".")
	}
	return strings.Join(toks[:n], ".") + ".>"
}

// Ptr returns a pointer to s, for building filters.
func Ptr(s string) *string { return &s }
