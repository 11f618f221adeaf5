package clickhouse

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/query"
)

// A read at or over --clickhouse-slow-read is logged with its time and
// statement, and with what the engine reports of it where the transport
// has that (the embedded engine: its time on the statement, the wait for a
// connection, the result's size); the statement's bound
// values (a tenant's name here) never reach the log.
func TestSlowReadsAreLoggedWithoutTheirValues(t *testing.T) {
	const secret = "slow-read-tenant-name"
	for _, tr := range chtest.Transports {
		t.Run(tr.Name, func(t *testing.T) {
			// A file: the store's goroutines may log while the test reads.
			logFile, err := os.CreateTemp(t.TempDir(), "log")
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Database = chtest.Database(t)
			cfg.SlowRead = time.Nanosecond // every read
			var s *Store
			log := slog.New(slog.NewJSONHandler(logFile, nil))
			if tr.DSN == nil {
				s, err = OpenEngine(context.Background(), chtest.Engine(t), cfg, log)
			} else {
				cfg.DSN = tr.DSN(t)
				s, err = Open(context.Background(), cfg, log)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				s.Close()
				logFile.Close()
				chtest.Engine(t).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
			})
			rv := insert(t, s, 1, mkEvent("u1", 1, tenant("project", secret)), mkEvent("u2", 2, tenant("project", secret)))
			scope := query.Scope{Tenants: []query.TenantRef{{Type: "project", Name: secret}}}
			if p := listPage(t, s, query.List{Scope: scope, PageSize: 10}, rv); len(p.Events) != 2 {
				t.Fatalf("listed %d events, want 2", len(p.Events))
			}
			logged, err := os.ReadFile(logFile.Name())
			if err != nil {
				t.Fatal(err)
			}
			var lines int
			for _, line := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
				if strings.Contains(line, secret) {
					t.Fatalf("a bound value reached the log: %s", line)
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if rec["msg"] != "clickhouse read slow" || !strings.Contains(rec["sql"].(string), "tenant_name") {
					continue
				}
				lines++
				if _, ok := rec["elapsed_ms"].(float64); !ok {
					t.Errorf("no elapsed_ms: %s", line)
				}
				for _, k := range []string{"result_rows", "result_bytes", "engine_ms", "wait_ms"} {
					if _, ok := rec[k].(float64); ok != (tr.DSN == nil) {
						t.Errorf("%s present %v, want %v (embedded engine only): %s", k, ok, tr.DSN == nil, line)
					}
				}
			}
			if lines == 0 {
				t.Fatalf("the listing's read was not logged:\n%s", logged)
			}
		})
	}
}
