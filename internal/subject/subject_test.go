package subject

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"
)

func TestEncodeToken(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", "_"},
		{"nginx", "nginx"},
		{"ip-10-0-0-1.ec2.internal", "ip-10-0-0-1_ec2_internal"},
		{"a_b", "a~5Fb"},
		{".", "~2E"},
		{"..", "__"},
		{"*", "~2A"},
		{">", "~3E"},
		{"a b", "a~20b"},
		{"~", "~7E"},
		{"é", "~C3~A9"},
		{"_", "~5F"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got := EncodeToken(tt.in)
			if got != tt.want {
				t.Fatalf("EncodeToken(%q) = %q, want %q", tt.in, got, tt.want)
			}
			back, err := DecodeToken(got)
			if err != nil || back != tt.in {
				t.Fatalf("DecodeToken(%q) = %q, %v; want %q", got, back, err, tt.in)
			}
		})
	}
}

func TestGroupKind(t *testing.T) {
	tests := []struct {
		group, kind, want string
	}{
		{"", "Pod", "core_Pod"},
		{"apps", "Deployment", "apps_Deployment"},
		{"networking.k8s.io", "NetworkPolicy", "networking_k8s_io_NetworkPolicy"},
		{"core", "Thing", "~63ore_Thing"},
		{"a_b", "K_ind", "a~5Fb_K~5Find"},
		{"x", "A.B", "x_A~2EB"},
	}
	for _, tt := range tests {
		got := EncodeGroupKind(tt.group, tt.kind)
		if got != tt.want {
			t.Errorf("EncodeGroupKind(%q,%q) = %q, want %q", tt.group, tt.kind, got, tt.want)
		}
		g, k, err := DecodeGroupKind(got)
		if err != nil || g != tt.group || k != tt.kind {
			t.Errorf("DecodeGroupKind(%q) = %q,%q,%v", got, g, k, err)
		}
	}
}

func TestMatchGroupKindSelectsAKindInAnyGroupAndAGroupOfAnyKind(t *testing.T) {
	subj := func(group, kind string) string {
		return Key{TenantType: "project", TenantName: "p", Group: group, Kind: kind, Namespace: "ns"}.Subject()
	}
	pod, deploy, core, apps, empty, dotted := "Pod", "Deployment", "", "apps", "", "foo."
	tests := []struct {
		name         string
		group, kind  *string
		subject      string
		wantMatching bool
	}{
		{"kind in the core group", nil, &pod, subj("", "Pod"), true},
		{"kind in another group", nil, &deploy, subj("apps", "Deployment"), true},
		{"kind in a dotted group", nil, &deploy, subj("example.com", "Deployment"), true},
		{"another kind", nil, &pod, subj("", "PodTemplate"), false},
		{"kind that is a suffix of another", nil, &pod, subj("x", "MyPod"), false},
		{"kind escaped in the token", &apps, nil, subj("apps", "A_B"), true},
		{"group of any kind", &apps, nil, subj("apps", "ReplicaSet"), true},
		{"another group", &apps, nil, subj("apps.example.com", "Deployment"), false},
		{"the core group", &core, nil, subj("", "Pod"), true},
		{"a group named core is not the core group", &core, nil, subj("core", "Pod"), false},
		{"the empty kind", nil, &empty, subj("apps", ""), true},
		{"the empty kind is not another", nil, &empty, subj("apps", "Pod"), false},
		{"a group ending in a dot", &dotted, nil, subj("foo.", "Pod"), true},
		{"a group ending in a dot, empty kind", &dotted, &empty, subj("foo.", ""), true},
		{"group and kind", &apps, &deploy, subj("apps", "Deployment"), true},
		{"group and another kind", &apps, &deploy, subj("apps", "StatefulSet"), false},
		{"not an event subject", nil, &pod, "events.project.p", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MatchGroupKind(tt.group, tt.kind)(tt.subject); got != tt.wantMatching {
				t.Fatalf("MatchGroupKind(%v, %v)(%q) = %v, want %v", deref(tt.group), deref(tt.kind), tt.subject, got, tt.wantMatching)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<any>"
	}
	return *s
}

func TestSeedExamplesWithTheNameTokenReserved(t *testing.T) {
	// The examples of the storage design doc, with the node name that broke
	// its draft. legacy is the subject a stream written before the sixth token
	// was reserved holds: it parses to the same key.
	tests := []struct {
		key          Key
		want, legacy string
	}{
		{Key{"project", "prod-cluster", "apps", "Deployment", "default"}, "events.project.prod-cluster.apps_Deployment.default._", "events.project.prod-cluster.apps_Deployment.default.nginx"},
		{Key{"global", "", "", "Node", ""}, "events.global._.core_Node._._", "events.global._.core_Node._.worker-1"},
		{Key{"project", "prod-cluster", "networking.k8s.io", "NetworkPolicy", "default"}, "events.project.prod-cluster.networking_k8s_io_NetworkPolicy.default._", "events.project.prod-cluster.networking_k8s_io_NetworkPolicy.default.deny-all"},
		{Key{"global", "", "", "Node", ""}, "events.global._.core_Node._._", "events.global._.core_Node._.ip-10-0-0-1_ec2_internal"},
	}
	for _, tt := range tests {
		if got := tt.key.Subject(); got != tt.want {
			t.Errorf("Subject() = %q, want %q", got, tt.want)
		}
		for _, subj := range []string{tt.want, tt.legacy} {
			back, err := Parse(subj)
			if err != nil || back != tt.key {
				t.Errorf("Parse(%q) = %+v, %v", subj, back, err)
			}
		}
	}
	if _, err := Parse("events.project.p.core_Pod.default.a~"); err == nil {
		t.Error("Parse accepted a non-canonical reserved token")
	}
}

func TestDecodeRejectsNonCanonical(t *testing.T) {
	for _, tok := range []string{"", "~2e", "~41", "a~", "a~4", "*", ">", "a.b", "a b", "~5F~5F_", "~5F"[:2]} {
		if v, err := DecodeToken(tok); err == nil && EncodeToken(v) != tok {
			t.Errorf("DecodeToken(%q) accepted a non-canonical token", tok)
		}
	}
	for _, tok := range []string{"Pod", "_Pod", "core_", "x_~"} {
		if _, _, err := DecodeGroupKind(tok); err == nil {
			t.Errorf("DecodeGroupKind(%q) = nil error", tok)
		}
	}
}

func TestFilterSubject(t *testing.T) {
	tests := []struct {
		f    Filter
		want string
	}{
		{Filter{}, "events.>"},
		{Filter{TenantType: Ptr("project"), TenantName: Ptr("a.b")}, "events.project.a_b.>"},
		{Filter{TenantType: Ptr("project"), Kind: Ptr("Pod")}, "events.project.>"},
		{Filter{TenantType: Ptr("project"), Group: Ptr(""), Kind: Ptr("Pod"), Namespace: Ptr("*")}, "events.project.*.core_Pod.~2A.>"},
		{Filter{Namespace: Ptr("")}, "events.*.*.*._.>"},
	}
	for _, tt := range tests {
		if got := tt.f.Subject(); got != tt.want {
			t.Errorf("Subject() = %q, want %q", got, tt.want)
		}
		if !server.IsValidSubject(tt.want) {
			t.Errorf("%q is not a valid NATS subject", tt.want)
		}
	}
}

// FuzzToken checks that any value encodes to one valid, wildcard-free literal
// token that decodes back to the value, and that distinct values never collide.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"", ".", "_", "~", "*", ">", "a.b", "ip-10-0-0-1.ec2.internal", "core", "é", "\x00", "a b\t"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, s := range []string{a, b} {
			tok := EncodeToken(s)
			if tok == "" || strings.ContainsAny(tok, ".*> \t\r\n") || !utf8.ValidString(tok) {
				t.Fatalf("EncodeToken(%q) = %q is not a safe token", s, tok)
			}
			if !server.IsValidLiteralSubject("events." + tok) {
				t.Fatalf("EncodeToken(%q) = %q is not a literal subject token", s, tok)
			}
			back, err := DecodeToken(tok)
			if err != nil || back != s {
				t.Fatalf("round trip %q -> %q -> %q, %v", s, tok, back, err)
			}
			gk := EncodeGroupKind(s, b)
			g, k, err := DecodeGroupKind(gk)
			if err != nil || g != s || k != b {
				t.Fatalf("group/kind round trip (%q,%q) -> %q -> (%q,%q), %v", s, b, gk, g, k, err)
			}
		}
		if a != b && EncodeToken(a) == EncodeToken(b) {
			t.Fatalf("collision: %q and %q both encode to %q", a, b, EncodeToken(a))
		}
		key := Key{a, b, a, b, a}
		subj := key.Subject()
		if !server.IsValidLiteralSubject(subj) || strings.Count(subj, ".") != Tokens-1 {
			t.Fatalf("subject %q of %+v is not a 6-token literal", subj, key)
		}
		if back, err := Parse(subj); err != nil || back != key {
			t.Fatalf("Parse(%q) = %+v, %v; want %+v", subj, back, err, key)
		}
		// The subject's group_Kind test agrees with the decoded key's.
		for _, q := range []string{a, b} {
			if got, want := MatchGroupKind(nil, &q)(subj), key.Kind == q; got != want {
				t.Fatalf("kind %q of %q: matched %v, want %v", q, subj, got, want)
			}
			if got, want := MatchGroupKind(&q, nil)(subj), key.Group == q; got != want {
				t.Fatalf("group %q of %q: matched %v, want %v", q, subj, got, want)
			}
		}
		// Decoding arbitrary input never panics and only accepts canonical tokens.
		if v, err := DecodeToken(a); err == nil && EncodeToken(v) != a {
			t.Fatalf("DecodeToken(%q) accepted a non-canonical token", a)
		}
	})
}
