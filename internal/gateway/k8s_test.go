package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
	"github.com/eventgate/eventgate/internal/gateway/config"
)

// k8sClient is a client-go clientset for the gateway's Kubernetes API,
// authenticated with token ("" for none).
func k8sClient(t testing.TB, baseURL, token string) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(k8sRestConfig(baseURL, token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func k8sRestConfig(baseURL, token string) *rest.Config {
	return &rest.Config{Host: baseURL, BearerToken: token, QPS: 1000, Burst: 1000, Timeout: 30 * time.Second}
}

// k8sEvent is an events.k8s.io/v1 event about a pod.
func k8sEvent(ns, name, reason, pod string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web"}},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: "example.com/ctl",
		ReportingInstance:   "ctl-1",
		Action:              "Sync",
		Reason:              reason,
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID("uid-" + pod)},
		Note:                "note of " + name,
		Type:                "Normal",
	}
}

// k8sWaitRV waits until a list answers at resourceVersion rv or later, so
// that what was written is in the store.
func k8sWaitRV(t testing.TB, tg *testGateway, rv string) {
	t.Helper()
	waitIngested(t, tg, rv)
}

func k8sStatus(t testing.TB, err error) *metav1.Status {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a Kubernetes Status", err, err)
	}
	st := se.Status()
	return &st
}

// k8sRaw sends a request and returns the status code and the body.
func k8sRaw(t testing.TB, method, url, token, contentType, body string, header ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
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

// TestK8sEventsAPI drives both Event APIs with client-go: create, get, list
// with selectors and pages, update, patch, delete, the core/v1 conversion
// and Status errors.
func TestK8sEventsAPI(t *testing.T) {
	tg := startGateway(t, func(c *config.Config) { c.K8s.ContinueTTL = 2 * time.Second })
	cs := k8sClient(t, tg.httpURL, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ev := cs.EventsV1().Events("web")

	created, err := ev.Create(ctx, k8sEvent("web", "api-0.1", "BackOff", "api-0"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.UID == "" || created.ResourceVersion == "" || created.Name != "api-0.1" || created.Namespace != "web" {
		t.Fatalf("created %+v", created.ObjectMeta)
	}
	if _, err := ev.Create(ctx, k8sEvent("web", "api-0.1", "BackOff", "api-0"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create of the same name: %v, want AlreadyExists", err)
	}
	var last string
	for i, r := range []string{"Pulled", "Started", "Killing", "BackOff"} {
		e := k8sEvent("web", fmt.Sprintf("api-1.%d", i), r, "api-1")
		if r == "Killing" {
			e.Type = "Warning"
		}
		out, err := ev.Create(ctx, e, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		last = out.ResourceVersion
	}
	other := k8sEvent("other", "db-0.1", "BackOff", "db-0")
	if _, err := cs.EventsV1().Events("other").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k8sWaitRV(t, tg, last)

	t.Run("get", func(t *testing.T) {
		got, err := ev.Get(ctx, "api-0.1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID != created.UID || got.Reason != "BackOff" || got.Regarding.Name != "api-0" || got.Note != "note of api-0.1" ||
			got.ReportingController != "example.com/ctl" || got.ReportingInstance != "ctl-1" || got.Labels["app"] != "web" {
			t.Errorf("get: %+v", got)
		}
		_, err = ev.Get(ctx, "nope", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("get of a missing event: %v", err)
		}
		st := k8sStatus(t, err)
		if st.Code != 404 || st.Reason != metav1.StatusReasonNotFound || st.Details == nil || st.Details.Name != "nope" {
			t.Errorf("NotFound status: %+v", st)
		}
	})

	t.Run("core/v1 view", func(t *testing.T) {
		got, err := cs.CoreV1().Events("web").Get(ctx, "api-0.1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.InvolvedObject.Name != "api-0" || got.InvolvedObject.Kind != "Pod" || got.Message != "note of api-0.1" ||
			got.Source.Component != "example.com/ctl" || got.Source.Host != "ctl-1" || got.ReportingController != "example.com/ctl" ||
			got.Count != 1 || got.FirstTimestamp.IsZero() || got.LastTimestamp.IsZero() || string(got.UID) != string(created.UID) {
			t.Errorf("core/v1 event: %+v", got)
		}
	})

	t.Run("field selectors", func(t *testing.T) {
		for _, tc := range []struct {
			core bool
			sel  string
			want int
		}{
			{false, "", 5},
			{false, "reason=BackOff", 2},
			{false, "reason==BackOff", 2},
			{false, "reason!=BackOff", 3},
			{false, "regarding.name=api-1,type=Warning", 1},
			{false, "regarding.kind=Pod,regarding.namespace=web", 5},
			{false, "metadata.name=api-1.2", 1},
			{false, "metadata.name!=api-1.2,reason=Killing", 0},
			{false, "reportingController=example.com/ctl", 5},
			{false, "reportingInstance=ctl-1,action=Sync", 5},
			{false, "related.name=x", 0},
			{false, "regarding.uid=uid-api-1", 4},
			{true, "involvedObject.name=api-1,involvedObject.kind=Pod", 4},
			{true, "source=example.com/ctl,reason=Started", 1},
			{true, "reportingComponent=example.com/ctl,type!=Normal", 1},
			{true, "metadata.namespace=web", 5},
		} {
			var n int
			if tc.core {
				l, err := cs.CoreV1().Events("web").List(ctx, metav1.ListOptions{FieldSelector: tc.sel})
				if err != nil {
					t.Fatalf("%q: %v", tc.sel, err)
				}
				n = len(l.Items)
			} else {
				l, err := ev.List(ctx, metav1.ListOptions{FieldSelector: tc.sel})
				if err != nil {
					t.Fatalf("%q: %v", tc.sel, err)
				}
				n = len(l.Items)
			}
			if n != tc.want {
				t.Errorf("fieldSelector %q (core %v): %d events, want %d", tc.sel, tc.core, n, tc.want)
			}
		}
		all, err := cs.EventsV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=BackOff"})
		if err != nil || len(all.Items) != 3 {
			t.Errorf("all namespaces: %v, %d items", err, len(all.Items))
		}
		_, err = ev.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=x"})
		if st := k8sStatus(t, err); st.Code != 400 || st.Reason != metav1.StatusReasonBadRequest || !strings.Contains(st.Message, "spec.nodeName") {
			t.Errorf("unknown field: %+v", st)
		}
		_, err = cs.CoreV1().Events("web").List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=x"})
		if st := k8sStatus(t, err); st.Code != 400 {
			t.Errorf("events.k8s.io field on core/v1: %+v", st)
		}
		l, err := ev.List(ctx, metav1.ListOptions{LabelSelector: "app in (web,db)"})
		if err != nil || len(l.Items) != 5 {
			t.Errorf("labelSelector: %v, %d items", err, len(l.Items))
		}
		l, err = ev.List(ctx, metav1.ListOptions{LabelSelector: "app!=web"})
		if err != nil || len(l.Items) != 0 {
			t.Errorf("labelSelector !=: %v, %d items", err, len(l.Items))
		}
	})

	t.Run("pages", func(t *testing.T) {
		seen := map[string]bool{}
		opts := metav1.ListOptions{Limit: 2}
		var rv string
		for pages := 0; ; pages++ {
			l, err := ev.List(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rv == "" {
				rv = l.ResourceVersion
			} else if l.ResourceVersion != rv {
				t.Errorf("page %d at resourceVersion %s, first at %s", pages, l.ResourceVersion, rv)
			}
			if len(l.Items) > 2 {
				t.Errorf("page of %d items, limit 2", len(l.Items))
			}
			for _, it := range l.Items {
				if seen[it.Name] {
					t.Errorf("%s listed twice", it.Name)
				}
				seen[it.Name] = true
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if len(seen) != 5 {
			t.Errorf("pages listed %d events, want 5", len(seen))
		}
		_, err := ev.List(ctx, metav1.ListOptions{Limit: 2, Continue: "garbage"})
		if st := k8sStatus(t, err); st.Code != 400 {
			t.Errorf("bad continue: %+v", st)
		}
	})

	t.Run("expired continue", func(t *testing.T) {
		first, err := ev.List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil || first.Continue == "" {
			t.Fatalf("first page: %v %q", err, first.Continue)
		}
		// The token lives 2 s (ContinueTTL); ask until it is refused.
		deadline := time.Now().Add(10 * time.Second)
		var st *metav1.Status
		for time.Now().Before(deadline) {
			_, err = ev.List(ctx, metav1.ListOptions{Limit: 2, Continue: first.Continue})
			if err != nil {
				st = k8sStatus(t, err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if st == nil || st.Code != 410 || st.Reason != metav1.StatusReasonExpired || st.Continue == "" {
			t.Fatalf("expired token: %+v", st)
		}
		names := map[string]bool{}
		for _, it := range first.Items {
			names[it.Name] = true
		}
		opts := metav1.ListOptions{Limit: 2, Continue: st.Continue}
		for {
			l, err := ev.List(ctx, opts)
			if err != nil {
				t.Fatalf("fresh token: %v", err)
			}
			for _, it := range l.Items {
				if names[it.Name] {
					t.Errorf("%s listed again after the fresh token", it.Name)
				}
				names[it.Name] = true
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if len(names) != 5 {
			t.Errorf("listed %d events across the expiry, want 5", len(names))
		}
	})

	t.Run("update and patch keep uid", func(t *testing.T) {
		got, err := ev.Get(ctx, "api-1.0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Note = "updated note"
		upd, err := ev.Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if upd.UID != got.UID || upd.Note != "updated note" || upd.ResourceVersion == got.ResourceVersion {
			t.Errorf("update: %+v", upd)
		}
		stale := got.DeepCopy()
		stale.Note = "stale"
		if _, err := ev.Update(ctx, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			t.Errorf("update with a stale resourceVersion: %v, want Conflict", err)
		}
		p := fmt.Sprintf(`{"series":{"count":3,"lastObservedTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
		pt, err := ev.Patch(ctx, "api-1.0", types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pt.UID != got.UID || pt.Series == nil || pt.Series.Count != 3 || pt.Note != "updated note" {
			t.Errorf("strategic merge patch: %+v", pt)
		}
		mp, err := ev.Patch(ctx, "api-1.0", types.MergePatchType, []byte(`{"note":"merged"}`), metav1.PatchOptions{})
		if err != nil || mp.Note != "merged" || mp.Series == nil || mp.Series.Count != 3 {
			t.Errorf("merge patch: %v %+v", err, mp)
		}
		jp, err := ev.Patch(ctx, "api-1.0", types.JSONPatchType, []byte(`[{"op":"replace","path":"/note","value":"json-patched"}]`), metav1.PatchOptions{})
		if err != nil || jp.Note != "json-patched" || jp.UID != got.UID {
			t.Errorf("json patch: %v %+v", err, jp)
		}
		k8sWaitRV(t, tg, jp.ResourceVersion)
		q, err := tg.client.Query(ctx, &eventgatev1.QueryRequest{FieldSelector: "regarding.name=api-1,reason=Pulled"})
		if err != nil || len(q.Events) != 1 {
			t.Fatalf("query after patches: %v %d", err, len(q.Events))
		}
		if e := q.Events[0]; e.Uid != string(got.UID) || e.Note != "json-patched" || e.Series.GetCount() != 3 {
			t.Errorf("stored after patches: %v", e)
		}
		_, err = ev.Patch(ctx, "missing", types.MergePatchType, []byte(`{"note":"x"}`), metav1.PatchOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("patch of a missing event: %v", err)
		}
		_, err = ev.Patch(ctx, "api-1.0", types.JSONPatchType, []byte(`[{"op":"replace","path":"/metadata/uid","value":"x"}]`), metav1.PatchOptions{})
		if st := k8sStatus(t, err); st.Code != 422 || st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "metadata.uid" {
			t.Errorf("patching the uid: %+v", st)
		}
	})

	t.Run("core/v1 count becomes a series", func(t *testing.T) {
		ce := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "legacy.1", Namespace: "web"},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"},
			Reason:         "NodeNotReady",
			Message:        "node is not ready",
			Source:         corev1.EventSource{Component: "node-controller", Host: "cp-1"},
			FirstTimestamp: metav1.NewTime(time.Now().Add(-time.Minute)),
			LastTimestamp:  metav1.NewTime(time.Now()),
			Count:          4,
			Type:           "Warning",
		}
		out, err := cs.CoreV1().Events("web").Create(ctx, ce, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Count != 4 || out.Series == nil || out.Series.Count != 4 {
			t.Errorf("created core/v1 event: count %d series %+v", out.Count, out.Series)
		}
		// client-go's old recorder patches count, lastTimestamp and message.
		p := fmt.Sprintf(`{"count":5,"lastTimestamp":%q,"message":"still not ready"}`, time.Now().UTC().Format(time.RFC3339))
		pt, err := cs.CoreV1().Events("web").Patch(ctx, "legacy.1", types.StrategicMergePatchType, []byte(p), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pt.Count != 5 || pt.UID != out.UID || pt.Message != "still not ready" {
			t.Errorf("patched core/v1 event: %+v", pt)
		}
		k8sWaitRV(t, tg, pt.ResourceVersion)
		got, err := tg.client.Get(ctx, &eventgatev1.GetRequest{Namespace: "web", Name: "legacy.1"})
		if err != nil {
			t.Fatal(err)
		}
		if e := got.Event; e.Series.GetCount() != 5 || e.ReportingController != "node-controller" || e.ReportingInstance != "cp-1" || e.Note != "still not ready" {
			t.Errorf("stored core/v1 event: %v", e)
		}
		v1, err := ev.Get(ctx, "legacy.1", metav1.GetOptions{})
		if err != nil || v1.Series == nil || v1.Series.Count != 5 || v1.Regarding.Name != "n1" {
			t.Errorf("events.k8s.io view: %v %+v", err, v1)
		}
	})

	t.Run("delete is refused", func(t *testing.T) {
		err := ev.Delete(ctx, "api-0.1", metav1.DeleteOptions{})
		if st := k8sStatus(t, err); st.Code != 405 || st.Reason != metav1.StatusReasonMethodNotAllowed {
			t.Errorf("delete: %+v", st)
		}
		err = ev.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		if st := k8sStatus(t, err); st.Code != 405 {
			t.Errorf("deletecollection: %+v", st)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		bad := k8sEvent("web", "bad.1", "", "")
		_, err := ev.Create(ctx, bad, metav1.CreateOptions{})
		st := k8sStatus(t, err)
		fields := map[string]bool{}
		if st.Details != nil {
			for _, c := range st.Details.Causes {
				fields[c.Field] = true
			}
		}
		if st.Code != 422 || st.Reason != metav1.StatusReasonInvalid || !fields["reason"] || !fields["regarding.name"] {
			t.Errorf("invalid event: %+v", st)
		}
		core := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bad.2"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod"}, Reason: "X"}
		_, err = cs.CoreV1().Events("web").Create(ctx, core, metav1.CreateOptions{})
		if st := k8sStatus(t, err); st.Code != 422 || st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "involvedObject.name" {
			t.Errorf("invalid core/v1 event: %+v", st)
		}
		wrongNS := k8sEvent("elsewhere", "x.1", "R", "p")
		_, err = ev.Create(ctx, wrongNS, metav1.CreateOptions{})
		if st := k8sStatus(t, err); st.Code != 400 {
			t.Errorf("namespace mismatch: %+v", st)
		}
		base := tg.httpURL + "/apis/events.k8s.io/v1/namespaces/web/events"
		for _, tc := range []struct {
			method, url, ct, body string
			code                  int
		}{
			{"POST", base, "application/json", `{"kind":`, 400},
			{"POST", base, "application/json", `[1,2]`, 400},
			{"POST", base, "application/json", `{"apiVersion":"v1","kind":"Pod"}`, 400},
			{"POST", base, "application/yaml", `kind: Event`, 415},
			{"PATCH", base + "/api-0.1", "application/apply-patch+yaml", `{}`, 415},
			{"PATCH", base + "/api-0.1", "application/json-patch+json", `{"not":"a patch"}`, 400},
			{"GET", base + "?limit=-1", "", "", 400},
			{"GET", base + "?watch=maybe", "", "", 400},
			{"GET", base + "?resourceVersion=abc", "", "", 400},
			{"GET", base + "?labelSelector=a%20in%20(", "", "", 400},
			{"GET", base + "?fieldSelector=reason%3D%3D%3D", "", "", 400},
			{"GET", tg.httpURL + "/api/v1/namespaces/web/pods", "", "", 404},
			{"GET", tg.httpURL + "/tenants/nope/x/api/v1/events", "", "", 400},
		} {
			code, body := k8sRaw(t, tc.method, tc.url, "", tc.ct, tc.body)
			var st metav1.Status
			if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || int(st.Code) != tc.code || code != tc.code {
				t.Errorf("%s %s %q: %d %s, want a %d Status", tc.method, tc.url, tc.body, code, body, tc.code)
			}
		}
	})
}

// TestK8sDiscovery checks the documents kubectl and client-go read.
func TestK8sDiscovery(t *testing.T) {
	tg := startGateway(t, nil)
	cs := k8sClient(t, tg.httpURL, "")
	v, err := cs.Discovery().ServerVersion()
	if err != nil || v.Major != "1" || v.GitVersion == "" {
		t.Fatalf("version: %v %+v", err, v)
	}
	groups, resources, err := cs.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range groups {
		names = append(names, g.Name)
	}
	if strings.Join(names, ",") != ",events.k8s.io" {
		t.Errorf("groups %v", names)
	}
	for _, rl := range resources {
		if len(rl.APIResources) != 1 || rl.APIResources[0].Name != "events" || !rl.APIResources[0].Namespaced ||
			strings.Join(rl.APIResources[0].Verbs, ",") != "create,get,list,patch,update,watch" {
			t.Errorf("%s: %+v", rl.GroupVersion, rl.APIResources)
		}
	}
	if len(resources) != 2 {
		t.Errorf("%d resource lists, want 2", len(resources))
	}
}
