package natstest

import (
	"net"
	"testing"
	"time"
)

// TestStartClusterStartsAgainWhenAPortIsTaken: a cluster port taken by
// another process between its pick and the node's bind makes that node
// fail to listen for routes; StartCluster starts the cluster again on new
// ports, and the cluster it returns places a replicated stream (its
// readiness check).
func TestStartClusterStartsAgainWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	pickPort = func(t testing.TB) int {
		picks++
		if picks == 2 {
			return taken.Addr().(*net.TCPAddr).Port
		}
		return freePort(t)
	}
	defer func() { pickPort = freePort }()
	start := time.Now()
	c := StartCluster(t, 3)
	if picks != 6 {
		t.Errorf("%d ports picked, want 6 (3 for the failed start, 3 for the next)", picks)
	}
	for _, s := range c.Servers {
		if a := s.ClusterAddr(); a == nil || a.Port == taken.Addr().(*net.TCPAddr).Port {
			t.Errorf("node %s listens for routes on %v, not on a new port", s.Name(), a)
		}
	}
	t.Logf("started in %v", time.Since(start).Round(time.Millisecond))
}
