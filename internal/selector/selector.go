// Package selector parses Kubernetes-style selectors: the field selector
// syntax (key=value, key==value, key!=value) extended with the set forms of
// label selectors (key in (a,b), key notin (a,b)) and existence (key, !key).
//
// Values may contain any character; ',', '=', '!', '(', ')' and '\' are
// escaped with a backslash, as Kubernetes' fields.EscapeValue does. Parsed
// values are plain data: they are never turned into query text.
package selector

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Operators of a requirement.
const (
	Equals    = "="
	NotEquals = "!="
	In        = "in"
	NotIn     = "notin"
	Exists    = "exists"
	NotExists = "!"
)

// Requirement is one clause of a selector.
type Requirement struct {
	Key    string
	Op     string
	Values []string
}

// ErrSyntax is wrapped by every parse error.
var ErrSyntax = errors.New("selector syntax")

// MaxLength bounds a selector's text.
const MaxLength = 8192

// MaxValues bounds the values of one set.
const MaxValues = 256

type parser struct {
	s   string
	pos int
}

func (p *parser) errf(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrSyntax, p.pos, fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) peek(lit string) bool { return strings.HasPrefix(p.s[p.pos:], lit) }

// key reads a key: letters, digits and "._-/" (e.g. "regarding.kind",
// "app.kubernetes.io/name").
func (p *parser) key() (string, error) {
	start := p.pos
	for p.pos < len(p.s) {
		c := rune(p.s[p.pos])
		if unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("._-/", c) {
			p.pos++
			continue
		}
		break
	}
	if p.pos == start {
		return "", p.errf("expected a key")
	}
	return p.s[start:p.pos], nil
}

// value reads a value up to an unescaped stop character.
func (p *parser) value(stops string) (string, error) {
	var b strings.Builder
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '\\' {
			if p.pos+1 >= len(p.s) {
				return "", p.errf("dangling escape")
			}
			b.WriteByte(p.s[p.pos+1])
			p.pos += 2
			continue
		}
		if strings.IndexByte(stops, c) >= 0 {
			break
		}
		b.WriteByte(c)
		p.pos++
	}
	return strings.TrimSpace(b.String()), nil
}

func (p *parser) set() ([]string, error) {
	p.skipSpace()
	if !p.peek("(") {
		return nil, p.errf("expected '(' to open a set")
	}
	p.pos++
	var vals []string
	for {
		v, err := p.value(",)")
		if err != nil {
			return nil, err
		}
		vals = append(vals, v)
		if len(vals) > MaxValues {
			return nil, p.errf("more than %d values in a set", MaxValues)
		}
		if p.pos >= len(p.s) {
			return nil, p.errf("unterminated set")
		}
		if p.s[p.pos] == ')' {
			p.pos++
			return vals, nil
		}
		p.pos++ // ','
	}
}

// word reports whether the keyword w (followed by space or '(') is next.
func (p *parser) word(w string) bool {
	if !p.peek(w) {
		return false
	}
	rest := p.s[p.pos+len(w):]
	return rest != "" && (rest[0] == ' ' || rest[0] == '\t' || rest[0] == '(')
}

// Parse parses a selector. The empty selector has no requirements.
func Parse(s string) ([]Requirement, error) {
	if len(s) > MaxLength {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrSyntax, MaxLength)
	}
	p := &parser{s: s}
	var reqs []Requirement
	p.skipSpace()
	if p.pos == len(p.s) {
		return nil, nil
	}
	for {
		p.skipSpace()
		var r Requirement
		if p.peek("!") && !p.peek("!=") {
			p.pos++
			p.skipSpace()
			k, err := p.key()
			if err != nil {
				return nil, err
			}
			r = Requirement{Key: k, Op: NotExists}
		} else {
			k, err := p.key()
			if err != nil {
				return nil, err
			}
			r.Key = k
			p.skipSpace()
			switch {
			case p.peek("=="):
				p.pos += 2
				r.Op = Equals
			case p.peek("!="):
				p.pos += 2
				r.Op = NotEquals
			case p.peek("="):
				p.pos++
				r.Op = Equals
			case p.word("notin"):
				p.pos += len("notin")
				r.Op = NotIn
			case p.word("in"):
				p.pos += len("in")
				r.Op = In
			case p.pos == len(p.s) || p.peek(","):
				r.Op = Exists
			default:
				return nil, p.errf("expected an operator (=, ==, !=, in, notin) after %q", k)
			}
			switch r.Op {
			case Equals, NotEquals:
				v, err := p.value(",")
				if err != nil {
					return nil, err
				}
				r.Values = []string{v}
			case In, NotIn:
				vals, err := p.set()
				if err != nil {
					return nil, err
				}
				r.Values = vals
			}
		}
		reqs = append(reqs, r)
		p.skipSpace()
		if p.pos == len(p.s) {
			return reqs, nil
		}
		if p.s[p.pos] != ',' {
			return nil, p.errf("expected ',' between requirements")
		}
		p.pos++
	}
}

// EscapeValue escapes a value for use in a selector.
func EscapeValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `,`, `\,`, `=`, `\=`, `!`, `\!`, `(`, `\(`, `)`, `\)`)
	return r.Replace(v)
}
