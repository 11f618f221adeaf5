package selector

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want []Requirement
	}{
		{"", nil},
		{"reason=BackOff", []Requirement{{"reason", Equals, []string{"BackOff"}}}},
		{"reason==BackOff,type!=Normal", []Requirement{{"reason", Equals, []string{"BackOff"}}, {"type", NotEquals, []string{"Normal"}}}},
		{"reason in (A, B),regarding.kind notin (Pod)", []Requirement{{"reason", In, []string{"A", "B"}}, {"regarding.kind", NotIn, []string{"Pod"}}}},
		{"app.kubernetes.io/name, !tier", []Requirement{{"app.kubernetes.io/name", Exists, nil}, {"tier", NotExists, nil}}},
		{`regarding.name=a\,b\=c`, []Requirement{{"regarding.name", Equals, []string{"a,b=c"}}}},
		{`note=it's '; DROP TABLE events; --`, []Requirement{{"note", Equals, []string{"it's '; DROP TABLE events; --"}}}},
		{"regarding.name=", []Requirement{{"regarding.name", Equals, []string{""}}}},
		{"x in ()", []Requirement{{"x", In, []string{""}}}},
		{"index=1", []Requirement{{"index", Equals, []string{"1"}}}},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{"=x", "a b", "a in x", "a in (x", "a,,b", "a=b c=d" + ",(", "a=\\", "!", "a ~ b", strings.Repeat("a", MaxLength+1)} {
		if _, err := Parse(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want a syntax error", in, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=b", "a in (b,c)", `a=\,`, "!a", "a notin (x)"} {
		f.Add(s, "v")
	}
	f.Fuzz(func(t *testing.T, s, v string) {
		_, _ = Parse(s) // never panics
		// Any value survives escaping.
		got, err := Parse("k=" + EscapeValue(v))
		if err != nil {
			t.Fatalf("escaped value %q: %v", v, err)
		}
		if want := strings.TrimSpace(v); got[0].Values[0] != want {
			t.Fatalf("value %q came back as %q", want, got[0].Values[0])
		}
	})
}
