package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/gen/openapiv2"
	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/gateway/config"
	ejs "github.com/eventgate/eventgate/internal/jetstream"
	"github.com/eventgate/eventgate/internal/jetstream/wire"
)

// Principals of the analytics test.
const (
	anaShop      = "analytics-shop-token-0123"
	anaBlog      = "analytics-blog-token-0123"
	anaQueryOnly = "analytics-query-only-token"
	anaPlatform  = "analytics-platform-token-0"
)

func writeAnalyticsTokens(t *testing.T) string {
	t.Helper()
	h := authz.HashToken
	yaml := fmt.Sprintf(`principals:
  - name: shop
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: shop, verbs: [query, analytics]}
  - name: blog
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: blog, verbs: [query, analytics]}
  - name: blog-query-only
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: blog, verbs: [query]}
  - name: platform
    platform: true
    tokens: [%q]
    grants:
      - {tenantType: project, tenantName: "*", verbs: [emit, query, analytics]}
`, h(anaShop), h(anaBlog), h(anaQueryOnly), h(anaPlatform))
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// anaT0 starts the analytics window: a whole hour, recent for the TTL.
var anaT0 = time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)

func anaAt(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(anaT0.Add(d)) }

// anaEvent is one event of the analytics data set.
type anaEvent struct {
	uid, tenant, reason, typ, apiVersion, kind, ns, name, rc string
	at                                                       time.Duration
	related                                                  *eventgatev1.ObjectReference
}

func (a anaEvent) event() *eventgatev1.Event {
	tt, tn, _ := strings.Cut(a.tenant, "/")
	return &eventgatev1.Event{
		Uid: a.uid, Name: a.name + "." + a.uid, Namespace: a.ns, EventTime: anaAt(a.at),
		Reason: a.reason, Type: a.typ, Action: "Act", ReportingController: a.rc, ReportingInstance: a.rc + "-0",
		Regarding: &eventgatev1.ObjectReference{ApiVersion: a.apiVersion, Kind: a.kind, Namespace: a.ns, Name: a.name},
		Related:   a.related,
		Tenant:    &eventgatev1.Tenant{Type: tt, Name: tn},
		Note:      "note of " + a.uid,
	}
}

// anaWrite is one events message as the intake (or an older gateway)
// writes it: a version of an event, with the intake's headers when reason
// is set.
type anaWrite struct {
	ev      anaEvent
	count   int32 // 0: no series
	last    time.Duration
	state   string
	reason  string         // Eventgate-Write-Reason; "" for no headers
	minutes map[int]uint32 // minute offset from anaT0 → occurrences
}

// publishEventsMessage publishes the events message the intake would
// write (its headers included) and returns its stream sequence.
func publishEventsMessage(t testing.TB, tg *testGateway, ev *eventgatev1.Event, reason string, minutes []wire.Minute) uint64 {
	t.Helper()
	m, err := ejs.Msg(wire.Write{Event: ev, Reason: reason, Minutes: minutes})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := tg.js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func (w anaWrite) publish(t testing.TB, tg *testGateway) uint64 {
	ev := w.ev.event()
	if w.count > 0 {
		ev.Series = &eventgatev1.EventSeries{Count: w.count, LastObservedTime: anaAt(w.last), State: w.state}
	}
	var ms []wire.Minute
	for off, n := range w.minutes {
		ms = append(ms, wire.Minute{Start: anaT0.Add(time.Duration(off) * time.Minute), Count: n})
	}
	slices.SortFunc(ms, func(a, b wire.Minute) int { return a.Start.Compare(b.Start) })
	return publishEventsMessage(t, tg, ev, w.reason, ms)
}

// anaWrites is the data set with known answers; the window is
// [T0, T0+1h), the previous one [T0-1h, T0).
//
// project/shop:
//   - a1 singleton BackOff Warning Pod web/api-0 at +1m (intake Created write: its minute is not counted again)
//   - a2 singleton Pulled Normal Pod web/api-0 at +2m30s (no headers: an older writer)
//   - a3 singleton ScaledUp Normal Deployment web/api at +3m, related Pod web/api-0
//   - s1 intake series BackOff Warning Pod web/api-1 from +5m: 2, 5, 7 (Finished);
//     minutes +6:1 +7:2 +8:1 +19:1 +20:1, so 1 at +5m
//   - c1 client series FailedMount Warning PersistentVolumeClaim db/data-0 at +10m:
//     versions 3 and 4, no minutes: 4 at +10m
//   - old singleton BackOff Warning Pod web/api-0 at -30m
//   - s2 intake series Unhealthy Warning Pod web/api-2 from -10m: 2, 5; minutes -9:1 +2:3
//
// project/blog:
//   - b1 singleton Evicted Warning Pod web/api-0 at +1m
//   - b2 intake series OOMKilled Warning Pod web/api-9 from +3m: 2, 10; minutes +4:1, +4:3 +40:5
func anaWrites() []anaWrite {
	m := time.Minute
	pod0 := &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: "web", Name: "api-0"}
	a1 := anaEvent{"a1", "project/shop", "BackOff", "Warning", "v1", "Pod", "web", "api-0", "kubelet", 1 * m, nil}
	a2 := anaEvent{"a2", "project/shop", "Pulled", "Normal", "v1", "Pod", "web", "api-0", "kubelet", 150 * time.Second, nil}
	a3 := anaEvent{"a3", "project/shop", "ScaledUp", "Normal", "apps/v1", "Deployment", "web", "api", "deployer", 3 * m, pod0}
	s1 := anaEvent{"s1", "project/shop", "BackOff", "Warning", "v1", "Pod", "web", "api-1", "kubelet", 5 * m, nil}
	c1 := anaEvent{"c1", "project/shop", "FailedMount", "Warning", "v1", "PersistentVolumeClaim", "db", "data-0", "csi", 10 * m, nil}
	old := anaEvent{"old", "project/shop", "BackOff", "Warning", "v1", "Pod", "web", "api-0", "kubelet", -30 * m, nil}
	s2 := anaEvent{"s2", "project/shop", "Unhealthy", "Warning", "v1", "Pod", "web", "api-2", "kubelet", -10 * m, nil}
	b1 := anaEvent{"b1", "project/blog", "Evicted", "Warning", "v1", "Pod", "web", "api-0", "kubelet", 1 * m, nil}
	b2 := anaEvent{"b2", "project/blog", "OOMKilled", "Warning", "v1", "Pod", "web", "api-9", "kubelet", 3 * m, nil}
	return []anaWrite{
		{ev: old, reason: "created", minutes: map[int]uint32{-30: 1}},
		{ev: s2, reason: "created", minutes: map[int]uint32{-10: 1}},
		{ev: s2, count: 2, last: -9 * m, state: "Ongoing", reason: "started", minutes: map[int]uint32{-9: 1}},
		{ev: a1, reason: "created", minutes: map[int]uint32{1: 1}},
		{ev: b1, reason: "created", minutes: map[int]uint32{1: 1}},
		{ev: a2},
		{ev: s2, count: 5, last: 2 * m, state: "Ongoing", reason: "flush", minutes: map[int]uint32{2: 3}},
		{ev: a3, reason: "created", minutes: map[int]uint32{3: 1}},
		{ev: b2, reason: "created", minutes: map[int]uint32{3: 1}},
		{ev: b2, count: 2, last: 4 * m, state: "Ongoing", reason: "started", minutes: map[int]uint32{4: 1}},
		{ev: s1, reason: "created", minutes: map[int]uint32{5: 1}},
		{ev: s1, count: 2, last: 6*m + 10*time.Second, state: "Ongoing", reason: "started", minutes: map[int]uint32{6: 1}},
		{ev: s1, count: 5, last: 8*m + 30*time.Second, state: "Ongoing", reason: "flush", minutes: map[int]uint32{7: 2, 8: 1}},
		{ev: c1, count: 3, last: 11 * m, state: "Ongoing", reason: "client"},
		{ev: c1, count: 4, last: 12 * m, state: "Ongoing", reason: "client"},
		{ev: s1, count: 5, last: 8*m + 30*time.Second, state: "Ongoing", reason: "heartbeat"},
		{ev: s1, count: 7, last: 20 * m, state: "Finished", reason: "finished", minutes: map[int]uint32{19: 1, 20: 1}},
		{ev: b2, count: 10, last: 40 * m, state: "Ongoing", reason: "flush", minutes: map[int]uint32{4: 3, 40: 5}},
	}
}

// analyticsClient calls the AnalyticsService over gRPC and REST.
type analyticsClient struct {
	t     *testing.T
	tg    *testGateway
	grpc  eventgatev1.AnalyticsServiceClient
	token string
}

// call runs method over gRPC with req, and over REST at path?query, and
// checks that both answer the same; it returns the gRPC answer.
func call[Req, Resp proto.Message](c analyticsClient, grpcCall func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req, path string, query url.Values) Resp {
	c.t.Helper()
	resp, err := grpcCall(withToken(context.Background(), c.token), req)
	if err != nil {
		c.t.Fatalf("gRPC %s %v: %v", path, req, err)
	}
	code, body := restGet(c.t, c.tg.httpURL+path+"?"+query.Encode(), c.token)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s?%s = %d %s", path, query.Encode(), code, body)
	}
	rest := resp.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(body, rest); err != nil {
		c.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	if diff := cmp.Diff(resp, rest, protocmp.Transform()); diff != "" {
		c.t.Fatalf("GET %s?%s differs from gRPC (-grpc +rest)\n%s", path, query.Encode(), diff)
	}
	return resp
}

func restGet(t testing.TB, u, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func rfc(d time.Duration) string { return anaT0.Add(d).Format(time.RFC3339) }

func wantEqual(t *testing.T, label string, want, got proto.Message) {
	t.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("%s (-want +got)\n%s", label, diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAnalytics(t *testing.T) {
	tokens := writeAnalyticsTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens })
	var last uint64
	for _, w := range anaWrites() {
		last = w.publish(t, tg)
	}
	waitIngested(t, tg, fmt.Sprint(last))
	conn, err := grpc.NewClient(tg.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := eventgatev1.NewAnalyticsServiceClient(conn)
	shop := analyticsClient{t: t, tg: tg, grpc: client, token: anaShop}
	blog := analyticsClient{t: t, tg: tg, grpc: client, token: anaBlog}
	platform := analyticsClient{t: t, tg: tg, grpc: client, token: anaPlatform}

	since, until := anaAt(0), anaAt(time.Hour)
	window := url.Values{"since": {rfc(0)}, "until": {rfc(time.Hour)}}
	with := func(kv ...string) url.Values {
		v := url.Values{}
		for k, vs := range window {
			v[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	buckets := []*timestamppb.Timestamp{anaAt(0), anaAt(15 * time.Minute), anaAt(30 * time.Minute), anaAt(45 * time.Minute)}

	t.Run("histogram", func(t *testing.T) {
		shop.t, blog.t = t, t
		got := call(shop, client.Histogram, &eventgatev1.HistogramRequest{Since: since, Until: until, Bucket: durationpb.New(15 * time.Minute), GroupBy: []string{"reason"}, Limit: 2},
			"/v1/analytics/histogram", with("bucket", "900s", "groupBy", "reason", "limit", "2"))
		wantEqual(t, "shop histogram by reason", &eventgatev1.HistogramResponse{
			Since: since, Until: until, Bucket: durationpb.New(15 * time.Minute), BucketStarts: buckets,
			Totals: []int64{15, 2, 0, 0}, GroupBy: []string{"reason"}, Total: 17, DistinctGroups: 5,
			Groups: []*eventgatev1.HistogramGroup{
				{Values: []string{"BackOff"}, Total: 8, Counts: []int64{6, 2, 0, 0}},
				{Values: []string{"FailedMount"}, Total: 4, Counts: []int64{4, 0, 0, 0}},
				{Other: true, Total: 5, Counts: []int64{5, 0, 0, 0}},
			},
		}, got)
		got = call(blog, client.Histogram, &eventgatev1.HistogramRequest{Since: since, Until: until, Bucket: durationpb.New(15 * time.Minute), GroupBy: []string{"reason"}, Limit: 2},
			"/v1/analytics/histogram", with("bucket", "900s", "groupBy", "reason", "limit", "2"))
		wantEqual(t, "blog histogram by reason", &eventgatev1.HistogramResponse{
			Since: since, Until: until, Bucket: durationpb.New(15 * time.Minute), BucketStarts: buckets,
			Totals: []int64{6, 0, 5, 0}, GroupBy: []string{"reason"}, Total: 11, DistinctGroups: 2,
			Groups: []*eventgatev1.HistogramGroup{
				{Values: []string{"OOMKilled"}, Total: 10, Counts: []int64{5, 0, 5, 0}},
				{Values: []string{"Evicted"}, Total: 1, Counts: []int64{1, 0, 0, 0}},
			},
		}, got)
		// The filter language of Query: a field selector, a label-less
		// type filter, ungrouped; an automatic bucket (1h → 1m).
		got = call(shop, client.Histogram, &eventgatev1.HistogramRequest{Since: since, Until: until, FieldSelector: "regarding.kind=Pod", Type: []string{"Warning"}},
			"/v1/analytics/histogram", with("fieldSelector", "regarding.kind=Pod", "type", "Warning"))
		if got.Bucket.AsDuration() != time.Minute || len(got.Totals) != 60 || got.Total != 11 || got.Totals[7] != 2 || got.Totals[20] != 1 || len(got.Groups) != 0 {
			t.Errorf("shop Warning Pods per minute: %v", got)
		}
	})

	t.Run("top", func(t *testing.T) {
		shop.t, blog.t, platform.t = t, t, t
		got := call(shop, client.Top, &eventgatev1.TopRequest{Since: since, Until: until, Dimension: "reason"},
			"/v1/analytics/top", with("dimension", "reason"))
		wantEqual(t, "shop top reasons", &eventgatev1.TopResponse{
			Since: since, Until: until, PreviousSince: anaAt(-time.Hour), Dimension: "reason",
			Entries: []*eventgatev1.TopEntry{
				{Value: "BackOff", Count: 8, Share: 8.0 / 17, PreviousCount: 1, Change: ptr(7.0)},
				{Value: "FailedMount", Count: 4, Share: 4.0 / 17},
				{Value: "Unhealthy", Count: 3, Share: 3.0 / 17, PreviousCount: 2, Change: ptr(0.5)},
				{Value: "Pulled", Count: 1, Share: 1.0 / 17},
				{Value: "ScaledUp", Count: 1, Share: 1.0 / 17},
			},
			Total: 17, PreviousTotal: 3, DistinctValues: 5,
		}, got)
		got = call(blog, client.Top, &eventgatev1.TopRequest{Since: since, Until: until, Dimension: "reason", Limit: 1},
			"/v1/analytics/top", with("dimension", "reason", "limit", "1"))
		wantEqual(t, "blog top reason", &eventgatev1.TopResponse{
			Since: since, Until: until, PreviousSince: anaAt(-time.Hour), Dimension: "reason",
			Entries: []*eventgatev1.TopEntry{{Value: "OOMKilled", Count: 10, Share: 10.0 / 11}},
			Total:   11, Other: 1, DistinctValues: 2,
		}, got)
		// A platform caller sees both tenants and may group by tenant.
		got = call(platform, client.Top, &eventgatev1.TopRequest{Since: since, Until: until, Dimension: "tenant"},
			"/v1/analytics/top", with("dimension", "tenant"))
		wantEqual(t, "platform top tenants", &eventgatev1.TopResponse{
			Since: since, Until: until, PreviousSince: anaAt(-time.Hour), Dimension: "tenant",
			Entries: []*eventgatev1.TopEntry{
				{Value: "project/shop", Count: 17, Share: 17.0 / 28, PreviousCount: 3, Change: ptr(14.0 / 3)},
				{Value: "project/blog", Count: 11, Share: 11.0 / 28},
			},
			Total: 28, PreviousTotal: 3, DistinctValues: 2,
		}, got)
		// The objects with the most occurrences, and the related ones.
		got = call(shop, client.Top, &eventgatev1.TopRequest{Since: since, Until: until, Dimension: "regarding", Limit: 2},
			"/v1/analytics/top", with("dimension", "regarding", "limit", "2"))
		wantEqual(t, "shop top objects", &eventgatev1.TopResponse{
			Since: since, Until: until, PreviousSince: anaAt(-time.Hour), Dimension: "regarding",
			Entries: []*eventgatev1.TopEntry{
				{Value: "Pod/web/api-1", Count: 7, Share: 7.0 / 17},
				{Value: "PersistentVolumeClaim/db/data-0", Count: 4, Share: 4.0 / 17},
			},
			Total: 17, PreviousTotal: 3, Other: 6, DistinctValues: 5,
		}, got)
		got = call(shop, client.Top, &eventgatev1.TopRequest{Since: since, Until: until, Dimension: "related"},
			"/v1/analytics/top", with("dimension", "related"))
		wantEqual(t, "shop top related objects", &eventgatev1.TopResponse{
			Since: since, Until: until, PreviousSince: anaAt(-time.Hour), Dimension: "related",
			Entries: []*eventgatev1.TopEntry{
				{Value: "", Count: 16, Share: 16.0 / 17, PreviousCount: 3, Change: ptr(13.0 / 3)},
				{Value: "Pod/web/api-0", Count: 1, Share: 1.0 / 17},
			},
			Total: 17, PreviousTotal: 3, DistinctValues: 2,
		}, got)
	})

	t.Run("facets", func(t *testing.T) {
		shop.t, blog.t = t, t
		got := call(shop, client.Facets, &eventgatev1.FacetsRequest{Since: since, Until: until},
			"/v1/analytics/facets", window)
		fv := func(kv ...any) []*eventgatev1.FacetValue {
			var out []*eventgatev1.FacetValue
			for i := 0; i < len(kv); i += 2 {
				out = append(out, &eventgatev1.FacetValue{Value: kv[i].(string), Count: int64(kv[i+1].(int))})
			}
			return out
		}
		wantEqual(t, "shop facets", &eventgatev1.FacetsResponse{Since: since, Until: until, Total: 17, Facets: []*eventgatev1.Facet{
			{Dimension: "type", Values: fv("Warning", 15, "Normal", 2), DistinctValues: 2},
			{Dimension: "reason", Values: fv("BackOff", 8, "FailedMount", 4, "Unhealthy", 3, "Pulled", 1, "ScaledUp", 1), DistinctValues: 5},
			{Dimension: "regarding.kind", Values: fv("Pod", 12, "PersistentVolumeClaim", 4, "Deployment", 1), DistinctValues: 3},
			{Dimension: "namespace", Values: fv("web", 13, "db", 4), DistinctValues: 2},
			{Dimension: "reportingController", Values: fv("kubelet", 12, "csi", 4, "deployer", 1), DistinctValues: 3},
		}}, got)
		got = call(blog, client.Facets, &eventgatev1.FacetsRequest{Since: since, Until: until, Dimensions: []string{"reason", "action"}, Limit: 1},
			"/v1/analytics/facets", with("dimensions", "reason", "dimensions", "action", "limit", "1"))
		wantEqual(t, "blog facets", &eventgatev1.FacetsResponse{Since: since, Until: until, Total: 11, Facets: []*eventgatev1.Facet{
			{Dimension: "reason", Values: fv("OOMKilled", 10), DistinctValues: 2, Other: 1},
			{Dimension: "action", Values: fv("Act", 11), DistinctValues: 1},
		}}, got)
	})

	t.Run("series", func(t *testing.T) {
		shop.t, blog.t = t, t
		got := call(shop, client.Series, &eventgatev1.SeriesRequest{Since: since, Until: until},
			"/v1/analytics/series", window)
		var lines []string
		for _, s := range got.Series {
			var pts []string
			for _, m := range s.Minutes {
				pts = append(pts, fmt.Sprintf("%+d:%d", int(m.Minute.AsTime().Sub(anaT0)/time.Minute), m.Count))
			}
			lines = append(lines, fmt.Sprintf("%s %s %s %s/%s n=%d w=%d %s first=%+v last=%+v rate=%.3f [%s]", s.Uid, s.Tenant.GetName(), s.Reason,
				s.Regarding.GetKind(), s.Regarding.GetName(), s.Count, s.WindowCount, s.State,
				s.FirstObserved.AsTime().Sub(anaT0), s.LastObserved.AsTime().Sub(anaT0), s.RatePerMinute, strings.Join(pts, " ")))
		}
		want := []string{
			"s1 shop BackOff Pod/api-1 n=7 w=7 Finished first=5m0s last=20m0s rate=0.467 [+5:1 +6:1 +7:2 +8:1 +19:1 +20:1]",
			"s2 shop Unhealthy Pod/api-2 n=5 w=3 Ongoing first=-10m0s last=2m0s rate=0.417 [+2:3]",
			"c1 shop FailedMount PersistentVolumeClaim/data-0 n=4 w=4 Ongoing first=10m0s last=12m0s rate=2.000 [+10:4]",
		}
		if diff := cmp.Diff(want, lines); diff != "" || got.Total != 3 {
			t.Errorf("shop series (-want +got)\n%s total %d", diff, got.Total)
		}
		got = call(shop, client.Series, &eventgatev1.SeriesRequest{Since: since, Until: until, State: "Finished"},
			"/v1/analytics/series", with("state", "Finished"))
		if len(got.Series) != 1 || got.Series[0].Uid != "s1" || got.Total != 1 {
			t.Errorf("shop finished series: %v", got)
		}
		got = call(blog, client.Series, &eventgatev1.SeriesRequest{Since: since, Until: until},
			"/v1/analytics/series", window)
		if len(got.Series) != 1 || got.Series[0].Uid != "b2" || got.Series[0].Count != 10 || got.Series[0].WindowCount != 10 || len(got.Series[0].Minutes) != 3 {
			t.Errorf("blog series: %v", got)
		}
	})

	t.Run("timeline", func(t *testing.T) {
		shop.t, blog.t = t, t
		pod := &eventgatev1.ObjectSelector{Kind: "Pod", Namespace: "web", Name: "api-0"}
		q := url.Values{"involving.kind": {"Pod"}, "involving.namespace": {"web"}, "involving.name": {"api-0"}}
		got := call(shop, client.Timeline, &eventgatev1.TimelineRequest{Involving: pod}, "/v1/analytics/timeline", q)
		var lines []string
		for _, e := range got.Entries {
			lines = append(lines, fmt.Sprintf("%s %s %s x%d", e.Event.Uid, e.Event.Tenant.GetName(), e.Role, e.Occurrences))
		}
		if diff := cmp.Diff([]string{"old shop regarding x1", "a1 shop regarding x1", "a2 shop regarding x1", "a3 shop related x1"}, lines); diff != "" {
			t.Errorf("shop timeline (-want +got)\n%s", diff)
		}
		got = call(blog, client.Timeline, &eventgatev1.TimelineRequest{Involving: pod}, "/v1/analytics/timeline", q)
		if len(got.Entries) != 1 || got.Entries[0].Event.Uid != "b1" || got.Entries[0].Event.Note != "note of b1" {
			t.Errorf("blog timeline: %v", got)
		}
		// A series collapses to its latest version, paged.
		s1 := &eventgatev1.ObjectSelector{Name: "api-1"}
		got = call(shop, client.Timeline, &eventgatev1.TimelineRequest{Involving: s1, Limit: 1}, "/v1/analytics/timeline", url.Values{"involving.name": {"api-1"}, "limit": {"1"}})
		if len(got.Entries) != 1 || got.Entries[0].Occurrences != 7 || got.Entries[0].Event.Series.GetState() != "Finished" || got.NextPageToken != "" ||
			!got.Entries[0].LastObserved.AsTime().Equal(anaT0.Add(20*time.Minute)) {
			t.Errorf("shop timeline of api-1: %v", got)
		}
	})

	t.Run("refused", func(t *testing.T) {
		ctx := context.Background()
		// Another tenant, or no analytics grant: PermissionDenied / 403.
		_, err := client.Top(withToken(ctx, anaShop), &eventgatev1.TopRequest{Dimension: "reason", Tenant: &eventgatev1.Tenant{Type: "project", Name: "blog"}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("shop reading blog: %v", err)
		}
		if code, body := restGet(t, tg.httpURL+"/v1/analytics/top?dimension=reason&tenant.type=project&tenant.name=blog", anaShop); code != http.StatusForbidden {
			t.Errorf("REST shop reading blog: %d %s", code, body)
		}
		_, err = client.Facets(withToken(ctx, anaQueryOnly), &eventgatev1.FacetsRequest{})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("query-only principal: %v", err)
		}
		if code, _ := restGet(t, tg.httpURL+"/v1/analytics/facets", ""); code != http.StatusUnauthorized {
			t.Errorf("REST without token: %d", code)
		}
		// Limits and bad fields: InvalidArgument naming the field and the limit.
		for _, tc := range []struct {
			name        string
			call        func() error
			rest        string
			field, text string
		}{
			{"buckets", func() error {
				_, err := client.Histogram(withToken(ctx, anaShop), &eventgatev1.HistogramRequest{Since: since, Until: until, Bucket: durationpb.New(time.Second)})
				return err
			}, "/v1/analytics/histogram?bucket=1s&" + window.Encode(), "bucket", "MaxBuckets"},
			{"range", func() error {
				_, err := client.Facets(withToken(ctx, anaShop), &eventgatev1.FacetsRequest{Since: anaAt(-40 * 24 * time.Hour), Until: until})
				return err
			}, "/v1/analytics/facets?since=" + url.QueryEscape(rfc(-40*24*time.Hour)), "since", "MaxRange"},
			{"tenant dimension of one tenant", func() error {
				_, err := client.Top(withToken(ctx, anaShop), &eventgatev1.TopRequest{Dimension: "tenant"})
				return err
			}, "/v1/analytics/top?dimension=tenant", "dimension", "several tenants"},
			{"no dimension", func() error {
				_, err := client.Top(withToken(ctx, anaShop), &eventgatev1.TopRequest{})
				return err
			}, "/v1/analytics/top", "dimension", "required"},
			{"groups", func() error {
				_, err := client.Histogram(withToken(ctx, anaShop), &eventgatev1.HistogramRequest{GroupBy: []string{"reason", "type", "action"}})
				return err
			}, "/v1/analytics/histogram?groupBy=reason&groupBy=type&groupBy=action", "groupBy", "at most 2"},
			{"series limit", func() error {
				_, err := client.Series(withToken(ctx, anaShop), &eventgatev1.SeriesRequest{Limit: 501})
				return err
			}, "/v1/analytics/series?limit=501", "limit", "MaxSeriesLimit"},
			{"bad selector", func() error {
				_, err := client.Facets(withToken(ctx, anaShop), &eventgatev1.FacetsRequest{FieldSelector: "bogus=1"})
				return err
			}, "/v1/analytics/facets?fieldSelector=bogus%3D1", "fieldSelector", "unknown field"},
			{"timeline without object", func() error {
				_, err := client.Timeline(withToken(ctx, anaShop), &eventgatev1.TimelineRequest{})
				return err
			}, "/v1/analytics/timeline", "involving", "name the object"},
		} {
			fields := fieldViolations(t, tc.call())
			if !slices.Contains(fields, tc.field) || !strings.Contains(status.Convert(tc.call()).Message(), tc.text) {
				t.Errorf("%s: %v (violations %v), want field %s and %q", tc.name, tc.call(), fields, tc.field, tc.text)
			}
			if code, body := restGet(t, tg.httpURL+tc.rest, anaShop); code != http.StatusBadRequest || !strings.Contains(string(body), tc.text) {
				t.Errorf("%s over REST: %d %s", tc.name, code, body)
			}
		}
	})
}

// TestEventFilterFieldsAligned: every analytics request declares
// EventFilter's fields with the same numbers, names and types, and so does
// QueryRequest — what lets the service read any request's filter through
// the wire format, exactly as Query reads its own.
func TestEventFilterFieldsAligned(t *testing.T) {
	filter := (&eventgatev1.EventFilter{}).ProtoReflect().Descriptor().Fields()
	for _, m := range []proto.Message{
		&eventgatev1.HistogramRequest{}, &eventgatev1.TopRequest{}, &eventgatev1.FacetsRequest{},
		&eventgatev1.SeriesRequest{}, &eventgatev1.TimelineRequest{}, &eventgatev1.QueryRequest{},
	} {
		fields := m.ProtoReflect().Descriptor().Fields()
		for i := range filter.Len() {
			f := filter.Get(i)
			g := fields.ByNumber(f.Number())
			same := g != nil && g.Name() == f.Name() && g.Kind() == f.Kind() && g.Cardinality() == f.Cardinality() && g.IsMap() == f.IsMap()
			switch {
			case !same:
			case f.IsMap():
				same = g.MapKey().Kind() == f.MapKey().Kind() && g.MapValue().Kind() == f.MapValue().Kind()
			case f.Kind() == protoreflect.MessageKind:
				same = g.Message().FullName() == f.Message().FullName()
			}
			if !same {
				t.Errorf("%s: field %d is %v, EventFilter has %v", m.ProtoReflect().Descriptor().FullName(), f.Number(), g, f)
			}
		}
		if _, isQuery := m.(*eventgatev1.QueryRequest); isQuery {
			continue
		}
		// Fields of the request's own start at 20, clear of QueryRequest's.
		for i := range fields.Len() {
			if g := fields.Get(i); filter.ByNumber(g.Number()) == nil && g.Number() < 20 {
				t.Errorf("%s: own field %s numbered %d, below 20", m.ProtoReflect().Descriptor().FullName(), g.Name(), g.Number())
			}
		}
	}
}

// TestAnalyticsOpenAPI: the OpenAPI document describes every analytics
// endpoint, its filter and its own parameters.
func TestAnalyticsOpenAPI(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Summary     string `json:"summary"`
			Description string `json:"description"`
			Parameters  []struct {
				Name        string `json:"name"`
				In          string `json:"in"`
				Description string `json:"description"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openapiv2.Document, &doc); err != nil {
		t.Fatal(err)
	}
	filter := []string{"tenant.type", "tenant.name", "namespace", "type", "reason", "action", "reportingController", "reportingInstance",
		"regarding.kind", "related.name", "involving.uid", "since", "until", "fieldSelector", "labelSelector"}
	for path, own := range map[string][]string{
		"/v1/analytics/histogram": {"bucket", "groupBy", "limit"},
		"/v1/analytics/top":       {"dimension", "limit"},
		"/v1/analytics/facets":    {"dimensions", "limit"},
		"/v1/analytics/series":    {"state", "limit", "orderBy"},
		"/v1/analytics/timeline":  {"limit", "pageToken", "newestFirst"},
	} {
		op, ok := doc.Paths[path]["get"]
		if !ok || op.Summary == "" {
			t.Errorf("GET %s: not described", path)
			continue
		}
		described := map[string]bool{}
		for _, p := range op.Parameters {
			if p.In == "query" && p.Description != "" {
				described[p.Name] = true
			}
		}
		for _, name := range append(slices.Clone(filter), own...) {
			if !described[name] {
				t.Errorf("GET %s: parameter %s missing or without description", path, name)
			}
		}
	}
}

// TestAnalyticsWithIntake: occurrences emitted through the server-side
// series aggregation (the intake writes the per-minute records) are counted
// exactly, each once, spread over their minutes.
func TestAnalyticsWithIntake(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		c.Series = true
		c.Intake.Series.Window = 5 * time.Second
		c.Intake.Series.FlushInterval = 500 * time.Millisecond
		c.Intake.Series.Heartbeat = time.Second
		c.Intake.Series.FinishAfter = 2 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const per = 40
	since := time.Now().Add(-time.Minute)
	for r := 0; r < per; r++ {
		evs := []*eventgatev1.Event{
			{Reason: "CrashLoop", Type: "Warning", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-a"}},
			{Reason: "CrashLoop", Type: "Warning", Regarding: &eventgatev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-b"}},
		}
		if r%4 == 0 {
			evs = append(evs, &eventgatev1.Event{Reason: fmt.Sprintf("Once%d", r), Regarding: &eventgatev1.ObjectReference{Kind: "Job", Namespace: "ns", Name: fmt.Sprintf("job-%d", r)}})
		}
		if _, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: evs}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	client := eventgatev1.NewAnalyticsServiceClient(tg.conn)
	win := func() (*timestamppb.Timestamp, *timestamppb.Timestamp) {
		return timestamppb.New(since), timestamppb.New(time.Now().Add(time.Minute))
	}
	// Until both series are finished and stored.
	for {
		s, u := win()
		resp, err := client.Series(ctx, &eventgatev1.SeriesRequest{Since: s, Until: u, State: "Finished"})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Series) == 2 {
			for _, e := range resp.Series {
				var sum int64
				for _, m := range e.Minutes {
					sum += m.Count
				}
				if e.Count != per || e.WindowCount != per || sum != per {
					t.Errorf("series %s: count %d, in window %d, per minute %d; want %d", e.Regarding.GetName(), e.Count, e.WindowCount, sum, per)
				}
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("series not finished: %v", resp)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s, u := win()
	top, err := client.Top(ctx, &eventgatev1.TopRequest{Since: s, Until: u, Dimension: "reason", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Entries) != 1 || top.Entries[0].Value != "CrashLoop" || top.Entries[0].Count != 2*per || top.Total != 2*per+per/4 || top.DistinctValues != 1+per/4 {
		t.Errorf("top: %v", top)
	}
	h, err := client.Histogram(ctx, &eventgatev1.HistogramRequest{Since: s, Until: u, GroupBy: []string{"regarding.kind"}})
	if err != nil {
		t.Fatal(err)
	}
	if h.Total != 2*per+per/4 || len(h.Groups) != 2 || h.Groups[0].Total != 2*per || h.Groups[1].Total != per/4 {
		t.Errorf("histogram: %v", h)
	}
}
