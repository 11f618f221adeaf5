package gateway

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	ejs "github.com/eventgate/eventgate/internal/jetstream"
)

// natsPaths are a connection per data path, beside the control one. A NATS
// connection is one socket with one read loop on each side, handled in
// order: on one shared connection an emit's acknowledgement waited behind
// every event the watch feed and the ingest were being sent and every
// write the intake owners were publishing.
type natsPaths struct {
	emit   natsPath // the intake log's entries and as-is publishes
	write  natsPath // the intake owners' writes to the events stream
	watch  natsPath // the watch feed
	ingest natsPath // the store's ingest consumer
	// rules: the rules' store, their shards' notifications and
	// checkpoints, and the deliveries' consumers and log. On the control
	// connection, beside the intake owners' consumers, a run with 1,000
	// rules doubled the owners' fetch p99 in the bench.
	rules natsPath
}

type natsPath struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func (p *natsPaths) all() []*natsPath {
	return []*natsPath{&p.emit, &p.write, &p.watch, &p.ingest, &p.rules}
}

// connect opens every path's connection; on an error, those opened stay
// for close.
func (p *natsPaths) connect(cfg ejs.Config, ns *server.Server) error {
	names := []string{"emit", "write", "watch", "ingest", "rules"}
	for i, path := range p.all() {
		nc, err := ejs.Connect(cfg, ns, "eventgate-"+names[i])
		if err != nil {
			return fmt.Errorf("%s connection: %w", names[i], err)
		}
		path.nc = nc
		if path.js, err = ejs.NewJetStream(nc); err != nil {
			return fmt.Errorf("%s connection: %w", names[i], err)
		}
	}
	return nil
}

// conns returns the paths' open connections.
func (p *natsPaths) conns() []*nats.Conn {
	var ncs []*nats.Conn
	for _, path := range p.all() {
		if path.nc != nil {
			ncs = append(ncs, path.nc)
		}
	}
	return ncs
}
