package authz

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
)

func TestIntersect(t *testing.T) {
	tests := []struct {
		a, b string
		want string
		ok   bool
	}{
		{"events.>", "events.project.a.>", "events.project.a.>", true},
		{"events.project.*.apps_Deployment.>", "events.project.a.>", "events.project.a.apps_Deployment.>", true},
		{"events.project.a.>", "events.project.b.>", "", false},
		{"events.*.*.*.*.x", "events.project.>", "events.project.*.*.*.x", true},
		// An encoded "*" is a literal: it meets "*" but not another literal.
		{"events.project.~2A.>", "events.project.*.>", "events.project.~2A.>", true},
		{"events.project.~2A.>", "events.project.a.>", "", false},
		// ">" on the sixth token is one token.
		{"events.a.b.c.d.>", "events.a.b.c.d.e", "events.a.b.c.d.e", true},
		// Filters that match no event subject.
		{"events.a.b", "events.>", "", false},
		{"events.a.b.c.d.e.f", "events.>", "", false},
		{"events.a.b.c.d.e.>", "events.>", "", false},
		{"events.>.a", "events.>", "", false},
		{"events..a.b.c.d", "events.>", "", false},
		{"", "events.>", "", false},
		{"events.a b.c.d.e.f", "events.>", "", false},
	}
	for _, tt := range tests {
		got, ok := Intersect(tt.a, tt.b)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Intersect(%q, %q) = %q, %v; want %q, %v", tt.a, tt.b, got, ok, tt.want, tt.ok)
		}
		got2, ok2 := Intersect(tt.b, tt.a)
		if got2 != got || ok2 != ok {
			t.Errorf("Intersect is not symmetric on %q, %q", tt.a, tt.b)
		}
	}
}

func TestSubsetOverlapNormalize(t *testing.T) {
	if !Subset("events.project.a.>", "events.project.*.>") || Subset("events.project.*.>", "events.project.a.>") {
		t.Error("Subset")
	}
	if !Subset("events.a.>", "events.a.*.*.*.*") {
		t.Error("events.a.> and events.a.*.*.*.* select the same event subjects")
	}
	if Overlap("events.project.a.>", "events.project.b.>") || !Overlap("events.project.a.>", "events.*.*.core_Pod.>") {
		t.Error("Overlap")
	}
	got := Normalize([]string{"events.project.a.>", "events.project.*.>", "events.user.u.>", "events.project.*.*.*.*", "bad..subject"})
	if diff := cmp.Diff([]string{"events.project.>", "events.user.u.>"}, got); diff != "" {
		t.Errorf("Normalize (-want +got):\n%s", diff)
	}
	if _, ok := Disjoint([]string{"events.project.a.>", "events.project.*.core_Pod.>"}); ok {
		t.Error("Disjoint: a partial overlap has no disjoint equivalent")
	}
	d, ok := Disjoint([]string{"events.project.a.core_Pod.>", "events.project.*.core_Pod.>", "events.user.u.>"})
	if !ok || !slices.Equal(d, []string{"events.project.*.core_Pod.>", "events.user.u.>"}) {
		t.Errorf("Disjoint = %v, %v", d, ok)
	}
}

// algUniverse is every 6-token subject over the literals the patterns use
// plus one fresh literal per position.
func algUniverse(lits []string) [][]string {
	alphabet := append(slices.Clone(lits), "fresh")
	subjs := [][]string{{}}
	for range 6 {
		var next [][]string
		for _, s := range subjs {
			for _, l := range alphabet {
				next = append(next, append(slices.Clone(s), l))
			}
		}
		subjs = next
	}
	return subjs
}

func randPattern(r *rand.Rand, lits []string) string {
	n := 1 + r.IntN(7)
	toks := make([]string, n)
	for i := range toks {
		switch x := r.IntN(10); {
		case x < 4:
			toks[i] = "*"
		case x == 4 && i == n-1:
			toks[i] = ">"
		default:
			toks[i] = lits[r.IntN(len(lits))]
		}
	}
	if r.IntN(3) > 0 { // mostly event-shaped
		toks = append(make([]string, 0, 6), toks...)
		for len(toks) < 6 && toks[len(toks)-1] != ">" {
			toks = append(toks, "*")
		}
	}
	return strings.Join(toks, ".")
}

// TestAlgebraProperty checks Intersect, Subset, Overlap, Normalize and
// Disjoint against brute-force matching (nats-server's matcher) over every
// subject of a small universe.
func TestAlgebraProperty(t *testing.T) {
	lits := []string{"a", "~2A"}
	univ := algUniverse(lits)
	subjs := make([]string, len(univ))
	for i, u := range univ {
		subjs[i] = strings.Join(u, ".")
	}
	match := func(filter string) []bool {
		m := make([]bool, len(subjs))
		if _, ok := parsePattern(filter); !ok {
			return m // matches no 6-token subject
		}
		for i, s := range subjs {
			m[i] = server.SubjectMatchesFilter(s, filter)
		}
		return m
	}
	empty := func(m []bool) bool { return !slices.Contains(m, true) }
	and := func(a, b []bool) []bool {
		r := make([]bool, len(a))
		for i := range a {
			r[i] = a[i] && b[i]
		}
		return r
	}
	sub := func(a, b []bool) bool {
		for i := range a {
			if a[i] && !b[i] {
				return false
			}
		}
		return true
	}
	n := 3000
	if testing.Short() {
		n = 300
	}
	r := rand.New(rand.NewPCG(7, 11))
	for range n {
		a, b := randPattern(r, lits), randPattern(r, lits)
		ma, mb := match(a), match(b)
		// A filter that is not event-shaped matches no event subject, as
		// the brute force confirms.
		if _, ok := parsePattern(a); !ok {
			for i, s := range subjs {
				if server.IsValidSubject(a) && server.SubjectMatchesFilter(s, a) {
					t.Fatalf("%q is said to match no event subject, but matches %s", a, subjs[i])
				}
			}
		}
		in, ok := Intersect(a, b)
		if want := and(ma, mb); ok == empty(want) || ok && !slices.Equal(match(in), want) {
			t.Fatalf("Intersect(%q, %q) = %q, %v; brute force disagrees", a, b, in, ok)
		}
		if Overlap(a, b) != !empty(and(ma, mb)) {
			t.Fatalf("Overlap(%q, %q) disagrees with brute force", a, b)
		}
		_, okA := parsePattern(a)
		_, okB := parsePattern(b)
		if okA && okB && server.SubjectsCollide(a, b) != Overlap(a, b) {
			t.Fatalf("Overlap(%q, %q) disagrees with server.SubjectsCollide", a, b)
		}
		if got, want := Subset(a, b), okA && okB && sub(ma, mb); got != want {
			t.Fatalf("Subset(%q, %q) = %v; brute force %v", a, b, got, want)
		}

		// Sets of filters.
		fs := []string{a, b}
		for k := r.IntN(4); k > 0; k-- {
			fs = append(fs, randPattern(r, lits))
		}
		union := make([]bool, len(subjs))
		for _, f := range fs {
			for i, m := range match(f) {
				union[i] = union[i] || m
			}
		}
		norm := Normalize(fs)
		got := make([]bool, len(subjs))
		for x, f := range norm {
			for i, m := range match(f) {
				got[i] = got[i] || m
			}
			for y, g := range norm {
				if x != y && Subset(f, g) {
					t.Fatalf("Normalize(%q) = %q keeps %q within %q", fs, norm, f, g)
				}
			}
		}
		if !slices.Equal(got, union) {
			t.Fatalf("Normalize(%q) = %q changes the union", fs, norm)
		}
		dis, ok := Disjoint(fs)
		if !ok {
			// Justified only if two of the minimal filters overlap
			// without either containing the other (brute force).
			justified := false
			for x := range norm {
				for y := x + 1; y < len(norm); y++ {
					mx, my := match(norm[x]), match(norm[y])
					if !empty(and(mx, my)) && !sub(mx, my) && !sub(my, mx) {
						justified = true
					}
				}
			}
			if !justified {
				t.Fatalf("Disjoint(%q) failed although %q do not overlap", fs, norm)
			}
			continue
		}
		seen := make([]int, len(subjs))
		for _, f := range dis {
			for i, m := range match(f) {
				if m {
					seen[i]++
				}
			}
		}
		for i := range subjs {
			if seen[i] > 1 || (seen[i] == 1) != union[i] {
				t.Fatalf("Disjoint(%q) = %q: %s matched %d times, in the union: %v", fs, dis, subjs[i], seen[i], union[i])
			}
		}
	}
}

func FuzzIntersect(f *testing.F) {
	f.Add("events.project.a.>", "events.*.*.core_Pod.>")
	f.Add("events.>", "events.a.b.c.d.e")
	f.Add("events.~2A.>", "events.*.*.*.*.*")
	f.Add(">", "*.*.*.*.*.*")
	f.Fuzz(func(t *testing.T, a, b string) {
		in, ok := Intersect(a, b)
		_, okA := parsePattern(a)
		_, okB := parsePattern(b)
		if !okA || !okB {
			if ok || Subset(a, b) {
				t.Fatalf("invalid filters %q, %q intersect or contain", a, b)
			}
			return
		}
		if !server.IsValidSubject(a) || !server.IsValidSubject(b) {
			t.Fatalf("%q or %q accepted but not a valid NATS subject", a, b)
		}
		// A universe from the literals the filters use, and a fresh one.
		var lits []string
		for _, s := range []string{a, b} {
			for _, tok := range strings.Split(s, ".") {
				if tok != "*" && tok != ">" && !slices.Contains(lits, tok) {
					lits = append(lits, tok)
				}
			}
		}
		if len(lits) > 4 {
			lits = lits[:4] // keeps the universe small; the rest stay fresh
		}
		for _, u := range algUniverse(lits) {
			s := strings.Join(u, ".")
			want := server.SubjectMatchesFilter(s, a) && server.SubjectMatchesFilter(s, b)
			if got := ok && server.SubjectMatchesFilter(s, in); got != want {
				t.Fatalf("Intersect(%q, %q) = %q, %v on %s: got %v, want %v", a, b, in, ok, s, got, want)
			}
		}
	})
}
