package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/authz"
	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/gateway/gatewaytest"
)

// chDir is the embedded ClickHouse directory the gateways of this test
// binary share (one storage path per process).
var chDir string

func TestMain(m *testing.M) {
	os.Exit(chtest.MainDir(m, "eventgate-cli-test-", &chDir))
}

// startGateway serves a real gateway in process (gatewaytest.Start) on
// dataDir at grpcAddr and httpAddr, its database named cli_…; stop ends it
// (t.Cleanup too).
func startGateway(t *testing.T, dataDir, grpcAddr, httpAddr string, mutate ...func(*config.Config)) (stop func()) {
	t.Helper()
	return gatewaytest.Start(t, chDir, "cli_", dataDir, grpcAddr, httpAddr, mutate...).Stop
}

func freeAddr(t *testing.T) string {
	l := gatewaytest.Listen(t, "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// cli runs the eventgate command in process, as its main does.
func cli(t *testing.T, ctx context.Context, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut, func(k string) string { return env[k] })
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(&errOut, errorLine(err))
	}
	return out.String(), errOut.String(), err
}

func mustCLI(t *testing.T, ctx context.Context, env map[string]string, args ...string) string {
	t.Helper()
	out, errOut, err := cli(t, ctx, env, args...)
	if err != nil {
		t.Fatalf("eventgate %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// TestWatchShowsEmitsLiveAndResumesAcrossRestart: one CLI watches, another
// emits; the watch prints each event live, and across a gateway restart
// it resumes with no gap and no duplicate.
func TestWatchShowsEmitsLiveAndResumesAcrossRestart(t *testing.T) {
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	stop := startGateway(t, dataDir, grpcAddr, httpAddr)
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	wctx, wcancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	var werr bytes.Buffer
	watchDone := make(chan error, 1)
	go func() {
		root := newRoot(pw, &lockedWriter{w: &werr}, func(k string) string { return env[k] })
		root.SetArgs([]string{"watch", "-n", "web", "-o", "ndjson"})
		watchDone <- root.ExecuteContext(wctx)
		pw.Close()
	}()
	lines := make(chan map[string]any, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("watch line %q: %v", sc.Text(), err)
				return
			}
			lines <- m
		}
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the watch ended")
			}
			return m
		case <-ctx.Done():
			t.Fatal("no event from the watch")
		}
		return nil
	}
	emit := func(reason string) {
		t.Helper()
		mustCLI(t, ctx, env, "emit", "-n", "web", "--reason", reason, "--note", "note of "+reason, "--regarding", "Deployment/api-"+strings.ToLower(reason))
	}
	// The watch starts from "now": emit probes until one arrives, so that
	// it is known to be established. Probes are left out of the check.
probing:
	for i := 0; ; i++ {
		emit(fmt.Sprintf("Probe%d", i))
		select {
		case <-lines:
			break probing
		case <-time.After(time.Second): // not established yet: probe again
		case <-ctx.Done():
			t.Fatal("the watch never printed a probe")
		}
	}
	var got []string
	record := func(n int) {
		t.Helper()
		for len(got) < n {
			if r := next()["reason"].(string); !strings.HasPrefix(r, "Probe") {
				got = append(got, r)
			}
		}
	}
	emit("Second")
	emit("Third")
	record(2)

	stop()
	startGateway(t, dataDir, grpcAddr, httpAddr)
	for _, r := range []string{"Fourth", "Fifth", "Sixth"} {
		emit(r)
	}
	record(5)
	wcancel()
	if err := <-watchDone; err != nil {
		t.Errorf("watch: %v", err)
	}
	for m := range lines {
		if r := m["reason"].(string); !strings.HasPrefix(r, "Probe") {
			got = append(got, r)
		}
	}
	want := []string{"Second", "Third", "Fourth", "Fifth", "Sixth"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the watch printed %v, want %v (no gap, no duplicate)", got, want)
	}
	if !strings.Contains(werr.String(), "resuming") {
		t.Errorf("the watch did not say it resumed: %q", werr.String())
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestQueryTableMatchesKubectl: the CLI's table is kubectl get events'
// for the same events, plain, wide and across namespaces.
func TestQueryTableMatchesKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not installed")
	}
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr)
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := time.Now().Add(-3 * time.Hour).UTC().Format(time.RFC3339Nano)
	file := filepath.Join(t.TempDir(), "events.yaml")
	events := fmt.Sprintf(`events:
- {reason: Scheduled, note: "assigned web/api-0 to node-1", type: Normal, eventTime: %q, reportingController: default-scheduler, reportingInstance: sched-1,
   regarding: {apiVersion: v1, kind: Pod, namespace: web, name: api-0}, action: Binding}
- {reason: BackOff, note: "back-off restarting failed container", type: Warning, eventTime: %q, reportingController: kubelet, reportingInstance: node-1,
   regarding: {apiVersion: v1, kind: Pod, namespace: web, name: api-0, fieldPath: "spec.containers{app}"}, action: Restart}
- {reason: Killing, note: "stopping container", type: Normal, eventTime: %q, reportingController: kubelet,
   regarding: {apiVersion: v1, kind: Pod, namespace: db, name: db-0}, action: Kill}
`, old, old, old)
	if err := os.WriteFile(file, []byte(events), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := mustCLI(t, ctx, env, "emit", "-f", file); strings.Count(out, " created") != 3 {
		t.Fatalf("emit -f: %s", out)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: eg, cluster: {server: "http://%s"}}]
users: [{name: me, user: {}}]
contexts: [{name: eg, context: {cluster: eg, user: me}}]
current-context: eg
`, httpAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ cli, kubectl []string }{
		{[]string{"query", "-n", "web"}, []string{"get", "events", "-n", "web"}},
		{[]string{"query", "-n", "web", "-o", "wide"}, []string{"get", "events", "-n", "web", "-o", "wide"}},
		{[]string{"query", "-A"}, []string{"get", "events", "-A"}},
	} {
		t.Run(strings.Join(tc.cli, " "), func(t *testing.T) {
			rows := 2
			if tc.cli[1] == "-A" {
				rows = 3
			}
			var ours string
			deadline := time.Now().Add(20 * time.Second)
			for { // ingest into the store is asynchronous
				ours = mustCLI(t, ctx, env, tc.cli...)
				if strings.Count(ours, "\n") == 1+rows {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("eventgate %s: want %d rows:\n%s", strings.Join(tc.cli, " "), rows, ours)
				}
				time.Sleep(50 * time.Millisecond) // polling the store
			}
			cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc, "--cache-dir", filepath.Join(t.TempDir(), "cache")}, tc.kubectl...)...)
			theirs, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(tc.kubectl, " "), err, theirs)
			}
			if ours != string(theirs) {
				t.Errorf("eventgate %s:\n%s\nkubectl %s:\n%s", strings.Join(tc.cli, " "), ours, strings.Join(tc.kubectl, " "), theirs)
			}
		})
	}
}

// TestErrorsReadLikeKubectl: a refusal names its reason, an unreachable
// server its address, and the exit is an error.
func TestErrorsReadLikeKubectl(t *testing.T) {
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"invalid event", env, []string{"emit", "-n", "web", "--reason", "X", "--regarding", "Pod/a", "--type", "Bogus"},
			`Error from server (BadRequest): invalid events[0].type: must be one of Normal, Warning, got "Bogus"`},
		{"not found", env, []string{"get", "no-such-event", "-n", "web"}, "Error from server (NotFound): "},
		{"unreachable", map[string]string{"EVENTGATE_SERVER": freeAddr(t)}, []string{"query"}, "The connection to the server 127.0.0.1:"},
		{"bad output", env, []string{"query", "-o", "xml"}, `error: unable to match a printer suitable for the output format "xml"`},
		{"bad flags", env, []string{"emit", "--regarding", "nokind"}, "error: emit needs -f FILE, or at least --reason and --regarding KIND/NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := cli(t, ctx, tc.env, tc.args...)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("error output %q, want one line starting %q", errOut, tc.want)
			}
		})
	}
}

// TestContextsFile: the server, tenant and namespace come from the
// contexts file's current context; flags override it.
func TestContextsFile(t *testing.T) {
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`current-context: dev
contexts:
- name: dev
  server: %s
  tenant: project/shop
  namespace: web
- name: broken
  server: %s
`, grpcAddr, freeAddr(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EVENTGATE_CONFIG": file}
	out := mustCLI(t, ctx, env, "emit", "--reason", "FromContext", "--regarding", "Deployment/api")
	if !strings.HasPrefix(out, "event/api.") {
		t.Fatalf("emit with the context: %s", out)
	}
	view := mustCLI(t, ctx, env, "config", "view")
	for _, want := range []string{"server: " + grpcAddr, "tenant: project/shop", "namespace: web", "insecure: true"} {
		if !strings.Contains(view, want) {
			t.Errorf("config view lacks %q:\n%s", want, view)
		}
	}
	if _, errOut, err := cli(t, ctx, env, "--context", "broken", "query"); err == nil || !strings.Contains(errOut, "The connection to the server") {
		t.Errorf("--context broken: %v %s", err, errOut)
	}
	if _, errOut, err := cli(t, ctx, env, "--context", "nope", "query"); err == nil || !strings.Contains(errOut, `context "nope" is not in`) {
		t.Errorf("--context nope: %v %s", err, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out = mustCLI(t, ctx, env, "query", "-o", "ndjson")
		if strings.Contains(out, `"reason":"FromContext"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the store
	}
	if !strings.Contains(out, `"tenant":{"type":"project","name":"shop"}`) || !strings.Contains(out, `"namespace":"web"`) {
		t.Errorf("the event is not in the context's tenant and namespace: %s", out)
	}
}

// TestCompletion: the shell completion scripts are there.
func TestCompletion(t *testing.T) {
	ctx := context.Background()
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := mustCLI(t, ctx, nil, "completion", sh); !strings.Contains(out, "eventgate") {
			t.Errorf("completion %s: %.200s", sh, out)
		}
	}
	out := mustCLI(t, ctx, nil, "__complete", "query", "-o", "")
	if !strings.Contains(out, "ndjson") {
		t.Errorf("completing -o: %s", out)
	}
}

// TestWhoami: the principal, default tenant and grants of the caller's
// token, as the gateway sees them (and kubectl auth whoami).
func TestWhoami(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf(`principals:
  - name: blog-deployer
    tokens: [%q]
    defaultTenant: {type: project, name: blog}
    grants:
      - {tenantType: project, tenantName: blog, kinds: [{group: apps, kind: Deployment}], verbs: [emit, query]}
`, authz.HashToken("blog-deployer-token-0123"))), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr, func(c *config.Config) { c.Auth.TokensFile = tokens })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr, "EVENTGATE_HTTP_SERVER": "http://" + httpAddr, "EVENTGATE_TOKEN": "blog-deployer-token-0123"}
	out := mustCLI(t, ctx, env, "whoami")
	for _, want := range []string{"Username         blog-deployer", "Default tenant   project/blog", "Grant            project/blog (apps/Deployment): emit, query"} {
		if !strings.Contains(out, want) {
			t.Errorf("whoami lacks %q:\n%s", want, out)
		}
	}
	env["EVENTGATE_TOKEN"] = "not-a-token-0123456789"
	if _, errOut, err := cli(t, ctx, env, "whoami"); err == nil || !strings.HasPrefix(errOut, "Error from server (Unauthorized): ") {
		t.Errorf("whoami with a wrong token: %v %s", err, errOut)
	}
}

// TestInstallsWithoutCgo: the CLI depends on none of the server's packages
// (the embedded engine's binding needs cgo), so go install works without a
// C compiler.
func TestInstallsWithoutCgo(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.CgoFiles}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue // a standard package: its cgo is optional
		}
		pkg, cgo, _ := strings.Cut(line, " ")
		if cgo != "[]" {
			t.Errorf("%s has cgo files %s", pkg, cgo)
		}
		if strings.HasPrefix(pkg, "github.com/eventgate/eventgate/internal/") && pkg != "github.com/eventgate/eventgate/internal/k8sapi/eventtable" {
			t.Errorf("the CLI depends on the server's %s", pkg)
		}
	}
}

// TestEmitFromStdinThenGet: events piped in as JSON are stored; get finds
// one by name in its namespace (YAML) and by uid (a table).
func TestEmitFromStdinThenGet(t *testing.T) {
	dataDir, grpcAddr, httpAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	startGateway(t, dataDir, grpcAddr, httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := map[string]string{"EVENTGATE_SERVER": grpcAddr}
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut, func(k string) string { return env[k] })
	root.SetIn(strings.NewReader(`[{"reason":"FromStdin","note":"piped","regarding":{"kind":"Job","name":"backup","namespace":"ops"}},
{"reason":"AlsoStdin","regarding":{"kind":"Job","name":"restore","namespace":"ops"}}]`))
	root.SetArgs([]string{"emit", "-f", "-"})
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("emit -f -: %v\n%s", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "event/backup.") || !strings.HasSuffix(lines[0], " created") {
		t.Fatalf("emit -f - printed %q", out.String())
	}
	name := strings.TrimSuffix(strings.TrimPrefix(lines[0], "event/"), " created")
	var y string
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		y, _, err = cli(t, ctx, env, "get", name, "-n", "ops", "-o", "yaml")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the store
	}
	if !strings.Contains(y, "reason: FromStdin") || !strings.Contains(y, "note: piped") {
		t.Fatalf("get %s -n ops -o yaml:\n%s", name, y)
	}
	var uid string
	for _, l := range strings.Split(y, "\n") {
		if v, ok := strings.CutPrefix(l, "uid: "); ok {
			uid = v
		}
	}
	if tbl := mustCLI(t, ctx, env, "get", uid); !strings.Contains(tbl, "FromStdin") || !strings.Contains(tbl, "job/backup") {
		t.Errorf("get %s:\n%s", uid, tbl)
	}
}
