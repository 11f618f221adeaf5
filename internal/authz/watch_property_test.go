package authz

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/subject"
)

// The property test compares WatchSubjects against brute force. For each
// generated case (a principal with random grants and a random filter) it
// enumerates concrete event subjects: every combination of the literal
// values the case mentions plus one fresh value per position. A fresh value
// stands for "any value the case does not mention", so the enumeration
// decides every question about the case exactly. The oracles are
// independent of the algebra: the filter and the outputs are matched with
// nats-server's own matcher, and grants are checked on decoded subjects.

var propCases = flag.Int("authz.cases", 4000, "cases of the WatchSubjects property test")

// chooser picks the case's random values.
type chooser interface{ intn(n int) int }

type randChooser struct{ r *rand.Rand }

func (c randChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser draws from fuzz input; 0 once it is used up.
type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

var (
	propTypes       = []string{event.TenantGlobal, event.TenantOrganization, event.TenantProject, event.TenantUser}
	propFilterTypes = append(slices.Clone(propTypes), "*", ">", "Project", "pro.ject", "_", "")
	// Names that are data but look like syntax: wildcards, their encodings,
	// separators, the empty token, SQL metacharacters.
	propNames = []string{"a", "b", "shop", "*", ">", "a.b", "a_b", "_", ".", "~2A", "~3E", "core",
		"x y", "a' OR '1'='1", "%", "\\", "ü", "a*", "a.>", "events"}
	propGroups = []string{"", "apps", "networking.k8s.io", "core", "a_b", "a.b", "*", ">", "_"}
	propKinds  = []string{"Pod", "Deployment", "*", "_", ">", "a_b", "a.b"}
	propNS     = []string{"", "default", "*", "a.b", ">", "_"}
)

func pick[T any](c chooser, xs []T) T { return xs[c.intn(len(xs))] }

type propCase struct {
	p *Principal
	f subject.Filter
}

func (pc propCase) String() string {
	s := func(p *string) string {
		if p == nil {
			return "nil"
		}
		return fmt.Sprintf("%q", *p)
	}
	f := pc.f
	return fmt.Sprintf("platform=%v grants=%+v filter{type:%s name:%s group:%s kind:%s ns:%s} (subject %s)",
		pc.p.Platform, pc.p.Grants, s(f.TenantType), s(f.TenantName), s(f.Group), s(f.Kind), s(f.Namespace), f.Subject())
}

func genCase(c chooser) propCase {
	p := &Principal{Name: "prop", Platform: c.intn(2) == 0}
	for n := 1 + c.intn(4); len(p.Grants) < n; {
		g := Grant{TenantType: pick(c, propTypes), TenantName: pick(c, propNames)}
		if g.TenantType == event.TenantGlobal && c.intn(2) == 0 {
			g.TenantName = ""
		}
		if p.Platform && c.intn(3) == 0 {
			g.TenantName = AnyName
		}
		if c.intn(2) == 0 {
			for k := 1 + c.intn(3); k > 0; k-- {
				g.Kinds = append(g.Kinds, GroupKind{pick(c, propGroups), pick(c, propKinds)})
			}
		}
		g.Verbs = []Verb{VerbWatch}
		if c.intn(6) == 0 {
			g.Verbs = []Verb{VerbQuery, VerbEmit} // not a watch grant: must be ignored
		}
		if ng, err := g.normalize(p.Platform); err == nil {
			p.Grants = append(p.Grants, ng)
		} else if !p.Platform && g.wide() && c.intn(3) == 0 {
			// Built by hand, bypassing validation: decisions must ignore it.
			p.Grants = append(p.Grants, g)
		} else if c.intn(4) == 0 {
			n-- // an invalid draw (e.g. a wide grant for a non-platform principal); give up on one
		}
	}
	var f subject.Filter
	opt := func(pool []string) *string {
		if c.intn(2) == 0 {
			return nil
		}
		return subject.Ptr(pick(c, pool))
	}
	f.TenantType = opt(propFilterTypes)
	if c.intn(3) == 0 {
		f.TenantName = opt(propNames)
	}
	group, kind := pick(c, propGroups), pick(c, propKinds)
	if len(p.Grants) > 0 && c.intn(4) > 0 {
		// Mostly aim at what the grants name, so that most cases are not
		// trivially denied.
		g := pick(c, p.Grants)
		if f.TenantType != nil {
			f.TenantType = &g.TenantType
		}
		if f.TenantName != nil && g.TenantName != AnyName {
			f.TenantName = &g.TenantName
		}
		if len(g.Kinds) > 0 && c.intn(3) > 0 {
			gk := pick(c, g.Kinds)
			group, kind = gk.Group, gk.Kind
		}
	}
	switch c.intn(6) {
	case 1, 2:
		f.Group, f.Kind = &group, &kind
	case 3:
		f.Group = &group
	case 4:
		f.Kind = &kind
	}
	f.Namespace = opt(propNS)
	return propCase{p: p, f: f}
}

// universe enumerates the concrete event subjects that decide a case.
func universe(pc propCase) []subject.Key {
	add := func(xs []string, v string) []string {
		if !slices.Contains(xs, v) {
			xs = append(xs, v)
		}
		return xs
	}
	types := append(slices.Clone(propTypes), "fresh-type")
	names := []string{"", "fresh-name"}
	groups := []string{"", "fresh.group"}
	kinds := []string{"FreshKind"}
	for _, g := range pc.p.Grants {
		if g.TenantName != AnyName {
			names = add(names, g.TenantName)
		}
		for _, gk := range g.Kinds {
			groups = add(groups, gk.Group)
			kinds = add(kinds, gk.Kind)
		}
	}
	f := pc.f
	if f.TenantType != nil {
		types = add(types, *f.TenantType)
	}
	if f.TenantName != nil {
		names = add(names, *f.TenantName)
	}
	if f.Group != nil {
		groups = add(groups, *f.Group)
	}
	if f.Kind != nil {
		kinds = add(kinds, *f.Kind)
	}
	nss := []string{"fresh-ns"}
	if f.Namespace != nil {
		nss = add(nss, *f.Namespace)
	}
	var keys []subject.Key
	for _, t := range types {
		for _, n := range names {
			for _, g := range groups {
				for _, k := range kinds {
					for _, ns := range nss {
						keys = append(keys, subject.Key{TenantType: t, TenantName: n, Group: g, Kind: k, Namespace: ns})
					}
				}
			}
		}
	}
	return keys
}

// Oracles, on decoded keys; written independently of decide.go.

func grantTenantOK(g Grant, k subject.Key) bool {
	if g.TenantType != k.TenantType {
		return false
	}
	if g.TenantType == event.TenantGlobal {
		return k.TenantName == ""
	}
	return g.TenantName == AnyName || g.TenantName == k.TenantName
}

func grantKindOK(g Grant, k subject.Key) bool {
	if len(g.Kinds) == 0 {
		return true
	}
	for _, gk := range g.Kinds {
		if gk.Group == k.Group && gk.Kind == k.Kind {
			return true
		}
	}
	return false
}

func watchGrants(p *Principal) []Grant {
	var gs []Grant
	for _, g := range p.Grants {
		wide := g.TenantType == event.TenantGlobal || g.TenantName == AnyName
		if slices.Contains(g.Verbs, VerbWatch) && (p.Platform || !wide) {
			gs = append(gs, g)
		}
	}
	return gs
}

// partialOK is the in-process half of a filter naming only a group or only
// a kind.
func partialOK(f subject.Filter, k subject.Key) bool {
	if f.Group != nil && f.Kind == nil && k.Group != *f.Group {
		return false
	}
	if f.Kind != nil && f.Group == nil && k.Kind != *f.Kind {
		return false
	}
	return true
}

// validTenant leaves out global tenants with a name: there is one global
// tenant, so a filter on the global type is one on it. Every other
// combination counts: the algebra treats types and names as open domains.
func validTenant(k subject.Key) bool {
	return k.TenantType != event.TenantGlobal || k.TenantName == ""
}

// checkCase checks WatchSubjects on one case; it returns the outcome for
// statistics.
func checkCase(t *testing.T, pc propCase) string {
	t.Helper()
	out, err := pc.p.WatchSubjects(pc.f)
	keys := universe(pc)
	subjs := make([]string, len(keys))
	for i, k := range keys {
		subjs[i] = k.Subject()
		if back, perr := subject.Parse(subjs[i]); perr != nil || back != k {
			t.Fatalf("subject %q of %+v does not round-trip: %v", subjs[i], k, perr)
		}
	}
	fsubj := pc.f.Subject()
	inF := func(i int) bool { return server.SubjectMatchesFilter(subjs[i], fsubj) && partialOK(pc.f, keys[i]) }
	gs := watchGrants(pc.p)
	granted := func(i int) bool {
		for _, g := range gs {
			if grantTenantOK(g, keys[i]) && grantKindOK(g, keys[i]) {
				return true
			}
		}
		return false
	}
	tenantGranted := func(i int) bool {
		for _, g := range gs {
			if grantTenantOK(g, keys[i]) {
				return true
			}
		}
		return false
	}
	tenantNamed := pc.f.TenantType != nil || pc.f.TenantName != nil
	kindFull := pc.f.Group != nil && pc.f.Kind != nil

	// beyond reports a subject the filter's named parts select that no grant
	// allows: the reason a strict denial is justified.
	beyond := func() (string, bool) {
		if !tenantNamed {
			return "", false
		}
		for i := range keys {
			if !inF(i) || !validTenant(keys[i]) {
				continue
			}
			if !tenantGranted(i) {
				return "tenant of " + subjs[i], true
			}
			if kindFull && !granted(i) {
				return "kind of " + subjs[i], true
			}
		}
		return "", false
	}

	if err != nil {
		switch {
		case errors.Is(err, ErrPermissionDenied):
			if !strings.Contains(err.Error(), "not allowed") {
				t.Fatalf("%v: denial does not say what is not allowed: %v", pc, err)
			}
			for i := range keys {
				if inF(i) && granted(i) {
					if why, ok := beyond(); ok {
						return "denied: beyond grants (" + strings.SplitN(why, " ", 2)[0] + ")"
					}
					t.Fatalf("%v: denied (%v) although %s is in the filter and granted, and the filter names nothing beyond the grants", pc, err, subjs[i])
				}
			}
			return "denied: nothing granted"
		case errors.Is(err, ErrOverlappingGrants):
			checkOverlapJustified(t, pc, keys, inF)
			return "overlapping grants"
		default:
			t.Fatalf("%v: unexpected error %v", pc, err)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%v: no subjects and no error", pc)
	}
	if why, ok := beyond(); ok {
		t.Fatalf("%v: allowed %v although the filter names something beyond the grants: %s", pc, out, why)
	}
	for _, o := range out {
		if !server.IsValidSubject(o) {
			t.Fatalf("%v: output %q is not a valid subject", pc, o)
		}
	}
	for a := range out {
		for b := a + 1; b < len(out); b++ {
			if server.SubjectsCollide(out[a], out[b]) {
				t.Fatalf("%v: outputs %q and %q overlap", pc, out[a], out[b])
			}
		}
	}
	for i := range keys {
		n := 0
		for _, o := range out {
			if server.SubjectMatchesFilter(subjs[i], o) {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("%v: %s matched by %d outputs %v", pc, subjs[i], n, out)
		}
		inOut := n == 1 && partialOK(pc.f, keys[i])
		want := inF(i) && granted(i)
		switch {
		case inOut && !inF(i):
			t.Fatalf("%v: output %v matches %s, which the filter does not", pc, out, subjs[i])
		case inOut && !granted(i):
			t.Fatalf("%v: output %v matches %s, which no watch grant allows", pc, out, subjs[i])
		case want && !inOut:
			t.Fatalf("%v: output %v loses %s, which the filter selects and a grant allows", pc, out, subjs[i])
		}
	}
	return fmt.Sprintf("allowed: %d subject(s)", min(len(out), 3))
}

// checkOverlapJustified checks that no disjoint set of filters could express
// the case: two minimal "atoms" (one grant kind each) overlap while neither
// contains the other, decided on the enumeration.
func checkOverlapJustified(t *testing.T, pc propCase, keys []subject.Key, inF func(int) bool) {
	t.Helper()
	var atoms [][]bool
	for _, g := range watchGrants(pc.p) {
		kinds := [][]GroupKind{nil}
		if len(g.Kinds) > 0 {
			kinds = kinds[:0]
			for _, gk := range g.Kinds {
				kinds = append(kinds, []GroupKind{gk})
			}
		}
		for _, ks := range kinds {
			a := Grant{TenantType: g.TenantType, TenantName: g.TenantName, Kinds: ks}
			set := make([]bool, len(keys))
			nonEmpty := false
			for i, k := range keys {
				set[i] = inF(i) && grantTenantOK(a, k) && grantKindOK(a, k)
				nonEmpty = nonEmpty || set[i]
			}
			if nonEmpty {
				atoms = append(atoms, set)
			}
		}
	}
	sub := func(a, b []bool) bool {
		for i := range a {
			if a[i] && !b[i] {
				return false
			}
		}
		return true
	}
	minimal := func(i int) bool {
		for j := range atoms {
			if j != i && sub(atoms[i], atoms[j]) && !sub(atoms[j], atoms[i]) {
				return false
			}
		}
		return true
	}
	for i := range atoms {
		for j := range atoms {
			if i == j || !minimal(i) || !minimal(j) || sub(atoms[i], atoms[j]) || sub(atoms[j], atoms[i]) {
				continue
			}
			for k := range keys {
				if atoms[i][k] && atoms[j][k] {
					return // justified
				}
			}
		}
	}
	t.Fatalf("%v: ErrOverlappingGrants although a disjoint set exists", pc)
}

func TestWatchSubjectsProperty(t *testing.T) {
	n := *propCases
	if testing.Short() {
		n /= 10
	}
	r := rand.New(rand.NewPCG(20260101, 4))
	stats := map[string]int{}
	for range n {
		pc := genCase(randChooser{r})
		stats[checkCase(t, pc)]++
	}
	if stats["allowed: 2 subject(s)"]+stats["allowed: 3 subject(s)"] == 0 || stats["denied: nothing granted"] == 0 {
		t.Errorf("the generator misses outcomes: %v", stats)
	}
	t.Logf("%d cases: %v", n, stats)
}

func FuzzWatchSubjects(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		{1, 0, 2, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
		[]byte("platform grants with wildcards"),
		{1, 2, 2, 3, 0, 1, 4, 2, 3, 0, 1, 1, 3, 1, 2, 1, 1},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkCase(t, genCase(&byteChooser{b: data}))
	})
}
