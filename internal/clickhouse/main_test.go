package clickhouse

import (
	"context"
	"os"
	"testing"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

func TestMain(m *testing.M) {
	os.Exit(chtest.Main(m, "eventgate-clickhouse-test-"))
}

// openStore opens a store with cfg over tr.
func openStore(t testing.TB, tr chtest.Transport, cfg Config) *Store {
	t.Helper()
	var s *Store
	var err error
	if tr.DSN == nil {
		s, err = OpenEngine(context.Background(), chtest.Engine(t), cfg, chtest.Logger(t))
	} else {
		cfg.DSN = tr.DSN(t)
		s, err = Open(context.Background(), cfg, chtest.Logger(t))
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// eachTransport runs f once per transport, each with its own database.
func eachTransport(t *testing.T, f func(t *testing.T, open func(cfg Config) *Store)) {
	for _, tr := range chtest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			db := chtest.Database(t)
			var stores []*Store
			open := func(cfg Config) *Store {
				if cfg.Database == "" {
					cfg.Database = db
				}
				s := openStore(t, tr, cfg)
				stores = append(stores, s)
				return s
			}
			t.Cleanup(func() {
				for _, s := range stores {
					s.Close()
				}
				chtest.Engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(db))
			})
			f(t, open)
		})
	}
}

// eachStore runs f once per transport with a store on a fresh database.
func eachStore(t *testing.T, f func(t *testing.T, s *Store)) {
	eachTransport(t, func(t *testing.T, open func(Config) *Store) {
		cfg := DefaultConfig()
		cfg.Database = ""
		f(t, open(cfg))
	})
}
