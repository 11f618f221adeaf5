package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventgate/eventgate/internal/gateway/config"
	"github.com/eventgate/eventgate/internal/ingest"
)

// replicaIDFile keeps, in the data directory, the id generated for the
// store there on first start: the replica id unless --replica-id is given,
// and the id of its store.
const replicaIDFile = "replica-id"

// replica is this gateway's identity among its replicas.
type replica struct {
	// ID names the replica: --replica-id, else Store.
	ID string
	// Store identifies the data directory's store; it changes when the
	// directory is wiped, even if ID does not.
	Store string
	// Own is true when the store is this replica's alone (the embedded
	// engine): it is filled from the replica's live feed.
	Own bool
	// Consumer is the ingest consumer this replica copies through
	// (ingest.FeedConsumer for its own store).
	Consumer string

	mu  sync.Mutex
	lag replicaLag
}

// replicaLag is what the last readiness check saw of this replica's ingest.
type replicaLag struct {
	Pending          uint64  `json:"pending"`
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"`
	MaxLagSeconds    float64 `json:"maxLagSeconds"`
}

// resolveReplica reads (or creates) the store id kept in the data
// directory and settles the replica's id and ingest. With a shared
// ClickHouse the data directory may be unwritable: the host name stands in.
func resolveReplica(cfg config.Config, log *slog.Logger) (*replica, error) {
	r := &replica{Own: cfg.ClickHouse.DSN == "", Consumer: ingest.DefaultConsumer}
	if cfg.Ingest.Durable != "" {
		r.Consumer = cfg.Ingest.Durable
	}
	store, err := storeID(cfg.DataDir)
	switch {
	case err == nil:
		r.Store = store
	case r.Own:
		return nil, fmt.Errorf("replica id: %w (the embedded engine needs a writable --data-dir)", err)
	default:
		r.Store = hostID()
		log.Warn("replica id not kept: the data directory is not writable; using the host name", "err", err, "replica", r.Store)
	}
	r.ID = cfg.ReplicaID
	if r.ID == "" {
		r.ID = r.Store
	}
	if r.Own {
		r.Consumer = ingest.FeedConsumer
	}
	return r, nil
}

// storeID returns the id kept in dir, generating and keeping one first.
func storeID(dir string) (string, error) {
	path := filepath.Join(dir, replicaIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := ingest.ValidateReplicaID(id); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", err
	}
	id := hostID() + "-" + hex.EncodeToString(rnd[:])
	// Written aside and renamed, so that a crash leaves no half id.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o640); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	return id, nil
}

var notIDChar = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// hostID is the host name reduced to what a replica id may hold.
func hostID() string {
	h, _ := os.Hostname()
	h = strings.Trim(notIDChar.ReplaceAllString(h, "-"), "-_")
	if h == "" {
		h = "eventgate"
	}
	return h[:min(len(h), 50)]
}

// registerMetrics exposes the replica's identity.
func (r *replica) registerMetrics(reg prometheus.Registerer) {
	topology := "shared-store"
	if r.Own {
		topology = "own-store"
	}
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "eventgate_replica_info",
		Help: "This gateway replica (1): its id, its store's id, its ingest (the shared consumer, or live-feed for a store of its own), and whether the store is its own (embedded engine) or shared (ClickHouse DSN)."},
		[]string{"replica", "store", "consumer", "topology"})
	info.WithLabelValues(r.ID, r.Store, r.Consumer, topology).Set(1)
	reg.MustRegister(info)
}

// ingestCheck is the readiness check of this replica's ingest: not ready
// while the oldest event not yet in its store is older than maxLag.
func (r *replica) ingestCheck(in storeIngest, maxLag time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		pending, age, err := in.Lag(ctx)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.lag = replicaLag{Pending: pending, OldestAgeSeconds: age.Seconds(), MaxLagSeconds: maxLag.Seconds()}
		r.mu.Unlock()
		if age > maxLag {
			return fmt.Errorf("%d events not yet in this replica's store, the oldest for %s (limit %s)", pending, age.Round(time.Second), maxLag)
		}
		return nil
	}
}

// status is the replica section of /readyz.
func (r *replica) status() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return map[string]any{"id": r.ID, "store": r.Store, "ownStore": r.Own, "ingestConsumer": r.Consumer, "ingestLag": r.lag}
}
