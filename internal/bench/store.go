package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse"
	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

// StoreInfo is what the store generator leaves for the query phase.
type StoreInfo struct {
	Events   int           `json:"events"`   // generated events
	Rows     uint64        `json:"rows"`     // stored versions (series add two each)
	Elapsed  time.Duration `json:"elapsed"`  // INSERT … SELECT time
	Merge    time.Duration `json:"merge"`    // waiting for background merges
	End      time.Time     `json:"end"`      // newest event time
	Objects  []ObjectRef   `json:"objects"`  // sampled objects (Query newest 100)
	UIDs     []UIDRef      `json:"uids"`     // sampled uids (Get)
	Tenants  [][2]string   `json:"tenants"`  // sampled tenants (analytics)
	MaxSeq   uint64        `json:"maxSeq"`   // highest seq written: Query needs an ack floor at least this
	BytesRow float64       `json:"bytesRow"` // compressed bytes per row on disk
}

// ObjectRef is one regarding object of the generated store.
type ObjectRef struct {
	TenantType, TenantName, Kind, Namespace, Name string
}

// UIDRef is one event uid and its tenant.
type UIDRef struct {
	TenantType, TenantName, UID string
}

// storeKinds are the regarding kinds of the generated store.
var storeKinds = []string{"Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "Service",
	"Ingress", "ConfigMap", "Secret", "Node", "PersistentVolumeClaim", "HorizontalPodAutoscaler", "Namespace",
	"Certificate", "Gateway", "HTTPRoute", "Workload", "Instance"}

// seriesPercent of generated events are series: besides the first write
// (a singleton) they get two more versions, the last one Finished, whose
// per-minute records spread their occurrences over the following minutes —
// what the intake writes.
const seriesPercent = 3

// pbVarint renders an unsigned integer SQL expression (< 2^35) as a
// protobuf varint of a fixed 5 bytes (protobuf decoders accept varints with
// redundant continuation bytes), so that x appears once per byte instead
// of once per possible length: ClickHouse expands aliases, and nested
// messages would otherwise multiply the query tree.
func pbVarint(x string) string {
	return fmt.Sprintf("char(bitOr(bitAnd(%[1]s, 127), 128), bitOr(bitAnd(bitShiftRight(%[1]s, 7), 127), 128), "+
		"bitOr(bitAnd(bitShiftRight(%[1]s, 14), 127), 128), bitOr(bitAnd(bitShiftRight(%[1]s, 21), 127), 128), bitAnd(bitShiftRight(%[1]s, 28), 127))", x)
}

// pbBytes is a length-delimited protobuf field; pbInt a varint field.
func pbBytes(field int, expr string) string {
	return fmt.Sprintf("concat(char(%d), %s, %s)", field<<3|2, pbVarint("length("+expr+")"), expr)
}

func pbInt(field int, expr string) string {
	return fmt.Sprintf("concat(char(%d), %s)", field<<3, pbVarint(expr))
}

// pbTime is a google.protobuf.Timestamp of a microsecond count.
func pbTime(us string) string {
	return "concat(" + pbInt(1, "intDiv("+us+", 1000000)") + ", " + pbInt(2, "("+us+" % 1000000) * 1000") + ")"
}

// LargeTenant holds half of the generated events; 500 small tenants share
// the rest.
var LargeTenant = [2]string{"organization", "large"}

// storeInsertSQL is one INSERT … SELECT of events [lo, hi) of n spread over
// 30 days ending at end: the large tenant and 500 small ones, 100,000
// objects (about n/100,000 events each; 50,000 the large tenant's) of 20
// kinds in 10 namespaces per kind, 50 reasons, 200
// reporting instances, a raw protobuf that Query and Get decode, and
// seriesPercent series with two more versions each. seq is the version
// number (1..3), so every row is visible at any resourceVersion ≥ 3.
func storeInsertSQL(table string, lo, hi, n int, end time.Time) string {
	quoted := make([]string, len(storeKinds))
	for i, k := range storeKinds {
		quoted[i] = "'" + k + "'"
	}
	span := int64(30 * 24 * time.Hour / time.Microsecond)
	step := max(span/int64(n), 1)
	start := end.Add(-30 * 24 * time.Hour).UnixMicro()
	with := []string{
		"number AS n",
		"n % 100000 AS obj",
		"obj % 1000 AS tenant",
		"cityHash64(n, 'series') % 100 < " + strconv.Itoa(seriesPercent) + " AS is_series",
		// Half of the objects (and events) are the large tenant's.
		"obj % 2 = 0 AS big",
		"if(big OR tenant % 10 = 0, 'organization', 'project') AS tt",
		"if(big, '" + LargeTenant[1] + "', concat('tenant-', toString(tenant))) AS tn",
		"[" + strings.Join(quoted, ", ") + "][intHash32(obj) % 20 + 1] AS kind",
		"concat('ns-', toString(intHash32(obj) % 200 % 10)) AS ns",
		"concat(lower(kind), '-', toString(obj)) AS rname",
		fmt.Sprintf("fromUnixTimestamp64Micro(toInt64(%d + n * %d + cityHash64(n) %% %d), 'UTC') AS et", start, step, step),
		"toUnixTimestamp64Micro(et) AS et_us",
		"1 + cityHash64(n) % 20 AS k",
		"intDiv(toUnixTimestamp(et), 60) * 60 AS m0",
		"lower(toString(reinterpretAsUUID(sipHash128(n)))) AS u",
		"concat(rname, '.', substring(replaceAll(u, '-', ''), 1, 16)) AS ename",
		"concat('Reason', toString(cityHash64(n, 7) % 50)) AS reason",
		"if(n % 7 = 0, 'Warning', 'Normal') AS typ",
		"concat('Back-off restarting failed container app in pod ', rname, ' (attempt ', toString(n % 97), ')') AS note",
		"concat('example.com/controller-', toString(intHash32(obj) % 20)) AS rc",
		"concat('controller-', toString(n % 200)) AS ri",
		"toInt32(multiIf(v = 0, 0, v = 1, 2, 2 + 2 * k)) AS scount",
		"if(v = 0, toDateTime64(0, 6, 'UTC'), et + toIntervalMinute(if(v = 1, 1, 1 + 2 * k))) AS slast",
		"multiIf(v = 0, '', v = 1, 'Ongoing', 'Finished') AS sstate",
	}
	// Nested messages are named in WITH first: a length prefix repeats its
	// operand, so inlining them would blow the statement up.
	with = append(with,
		"toUnixTimestamp64Micro(slast) AS slast_us",
		"concat("+strings.Join([]string{pbBytes(1, "'v1'"), pbBytes(2, "kind"), pbBytes(3, "ns"), pbBytes(4, "rname")}, ", ")+") AS pb_reg",
		pbTime("et_us")+" AS pb_et",
		pbTime("slast_us")+" AS pb_slast",
		"concat("+pbInt(1, "scount")+", "+pbBytes(2, "pb_slast")+", "+pbBytes(3, "sstate")+") AS pb_series_body",
		"if(v = 0, '', "+pbBytes(5, "pb_series_body")+") AS pb_series",
		"concat("+pbBytes(1, "tt")+", "+pbBytes(2, "tn")+") AS pb_tenant",
		"concat('app-', toString(obj % 1000)) AS app",
		"concat("+pbBytes(1, "'app'")+", "+pbBytes(2, "app")+") AS pb_label",
	)
	raw := "concat(" + strings.Join([]string{
		pbBytes(1, "u"), pbBytes(2, "ename"), pbBytes(3, "ns"), pbBytes(4, "pb_et"), "pb_series",
		pbBytes(6, "rc"), pbBytes(7, "ri"), pbBytes(8, "'Restart'"), pbBytes(9, "reason"), pbBytes(10, "pb_reg"),
		pbBytes(12, "note"), pbBytes(13, "typ"), pbBytes(14, "pb_tenant"), pbBytes(15, "pb_label"),
	}, ", ") + ")"
	cols := []struct{ name, expr string }{
		{"tenant_type", "tt"}, {"tenant_name", "tn"}, {"regarding_kind", "kind"}, {"regarding_namespace", "ns"},
		{"regarding_name", "rname"}, {"event_time", "et"}, {"uid", "u"}, {"seq", "v + 1"}, {"name", "ename"},
		{"namespace", "ns"}, {"type", "typ"}, {"reason", "reason"}, {"action", "'Restart'"}, {"note", "note"},
		{"regarding_api_version", "'v1'"}, {"reporting_controller", "rc"}, {"reporting_instance", "ri"},
		{"labels", "map('app', app)"},
		{"series_count", "scount"}, {"series_last_observed", "slast"}, {"series_state", "sstate"},
		{"subject", "concat('events.', tt, '.', tn, '.core_', kind, '.', ns, '.', rname)"},
		{"stored_at", "et"}, {"ttl_seconds", strconv.Itoa(90 * 24 * 3600)}, {"raw", raw},
		{"write_reason", "['created', 'started', 'finished'][v + 1]"},
		{"minutes", "multiIf(v = 0, [toDateTime(m0, 'UTC')], v = 1, [toDateTime(m0 + 60, 'UTC')], " +
			"arrayMap(j -> toDateTime(m0 + 60 * (2 + j), 'UTC'), range(2 * k - 1)))"},
		{"minute_counts", "if(v < 2, [toUInt32(1)], arrayWithConstant(2 * k - 1, toUInt32(1)))"},
	}
	names := make([]string, len(cols))
	exprs := make([]string, len(cols))
	for i, c := range cols {
		names[i], exprs[i] = c.name, c.expr
	}
	return "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ")" +
		" WITH " + strings.Join(with, ", ") +
		" SELECT " + strings.Join(exprs, ", ") +
		fmt.Sprintf(" FROM numbers(%d, %d) ARRAY JOIN if(is_series, [0, 1, 2], [0]) AS v", lo, hi-lo)
}

// GenerateStore fills the gateway's ClickHouse database under dataDir
// (<data-dir>/clickhouse, the gateway stopped) with n events by SQL
// (INSERT … SELECT FROM numbers, in chunks of 100,000 events in time order,
// through the analytics views, as ingest writes them), waits (at most 4 minutes) for the
// background merges and samples objects, uids and tenants. The schema is
// created by the store's own migrations. It is one sequence (open, insert
// the chunks, wait for the merges, sample), kept whole: the steps share the
// engine, the store and info.
func GenerateStore(ctx context.Context, dataDir, lib string, n int, log *slog.Logger) (*StoreInfo, error) {
	e, err := chdb.Open(chdb.Options{LibPath: lib, DataDir: dataDir})
	if err != nil {
		return nil, fmt.Errorf("open engine: %w", err)
	}
	defer e.Close()
	cfg := clickhouse.DefaultConfig()
	st, err := clickhouse.OpenEngine(ctx, e, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	table := cfg.Database + ".events"
	info := &StoreInfo{Events: n, End: time.Now().UTC().Truncate(time.Second), MaxSeq: 3}
	start := time.Now()
	const chunk = 100_000
	for lo := 0; lo < n; lo += chunk {
		if err := e.Exec(ctx, storeInsertSQL(table, lo, min(lo+chunk, n), n, info.End)); err != nil {
			return nil, fmt.Errorf("generate events %d..%d: %w", lo, min(lo+chunk, n), err)
		}
	}
	info.Elapsed = time.Since(start)
	start = time.Now()
	for deadline := time.Now().Add(4 * time.Minute); time.Now().Before(deadline); {
		var m []struct {
			N uint64 `json:"n"`
		}
		if err := queryJSON(ctx, e, "SELECT count() AS n FROM system.merges WHERE database = '"+cfg.Database+"'", &m); err != nil {
			return nil, err
		}
		if len(m) == 0 || m[0].N == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	info.Merge = time.Since(start)
	// The hourly rollups are built here, as a gateway that has been up for
	// the store's whole span would hold them, not by the gateway's first
	// minutes, which would compete with the figures measured then.
	if _, err := st.RollUp(ctx); err != nil {
		return nil, fmt.Errorf("roll up the generated store: %w", err)
	}
	var parts []struct {
		Rows  uint64 `json:"rows"`
		Bytes uint64 `json:"bytes"`
	}
	if err := queryJSON(ctx, e, "SELECT sum(rows) AS rows, sum(data_compressed_bytes) AS bytes FROM system.parts "+
		"WHERE active AND database = '"+cfg.Database+"' AND table = 'events'", &parts); err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		info.Rows = parts[0].Rows
		info.BytesRow = float64(parts[0].Bytes) / float64(max(parts[0].Rows, 1))
	}
	var samples []struct {
		TT, TN, Kind, NS, Name, UID string
	}
	every := max(n/4000, 1)
	if err := queryJSON(ctx, e, "SELECT toString(tenant_type) AS TT, toString(tenant_name) AS TN, toString(regarding_kind) AS Kind, "+
		"toString(regarding_namespace) AS NS, regarding_name AS Name, uid AS UID FROM "+table+
		" WHERE seq = 1 AND cityHash64(uid, 'sample') % "+strconv.Itoa(every)+" = 0 LIMIT 2000", &samples); err != nil {
		return nil, err
	}
	seen := map[[2]string]bool{}
	for _, s := range samples {
		info.Objects = append(info.Objects, ObjectRef{s.TT, s.TN, s.Kind, s.NS, s.Name})
		info.UIDs = append(info.UIDs, UIDRef{s.TT, s.TN, s.UID})
		// Tenants sampled for the one-tenant reads are the small ones.
		if t := [2]string{s.TT, s.TN}; !seen[t] && t != LargeTenant && len(info.Tenants) < 200 {
			seen[t] = true
			info.Tenants = append(info.Tenants, t)
		}
	}
	if len(info.Objects) == 0 {
		return nil, fmt.Errorf("generated store: no samples")
	}
	return info, nil
}

// queryJSON runs sql and decodes its JSONEachRow output into out (a slice).
func queryJSON(ctx context.Context, e *chdb.Engine, sql string, out any) error {
	b, err := e.Query(ctx, sql, "JSONEachRow")
	if err != nil {
		return fmt.Errorf("query %.60q: %w", sql, err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	arr := "[" + strings.Join(lines, ",") + "]"
	if strings.TrimSpace(string(b)) == "" {
		arr = "[]"
	}
	if err := json.Unmarshal([]byte(arr), out); err != nil {
		return fmt.Errorf("decode %.60q: %w", sql, err)
	}
	return nil
}

// WriteJSONFile writes v as JSON to path.
func WriteJSONFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadJSONFile reads JSON from path into v.
func ReadJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
