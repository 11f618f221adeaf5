package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
	"github.com/eventgate/eventgate/internal/clickhouse/chdbhttp"
)

// One process can open one chDB storage path: the whole test binary shares
// one engine, and tests are isolated by database.
var (
	testEngine  *chdb.Engine
	testOpenErr error
	testDataDir string
)

// EnvTestDataDir, when set, is the engine's data directory for this test
// binary, kept afterwards: the benchmark store is then generated once and
// reused by later runs.
const EnvTestDataDir = "EVENTGATE_TEST_CHDB_DIR"

func TestMain(m *testing.M) {
	dir, keep := os.Getenv(EnvTestDataDir), true
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "eventgate-clickhouse-test-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		keep = false
	}
	testDataDir = dir
	testEngine, testOpenErr = chdb.Open(chdb.Options{DataDir: dir, PoolSize: 6})
	code := m.Run()
	if testEngine != nil {
		testEngine.Close()
	}
	if !keep {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func engine(t testing.TB) *chdb.Engine {
	t.Helper()
	if testOpenErr != nil {
		if errors.Is(testOpenErr, chdb.ErrLibraryNotFound) {
			t.Fatalf("%v\nrun: bash scripts/fetch-chdb.sh (from the repository root)", testOpenErr)
		}
		t.Fatalf("open chDB: %v", testOpenErr)
	}
	return testEngine
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

var dbSeq atomic.Int64

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// testDatabase returns a database name unique to this test.
func testDatabase(t testing.TB) string {
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%s", dbSeq.Add(1), name)
}

// transportCase opens a store over one transport.
type transportCase struct {
	name string
	open func(t testing.TB, cfg Config) *Store
}

// transports are the two ways the store reaches the real engine: directly
// (embedded chDB) and through clickhouse-go/v2 over HTTP to the chdbhttp
// fixture serving the same engine.
var transports = []transportCase{
	{"chdb", func(t testing.TB, cfg Config) *Store {
		t.Helper()
		s, err := OpenEngine(context.Background(), engine(t), cfg, testLogger(t))
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		return s
	}},
	{"clickhouse-go-http", func(t testing.TB, cfg Config) *Store {
		t.Helper()
		addr := chdbhttp.Start(t, engine(t))
		cfg.DSN = "http://" + addr
		s, err := Open(context.Background(), cfg, testLogger(t))
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		return s
	}},
}

// eachTransport runs f once per transport, each with its own database.
func eachTransport(t *testing.T, f func(t *testing.T, open func(cfg Config) *Store)) {
	for _, tc := range transports {
		t.Run(tc.name, func(t *testing.T) {
			db := testDatabase(t)
			var stores []*Store
			open := func(cfg Config) *Store {
				if cfg.Database == "" {
					cfg.Database = db
				}
				s := tc.open(t, cfg)
				stores = append(stores, s)
				return s
			}
			t.Cleanup(func() {
				for _, s := range stores {
					s.Close()
				}
				engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(db))
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
