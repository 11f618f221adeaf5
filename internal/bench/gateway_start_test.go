package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartGatewayTriesNewPortsWhenOneIsTaken: a gateway that exits
// because a port chosen for it was taken is started again on new ports, at
// most portAttempts times in all, and the error then says why; a gateway
// that exits for any other reason is not started again.
func TestStartGatewayTriesNewPortsWhenOneIsTaken(t *testing.T) {
	for _, tc := range []struct {
		name, output string
		starts       int
		portTaken    bool
	}{
		{"port taken", "gateway: http listener: listen tcp 127.0.0.1:40585: bind: address already in use", portAttempts, true},
		{"other failure", "gateway: clickhouse: no such file", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			starts := filepath.Join(dir, "starts")
			bin := filepath.Join(dir, "gateway")
			script := "#!/bin/sh\necho start >> " + starts + "\necho '" + tc.output + "'\nexit 1\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			logPath := filepath.Join(dir, "gateway.log")
			// An earlier gateway's failure in the same log is not this one's.
			if tc.portTaken {
				if err := os.WriteFile(logPath, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(logPath, []byte("bind: address already in use\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			g, err := StartGateway(context.Background(), bin, filepath.Join(dir, "data"), logPath)
			if err == nil {
				g.Stop()
				t.Fatal("a gateway that exits at once was reported ready")
			}
			if got := errors.Is(err, errPortTaken); got != tc.portTaken {
				t.Errorf("errors.Is(err, errPortTaken) = %v, want %v (err: %v)", got, tc.portTaken, err)
			}
			b, rerr := os.ReadFile(starts)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if n := strings.Count(string(b), "start"); n != tc.starts {
				t.Errorf("started %d times, want %d", n, tc.starts)
			}
		})
	}
}
