package gateway

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// The events broadcaster's heartbeat (every 30 min) and finish (6 min after
// the last occurrence) run on timers that are package constants; the test
// calls the broadcaster's own methods instead of waiting for them.
//
//go:linkname eventsRefreshSeries k8s.io/client-go/tools/events.(*eventBroadcasterImpl).refreshExistingEventSeries
func eventsRefreshSeries(b unsafe.Pointer, ctx context.Context)

//go:linkname eventsFinishSeries k8s.io/client-go/tools/events.(*eventBroadcasterImpl).finishSeries
func eventsFinishSeries(b unsafe.Pointer, ctx context.Context)

// ageSeries moves the last observation of every series the broadcaster
// tracks back by d, under its lock, so that finishSeries finds them ended.
func ageSeries(t *testing.T, b events.EventBroadcaster, d time.Duration) {
	t.Helper()
	v := reflect.ValueOf(b).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("mu").UnsafeAddr()))
	f := v.FieldByName("eventCache")
	cache := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	mu.Lock()
	defer mu.Unlock()
	for it := cache.MapRange(); it.Next(); {
		ev := it.Value().Interface().(*eventsv1.Event)
		if ev.Series != nil {
			ev.Series.LastObservedTime = metav1.NewMicroTime(ev.Series.LastObservedTime.Add(-d))
		}
	}
}

// queryOne polls eventgate's own Query until exactly one event matches sel
// and cond holds for it.
func queryOne(t *testing.T, tg *testGateway, sel string, what string, cond func(*eventgatev1.Event) bool) *eventgatev1.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last []*eventgatev1.Event
	for time.Now().Before(deadline) {
		q, err := tg.client.Query(context.Background(), &eventgatev1.QueryRequest{FieldSelector: sel})
		if err == nil {
			last = q.Events
			if len(q.Events) == 1 && cond(q.Events[0]) {
				return q.Events[0]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: Query %q never matched; last answer: %v", what, sel, last)
	return nil
}

// TestK8sRecorderSeries runs client-go's events broadcaster and recorder
// (k8s.io/client-go/tools/events) against the gateway: the first occurrence
// is created, the second patches a series of count 2 onto the same event,
// later occurrences are counted by the client and written by its heartbeat
// and by its finish, and a new occurrence after the finish is a new event,
// as with kube-apiserver. Every step is checked through eventgate's Query.
func TestK8sRecorderSeries(t *testing.T) {
	tg := startGateway(t, nil)
	cs := k8sClient(t, tg.httpURL, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, "example.com/recorder")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: types.UID("pod-uid-1")}}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	sel := "regarding.name=web-0,reason=BackOff"

	rec.Eventf(pod, nil, corev1.EventTypeWarning, "BackOff", "Restart", "back-off restarting failed container")
	first := queryOne(t, tg, sel, "first occurrence", func(e *eventgatev1.Event) bool { return e.GetSeries().GetCount() <= 1 })
	if first.ReportingController != "example.com/recorder" || first.Namespace != "shop" || first.Regarding.GetKind() != "Pod" {
		t.Errorf("first occurrence stored as %v", first)
	}

	rec.Eventf(pod, nil, corev1.EventTypeWarning, "BackOff", "Restart", "back-off restarting failed container")
	second := queryOne(t, tg, sel, "second occurrence", func(e *eventgatev1.Event) bool { return e.GetSeries().GetCount() == 2 })
	if second.Uid != first.Uid || second.Name != first.Name || second.Series.GetLastObservedTime() == nil {
		t.Errorf("series of count 2: %v, first was %v", second, first)
	}
	k8s, err := cs.EventsV1().Events("shop").Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil || k8s.Series == nil || k8s.Series.Count != 2 || string(k8s.UID) != first.Uid {
		t.Errorf("events.k8s.io view of the series: %v %+v", err, k8s)
	}

	// Three more occurrences are counted by the recorder alone, until its
	// heartbeat writes them.
	for range 3 {
		rec.Eventf(pod, nil, corev1.EventTypeWarning, "BackOff", "Restart", "back-off restarting failed container")
	}
	var heartbeat *eventgatev1.Event
	deadline := time.Now().Add(30 * time.Second)
	for heartbeat == nil && time.Now().Before(deadline) {
		// The occurrences reach the broadcaster's cache asynchronously; a
		// heartbeat writes whatever it counted so far.
		eventsRefreshSeries(unsafe.Pointer(reflect.ValueOf(b).Pointer()), ctx)
		q, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{FieldSelector: sel})
		if err == nil && len(q.Events) == 1 && q.Events[0].GetSeries().GetCount() == 5 {
			heartbeat = q.Events[0]
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if heartbeat == nil || heartbeat.Uid != first.Uid {
		t.Fatalf("heartbeat: %v", heartbeat)
	}

	// Six minutes without an occurrence finish the series: the final count
	// is written and the recorder forgets it.
	ageSeries(t, b, 7*time.Minute)
	eventsFinishSeries(unsafe.Pointer(reflect.ValueOf(b).Pointer()), ctx)
	final := queryOne(t, tg, sel, "finished series", func(e *eventgatev1.Event) bool {
		return e.GetSeries().GetCount() == 5 && time.Since(e.GetSeries().GetLastObservedTime().AsTime()) > 6*time.Minute
	})
	if final.Uid != first.Uid {
		t.Errorf("finished series has uid %s, want %s", final.Uid, first.Uid)
	}

	// After the finish, the next occurrence is a new event, as kube-apiserver
	// stores it; the finished series keeps its count.
	rec.Eventf(pod, nil, corev1.EventTypeWarning, "BackOff", "Restart", "back-off restarting failed container")
	deadline = time.Now().Add(30 * time.Second)
	for {
		q, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{FieldSelector: sel})
		if err == nil && len(q.Events) == 2 {
			for _, e := range q.Events {
				switch {
				case e.Uid == first.Uid && e.GetSeries().GetCount() != 5:
					t.Errorf("finished series changed: %v", e)
				case e.Uid != first.Uid && e.GetSeries().GetCount() > 1:
					t.Errorf("new occurrence stored as %v", e)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the occurrence after the finish was not stored as a new event: %v %v", err, q)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGatewayAt starts a gateway on dataDir whose HTTP listener is on
// httpAddr, so that clients survive a restart on the same address.
func startGatewayAt(t *testing.T, dataDir, httpAddr string) *testGateway {
	t.Helper()
	tg := startGatewayOn(t, dataDir, httpAddr, func(c *config.Config) { c.K8s.BookmarkInterval = time.Second })
	t.Cleanup(tg.stop)
	return tg
}

// tapped records what a ListerWatcher hands the informer.
type tapped struct {
	mu      sync.Mutex
	lists   int
	watches []string // resourceVersion of each watch request
	got     map[string]int
	initial map[string]bool
}

func (tp *tapped) record(key string) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.got[key]++
}

// TestK8sInformerAcrossRestart runs a client-go informer (list then watch)
// on events while the gateway restarts on the same data directory and
// address: every event version written before, between and after is
// delivered exactly once, and the informer does not list again.
func TestK8sInformerAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	tg := startGatewayAt(t, dir, addr)
	cs := k8sClient(t, tg.httpURL, "")
	// EVENTGATE_INFORMER_SECONDS=180 runs the informer that long, creating
	// events all along, across the restart halfway.
	var soak time.Duration
	if n, err := strconv.Atoi(os.Getenv("EVENTGATE_INFORMER_SECONDS")); err == nil && n > 0 {
		soak = time.Duration(n) * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second+soak)
	defer cancel()

	create := func(i int) string {
		t.Helper()
		e := k8sEvent("inf", fmt.Sprintf("pod-%d.ev", i), "Started", fmt.Sprintf("pod-%d", i))
		var out *eventsv1.Event
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			if out, err = cs.EventsV1().Events("inf").Create(ctx, e, metav1.CreateOptions{}); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond) // the gateway is starting
		}
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		return out.Name + "@" + out.ResourceVersion
	}
	var want []string
	for i := range 3 {
		want = append(want, create(i))
	}

	tp := &tapped{got: map[string]int{}, initial: map[string]bool{}}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tp.mu.Lock()
			tp.lists++
			tp.mu.Unlock()
			return cs.EventsV1().Events("inf").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tp.mu.Lock()
			tp.watches = append(tp.watches, o.ResourceVersion)
			tp.mu.Unlock()
			w, err := cs.EventsV1().Events("inf").Watch(ctx, o)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if ev, ok := e.Object.(*eventsv1.Event); ok && e.Type != watch.Bookmark && e.Type != watch.Error {
					tp.record(ev.Name + "@" + ev.ResourceVersion)
				}
				return e, true
			}), nil
		},
	}
	seen := make(chan string, 100)
	inf := cache.NewSharedIndexInformer(lw, &eventsv1.Event{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { ev := obj.(*eventsv1.Event); seen <- ev.Name + "@" + ev.ResourceVersion },
		UpdateFunc: func(old, obj any) {
			if o, n := old.(*eventsv1.Event), obj.(*eventsv1.Event); o.ResourceVersion != n.ResourceVersion {
				seen <- n.Name + "@" + n.ResourceVersion
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ictx, icancel := context.WithCancel(ctx)
	defer icancel()
	go inf.RunWithContext(ictx)

	delivered := map[string]int{}
	await := func(keys []string) {
		t.Helper()
		for _, k := range keys {
			for delivered[k] == 0 {
				select {
				case s := <-seen:
					delivered[s]++
				case <-ctx.Done():
					t.Fatalf("informer never delivered %s; delivered %v", k, delivered)
				}
			}
		}
	}
	await(want)

	more := []string{create(3), create(4)}
	await(more)
	// A series update of an existing event arrives as a new version.
	p := fmt.Sprintf(`{"series":{"count":2,"lastObservedTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
	upd, err := cs.EventsV1().Events("inf").Patch(ctx, "pod-0.ev", types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updKey := upd.Name + "@" + upd.ResourceVersion
	await([]string{updKey})
	want = append(want, more...)
	want = append(want, updKey)

	next := 5
	keepCreating := func(d time.Duration) {
		for until := time.Now().Add(d); time.Now().Before(until); next++ {
			k := create(next)
			await([]string{k})
			want = append(want, k)
		}
	}
	keepCreating(soak / 2)

	// Restart on the same data directory and address.
	tg.stop()
	tg = startGatewayAt(t, dir, addr)
	after := []string{create(next), create(next + 1)}
	next += 2
	await(after)
	want = append(want, after...)
	keepCreating(soak / 2)

	// Nothing else arrives: wait for a bookmark-driven quiet period of a
	// last marker event, then compare.
	marker := create(next)
	await([]string{marker})
	want = append(want, marker)
	for _, k := range want {
		if delivered[k] != 1 {
			t.Errorf("%s delivered %d times", k, delivered[k])
		}
	}
	if len(delivered) != len(want) {
		t.Errorf("delivered %v, want exactly %v", delivered, want)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for k, n := range tp.got {
		if n != 1 {
			t.Errorf("the watch streams carried %s %d times", k, n)
		}
	}
	if tp.lists != 0 {
		t.Errorf("the informer listed %d times; the watch-list stream and the resumed watch should have served it", tp.lists)
	}
	if len(tp.watches) < 2 || tp.watches[len(tp.watches)-1] == "" {
		t.Errorf("watch requests at resourceVersions %q: want a resumed watch after the restart", tp.watches)
	}
}

// TestK8sWatch covers the watch protocol directly: initial events with the
// initial-events-end bookmark, resume from a resourceVersion, a field
// selector, Table watch frames, 400 for a future resourceVersion and 410 for
// one the stream no longer holds.
func TestK8sWatch(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.K8s.BookmarkInterval = time.Second })
	cs := k8sClient(t, tg.httpURL, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ev := cs.EventsV1().Events("w")
	var rvs []string
	for i := range 3 {
		out, err := ev.Create(ctx, k8sEvent("w", fmt.Sprintf("e%d", i), "R", "p"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, out.ResourceVersion)
	}
	k8sWaitRV(t, tg, rvs[2])

	next := func(w watch.Interface) watch.Event {
		t.Helper()
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch ended")
			}
			return e
		case <-ctx.Done():
			t.Fatal("no watch event")
		}
		return watch.Event{}
	}

	t.Run("sendInitialEvents", func(t *testing.T) {
		send := true
		w, err := ev.Watch(ctx, metav1.ListOptions{SendInitialEvents: &send, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for i := range 3 {
			if e := next(w); e.Type != watch.Added || e.Object.(*eventsv1.Event).Name != fmt.Sprintf("e%d", i) {
				t.Fatalf("initial event %d: %v %v", i, e.Type, e.Object)
			}
		}
		e := next(w)
		bm, _ := e.Object.(*eventsv1.Event)
		if e.Type != watch.Bookmark || bm == nil || bm.Annotations[metav1.InitialEventsAnnotationKey] != "true" || bm.ResourceVersion == "" {
			t.Fatalf("after the initial events: %v %+v", e.Type, e.Object)
		}
		out, err := ev.Create(ctx, k8sEvent("w", "e3", "R", "p"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			e := next(w)
			if e.Type == watch.Bookmark {
				continue
			}
			if e.Type != watch.Added || e.Object.(*eventsv1.Event).ResourceVersion != out.ResourceVersion {
				t.Fatalf("live event: %v %+v", e.Type, e.Object)
			}
			break
		}
	})

	t.Run("resume", func(t *testing.T) {
		w, err := cs.CoreV1().Events("w").Watch(ctx, metav1.ListOptions{ResourceVersion: rvs[0]})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for _, want := range []string{"e1", "e2", "e3"} {
			e := next(w)
			if got := e.Object.(*corev1.Event); e.Type != watch.Added || got.Name != want {
				t.Fatalf("resumed watch: %v %s, want ADDED %s", e.Type, got.Name, want)
			}
		}
	})

	t.Run("field selector", func(t *testing.T) {
		w, err := ev.Watch(ctx, metav1.ListOptions{ResourceVersion: rvs[0], FieldSelector: "metadata.name!=e1,reason=R"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for _, want := range []string{"e2", "e3"} {
			if e := next(w); e.Object.(*eventsv1.Event).Name != want {
				t.Fatalf("filtered watch: %+v, want %s", e.Object, want)
			}
		}
	})

	t.Run("table", func(t *testing.T) {
		code, body := k8sRaw(t, "GET", tg.httpURL+"/api/v1/namespaces/w/events?watch=true&resourceVersion="+rvs[1]+"&timeoutSeconds=2", "", "", "",
			"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
		if code != 200 {
			t.Fatalf("table watch: %d %s", code, body)
		}
		sc := bufio.NewScanner(strings.NewReader(string(body)))
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if len(lines) < 2 || !strings.Contains(lines[0], `"columnDefinitions"`) || !strings.Contains(lines[0], `"Last Seen"`) ||
			strings.Contains(lines[1], `"columnDefinitions":[{`) || !strings.Contains(lines[1], `"pod/p"`) {
			t.Errorf("table watch frames: %q", lines)
		}
	})
	t.Run("future resourceVersion", func(t *testing.T) {
		_, err := ev.Watch(ctx, metav1.ListOptions{ResourceVersion: "999999999"})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("watch from a future resourceVersion: %v, want 400", err)
		}
	})

	t.Run("expired resourceVersion", func(t *testing.T) {
		// Retention removes the oldest events, as max-age would.
		s, err := tg.js.Stream(ctx, "EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeKeep(1)); err != nil {
			t.Fatal(err)
		}
		_, err = ev.Watch(ctx, metav1.ListOptions{ResourceVersion: rvs[0]})
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("watch from a purged resourceVersion: %v, want 410", err)
		}
		if st := k8sStatus(t, err); st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
			t.Errorf("410 status: %+v", st)
		}
	})
}

// TestK8sAuthorization: the tenant comes from the credentials or the URL
// prefix; a caller without the grant gets 403 Status, none gets 401, and no
// caller sees another tenant's events.
func TestK8sAuthorization(t *testing.T) {
	tokens := writeTokens(t)
	tg := startGateway(t, func(c *config.Config) { c.Auth.TokensFile = tokens })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shop := k8sClient(t, tg.httpURL, tokShop)
	out, err := shop.EventsV1().Events("web").Create(ctx, k8sEvent("web", "shop.1", "R", "p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blog, err := k8sClient(t, tg.httpURL, tokPlatform).EventsV1().Events("web").Create(ctx, k8sEvent("web", "blog.1", "R", "p"), metav1.CreateOptions{})
	if err == nil || !apierrors.IsForbidden(err) {
		// The platform principal has wildcard grants: it must name a tenant.
		t.Errorf("platform without a tenant in the URL: %v %v", blog, err)
	}
	platBlog := k8sClient(t, tg.httpURL+"/tenants/project/blog", tokPlatform)
	bo, err := platBlog.EventsV1().Events("web").Create(ctx, k8sEvent("web", "blog.1", "R", "p"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k8sWaitRV(t, tg, maxRV([]*eventgatev1.EmitResult{{ResourceVersion: out.ResourceVersion}, {ResourceVersion: bo.ResourceVersion}}))

	l, err := shop.EventsV1().Events("web").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "shop.1" {
		t.Errorf("shop lists %v %v", err, l)
	}
	l, err = platBlog.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "blog.1" {
		t.Errorf("platform in project/blog lists %v %v", err, l)
	}
	q, err := tg.client.Query(withToken(ctx, tokPlatform), &eventgatev1.QueryRequest{Tenant: &eventgatev1.Tenant{Type: "project", Name: "blog"}})
	if err != nil || len(q.Events) != 1 || q.Events[0].Tenant.GetName() != "blog" {
		t.Errorf("stored in project/blog: %v %v", err, q)
	}

	forbidden := []struct {
		name string
		do   func() error
	}{
		{"shop reads project/blog", func() error {
			_, err := k8sClient(t, tg.httpURL+"/tenants/project/blog", tokShop).EventsV1().Events("web").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"shop watches project/blog", func() error {
			_, err := k8sClient(t, tg.httpURL+"/tenants/project/blog", tokShop).CoreV1().Events("web").Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
			return err
		}},
		{"shop writes project/blog", func() error {
			_, err := k8sClient(t, tg.httpURL+"/tenants/project/blog", tokShop).EventsV1().Events("web").Create(ctx, k8sEvent("web", "x.1", "R", "p"), metav1.CreateOptions{})
			return err
		}},
		{"read-only principal creates", func() error {
			_, err := k8sClient(t, tg.httpURL, tokDots).EventsV1().Events("web").Create(ctx, k8sEvent("web", "x.2", "R", "p"), metav1.CreateOptions{})
			return err
		}},
		{"deployer emits a Pod event", func() error {
			_, err := k8sClient(t, tg.httpURL, tokDeployer).EventsV1().Events("web").Create(ctx, k8sEvent("web", "x.3", "R", "p"), metav1.CreateOptions{})
			return err
		}},
	}
	for _, f := range forbidden {
		err := f.do()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403 Forbidden", f.name, err)
			continue
		}
		if st := k8sStatus(t, err); st.Code != 403 || st.Reason != metav1.StatusReasonForbidden {
			t.Errorf("%s: %+v", f.name, st)
		}
	}
	// Get of another tenant's event is NotFound, as eventgate's Get answers.
	if _, err := k8sClient(t, tg.httpURL+"/tenants/project/blog", tokShop).EventsV1().Events("web").Get(ctx, "blog.1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("shop gets project/blog's event: %v", err)
	}
	for _, tok := range []string{"", "wrong-token"} {
		_, err := k8sClient(t, tg.httpURL, tok).EventsV1().Events("web").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("token %q: %v, want 401", tok, err)
		}
	}
}

// kubectl runs the installed kubectl against the gateway with a kubeconfig
// holding the server and token.
type kubectl struct {
	bin, kubeconfig string
}

func newKubectl(t *testing.T, server, token string) *kubectl {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: eventgate
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: me
  user:
    token: %q
contexts:
- name: eventgate
  context: {cluster: eventgate, user: me, namespace: web}
current-context: eventgate
`, server, token)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return &kubectl{bin: bin, kubeconfig: kc}
}

func (k *kubectl) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, k.bin, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(k.kubeconfig), "cache")}, args...)...)
	c.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig)
	return c
}

func (k *kubectl) run(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := k.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestK8sKubectl runs the installed kubectl: get events (Table), get events
// -A, with a field selector, -o json, kubectl events, and get events -w
// streaming a new event.
//
// kubectl sends a kubeconfig's token over TLS only, so the gateway serves
// HTTPS here (a self-signed certificate; the kubeconfig skips verification).
func TestK8sKubectl(t *testing.T) {
	tokens := writeTokens(t)
	cert, key := selfSignedCert(t)
	tg := startGateway(t, func(c *config.Config) {
		c.Auth.TokensFile = tokens
		c.TLS.CertFile, c.TLS.KeyFile = cert, key
	})
	server := strings.Replace(tg.httpURL, "http://", "https://", 1)
	k := newKubectl(t, server, tokShop)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rc := k8sRestConfig(server, tokShop)
	rc.TLSClientConfig.Insecure = true
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []string{"Scheduled", "Pulled", "BackOff"} {
		e := k8sEvent("web", fmt.Sprintf("api-%d.ev", i), r, "api-"+strconv.Itoa(i))
		e.Note = "kubectl sees " + r
		if r == "BackOff" {
			e.Type = "Warning"
		}
		if _, err := cs.EventsV1().Events("web").Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := cs.CoreV1().Events("db").Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0.ev"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "db", Name: "db-0"},
		Reason: "Killing", Message: "stopping container", Type: "Normal", Source: corev1.EventSource{Component: "kubelet"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The db event is the last written, so once it is queryable all are.
	k8sWaitRV(t, tg, db.ResourceVersion)

	out := k.run(t, ctx, "get", "events")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "LAST SEEN") || !strings.Contains(lines[0], "TYPE") || !strings.Contains(lines[0], "REASON") ||
		!strings.Contains(lines[0], "OBJECT") || !strings.Contains(lines[0], "MESSAGE") || !strings.Contains(out, "pod/api-2") ||
		!strings.Contains(out, "kubectl sees BackOff") || !strings.Contains(out, "Warning") || strings.Contains(out, "db-0") {
		t.Errorf("kubectl get events:\n%s", out)
	}
	out = k.run(t, ctx, "get", "events", "-A")
	if !strings.Contains(out, "NAMESPACE") || !strings.Contains(out, "pod/db-0") || !strings.Contains(out, "pod/api-0") {
		t.Errorf("kubectl get events -A:\n%s", out)
	}
	out = k.run(t, ctx, "get", "events", "--field-selector", "type=Warning")
	if strings.Count(strings.TrimSpace(out), "\n") != 1 || !strings.Contains(out, "BackOff") {
		t.Errorf("kubectl get events --field-selector type=Warning:\n%s", out)
	}
	out = k.run(t, ctx, "get", "events.events.k8s.io", "-o", "wide")
	if !strings.Contains(out, "SOURCE") || !strings.Contains(out, "example.com/ctl") || !strings.Contains(out, "api-1.ev") {
		t.Errorf("kubectl get events.events.k8s.io -o wide:\n%s", out)
	}
	out = k.run(t, ctx, "get", "event", "api-1.ev", "-o", "json")
	if !strings.Contains(out, `"involvedObject"`) || !strings.Contains(out, `"kubectl sees Pulled"`) {
		t.Errorf("kubectl get event -o json:\n%s", out)
	}
	out = k.run(t, ctx, "events")
	if !strings.Contains(out, "LAST SEEN") || !strings.Contains(out, "Pod/api-2") || !strings.Contains(out, "kubectl sees Scheduled") {
		t.Errorf("kubectl events:\n%s", out)
	}
	out = k.run(t, ctx, "events", "--types=Warning")
	if !strings.Contains(out, "BackOff") || strings.Contains(out, "Scheduled") {
		t.Errorf("kubectl events --types=Warning:\n%s", out)
	}
	if out, err := k.cmd(ctx, "delete", "event", "api-1.ev").CombinedOutput(); err == nil || !strings.Contains(string(out), "MethodNotAllowed") && !strings.Contains(string(out), "not allowed") && !strings.Contains(string(out), "immutable") {
		t.Errorf("kubectl delete event: %v\n%s", err, out)
	}

	for _, args := range [][]string{{"get", "events", "-w"}, {"events", "-w"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			wctx, wcancel := context.WithCancel(ctx)
			defer wcancel()
			c := k.cmd(wctx, args...)
			stdout, err := c.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			c.Stderr = os.Stderr
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { wcancel(); _ = c.Wait() }()
			lines := make(chan string, 100)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			waitLine := func(sub string) {
				t.Helper()
				for {
					select {
					case l, ok := <-lines:
						if !ok {
							t.Fatalf("kubectl %s ended before %q", strings.Join(args, " "), sub)
						}
						if strings.Contains(l, sub) {
							return
						}
					case <-ctx.Done():
						t.Fatalf("kubectl %s never printed %q", strings.Join(args, " "), sub)
					}
				}
			}
			waitLine("kubectl sees BackOff") // the listing
			name := "live-" + strings.ReplaceAll(strings.Join(args, "-"), " ", "")
			e := k8sEvent("web", name+".ev", "Live", name)
			e.Note = "streamed to " + name
			if _, err := cs.EventsV1().Events("web").Create(ctx, e, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitLine("streamed to " + name)
		})
	}
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key.
func selfSignedCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "eventgate-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
