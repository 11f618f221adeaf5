package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/limits"
	"github.com/eventgate/eventgate/internal/webhook"
)

var (
	slowTenant = &eventgatev1.Tenant{Type: "project", Name: "slow"}
	fastTenant = &eventgatev1.Tenant{Type: "project", Name: "fast"}
)

// limitedGateway is a gateway whose tenant project/slow may emit a batch of
// 10 events and then one every 100 s: every later emit is over the limit
// for the whole test.
func limitedGateway(t *testing.T, mutate func(*config.Config)) *testGateway {
	return startGateway(t, func(c *config.Config) {
		c.MaxBatch = 10
		c.Limits.Tenants = map[string]limits.Override{
			"project/slow": {EmitRate: ptr(0.01), EmitBurst: ptr(10)},
		}
		if mutate != nil {
			mutate(c)
		}
	})
}

func tenantEvents(tn *eventgatev1.Tenant, n int, reason string) []*eventgatev1.Event {
	evs := make([]*eventgatev1.Event, n)
	for i := range evs {
		evs[i] = testEvent(reason, "Pod", "default", fmt.Sprintf("%s-%d", strings.ToLower(reason), i))
		evs[i].Tenant = tn
	}
	return evs
}

// limitedCount is what /metrics counts as limited for tenant (a tenant
// gets its own label after 100 events; the rest are "other").
func limitedCount(t *testing.T, tg *testGateway, tenant string) float64 {
	t.Helper()
	mfs, err := tg.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "eventgate_tenant_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, l := range m.GetLabel() {
				lbl[l.GetName()] = l.GetValue()
			}
			if lbl["tenant"] == tenant && lbl["kind"] == "emit" && lbl["outcome"] == "limited" {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// checkRateLimited asserts err is ResourceExhausted with RetryInfo and the
// RATE_LIMITED reason, naming the limit.
func checkRateLimited(t *testing.T, what string, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "emitRate") {
		t.Fatalf("%s: %v, want ResourceExhausted naming emitRate", what, err)
	}
	var retry, reason bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration() > 0
		case *errdetails.ErrorInfo:
			reason = d.GetReason() == "RATE_LIMITED" && d.GetMetadata()["who"] == "tenant project/slow"
		}
	}
	if !retry || !reason {
		t.Errorf("%s: details %v, want a RetryInfo and ErrorInfo RATE_LIMITED for tenant project/slow", what, st.Details())
	}
}

// TestEmitRateLimitOnEveryTransport exhausts a tenant's emit bucket and
// checks each transport's answer over the limit (gRPC ResourceExhausted
// with RetryInfo, REST 429 with Retry-After, an EmitStream error ack on a
// stream that goes on, per-item webhook answers, a Kubernetes 429 Status),
// that another tenant is not limited by it, and that a batch over the limit
// for one of its tenants stores nothing.
func TestEmitRateLimitOnEveryTransport(t *testing.T) {
	tg := limitedGateway(t, func(c *config.Config) {
		c.Limits.Tenants["global"] = limits.Override{EmitRate: ptr(0.01), EmitBurst: ptr(10)}
		c.Limits.Tenants["project/objects"] = limits.Override{ObjectEmitRate: ptr(0.01), ObjectEmitBurst: ptr(2)}
	})
	ctx := context.Background()
	emit(t, tg.client, tenantEvents(slowTenant, 10, "Burst")...)
	emit(t, tg.client, tenantEvents(&eventgatev1.Tenant{Type: "global"}, 10, "GlobalBurst")...)

	t.Run("grpc", func(t *testing.T) {
		_, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: tenantEvents(slowTenant, 1, "Over")})
		checkRateLimited(t, "Emit over the limit", err)
		// A batch with one limited tenant is refused whole.
		mixed := append(tenantEvents(fastTenant, 2, "Mixed"), tenantEvents(slowTenant, 1, "Mixed")...)
		_, err = tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: mixed})
		checkRateLimited(t, "a batch with a limited tenant", err)
		res := emit(t, tg.client, tenantEvents(fastTenant, 1, "Marker")...)
		waitIngested(t, tg, maxRV(res))
		q, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Tenant: fastTenant, Reason: []string{"Mixed"}})
		if err != nil || len(q.Events) != 0 {
			t.Errorf("the refused batch stored %d events of the other tenant (%v)", len(q.GetEvents()), err)
		}
	})

	t.Run("per object", func(t *testing.T) {
		objects := &eventgatev1.Tenant{Type: "project", Name: "objects"}
		about := func(pod string, n int) []*eventgatev1.Event {
			evs := tenantEvents(objects, n, "Spam")
			for i, ev := range evs {
				ev.Regarding.Name, ev.Note = pod, fmt.Sprintf("occurrence %d", i)
			}
			return evs
		}
		emit(t, tg.client, about("spammed", 2)...)
		_, err := tg.client.Emit(ctx, &eventgatev1.EmitRequest{Events: about("spammed", 1)})
		if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "objectEmitRate") {
			t.Errorf("a third event of one source about one object: %v, want ResourceExhausted naming objectEmitRate", err)
		}
		emit(t, tg.client, about("quiet", 2)...)
	})

	t.Run("rest", func(t *testing.T) {
		resp, err := http.Post(tg.httpURL+"/v1/events", "application/json",
			strings.NewReader(`{"tenant":{"type":"project","name":"slow"},"events":[{"reason":"Rest","regarding":{"kind":"Pod","name":"r"}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || ra < 1 || body["code"] != float64(codes.ResourceExhausted) ||
			!strings.Contains(fmt.Sprint(body["message"]), "emitRate") {
			t.Errorf("REST over the limit: %d Retry-After %q %v, want 429 with Retry-After and a status body naming emitRate",
				resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	})

	t.Run("emit stream", func(t *testing.T) {
		stream, err := tg.client.EmitStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, b := range []*eventgatev1.EmitStreamRequest{
			{BatchId: "limited", Events: tenantEvents(slowTenant, 1, "Stream")},
			{BatchId: "other", Events: tenantEvents(fastTenant, 1, "Stream")},
		} {
			if err := stream.Send(b); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		first, err := stream.Recv()
		if err != nil || first.GetBatchId() != "limited" || first.GetError().GetCode() != codes.ResourceExhausted.String() ||
			!strings.Contains(first.GetError().GetMessage(), "retry in") || first.GetError().GetRetryAfter().AsDuration() <= 0 {
			t.Fatalf("ack of the limited batch: %v %v, want a ResourceExhausted error ack saying when to retry (retryAfter)", first, err)
		}
		second, err := stream.Recv()
		if err != nil || second.GetBatchId() != "other" || second.GetError() != nil || len(second.GetResults()) != 1 {
			t.Fatalf("the stream did not go on: %v %v", second, err)
		}
	})

	t.Run("webhook", func(t *testing.T) {
		body := eventList(
			webhookItem("", "HookSlow", "Pod", "h0", scope("project", "slow")),
			webhookItem("", "HookFast", "Pod", "h1", scope("project", "fast")),
		)
		resp, err := http.Post(tg.httpURL+webhook.EventsPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var res webhook.ListResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			t.Fatal(err)
		}
		// A list with an item to send again is answered as for any
		// retryable failure (503), with the limit's Retry-After.
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || len(res.Items) != 2 {
			t.Fatalf("EventList with a limited item: %d Retry-After %q %+v, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), res)
		}
		if e := res.Items[0].Error; e == nil || e.HTTPStatus != http.StatusTooManyRequests || e.RetryAfterSeconds < 1 {
			t.Errorf("limited item: %+v, want a 429 error with retryAfterSeconds", res.Items[0])
		}
		if res.Items[1].Error != nil || res.Items[1].UID == "" {
			t.Errorf("the other tenant's item: %+v, want it stored", res.Items[1])
		}
	})

	t.Run("flux", func(t *testing.T) {
		resp, err := http.Post(tg.httpURL+webhook.FluxPath+"?tenant.type=project&tenant.name=slow", "application/json",
			strings.NewReader(fluxPayload("info", "ReconciliationSucceeded", nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); resp.StatusCode != http.StatusTooManyRequests || ra < 1 {
			t.Errorf("Flux event over the limit: %d Retry-After %q, want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})

	t.Run("kubernetes", func(t *testing.T) {
		// A plain request: client-go would wait out the Retry-After.
		ev := `{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"k8s-over","namespace":"default"},` +
			`"eventTime":"2026-11-24T10:00:00.000000Z","reportingController":"example.com/ctl","reportingInstance":"i",` +
			`"action":"Sync","reason":"Over","type":"Normal","regarding":{"apiVersion":"v1","kind":"Pod","namespace":"default","name":"p"}}`
		resp, err := http.Post(tg.httpURL+"/apis/events.k8s.io/v1/namespaces/default/events", "application/json", strings.NewReader(ev))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st metav1.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusTooManyRequests || st.Kind != "Status" || st.Reason != metav1.StatusReasonTooManyRequests ||
			st.Details == nil || st.Details.RetryAfterSeconds < 1 || ra != int(st.Details.RetryAfterSeconds) {
			t.Errorf("Kubernetes create over the limit: %d Retry-After %q %+v, want a 429 TooManyRequests Status with retryAfterSeconds", resp.StatusCode, resp.Header.Get("Retry-After"), st)
		}
	})

	if n := limitedCount(t, tg, limits.OtherTenants) + limitedCount(t, tg, "project/slow"); n < 5 {
		t.Errorf("/metrics counts %v limited events, want at least 5", n)
	}
}

// TestK8sRecorderBacksOffOverTheLimit runs client-go's events recorder
// against a tenant over its limit: the gateway answers 429 with
// Retry-After, client-go waits and sends again, and every event arrives
// once the limit allows.
func TestK8sRecorderBacksOffOverTheLimit(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		c.MaxBatch = 10
		// The recorder's tenant (the local administrator's default) takes
		// 10 at once, then 5 a second.
		c.Limits.Tenants = map[string]limits.Override{"global": {EmitRate: ptr(5.0), EmitBurst: ptr(10)}}
	})
	cs := k8sClient(t, tg.httpURL, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, "example.com/limited")
	const n = 25
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lim-%d", i), Namespace: "shop", UID: types.UID(fmt.Sprintf("lim-uid-%d", i))}}
		pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		rec.Eventf(pod, nil, corev1.EventTypeNormal, "Limited", "Sync", "event %d", i)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		q, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Reason: []string{"Limited"}, PageSize: 100})
		if err == nil && len(q.Events) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events arrived (%v)", len(q.GetEvents()), n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := limitedCount(t, tg, limits.OtherTenants) + limitedCount(t, tg, "global"); got == 0 {
		t.Error("no event was limited: the recorder never had to back off")
	}
}

// TestQueryWindowDefaultAndMaximum: a Query without since reads the
// tenant's default window (and every page of it the same window); a
// window over the maximum is refused naming the limit.
func TestQueryWindowDefaultAndMaximum(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		c.Limits.Tenants = map[string]limits.Override{"project/w": {QueryWindow: ptr(time.Hour), MaxQueryWindow: ptr(2 * time.Hour)}}
	})
	w := &eventgatev1.Tenant{Type: "project", Name: "w"}
	now := time.Now()
	var evs []*eventgatev1.Event
	for i, at := range []time.Time{now.Add(-3 * time.Hour), now.Add(-3 * time.Minute), now.Add(-2 * time.Minute), now.Add(-time.Minute)} {
		ev := testEvent("Window", "Pod", "default", fmt.Sprintf("w-%d", i))
		ev.Tenant, ev.EventTime = w, timestamppb.New(at)
		evs = append(evs, ev)
	}
	waitIngested(t, tg, maxRV(emit(t, tg.client, evs...)))
	ctx := context.Background()

	var names []string
	req := &eventgatev1.QueryRequest{Tenant: w, PageSize: 1}
	for {
		resp, err := tg.client.Query(ctx, req)
		if err != nil {
			t.Fatalf("page %d: %v", len(names), err)
		}
		for _, e := range resp.Events {
			names = append(names, e.Regarding.GetName())
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	if strings.Join(names, ",") != "w-3,w-2,w-1" {
		t.Errorf("pages of the default window: %v, want w-3,w-2,w-1 (w-0 is 3 h old)", names)
	}

	_, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Tenant: w, Since: timestamppb.New(now.Add(-5 * time.Hour))})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "maxQueryWindow") {
		t.Errorf("a 5 h window: %v, want InvalidArgument naming maxQueryWindow", err)
	}
	_, err = eventgatev1.NewAnalyticsServiceClient(tg.conn).Top(ctx, &eventgatev1.TopRequest{Tenant: w, Since: timestamppb.New(now.Add(-5 * time.Hour))})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "more than 2h0m0s (limit maxQueryWindow)") {
		t.Errorf("analytics over a 5 h window: %v, want InvalidArgument over the tenant's 2 h", err)
	}
	resp, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Tenant: w, Since: timestamppb.New(now.Add(-110 * time.Minute))})
	if err != nil || len(resp.Events) != 3 {
		t.Errorf("a window within the maximum: %v, %d events", err, len(resp.GetEvents()))
	}
}

// TestQueryOverReadLimitFailsNamingIt: a tenant whose queries may read 1
// row gets, for a query reading more, InvalidArgument naming maxRowsToRead
// and how to narrow the request.
func TestQueryOverReadLimitFailsNamingIt(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) {
		c.Limits.Tenants = map[string]limits.Override{"project/tiny": {MaxRowsToRead: ptr(int64(1))}}
	})
	tiny := &eventgatev1.Tenant{Type: "project", Name: "tiny"}
	waitIngested(t, tg, maxRV(emit(t, tg.client, tenantEvents(tiny, 5, "Rows")...)))
	ctx := context.Background()
	_, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Tenant: tiny})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "maxRowsToRead") || !strings.Contains(st.Message(), "narrow") {
		t.Fatalf("Query over the row limit: %v, want InvalidArgument naming maxRowsToRead", err)
	}
	_, err = eventgatev1.NewAnalyticsServiceClient(tg.conn).Facets(ctx, &eventgatev1.FacetsRequest{Tenant: tiny})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "maxRowsToRead") {
		t.Errorf("analytics over the row limit: %v, want InvalidArgument naming maxRowsToRead", err)
	}
	if _, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{Tenant: fastTenant}); err != nil {
		t.Errorf("another tenant's query: %v", err)
	}
}

// TestWatchQuotas: a tenant's and a principal's concurrent watches are
// bounded; the watch over the quota is refused naming the limit (REST 429);
// a watch that names no tenant counts against its principal's only tenant;
// the quota frees when a watch ends.
func TestWatchQuotas(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.Limits.Principal.Watches = 3
		c.Limits.Tenants = map[string]limits.Override{"project/w": {Watches: ptr(1)}, "project/shop": {Watches: ptr(1)}}
	})
	w := &eventgatev1.Tenant{Type: "project", Name: "w"}
	open := func(ctx context.Context, tok string, req *eventgatev1.StreamWatchRequest) error {
		stream, err := tg.client.StreamWatch(withToken(ctx, tok), req)
		if err != nil {
			return err
		}
		if md, err := stream.Header(); err == nil && len(md.Get(event.WatchEstablishedHeader)) > 0 {
			return nil
		}
		_, err = stream.Recv()
		return err
	}
	refused := func(err error, who string) bool {
		st := status.Convert(err)
		return st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), who) && strings.Contains(st.Message(), "limit watches")
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	if err := open(ctx1, tokPlatform, &eventgatev1.StreamWatchRequest{Tenant: w}); err != nil {
		t.Fatal(err)
	}
	if err := open(context.Background(), tokPlatform, &eventgatev1.StreamWatchRequest{Tenant: w}); !refused(err, "tenant project/w") {
		t.Fatalf("second watch of project/w: %v, want ResourceExhausted naming the tenant's watches", err)
	}
	req, _ := http.NewRequest(http.MethodGet, tg.httpURL+"/v1/events:watch?tenant.type=project&tenant.name=w", nil)
	req.Header.Set("Authorization", "Bearer "+tokPlatform)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("REST watch over the quota: %d, want 429", resp.StatusCode)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := open(ctx2, tokShop, &eventgatev1.StreamWatchRequest{}); err != nil {
		t.Fatal(err)
	}
	err = open(context.Background(), tokShop, &eventgatev1.StreamWatchRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "shop"}})
	if !refused(err, "tenant project/shop") {
		t.Errorf("shop's watch after one naming no tenant: %v, want project/shop's watches (the first counted against its only tenant)", err)
	}

	for range 2 {
		if err := open(ctx2, tokPlatform, &eventgatev1.StreamWatchRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := open(context.Background(), tokPlatform, &eventgatev1.StreamWatchRequest{}); !refused(err, "principal platform") {
		t.Fatalf("fourth watch of the platform principal: %v, want its watches", err)
	}
	cancel2()
	cancel1()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx3, cancel3 := context.WithCancel(context.Background())
		err := open(ctx3, tokPlatform, &eventgatev1.StreamWatchRequest{Tenant: w})
		cancel3()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quotas did not free when the watches ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
