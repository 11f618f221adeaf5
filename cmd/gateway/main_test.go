package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartupErrors runs the built binary with each dependency missing or
// unusable: it must exit non-zero with one line that names the thing and
// the fix, and never panic.
func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"engine library missing", nil, []string{"EVENTGATE_CHDB_LIB=" + filepath.Join(dir, "nowhere", "libchdb.so")},
			[]string{"libchdb.so", "not found", "fetch-chdb.sh", "--clickhouse-dsn"}},
		{"engine library unloadable", nil, []string{"EVENTGATE_CHDB_LIB=" + file}, []string{"libchdb.so", "a-file"}},
		{"data directory not writable", []string{"--data-dir", filepath.Join(file, "data")}, nil, []string{"data dir", "--data-dir"}},
		{"NATS unreachable", []string{"--nats-url", "nats://127.0.0.1:1"}, nil, []string{"nats", "--nats-url"}},
		{"port in use", []string{"--grpc-addr", busy.Addr().String()}, nil, []string{busy.Addr().String(), "address already in use", "--grpc-addr"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-level", "error"}, tc.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v (want status 1)\n%s", err, stderr.String())
			}
			out := strings.TrimSpace(stderr.String())
			if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") {
				t.Fatalf("panicked:\n%s", out)
			}
			lines := strings.Split(out, "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "gateway: ") {
				t.Errorf("last line %q is not the error", last)
			}
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q does not mention %q", last, w)
				}
			}
		})
	}
}
