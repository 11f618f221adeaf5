package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

// chDir is the embedded ClickHouse directory every gateway of this test
// binary shares: the engine allows one storage path per process, so each
// gateway gets a database of its own in it instead.
var chDir string

func TestMain(m *testing.M) {
	if _, err := os.Stat(chdb.DefaultLibPath()); err != nil {
		fmt.Fprintf(os.Stderr, "the embedded ClickHouse engine is missing (%v): run scripts/fetch-chdb.sh or make test\n", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "eventgate-gateway-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	chDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// databaseFor names the ClickHouse database of a gateway's data directory,
// so that a restart on the same directory finds its data.
func databaseFor(dataDir string) string {
	h := sha256.Sum256([]byte(dataDir))
	return "gw_" + hex.EncodeToString(h[:6])
}
