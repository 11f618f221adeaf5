package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// base is the time the test events happen around: recent, so that the 90
// day TTL keeps them.
var base = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)

type evOpt func(*eventgatev1.Event)

// mkEvent is a Pod event of tenant project/a at base+sec seconds.
func mkEvent(uid string, sec float64, opts ...evOpt) *eventgatev1.Event {
	ev := &eventgatev1.Event{
		Uid:       uid,
		Name:      "ev-" + uid,
		Namespace: "web",
		EventTime: timestamppb.New(base.Add(time.Duration(sec * float64(time.Second))).Truncate(time.Microsecond)),
		Reason:    "R",
		Type:      "Normal",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "pod-" + uid},
		Tenant:    &eventgatev1.Tenant{Type: "project", Name: "a"},
	}
	for _, o := range opts {
		o(ev)
	}
	return ev
}

func tenant(typ, name string) evOpt {
	return func(e *eventgatev1.Event) { e.Tenant = &eventgatev1.Tenant{Type: typ, Name: name} }
}

func regarding(apiVersion, kind, ns, name string) evOpt {
	return func(e *eventgatev1.Event) {
		e.Regarding = &eventgatev1.ObjectReference{ApiVersion: apiVersion, Kind: kind, Namespace: ns, Name: name}
		e.Namespace = ns
	}
}

func related(apiVersion, kind, ns, name string) evOpt {
	return func(e *eventgatev1.Event) {
		e.Related = &eventgatev1.ObjectReference{ApiVersion: apiVersion, Kind: kind, Namespace: ns, Name: name}
	}
}

func with(f func(e *eventgatev1.Event)) evOpt { return f }

// insert stores evs with consecutive sequences from seq.
func insert(t testing.TB, s *Store, seq uint64, evs ...*eventgatev1.Event) uint64 {
	t.Helper()
	rows := make([]Row, len(evs))
	for i, ev := range evs {
		rows[i] = Row{Seq: seq + uint64(i), Subject: event.SubjectOf(ev), Event: ev, StoredAt: time.Now()}
	}
	if err := s.Insert(context.Background(), rows); err != nil {
		t.Fatalf("insert: %v", err)
	}
	return seq + uint64(len(evs)) - 1
}

func uidsOf(evs []*eventgatev1.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.GetUid()
	}
	return out
}

func listPage(t testing.TB, s *Store, q query.List, rv uint64) query.Page {
	t.Helper()
	p, err := s.Query(context.Background(), q, rv)
	if err != nil {
		t.Fatalf("query %+v: %v", q, err)
	}
	return p
}

var all = query.Scope{All: true}

func set(in ...string) query.StringSet  { return query.StringSet{In: in} }
func notIn(v ...string) query.StringSet { return query.StringSet{NotIn: v} }

func TestMigrationsIdempotent(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = ""
		s1 := open(cfg)
		insert(t, s1, 1, mkEvent("a", 1))
		s2 := open(cfg) // the same database again: nothing to apply, data kept
		if got := uidsOf(listPage(t, s2, query.List{Scope: all}, 10).Events); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("after reopen: %v", got)
		}
		rs, err := s2.t.query(context.Background(), "SELECT toUInt64(count()), toUInt64(max(version)) FROM "+s2.ddl.table("schema_migrations"), nil)
		if err != nil {
			t.Fatal(err)
		}
		var n, v uint64
		for rs.Next() {
			if err := rs.Scan(&n, &v); err != nil {
				t.Fatal(err)
			}
		}
		rs.Close()
		if n != uint64(len(migrations)) || v != uint64(latestMigration) {
			t.Fatalf("schema_migrations: %d rows, max version %d", n, v)
		}
		// A schema newer than this build (another gateway upgraded first)
		// is accepted.
		if err := s2.t.exec(context.Background(), "INSERT INTO "+s2.ddl.table("schema_migrations")+" (version, name, applied_at) VALUES (999, 'future', now64(3))", nil); err != nil {
			t.Fatal(err)
		}
		open(cfg)
	})
}

func TestOpenErrors(t *testing.T) {
	chtest.Engine(t)
	_, err := Open(context.Background(), Config{ChDBLib: "/nonexistent/libchdb.so", DataDir: chtest.DataDir()}, nil)
	if !errors.Is(err, chdb.ErrLibraryNotFound) {
		t.Fatalf("missing library: %v", err)
	}
	for _, want := range []string{"scripts/fetch-chdb.sh", "--chdb-lib", "EVENTGATE_CHDB_LIB", "--clickhouse-dsn"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing-library error does not mention %s: %v", want, err)
		}
	}
	for _, cfg := range []Config{
		{Database: "bad-name"},
		{Database: "x; DROP DATABASE system"},
		{Database: "1abc"},
		{Cluster: "c`x"},
		{TenantTTL: map[string]time.Duration{"planet/earth": time.Hour}},
		{TenantTTL: map[string]time.Duration{"project/a": 0}},
		{TTL: -time.Hour},
	} {
		if _, err := OpenEngine(context.Background(), chtest.Engine(t), cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		full := &eventgatev1.Event{
			Uid: "0193b5a4-7c1e-7d2f-9a3b-4c5d6e7f8a9b", Name: "api-0.17a2b3c4d5e6f7a8", Namespace: "web",
			EventTime: timestamppb.New(base.Add(123456 * time.Microsecond)),
			Series: &eventgatev1.EventSeries{Count: 42, LastObservedTime: timestamppb.New(base.Add(time.Minute + 7*time.Microsecond)),
				State: event.SeriesOngoing},
			ReportingController: "example.com/payment-operator", ReportingInstance: "payment-operator-5f7c9",
			Action: "Scale", Reason: "ScaledUp",
			Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "web", Name: "api",
				Uid: "d-uid", FieldPath: "spec.replicas", ResourceVersion: "777"},
			Related: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0",
				Uid: "p-uid", FieldPath: "spec.containers{app}", ResourceVersion: "778"},
			Note: "scaled to 3 ✓", Type: "Warning",
			Tenant:      &eventgatev1.Tenant{Type: "project", Name: "shop"},
			Labels:      map[string]string{"app": "api", "tier": "backend"},
			Annotations: map[string]string{"example.com/trace": "abc", "empty": ""},
			Metadata:    map[string]string{"revision": "v1.2.3", "token": "s3cr3t"},
		}
		insert(t, s, 7, full)
		want := proto.Clone(full).(*eventgatev1.Event)
		want.ResourceVersion = "7"

		p := listPage(t, s, query.List{Scope: all}, 7)
		if len(p.Events) != 1 || !proto.Equal(p.Events[0], want) {
			t.Fatalf("query:\n got %v\nwant %v", p.Events, want)
		}
		if p.ResourceVersion != 7 || p.NextPageToken != "" {
			t.Fatalf("page rv %d token %q", p.ResourceVersion, p.NextPageToken)
		}
		got, err := s.Get(ctx, all, query.Lookup{UID: full.Uid})
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("get: %v %v", got, err)
		}
		// The columns hold the fields too (for filters and analytics).
		rs, err := s.t.query(ctx, "SELECT toString(reason), toInt64(series_count), toString(series_state), "+
			"toInt64(toUnixTimestamp64Micro(event_time)), toInt64(toUnixTimestamp64Micro(series_last_observed)), "+
			"labels['tier'], metadata['revision'], related_field_path, toUInt64(ttl_seconds), subject FROM "+s.events(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		if !rs.Next() {
			t.Fatal("no row")
		}
		var reason, state, tier, rev, fp, subj string
		var count, et, lo int64
		var ttl uint64
		if err := rs.Scan(&reason, &count, &state, &et, &lo, &tier, &rev, &fp, &ttl, &subj); err != nil {
			t.Fatal(err)
		}
		if reason != "ScaledUp" || count != 42 || state != "Ongoing" || et != full.EventTime.AsTime().UnixMicro() ||
			lo != full.Series.LastObservedTime.AsTime().UnixMicro() || tier != "backend" || rev != "v1.2.3" ||
			fp != "spec.containers{app}" || ttl != uint64(DefaultTTL/time.Second) || subj != event.SubjectOf(full) {
			t.Fatalf("columns: %q %d %q %d %d %q %q %q %d %q", reason, count, state, et, lo, tier, rev, fp, ttl, subj)
		}
	})
}

// filterEvents are the fixture of TestFilters, newest last.
func filterEvents() []*eventgatev1.Event {
	return []*eventgatev1.Event{
		mkEvent("e1", 1, regarding("v1", "Pod", "web", "api-0"), related("v1", "Node", "", "node-1"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Type, e.Action, e.ReportingController, e.ReportingInstance = "BackOff", "Warning", "Restart", "kubelet", "node-1"
			e.Regarding.Uid, e.Regarding.FieldPath = "pod-uid-0", "spec.containers{app}"
			e.Labels = map[string]string{"app": "web", "tier": "fe"}
		})),
		mkEvent("e2", 2, regarding("v1", "Pod", "web", "api-1"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Action, e.ReportingController, e.ReportingInstance = "Scheduled", "Bind", "default-scheduler", "sched-1"
			e.Labels = map[string]string{"app": "web"}
		})),
		mkEvent("e3", 3, regarding("apps/v1", "Deployment", "web", "api"), related("v1", "Pod", "web", "api-0"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Action, e.ReportingController, e.ReportingInstance = "ScalingReplicaSet", "Scale", "deployment-controller", "kcm-1"
			e.Labels = map[string]string{"app": "api", "tier": "be"}
		})),
		mkEvent("e4", 4, regarding("v1", "Node", "", "node-1"), with(func(e *eventgatev1.Event) {
			e.Reason, e.ReportingController, e.ReportingInstance = "NodeReady", "kubelet", "node-1"
			e.Regarding.Uid = "node-uid-1"
		})),
		mkEvent("e5", 5, regarding("v1", "Pod", "db", "pg-0"), related("v1", "PersistentVolumeClaim", "db", "data-pg-0"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Type, e.Action, e.ReportingController, e.ReportingInstance = "BackOff", "Warning", "Restart", "kubelet", "node-2"
			e.Labels = map[string]string{"app": "db", "tier": ""}
		})),
		mkEvent("e6", 6, tenant("project", "b"), regarding("v1", "Pod", "web", "api-0"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Type, e.ReportingController, e.ReportingInstance = "BackOff", "Warning", "kubelet", "node-1"
			e.Labels = map[string]string{"app": "web"}
		})),
		mkEvent("e7", 7, tenant("organization", "acme"), regarding("compute.example.com/v1", "Workload", "prod", "w1"), with(func(e *eventgatev1.Event) {
			e.Reason, e.ReportingController, e.ReportingInstance = "Created", "compute", "compute-0"
		})),
		mkEvent("e8", 8, tenant("global", ""), regarding("v1", "Node", "", "node-1"), with(func(e *eventgatev1.Event) {
			e.Reason, e.Type, e.ReportingController, e.ReportingInstance = "NodeNotReady", "Warning", "node-controller", "kcm-1"
		})),
	}
}

func at(sec float64) time.Time { return base.Add(time.Duration(sec * float64(time.Second))) }

func TestFilters(t *testing.T) {
	projA := &query.TenantRef{Type: "project", Name: "a"}
	cases := []struct {
		name   string
		scope  query.Scope
		filter query.Filter
		want   string // uids, newest first
	}{
		{"all", all, query.Filter{}, "e8 e7 e6 e5 e4 e3 e2 e1"},
		{"zero scope sees nothing", query.Scope{}, query.Filter{}, ""},
		{"scope one tenant", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}, query.Filter{}, "e5 e4 e3 e2 e1"},
		{"scope wildcard type", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "*"}}}, query.Filter{}, "e6 e5 e4 e3 e2 e1"},
		{"scope several tenants", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}, {Type: "global", Name: ""}}}, query.Filter{}, "e8 e6"},
		{"scope name is not a wildcard for another type", query.Scope{Tenants: []query.TenantRef{{Type: "user", Name: "*"}}}, query.Filter{}, ""},
		{"filter tenant narrows", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "*"}}}, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "b"}}, "e6"},
		{"filter tenant outside scope", query.Scope{Tenants: []query.TenantRef{{Type: "organization", Name: "acme"}}}, query.Filter{Tenant: projA}, ""},
		{"filter tenant wildcard", all, query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "*"}}, "e6 e5 e4 e3 e2 e1"},
		{"reason", all, query.Filter{Reason: set("BackOff")}, "e6 e5 e1"},
		{"reason in", all, query.Filter{Reason: set("BackOff", "Scheduled")}, "e6 e5 e2 e1"},
		{"reason not in", all, query.Filter{Reason: notIn("BackOff")}, "e8 e7 e4 e3 e2"},
		{"reason in and not in", all, query.Filter{Reason: query.StringSet{In: []string{"BackOff", "NodeReady"}, NotIn: []string{"NodeReady"}}}, "e6 e5 e1"},
		{"type", all, query.Filter{Type: set("Warning")}, "e8 e6 e5 e1"},
		{"type not", all, query.Filter{Type: notIn("Warning")}, "e7 e4 e3 e2"},
		{"action", all, query.Filter{Action: set("Restart")}, "e5 e1"},
		{"namespace", all, query.Filter{Namespace: set("web")}, "e6 e3 e2 e1"},
		{"namespace empty (cluster scoped)", all, query.Filter{Namespace: set("")}, "e8 e4"},
		{"namespace not in", all, query.Filter{Namespace: notIn("web", "")}, "e7 e5"},
		{"reporting controller", all, query.Filter{ReportingController: set("kubelet")}, "e6 e5 e4 e1"},
		{"reporting instance not in", all, query.Filter{ReportingInstance: notIn("node-1")}, "e8 e7 e5 e3 e2"},
		{"regarding kind", all, query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod")}}, "e6 e5 e2 e1"},
		{"regarding apiVersion", all, query.Filter{Regarding: query.ObjectFilter{APIVersion: set("apps/v1")}}, "e3"},
		{"regarding object", all, query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod"), Namespace: set("web"), Name: set("api-0")}}, "e6 e1"},
		{"regarding object in tenant", all, query.Filter{Tenant: projA, Regarding: query.ObjectFilter{Kind: set("Pod"), Namespace: set("web"), Name: set("api-0")}}, "e1"},
		{"regarding uid", all, query.Filter{Regarding: query.ObjectFilter{UID: set("pod-uid-0")}}, "e1"},
		{"regarding fieldPath", all, query.Filter{Regarding: query.ObjectFilter{FieldPath: set("spec.containers{app}")}}, "e1"},
		{"regarding name not in", all, query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod"), Name: notIn("api-0", "api-1")}}, "e5"},
		{"related kind", all, query.Filter{Related: query.ObjectFilter{Kind: set("Pod")}}, "e3"},
		{"related name", all, query.Filter{Related: query.ObjectFilter{Name: set("api-0", "node-1")}}, "e3 e1"},
		{"related absent", all, query.Filter{Related: query.ObjectFilter{Kind: set("")}}, "e8 e7 e6 e4 e2"},
		{"involving pod", all, query.Filter{Involving: &query.ObjectFilter{Kind: set("Pod"), Namespace: set("web"), Name: set("api-0")}}, "e6 e3 e1"},
		{"involving node", all, query.Filter{Involving: &query.ObjectFilter{Kind: set("Node"), Name: set("node-1")}}, "e8 e4 e1"},
		{"involving not pod", all, query.Filter{Involving: &query.ObjectFilter{Kind: notIn("Pod")}}, "e8 e7 e5 e4 e3 e1"},
		{"involving and reason", all, query.Filter{Reason: set("BackOff"), Involving: &query.ObjectFilter{Kind: set("Pod"), Namespace: set("web"), Name: set("api-0")}}, "e6 e1"},
		{"involving in scope", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}, query.Filter{Involving: &query.ObjectFilter{Kind: set("Pod"), Name: set("api-0")}}, "e3 e1"},
		{"label =", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "=", Values: []string{"web"}}}}, "e6 e2 e1"},
		{"label ==", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "==", Values: []string{"web"}}}}, "e6 e2 e1"},
		{"label !=", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "!=", Values: []string{"web"}}}}, "e8 e7 e5 e4 e3"},
		{"label in", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "in", Values: []string{"web", "db"}}}}, "e6 e5 e2 e1"},
		{"label notin", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "notin", Values: []string{"web", "db"}}}}, "e8 e7 e4 e3"},
		{"label exists", all, query.Filter{Labels: []query.LabelReq{{Key: "tier", Op: "exists", Values: nil}}}, "e5 e3 e1"},
		{"label does not exist", all, query.Filter{Labels: []query.LabelReq{{Key: "tier", Op: "!", Values: nil}}}, "e8 e7 e6 e4 e2"},
		{"label = empty needs the key", all, query.Filter{Labels: []query.LabelReq{{Key: "tier", Op: "=", Values: []string{""}}}}, "e5"},
		{"labels and", all, query.Filter{Labels: []query.LabelReq{{Key: "app", Op: "=", Values: []string{"web"}}, {Key: "tier", Op: "=", Values: []string{"fe"}}}}, "e1"},
		{"since", all, query.Filter{Since: at(3)}, "e8 e7 e6 e5 e4 e3"},
		{"until", all, query.Filter{Until: at(3)}, "e2 e1"},
		{"since until", all, query.Filter{Since: at(2), Until: at(5)}, "e4 e3 e2"},
		{"since sub-microsecond", all, query.Filter{Since: at(3).Add(500 * time.Nanosecond)}, "e8 e7 e6 e5 e4"},
		{"until sub-microsecond", all, query.Filter{Until: at(3).Add(500 * time.Nanosecond)}, "e3 e2 e1"},
		{"time range far out", all, query.Filter{Since: time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, "e8 e7 e6 e5 e4 e3 e2 e1"},
		{"everything", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "*"}}}, query.Filter{
			Tenant: projA, Namespace: set("web"), Type: set("Warning"), Reason: set("BackOff"), Action: set("Restart"),
			ReportingController: set("kubelet"), ReportingInstance: set("node-1"),
			Regarding: query.ObjectFilter{APIVersion: set("v1"), Kind: set("Pod"), Namespace: set("web"), Name: set("api-0"), UID: set("pod-uid-0"), FieldPath: set("spec.containers{app}")},
			Related:   query.ObjectFilter{Kind: set("Node"), Name: set("node-1"), Namespace: set("")},
			Involving: &query.ObjectFilter{Kind: set("Node")},
			Labels:    []query.LabelReq{{Key: "app", Op: "in", Values: []string{"web"}}, {Key: "tier", Op: "exists", Values: nil}, {Key: "x", Op: "!", Values: nil}},
			Since:     at(1), Until: at(2),
		}, "e1"},
	}
	eachStore(t, func(t *testing.T, s *Store) {
		rv := insert(t, s, 1, filterEvents()...)
		for _, c := range cases {
			p := listPage(t, s, query.List{Scope: c.scope, Filter: c.filter}, rv)
			if got := strings.Join(uidsOf(p.Events), " "); got != c.want {
				t.Errorf("%s: got [%s], want [%s]", c.name, got, c.want)
			}
			// Oldest first is the reverse.
			p = listPage(t, s, query.List{Scope: c.scope, Filter: c.filter, OldestFirst: true}, rv)
			want := strings.Fields(c.want)
			slices.Reverse(want)
			if got := uidsOf(p.Events); !slices.Equal(got, want) {
				t.Errorf("%s oldest first: got %v, want %v", c.name, got, want)
			}
		}
	})
}

func TestInvalidFilters(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		for _, f := range []query.Filter{
			{Labels: []query.LabelReq{{Key: "app", Op: "like", Values: []string{"x"}}}},
			{Labels: []query.LabelReq{{Key: "", Op: "exists", Values: nil}}},
			{Labels: []query.LabelReq{{Key: "app", Op: "=", Values: nil}}},
			{Labels: []query.LabelReq{{Key: "app", Op: "=", Values: []string{"a", "b"}}}},
			{Labels: []query.LabelReq{{Key: "app", Op: "in", Values: nil}}},
			{Labels: []query.LabelReq{{Key: "app", Op: "exists", Values: []string{"a"}}}},
			{Since: at(5), Until: at(1)},
			{Reason: query.StringSet{In: make([]string, query.MaxFilterValues+1)}},
		} {
			if _, err := s.Query(context.Background(), query.List{Scope: all, Filter: f}, 10); !errors.Is(err, query.ErrInvalidQuery) {
				t.Errorf("filter %+v: %v, want query.ErrInvalidQuery", f, err)
			}
		}
		if _, err := s.Get(context.Background(), all, query.Lookup{}); !errors.Is(err, query.ErrInvalidQuery) {
			t.Errorf("empty get: %v", err)
		}
	})
}

// hostileValues must reach ClickHouse as data, never as SQL.
var hostileValues = []string{
	"it's 'quoted'",
	`double "quoted"`,
	"back\\slash \\' \\N \\0 \\x41",
	"'; DROP TABLE events; --",
	"') OR 1=1 OR ('",
	"{x:String}",
	"{p0:String}",
	"{p1:UInt64}",
	"@name $1 ? %s",
	"nul\x00byte",
	"line\nbreak",
	"blank\n\nline",
	"tab\tcr\r",
	"ünïcødé ✓ 🎉",
	"`backtick` identifier",
	"*",
	strings.Repeat("long", 2000),
}

func TestHostileValues(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var evs []*eventgatev1.Event
		for i, h := range hostileValues {
			evs = append(evs, mkEvent("u"+h, float64(i), tenant("project", "t"+h), regarding("v1", "Pod", h, h), with(func(e *eventgatev1.Event) {
				e.Name, e.Reason, e.Note, e.Action, e.Type = "n"+h, h, h, h, h
				e.ReportingController, e.ReportingInstance = h, h
				e.Related = &eventgatev1.ObjectReference{Kind: h, Name: h, Namespace: h, Uid: h, FieldPath: h, ApiVersion: h}
				e.Regarding.Uid, e.Regarding.FieldPath = h, h
				e.Labels = map[string]string{h: h, "k": h}
				e.Annotations = map[string]string{h: h}
				e.Metadata = map[string]string{h: h}
			})))
		}
		rv := insert(t, s, 1, evs...)
		n := len(hostileValues)
		for i, h := range hostileValues {
			uid := "u" + h
			one := func(what string, f query.Filter) {
				t.Helper()
				p := listPage(t, s, query.List{Scope: all, Filter: f}, rv)
				if len(p.Events) != 1 || p.Events[0].Uid != uid || !proto.Equal(p.Events[0].Tenant, evs[i].Tenant) {
					t.Errorf("hostile %d %q, %s: got %q", i, truncate(h), what, uidsOf(p.Events))
				}
			}
			one("reason", query.Filter{Reason: set(h)})
			one("type+action", query.Filter{Type: set(h), Action: set(h)})
			one("namespace", query.Filter{Namespace: set(h)})
			one("reporting", query.Filter{ReportingController: set(h), ReportingInstance: set(h, "other")})
			one("regarding", query.Filter{Regarding: query.ObjectFilter{Kind: set("Pod"), Namespace: set(h), Name: set(h), UID: set(h), FieldPath: set(h)}})
			one("related", query.Filter{Related: query.ObjectFilter{APIVersion: set(h), Kind: set(h), Namespace: set(h), Name: set(h), UID: set(h), FieldPath: set(h)}})
			one("involving", query.Filter{Involving: &query.ObjectFilter{Kind: set(h), Name: set(h)}})
			one("label =", query.Filter{Labels: []query.LabelReq{{Key: h, Op: "=", Values: []string{h}}}})
			one("label exists", query.Filter{Labels: []query.LabelReq{{Key: h, Op: "exists", Values: nil}}})
			one("label in", query.Filter{Labels: []query.LabelReq{{Key: "k", Op: "in", Values: []string{h, "zzz"}}}})
			one("tenant filter", query.Filter{Tenant: &query.TenantRef{Type: "project", Name: "t" + h}})
			p := listPage(t, s, query.List{Scope: query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "t" + h}}}}, rv)
			if got := uidsOf(p.Events); len(got) != 1 || got[0] != uid {
				t.Errorf("hostile %d scope: %q", i, got)
			}
			p = listPage(t, s, query.List{Scope: all, Filter: query.Filter{Reason: notIn(h)}}, rv)
			if len(p.Events) != n-1 || slices.Contains(uidsOf(p.Events), uid) {
				t.Errorf("hostile %d not in: %d events", i, len(p.Events))
			}
			p = listPage(t, s, query.List{Scope: all, Filter: query.Filter{Labels: []query.LabelReq{{Key: h, Op: "!=", Values: []string{h}}}}}, rv)
			if len(p.Events) != n-1 {
				t.Errorf("hostile %d label !=: %d events", i, len(p.Events))
			}
			for _, g := range []query.Lookup{{UID: uid}, {Namespace: h, Name: "n" + h}, {UID: uid, Namespace: h, Name: "n" + h, Tenant: &query.TenantRef{Type: "project", Name: "t" + h}}} {
				ev, err := s.Get(ctx, all, g)
				if err != nil || ev.Uid != uid || ev.Labels["k"] != h {
					t.Errorf("hostile %d get %+v: %v %v", i, g, ev.GetUid(), err)
				}
			}
			// (Name "*" is the wildcard, by definition.)
			if _, err := s.Get(ctx, query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: h}}}, query.Lookup{UID: uid}); h != "*" && !errors.Is(err, query.ErrNotFound) {
				t.Errorf("hostile %d get out of scope: %v", i, err)
			}
		}
		// Nothing was dropped or changed.
		p := listPage(t, s, query.List{Scope: all, PageSize: 1000}, rv)
		if len(p.Events) != n {
			t.Fatalf("after hostile queries: %d events, want %d", len(p.Events), n)
		}
		for i, ev := range p.Events {
			want := proto.Clone(evs[n-1-i]).(*eventgatev1.Event)
			want.ResourceVersion = strconv.Itoa(n - i)
			if !proto.Equal(ev, want) {
				t.Errorf("event %d changed:\n got %v\nwant %v", i, ev, want)
			}
		}
	})
}

// TestHostileQueryOnlyValues: values an event cannot carry (protobuf strings
// are UTF-8) still travel safely as filter values.
func TestHostileQueryOnlyValues(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		rv := insert(t, s, 1, filterEvents()...)
		for _, h := range append([]string{"bad utf8 \xff\xfe", "\xc3\x28", "\\", "'", "\x00"}, hostileValues...) {
			for _, f := range []query.Filter{
				{Reason: set(h)}, {Namespace: set(h, "zzz")}, {Regarding: query.ObjectFilter{Name: set(h)}},
				{Involving: &query.ObjectFilter{UID: set(h)}}, {Labels: []query.LabelReq{{Key: h, Op: "in", Values: []string{h}}}},
				{Tenant: &query.TenantRef{Type: "project", Name: h}},
			} {
				if f.Tenant != nil && h == "*" {
					continue // the wildcard, by definition
				}
				p := listPage(t, s, query.List{Scope: all, Filter: f}, rv)
				if len(p.Events) != 0 {
					t.Errorf("%q: %d events", h, len(p.Events))
				}
			}
			p := listPage(t, s, query.List{Scope: all, Filter: query.Filter{Reason: notIn(h), Labels: []query.LabelReq{{Key: h, Op: "!", Values: nil}}}}, rv)
			if len(p.Events) != 8 {
				t.Errorf("%q negated: %d events", h, len(p.Events))
			}
			if _, err := s.Get(context.Background(), all, query.Lookup{UID: h, Namespace: h, Name: h}); !errors.Is(err, query.ErrNotFound) {
				t.Errorf("%q get: %v", h, err)
			}
		}
	})
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func TestGet(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		insert(t, s, 1, filterEvents()...)
		// The same uid in another tenant (a client may choose uids).
		insert(t, s, 100, mkEvent("e1", 9, tenant("project", "b"), with(func(e *eventgatev1.Event) { e.Reason = "Twin" })))
		cases := []struct {
			name   string
			scope  query.Scope
			g      query.Lookup
			want   string // uid/reason, "" for query.ErrNotFound
			reason string
		}{
			{"by uid", all, query.Lookup{UID: "e3"}, "e3", "ScalingReplicaSet"},
			{"by namespace/name", all, query.Lookup{Namespace: "web", Name: "ev-e2"}, "e2", "Scheduled"},
			{"cluster scoped by name", query.Scope{Tenants: []query.TenantRef{{Type: "global", Name: ""}}}, query.Lookup{Name: "ev-e8"}, "e8", "NodeNotReady"},
			{"by uid and name", all, query.Lookup{UID: "e2", Namespace: "web", Name: "ev-e2"}, "e2", "Scheduled"},
			{"uid and wrong name", all, query.Lookup{UID: "e2", Namespace: "web", Name: "ev-e3"}, "", ""},
			{"name in wrong namespace", all, query.Lookup{Namespace: "db", Name: "ev-e2"}, "", ""},
			{"in scope", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}, query.Lookup{UID: "e5"}, "e5", "BackOff"},
			{"out of scope", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}, query.Lookup{UID: "e6"}, "", ""},
			{"out of scope by name", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}}}, query.Lookup{Namespace: "web", Name: "ev-e2"}, "", ""},
			{"zero scope", query.Scope{}, query.Lookup{UID: "e1"}, "", ""},
			{"wildcard scope", query.Scope{Tenants: []query.TenantRef{{Type: "organization", Name: "*"}}}, query.Lookup{UID: "e7"}, "e7", "Created"},
			{"tenant narrows", all, query.Lookup{UID: "e1", Tenant: &query.TenantRef{Type: "project", Name: "a"}}, "e1", "BackOff"},
			{"twin uid in its tenant", all, query.Lookup{UID: "e1", Tenant: &query.TenantRef{Type: "project", Name: "b"}}, "e1", "Twin"},
			{"twin uid by scope", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}}}, query.Lookup{UID: "e1"}, "e1", "Twin"},
			{"own uid by scope", query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a"}}}, query.Lookup{UID: "e1"}, "e1", "BackOff"},
			{"missing", all, query.Lookup{UID: "nope"}, "", ""},
		}
		for _, c := range cases {
			ev, err := s.Get(ctx, c.scope, c.g)
			switch {
			case c.want == "" && !errors.Is(err, query.ErrNotFound):
				t.Errorf("%s: got %v %v, want query.ErrNotFound", c.name, ev.GetUid(), err)
			case c.want != "" && (err != nil || ev.Uid != c.want || ev.Reason != c.reason):
				t.Errorf("%s: got %v/%v %v, want %s/%s", c.name, ev.GetUid(), ev.GetReason(), err, c.want, c.reason)
			}
		}
		// Both twins are listed: the uid is unique per tenant, not globally.
		p := listPage(t, s, query.List{Scope: all, Filter: query.Filter{Regarding: query.ObjectFilter{Name: set("pod-e1", "api-0")}}}, 100)
		if got := strings.Join(uidsOf(p.Events), " "); got != "e1 e6 e1" {
			t.Errorf("twins: %s", got)
		}
	})
}

func TestSeriesVersionsAndRedelivery(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		version := func(seq uint64, count int32) Row {
			ev := mkEvent("s1", 1, with(func(e *eventgatev1.Event) {
				e.Series = &eventgatev1.EventSeries{Count: count, LastObservedTime: timestamppb.New(at(float64(count))), State: event.SeriesOngoing}
			}))
			return Row{Seq: seq, Event: ev, Subject: event.SubjectOf(ev)}
		}
		other := Row{Seq: 15, Event: mkEvent("s2", 2)}
		// Out of order, in several batches, some twice (redeliveries).
		for _, batch := range [][]Row{{version(20, 2)}, {version(10, 1), other}, {version(30, 3), version(20, 2)}, {version(30, 3)}, {other, version(10, 1)}} {
			if err := s.Insert(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		check := func(label string, rv uint64, want string) {
			t.Helper()
			for _, oldest := range []bool{false, true} {
				p := listPage(t, s, query.List{Scope: all, OldestFirst: oldest}, rv)
				var got []string
				for _, e := range p.Events {
					got = append(got, fmt.Sprintf("%s@%s#%d", e.Uid, e.ResourceVersion, e.GetSeries().GetCount()))
				}
				w := strings.Fields(want)
				if oldest {
					slices.Reverse(w)
				}
				if !slices.Equal(got, w) {
					t.Errorf("%s rv=%d oldest=%v: got %v, want %v", label, rv, oldest, got, w)
				}
			}
		}
		verify := func(label string) {
			check(label, 5, "")
			check(label, 10, "s1@10#1")
			check(label, 19, "s2@15#0 s1@10#1")
			check(label, 25, "s2@15#0 s1@20#2")
			check(label, 1000, "s2@15#0 s1@30#3")
			ev, err := s.Get(ctx, all, query.Lookup{UID: "s1"})
			if err != nil || ev.ResourceVersion != "30" || ev.Series.Count != 3 {
				t.Errorf("%s get: %v %v", label, ev, err)
			}
		}
		verify("before merges")
		// Merges drop the redelivered copies and keep every version.
		if err := s.t.exec(ctx, "OPTIMIZE TABLE "+s.events()+" FINAL", nil); err != nil {
			t.Fatal(err)
		}
		verify("after merge")
		rs, err := s.t.query(ctx, "SELECT toUInt64(count()) FROM "+s.events(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for rs.Next() {
			rs.Scan(&n)
		}
		rs.Close()
		if n != 4 {
			t.Errorf("after merge: %d rows, want 4 (three versions of s1, one of s2)", n)
		}
	})
}

func TestPageSizeAndTokens(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var evs []*eventgatev1.Event
		for i := 0; i < 1100; i++ {
			evs = append(evs, mkEvent(fmt.Sprintf("p%04d", i), float64(i)/10))
		}
		rv := insert(t, s, 1, evs...)
		p := listPage(t, s, query.List{Scope: all}, rv)
		if len(p.Events) != query.DefaultPageSize || p.NextPageToken == "" || p.Events[0].Uid != "p1099" {
			t.Fatalf("default page: %d events, token %q", len(p.Events), p.NextPageToken)
		}
		p = listPage(t, s, query.List{Scope: all, PageSize: 5000}, rv)
		if len(p.Events) != query.MaxPageSize || p.NextPageToken == "" {
			t.Fatalf("max page: %d events", len(p.Events))
		}
		p2 := listPage(t, s, query.List{Scope: all, PageSize: 5000, PageToken: p.NextPageToken}, rv)
		if len(p2.Events) != 100 || p2.NextPageToken != "" || p2.Events[0].Uid != "p0099" {
			t.Fatalf("last page: %d events, token %q", len(p2.Events), p2.NextPageToken)
		}
		// The token's rv wins over the argument.
		p = listPage(t, s, query.List{Scope: all, PageSize: 10}, 50)
		if p.Events[0].Uid != "p0049" {
			t.Fatalf("rv 50: first %s", p.Events[0].Uid)
		}
		p2 = listPage(t, s, query.List{Scope: all, PageSize: 10, PageToken: p.NextPageToken}, rv)
		if p2.ResourceVersion != 50 || p2.Events[0].Uid != "p0039" {
			t.Fatalf("token rv: rv %d first %s", p2.ResourceVersion, p2.Events[0].Uid)
		}
		// A token is bound to its filter and order.
		tok := p.NextPageToken
		for name, q := range map[string]query.List{
			"other filter": {Scope: all, PageToken: tok, Filter: query.Filter{Reason: set("R")}},
			"other order":  {Scope: all, PageToken: tok, OldestFirst: true},
			"garbage":      {Scope: all, PageToken: "not a token!"},
			"base64 junk":  {Scope: all, PageToken: "eyJ2IjoyfQ"},
			"truncated":    {Scope: all, PageToken: tok[:len(tok)/2]},
		} {
			if _, err := s.Query(ctx, q, rv); !errors.Is(err, query.ErrBadPageToken) {
				t.Errorf("%s: %v, want query.ErrBadPageToken", name, err)
			}
		}
		// Another scope may continue (the scope is enforced on every page).
		p2 = listPage(t, s, query.List{Scope: query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}}}, PageSize: 10, PageToken: tok}, rv)
		if len(p2.Events) != 0 {
			t.Fatalf("token in another scope returned %d events", len(p2.Events))
		}
	})
}

// TestPaginationUnderConcurrentIngest lists a snapshot page by page while
// new events, new series versions and redeliveries are inserted: every
// event of the snapshot comes exactly once, in order, at its version.
func TestPaginationUnderConcurrentIngest(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		type key struct{ uid, tenant string }
		type ver struct {
			seq  uint64
			time time.Time
			row  Row
		}
		latest := map[key]ver{}
		var rows []Row
		seq := uint64(0)
		add := func(uid string, sec float64, ten string, count int32) Row {
			seq++
			ev := mkEvent(uid, sec, tenant("project", ten), with(func(e *eventgatev1.Event) {
				if count > 0 {
					e.Series = &eventgatev1.EventSeries{Count: count}
				}
			}))
			r := Row{Seq: seq, Event: ev, Subject: event.SubjectOf(ev)}
			return r
		}
		// 600 events, three per timestamp (ties broken by uid and tenant),
		// two tenants sharing uids.
		for i := 0; i < 600; i++ {
			r := add(fmt.Sprintf("u%03d", i/2), float64(i/3), []string{"a", "b"}[i%2], 0)
			rows = append(rows, r)
		}
		// Series updates of every 7th event.
		for i := 0; i < 600; i += 7 {
			old := rows[i]
			rows = append(rows, add(old.Event.Uid, float64(i/3), old.Event.Tenant.Name, 2))
		}
		for _, r := range rows {
			k := key{r.Event.Uid, r.Event.Tenant.Name}
			if r.Seq > latest[k].seq {
				latest[k] = ver{r.Seq, r.Event.EventTime.AsTime(), r}
			}
		}
		rng := rand.New(rand.NewPCG(7, 9))
		shuffled := slices.Clone(rows)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for i := 0; i < len(shuffled); i += 100 {
			if err := s.Insert(ctx, shuffled[i:min(i+100, len(shuffled))]); err != nil {
				t.Fatal(err)
			}
		}
		rv := seq

		var want []ver
		for _, v := range latest {
			want = append(want, v)
		}
		slices.SortFunc(want, func(a, b ver) int {
			if c := a.time.Compare(b.time); c != 0 {
				return -c
			}
			if c := strings.Compare(a.row.Event.Uid, b.row.Event.Uid); c != 0 {
				return -c
			}
			return -strings.Compare(a.row.Event.Tenant.Name, b.row.Event.Tenant.Name)
		})

		// Concurrent ingest: new events in the same time range, newer
		// versions of listed events, and redeliveries of listed versions.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		var insertErr error
		pre := make(chan struct{})
		var preOnce sync.Once
		go func() {
			defer wg.Done()
			defer preOnce.Do(func() { close(pre) })
			next := rv
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				var batch []Row
				for j := 0; j < 20; j++ {
					next++
					ev := mkEvent(fmt.Sprintf("new%05d", n*20+j), float64(rng.IntN(200)), tenant("project", "a"))
					batch = append(batch, Row{Seq: next, Event: ev})
					old := rows[rng.IntN(len(rows))]
					next++
					upd := proto.Clone(old.Event).(*eventgatev1.Event)
					upd.Series = &eventgatev1.EventSeries{Count: 99}
					batch = append(batch, Row{Seq: next, Event: upd}, old)
				}
				if err := s.Insert(ctx, batch); err != nil {
					insertErr = err
					return
				}
				if n == 10 {
					// Ten batches before the listing starts, the rest
					// during it.
					preOnce.Do(func() { close(pre) })
				}
			}
		}()
		<-pre
		defer func() {
			close(stop)
			wg.Wait()
			if insertErr != nil {
				t.Errorf("concurrent insert: %v", insertErr)
			}
		}()

		for _, oldest := range []bool{false, true} {
			exp := slices.Clone(want)
			if oldest {
				slices.Reverse(exp)
			}
			q := query.List{Scope: query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "*"}}}, OldestFirst: oldest, PageSize: 7}
			var got []*eventgatev1.Event
			pages := 0
			for {
				p := listPage(t, s, q, rv)
				if p.ResourceVersion != rv {
					t.Fatalf("page rv %d, want %d", p.ResourceVersion, rv)
				}
				pages++
				got = append(got, p.Events...)
				if p.NextPageToken == "" {
					break
				}
				q.PageToken = p.NextPageToken
				time.Sleep(time.Millisecond) // let ingest interleave
			}
			if len(got) != len(exp) {
				t.Fatalf("oldest=%v: %d events in %d pages, want %d", oldest, len(got), pages, len(exp))
			}
			for i, e := range got {
				w := exp[i]
				if e.Uid != w.row.Event.Uid || e.Tenant.Name != w.row.Event.Tenant.Name || e.ResourceVersion != strconv.FormatUint(w.seq, 10) {
					t.Fatalf("oldest=%v: event %d is %s/%s@%s, want %s/%s@%d", oldest, i, e.Tenant.Name, e.Uid, e.ResourceVersion,
						w.row.Event.Tenant.Name, w.row.Event.Uid, w.seq)
				}
			}
		}
	})
}

func TestTTL(t *testing.T) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		ctx := context.Background()
		cfg := DefaultConfig()
		cfg.Database = ""
		cfg.TenantTTL = map[string]time.Duration{
			"project/short":  time.Hour,
			"organization/*": 48 * time.Hour,
			"global":         24 * time.Hour,
		}
		s := open(cfg)
		old := -2 * 3600.0 // two hours before base
		insert(t, s, 1,
			mkEvent("short", old, tenant("project", "short")),
			mkEvent("long", old, tenant("project", "long")),
			mkEvent("org", old, tenant("organization", "acme")),
			mkEvent("glob", old, tenant("global", "")),
			// A series observed recently is kept from its last observation.
			mkEvent("short-series", old, tenant("project", "short"), with(func(e *eventgatev1.Event) {
				e.Series = &eventgatev1.EventSeries{Count: 5, LastObservedTime: timestamppb.New(at(1800))}
			})),
		)
		rs, err := s.t.query(ctx, "SELECT uid, toUInt64(ttl_seconds) FROM "+s.events()+" ORDER BY uid", nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for rs.Next() {
			var uid string
			var ttl uint64
			if err := rs.Scan(&uid, &ttl); err != nil {
				t.Fatal(err)
			}
			got[uid] = ttl
		}
		rs.Close()
		// "short" may already be gone: expired rows can be dropped as the
		// part is written.
		want := map[string]uint64{"short-series": 3600, "long": uint64(DefaultTTL / time.Second), "org": 48 * 3600, "glob": 24 * 3600}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("ttl of %s: %d, want %d", k, got[k], v)
			}
		}
		// Expired rows go at the next merge.
		if err := s.t.exec(ctx, "OPTIMIZE TABLE "+s.events()+" FINAL", nil); err != nil {
			t.Fatal(err)
		}
		p := listPage(t, s, query.List{Scope: all, OldestFirst: true}, 10)
		if g := strings.Join(uidsOf(p.Events), " "); g != "glob long org short-series" {
			t.Errorf("after TTL merge: %s", g)
		}
	})
}

func TestScopeNeverLeaks(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		rv := insert(t, s, 1, filterEvents()...)
		scope := query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "b"}}}
		// Whatever the filter asks for, only project/b's event can come back.
		for _, f := range []query.Filter{
			{},
			{Tenant: &query.TenantRef{Type: "project", Name: "a"}},
			{Tenant: &query.TenantRef{Type: "project", Name: "*"}},
			{Reason: notIn("nothing")},
			{Involving: &query.ObjectFilter{}},
			{Labels: []query.LabelReq{{Key: "app", Op: "!", Values: nil}}},
			{Namespace: set("web", "db", "", "prod")},
		} {
			p := listPage(t, s, query.List{Scope: scope, Filter: f}, rv)
			for _, e := range p.Events {
				if e.Tenant.Type != "project" || e.Tenant.Name != "b" {
					t.Errorf("filter %+v leaked %s of %v", f, e.Uid, e.Tenant)
				}
			}
		}
	})
}

// TestClusterDDL checks the DDL for a cluster (no cluster runs here): ON
// CLUSTER everywhere and replicated engines.
func TestClusterDDL(t *testing.T) {
	d := ddl{db: quoteIdent("eg"), cluster: quoteIdent("prod")}
	stmts := migrations[0].stmts(d)
	for _, q := range stmts {
		if !strings.Contains(q, "ON CLUSTER `prod`") || !strings.Contains(q, "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/events', '{replica}', seq)") {
			t.Errorf("cluster DDL: %s", q)
		}
		if strings.Contains(q, "non_replicated_deduplication_window") {
			t.Errorf("replicated table with a non-replicated setting: %s", q)
		}
	}
	plain := migrations[0].stmts(ddl{db: quoteIdent("eg")})[0]
	if strings.Contains(plain, "ON CLUSTER") || !strings.Contains(plain, "ENGINE = ReplacingMergeTree(seq)") {
		t.Errorf("single-node DDL: %s", plain)
	}
}

// TestScopeKinds: a scope that restricts a tenant to some kinds returns
// events regarding those kinds only, matching group and kind together.
func TestScopeKinds(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		rv := insert(t, s, 1, filterEvents()...)
		for _, tc := range []struct {
			scope query.Scope
			want  string
		}{
			{query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Group: "apps", Kind: "Deployment"}}}}}, "e3"},
			{query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Group: "", Kind: "Pod"}}}}}, "e1 e2 e5"},
			{query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Group: "v1", Kind: "Pod"}}}}}, ""},
			{query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: "a", Kinds: []query.GroupKind{{Group: "", Kind: "Deployment"}}}}}, ""},
			{query.Scope{Tenants: []query.TenantRef{
				{Type: "project", Name: "*", Kinds: []query.GroupKind{{Group: "", Kind: "Node"}}},
				{Type: "organization", Name: "*", Kinds: []query.GroupKind{{Group: "compute.example.com", Kind: "Workload"}}},
			}}, "e4 e7"},
		} {
			p := listPage(t, s, query.List{Scope: tc.scope, OldestFirst: true}, rv)
			if got := strings.Join(uidsOf(p.Events), " "); got != tc.want {
				t.Errorf("scope %+v: got %q, want %q", tc.scope, got, tc.want)
			}
			for _, e := range p.Events {
				if _, err := s.Get(context.Background(), tc.scope, query.Lookup{UID: e.Uid}); err != nil {
					t.Errorf("Get %s in scope: %v", e.Uid, err)
				}
			}
			if _, err := s.Get(context.Background(), tc.scope, query.Lookup{UID: "e6"}); !errors.Is(err, query.ErrNotFound) {
				t.Errorf("Get e6 out of scope %+v: %v", tc.scope, err)
			}
		}
	})
}
