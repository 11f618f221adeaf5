// Package chtest is a test fixture: the embedded ClickHouse engine shared
// by one test binary, a database per test, and the transports a store
// reaches it by. One process can open one chDB storage path, so a package
// opens the engine once in TestMain (Main) and isolates its tests by
// database.
package chtest

import (
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

// EnvDataDir, when set, is the engine's data directory for the test binary,
// kept afterwards: a benchmark store is then generated once and reused by
// later runs.
const EnvDataDir = "EVENTGATE_TEST_CHDB_DIR"

var (
	engine  *chdb.Engine
	openErr error
	dataDir string
)

// Main opens the engine in a fresh directory named after pattern (or in
// EnvDataDir's, when set), runs m and closes it; it returns m's exit code.
func Main(m *testing.M, pattern string) int {
	dir, keep := os.Getenv(EnvDataDir), true
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", pattern); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		keep = false
	}
	dataDir = dir
	engine, openErr = chdb.Open(chdb.Options{DataDir: dir, PoolSize: 6})
	code := m.Run()
	if engine != nil {
		engine.Close()
	}
	if !keep {
		os.RemoveAll(dir)
	}
	return code
}

// Engine is the engine Main opened; it fails t, with the fetch instruction
// when the library is missing, if it could not be opened.
func Engine(t testing.TB) *chdb.Engine {
	t.Helper()
	if openErr != nil {
		if errors.Is(openErr, chdb.ErrLibraryNotFound) {
			t.Fatalf("%v\nrun: bash scripts/fetch-chdb.sh (from the repository root)", openErr)
		}
		t.Fatalf("open chDB: %v", openErr)
	}
	return engine
}

// DataDir is the engine's data directory.
func DataDir() string { return dataDir }

// MainDir checks that the engine's library is present, then runs m with
// *dir set to a fresh directory (named after pattern) for the gateways of
// the test binary to share, and removes it; it returns m's exit code. The
// gateways open the engine themselves, each in a database of its own.
func MainDir(m *testing.M, pattern string, dir *string) int {
	if _, err := os.Stat(chdb.DefaultLibPath()); err != nil {
		fmt.Fprintf(os.Stderr, "the embedded ClickHouse engine is missing (%v): run scripts/fetch-chdb.sh or make test\n", err)
		return 1
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	*dir = d
	return m.Run()
}

// Logger discards, or logs at debug level to stderr under go test -v.
func Logger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

var (
	dbSeq    atomic.Int64
	nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)
)

// Database returns a database name unique to t.
func Database(t testing.TB) string {
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("t%d_%s", dbSeq.Add(1), name)
}

// Transport is one way a store reaches the engine.
type Transport struct {
	Name string
	// DSN returns the DSN of a server in front of the engine, for stores
	// opened by DSN; nil for the embedded engine itself.
	DSN func(t testing.TB) string
}

// Transports are the two ways a store reaches the real engine: directly
// (embedded chDB) and through clickhouse-go/v2 over HTTP to the chdbhttp
// fixture serving the same engine.
var Transports = []Transport{
	{Name: "chdb"},
	{Name: "clickhouse-go-http", DSN: func(t testing.TB) string {
		t.Helper()
		return "http://" + chdbhttp.Start(t, Engine(t))
	}},
}
