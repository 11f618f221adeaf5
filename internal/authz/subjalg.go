package authz

import (
	"slices"
	"strings"

	"github.com/eventgate/eventgate/internal/subject"
)

// Subject algebra over event subject filters.
//
// Every event subject has exactly subject.Tokens (6) tokens, so a NATS
// filter that can match one is equivalent to a pattern of 6 tokens, each a
// literal or "*": a trailing ">" at position i stands for "*" at positions
// i..5. On that normal form, and with the infinitely many literals every
// position can hold, the algebra is exact:
//
//   - a ∩ b is position-wise: "*"∩x = x, x∩x = x, x∩y = ∅ for literals x≠y;
//   - a ⊆ b iff at every position b is "*" or equals a;
//   - a ∪ b ⊆ c iff a ⊆ c and b ⊆ c, and a ⊆ b1 ∪ … ∪ bn iff a ⊆ some bi
//     (pick, at each "*" of a, a literal no bi names: that subject is in a
//     and in no bi that does not contain a).
//
// The last point also means that a set of patterns with none contained in
// another has a disjoint equivalent only if no two of them overlap: each
// such pattern must itself be in any disjoint cover of the union.
//
// Literal tokens are compared as opaque strings: the encoding of package
// subject never produces "*" or ">" or an empty token, so an encoded name
// that "looks like" a wildcard ("~2A", "~3E") is an ordinary literal.

// pattern is a filter in normal form: 6 tokens, each a literal or "*".
type pattern [subject.Tokens]string

const (
	pwc = "*"
	fwc = ">"
)

// parsePattern returns the normal form of a NATS filter subject, and false
// when s is not a valid filter, can match no event subject, or has a token
// that mixes a wildcard character with others.
func parsePattern(s string) (pattern, bool) {
	var p pattern
	if s == "" {
		return p, false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		// A token holding "*" or ">" beside other bytes is refused: NATS
		// helpers disagree on whether it is a wildcard. Encoded tokens never
		// hold either.
		if t == "" || strings.ContainsAny(t, " \t\r\n\f\v") ||
			t != pwc && t != fwc && strings.ContainsAny(t, "*>") {
			return p, false
		}
		if t == fwc {
			if i != len(toks)-1 || i >= subject.Tokens {
				return p, false
			}
			for j := i; j < subject.Tokens; j++ {
				p[j] = pwc
			}
			return p, true
		}
		if i >= subject.Tokens {
			return p, false
		}
		p[i] = t
	}
	return p, len(toks) == subject.Tokens
}

// String renders p as a NATS filter, trailing "*" tokens collapsed into ">"
// (as subject.Filter.Subject does; the first token is always kept).
func (p pattern) String() string {
	n := len(p)
	for n > 1 && p[n-1] == pwc {
		n--
	}
	if n == len(p) {
		return strings.Join(p[:], ".")
	}
	return strings.Join(p[:n], ".") + "." + fwc
}

func (p pattern) intersect(q pattern) (pattern, bool) {
	var r pattern
	for i := range p {
		switch {
		case p[i] == pwc:
			r[i] = q[i]
		case q[i] == pwc || q[i] == p[i]:
			r[i] = p[i]
		default:
			return r, false
		}
	}
	return r, true
}

// subset reports whether every subject p matches is matched by q.
func (p pattern) subset(q pattern) bool {
	for i := range p {
		if q[i] != pwc && q[i] != p[i] {
			return false
		}
	}
	return true
}

func (p pattern) overlaps(q pattern) bool {
	_, ok := p.intersect(q)
	return ok
}

// matches reports whether p matches the literal event subject toks.
func (p pattern) matches(toks []string) bool {
	if len(toks) != len(p) {
		return false
	}
	for i := range p {
		if p[i] != pwc && p[i] != toks[i] {
			return false
		}
	}
	return true
}

// Intersect returns the filter matching exactly the event subjects both a
// and b match, and false when there is none (or a or b is not a valid
// filter).
func Intersect(a, b string) (string, bool) {
	pa, ok1 := parsePattern(a)
	pb, ok2 := parsePattern(b)
	if !ok1 || !ok2 {
		return "", false
	}
	r, ok := pa.intersect(pb)
	if !ok {
		return "", false
	}
	return r.String(), true
}

// Subset reports whether every event subject a matches is matched by b. A
// filter that matches no event subject is a subset of nothing.
func Subset(a, b string) bool {
	pa, ok1 := parsePattern(a)
	pb, ok2 := parsePattern(b)
	return ok1 && ok2 && pa.subset(pb)
}

// Overlap reports whether some event subject is matched by both a and b.
func Overlap(a, b string) bool {
	_, ok := Intersect(a, b)
	return ok
}

// Normalize removes duplicates and filters contained in another, and sorts
// the rest; invalid filters are dropped. The result matches the same event
// subjects as fs.
func Normalize(fs []string) []string {
	ps := make([]pattern, 0, len(fs))
	for _, f := range fs {
		if p, ok := parsePattern(f); ok {
			ps = append(ps, p)
		}
	}
	ps = minimal(ps)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// minimal removes duplicates and patterns contained in another, sorted.
func minimal(ps []pattern) []pattern {
	slices.SortFunc(ps, func(a, b pattern) int { return slices.Compare(a[:], b[:]) })
	ps = slices.Compact(ps)
	out := ps[:0:0]
	for i, p := range ps {
		contained := false
		for j, q := range ps {
			if i != j && p.subset(q) {
				contained = true // q != p after Compact, so q is strictly larger
				break
			}
		}
		if !contained {
			out = append(out, p)
		}
	}
	return out
}

// Disjoint returns filters matching exactly the event subjects fs match, no
// two of which overlap, and false when no such set exists (two filters
// overlap and neither contains the other: no disjoint set then exists, as
// the algebra notes at the top of subjalg.go show).
func Disjoint(fs []string) ([]string, bool) {
	ps := make([]pattern, 0, len(fs))
	for _, f := range fs {
		if p, ok := parsePattern(f); ok {
			ps = append(ps, p)
		}
	}
	ps, ok := disjoint(ps)
	if !ok {
		return nil, false
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out, true
}

func disjoint(ps []pattern) ([]pattern, bool) {
	ps = minimal(ps)
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			if ps[i].overlaps(ps[j]) {
				return nil, false
			}
		}
	}
	return ps, true
}
