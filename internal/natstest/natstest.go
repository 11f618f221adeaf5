// Package natstest starts real NATS servers for tests: a JetStream cluster
// of embedded nats-server nodes on loopback ports.
package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a running JetStream cluster.
type Cluster struct {
	Servers []*server.Server
	opts    []*server.Options
}

// URL returns a client URL listing every node.
func (c *Cluster) URL() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// pickPort picks a cluster port (tests replace it).
var pickPort = freePort

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// StartCluster starts an n-node JetStream cluster and waits until it has a
// meta leader. The nodes are shut down when the test ends. The cluster
// ports are picked free before the nodes bind them, so another process may
// take one in between (CI runs test packages side by side): a node that is
// not ready is reported and the cluster is started again on new ports, up
// to three times.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	var err error
	for range 3 {
		var c *Cluster
		if c, err = startCluster(t, n); err == nil {
			t.Cleanup(c.shutdown)
			c.waitMetaLeader(t)
			return c
		}
		t.Logf("natstest: %v; starting the cluster again on new ports", err)
	}
	t.Fatalf("natstest: %v", err)
	return nil
}

// readyWait bounds how long a node may take to listen: a loaded 2-core
// machine running other test packages can take seconds.
const readyWait = 30 * time.Second

// startCluster starts the nodes and waits until each listens; on failure it
// shuts down what it started.
func startCluster(t testing.TB, n int) (*Cluster, error) {
	t.Helper()
	ports := make([]int, n)
	var routes []*url.URL
	for i := range ports {
		ports[i] = pickPort(t)
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])})
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		opts := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      os.Getenv("NATSTEST_LOG") == "",
			Debug:      os.Getenv("NATSTEST_LOG") != "",
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: "eventgate-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		}
		s, err := server.NewServer(opts)
		if err != nil {
			c.shutdown()
			return nil, err
		}
		if !opts.NoLog {
			s.ConfigureLogger()
		}
		s.Start()
		c.Servers = append(c.Servers, s)
		c.opts = append(c.opts, opts)
	}
	for _, s := range c.Servers {
		if err := waitListening(s); err != nil {
			c.shutdown()
			return nil, err
		}
	}
	return c, nil
}

// waitListening waits until s listens for clients and routes. A node
// listens for routes right after clients; one that does not within
// routeGrace of that failed to bind its cluster port.
func waitListening(s *server.Server) error {
	const routeGrace = 3 * time.Second
	var clientsSince time.Time
	for deadline := time.Now().Add(readyWait); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		clients, routes := s.Addr() != nil, s.ClusterAddr() != nil
		switch {
		case clients && routes:
			return nil
		case !clients:
		case clientsSince.IsZero():
			clientsSince = time.Now()
		case time.Since(clientsSince) > routeGrace:
			return fmt.Errorf("node %s listens for clients but not for routes %v later (its cluster port was taken)", s.Name(), routeGrace)
		}
	}
	return fmt.Errorf("node %s not listening after %v (clients: %v, routes: %v)", s.Name(), readyWait, s.Addr() != nil, s.ClusterAddr() != nil)
}

func (c *Cluster) shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Stop shuts node i down, as a lost node: its clients reconnect to the
// others.
func (c *Cluster) Stop(i int) {
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// Restart starts node i again on its store directory and cluster port,
// and waits until it is ready and the cluster has a meta leader. Its
// client port is a new one.
func (c *Cluster) Restart(t testing.TB, i int) {
	t.Helper()
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		t.Fatal(err)
	}
	if !c.opts[i].NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	c.Servers[i] = s
	if !s.ReadyForConnections(readyWait) {
		t.Fatalf("node %s not ready after restart", s.Name())
	}
	c.waitMetaLeader(t)
}

func (c *Cluster) waitMetaLeader(t testing.TB) {
	t.Helper()
	for _, s := range c.Servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("node %s not ready", s.Name())
		}
	}
	nc, js := Connect(t, c.URL())
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// The cluster is usable once its meta leader places a stream on
		// every node: answering account info, it may still count a peer
		// offline ("no suitable peers for placement").
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.CreateStream(actx, jetstream.StreamConfig{Name: "NATSTEST_READY", Subjects: []string{"natstest.ready"},
			Storage: jetstream.MemoryStorage, Replicas: len(c.Servers)})
		if err == nil {
			err = js.DeleteStream(actx, "NATSTEST_READY")
		}
		acancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("JetStream cluster cannot place a stream on its %d nodes after 30s: %v", len(c.Servers), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Connect connects to url and returns the connection, which the caller
// closes, and a JetStream context on it. It fails t if either fails.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatal(err)
	}
	return nc, js
}

// StartServer starts one JetStream server on a loopback port, for several
// gateways (or processes) to share. It is shut down when the test ends.
func StartServer(t testing.TB) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "single",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      os.Getenv("NATSTEST_LOG") == "",
		NoSigs:     true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return s
}
