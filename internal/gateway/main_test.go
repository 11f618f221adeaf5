package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
)

// chDir is the embedded ClickHouse directory every gateway of this test
// binary shares: the engine allows one storage path per process, so each
// gateway gets a database of its own in it instead.
var chDir string

func TestMain(m *testing.M) {
	code := chtest.MainDir(m, "eventgate-gateway-test-", &chDir)
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// databaseFor names the ClickHouse database of a gateway's data directory,
// so that a restart on the same directory finds its data.
func databaseFor(dataDir string) string {
	h := sha256.Sum256([]byte(dataDir))
	return "gw_" + hex.EncodeToString(h[:6])
}
