package clickhouse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventgate/eventgate/internal/clickhouse/chtest"
	"github.com/eventgate/eventgate/internal/event"
	"github.com/eventgate/eventgate/internal/query"
)

// The benchmark store: EVENTGATE_BENCH_EVENTS events (default 10,000,000)
// generated in SQL (INSERT … SELECT FROM numbers) into their own database
// of the shared embedded engine, with realistic cardinalities: 1,000
// tenants, 100,000 objects (about 100 events each) of 20 kinds in 10
// namespaces per kind, 50 reasons, 200 reporting instances, 30 days of
// event times ending now, and a real protobuf raw event (~330 bytes) that Query and Get
// decode.
//
//	go test -run '^$' -bench BenchmarkStore -benchtime 200x -timeout 60m ./internal/clickhouse/
var bench struct {
	once    sync.Once
	err     error
	store   *Store
	n       int
	objects []benchObject
	uids    []benchUID
	genTime time.Duration
}

type benchObject struct {
	tenant                query.TenantRef
	kind, namespace, name string
}

type benchUID struct {
	tenant query.TenantRef
	uid    string
}

func benchEvents() int { return benchCount("EVENTGATE_BENCH_EVENTS", 10_000_000) }

// benchCount is the positive count in the environment variable env
// (underscores allowed), or def.
func benchCount(env string, def int) int {
	if v := os.Getenv(env); v != "" {
		n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
		if err == nil && n > 0 {
			return n
		}
	}
	return def
}

// varintSQL encodes an unsigned integer expression as a protobuf varint
// (up to 5 bytes: values < 2^35).
func varintSQL(x string) string {
	b := func(shift int, more bool) string {
		e := fmt.Sprintf("bitAnd(bitShiftRight(%s, %d), 127)", x, shift)
		if more {
			e = "bitOr(" + e + ", 128)"
		}
		return e
	}
	return fmt.Sprintf("multiIf(%[1]s < 128, char(%[2]s), %[1]s < 16384, char(%[3]s, %[4]s), %[1]s < 2097152, char(%[3]s, %[5]s, %[6]s), "+
		"%[1]s < 268435456, char(%[3]s, %[5]s, %[7]s, %[8]s), char(%[3]s, %[5]s, %[7]s, %[9]s, %[10]s))",
		x, b(0, false), b(0, true), b(7, false), b(7, true), b(14, false), b(14, true), b(21, false), b(21, true), b(28, false))
}

// pbSQL is a length-delimited protobuf field (tag = field<<3 | 2).
func pbSQL(field int, expr string) string {
	return fmt.Sprintf("concat(char(%d), %s, %s)", field<<3|2, varintSQL("length("+expr+")"), expr)
}

func pbVarintSQL(field int, expr string) string {
	return fmt.Sprintf("concat(char(%d), %s)", field<<3, varintSQL(expr))
}

// benchKindSQL is an array of the 20 kinds the generated events regard.
const benchKindSQL = "['Pod', 'Deployment', 'ReplicaSet', 'StatefulSet', 'DaemonSet', 'Job', 'CronJob', 'Service', " +
	"'Ingress', 'ConfigMap', 'Secret', 'Node', 'PersistentVolumeClaim', 'HorizontalPodAutoscaler', 'Namespace', " +
	"'Certificate', 'Gateway', 'HTTPRoute', 'Workload', 'Instance']"

// insertGenerated inserts rows n numbers generate into s's events table,
// chunk numbers at a time: with are the derived columns (WITH), values the
// event columns' expressions, suffix what follows FROM numbers (an ARRAY
// JOIN).
func insertGenerated(ctx context.Context, s *Store, with []string, values map[string]string, first, end, chunk int, suffix string) error {
	var cols, exprs []string
	for _, c := range eventColumns {
		if v, ok := values[c.name]; ok {
			cols = append(cols, c.name)
			exprs = append(exprs, v)
		}
	}
	for lo := first; lo < end; lo += chunk {
		hi := min(lo+chunk, end)
		sql := "INSERT INTO " + s.events() + " (" + strings.Join(cols, ", ") + ")" +
			" WITH " + strings.Join(with, ", ") +
			" SELECT " + strings.Join(exprs, ", ") +
			fmt.Sprintf(" FROM numbers(%d, %d)", lo, hi-lo) + suffix
		if err := s.t.exec(ctx, sql, nil); err != nil {
			return fmt.Errorf("generate rows %d..%d: %w", lo, hi, err)
		}
	}
	return nil
}

// logTables logs the rows, parts and compressed size of each table of s.
func logTables(b *testing.B, s *Store, tables ...string) {
	for _, tbl := range tables {
		p := newParams()
		rs, err := s.t.query(context.Background(), "SELECT toUInt64(count()), toUInt64(sum(rows)), toUInt64(sum(data_compressed_bytes)) "+
			"FROM system.parts WHERE active AND database = "+p.str(s.cfg.Database)+" AND table = "+p.str(tbl), p.m)
		if err != nil {
			b.Fatal(err)
		}
		var parts, rows, bytes uint64
		for rs.Next() {
			rs.Scan(&parts, &rows, &bytes)
		}
		rs.Close()
		b.Logf("%s: %d rows in %d parts, %.1f MiB compressed", tbl, rows, parts, float64(bytes)/(1<<20))
	}
}

func generateBenchData(ctx context.Context, s *Store, n int) error {
	// Derived columns first (WITH), then the row.
	with := []string{
		"number AS n",
		"n % 100000 AS obj",
		"obj % 1000 AS tenant",
		"if(tenant % 10 = 0, 'organization', 'project') AS tt",
		"concat('tenant-', toString(tenant)) AS tn",
		benchKindSQL + "[intHash32(obj) % 20 + 1] AS kind",
		"concat('ns-', toString(intHash32(obj) % 200 % 10)) AS ns",
		"concat(lower(kind), '-', toString(obj)) AS rname",
		fmt.Sprintf("fromUnixTimestamp64Micro(toInt64(%d), 'UTC') + toIntervalMicrosecond(intDiv(n * %d, %d) + cityHash64(n) %% 1000000) AS et",
			time.Now().Add(-31*24*time.Hour).UnixMicro(), int64(30*24*time.Hour/time.Microsecond), n),
		"lower(toString(reinterpretAsUUID(sipHash128(n)))) AS u",
		"concat(rname, '.', substring(replaceAll(u, '-', ''), 1, 16)) AS ename",
		"concat('Reason', toString(cityHash64(n, 7) % 50)) AS reason",
		"if(n % 7 = 0, 'Warning', 'Normal') AS typ",
		"concat('Back-off restarting failed container app in pod ', rname, ' (attempt ', toString(n % 97), ')') AS note",
		"concat('example.com/controller-', toString(intHash32(obj) % 20)) AS rc",
		"concat('controller-', toString(n % 200)) AS ri",
		"'v1' AS apiv",
		"toUnixTimestamp64Micro(et) AS et_us",
	}
	raw := benchRawSQL()
	values := map[string]string{
		"tenant_type": "tt", "tenant_name": "tn", "regarding_kind": "kind", "regarding_namespace": "ns",
		"regarding_name": "rname", "event_time": "et", "uid": "u", "seq": "n + 1", "name": "ename", "namespace": "ns",
		"type": "typ", "reason": "reason", "action": "'Restart'", "note": "note", "regarding_api_version": "apiv",
		"reporting_controller": "rc", "reporting_instance": "ri",
		"labels":    "map('app', concat('app-', toString(obj % 1000)))",
		"subject":   "concat('events.', tt, '.', tn, '.core_', kind, '.', ns, '.', rname)",
		"stored_at": "et", "ttl_seconds": strconv.Itoa(int(ttlSeconds(DefaultTTL))), "raw": raw,
	}
	// In chunks, as ingest would write them (parts then merge in the
	// background).
	return insertGenerated(ctx, s, with, values, 0, n, 1_000_000, "")
}

// benchRawSQL is a protobuf Event built in SQL from the aliases u, ename,
// ns, et_us, rc, ri, reason, apiv, kind, rname, note, typ, tt, tn and obj.
func benchRawSQL() string {
	ts := pbVarintSQL(1, "intDiv(et_us, 1000000)") // seconds
	ts = "concat(" + ts + ", " + pbVarintSQL(2, "(et_us % 1000000) * 1000") + ")"
	reg := "concat(" + strings.Join([]string{pbSQL(1, "apiv"), pbSQL(2, "kind"), pbSQL(3, "ns"), pbSQL(4, "rname")}, ", ") + ")"
	tenant := "concat(" + pbSQL(1, "tt") + ", " + pbSQL(2, "tn") + ")"
	return "concat(" + strings.Join([]string{
		pbSQL(1, "u"), pbSQL(2, "ename"), pbSQL(3, "ns"), pbSQL(4, ts), pbSQL(6, "rc"), pbSQL(7, "ri"),
		pbSQL(9, "reason"), pbSQL(10, reg), pbSQL(12, "note"), pbSQL(13, "typ"), pbSQL(14, tenant),
		// labels (field 15, map entry: key 1, value 2)
		pbSQL(15, "concat("+pbSQL(1, "'app'")+", "+pbSQL(2, "concat('app-', toString(obj % 1000))")+")"),
	}, ", ") + ")"
}

func setupBench(b *testing.B) {
	bench.once.Do(func() {
		ctx := context.Background()
		n := benchEvents()
		cfg := DefaultConfig()
		cfg.Database = fmt.Sprintf("bench_%d", n)
		s, err := OpenEngine(ctx, chtest.Engine(b), cfg, chtest.Logger(b))
		if err != nil {
			bench.err = err
			return
		}
		bench.store, bench.n = s, n
		var have uint64
		rs, err := s.t.query(ctx, "SELECT count() FROM "+s.events(), nil)
		if err == nil {
			for rs.Next() {
				rs.Scan(&have)
			}
			rs.Close()
		}
		if have != uint64(n) {
			start := time.Now()
			if err := generateBenchData(ctx, s, n); err != nil {
				bench.err = err
				return
			}
			bench.genTime = time.Since(start)
		}
		// Measure the steady state: let background merges finish (at most
		// 10 minutes).
		for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
			rs, err := s.t.query(ctx, "SELECT toUInt64(count()) FROM system.merges WHERE database = {db:String}",
				map[string]string{"db": cfg.Database})
			if err != nil {
				break
			}
			var merging uint64
			for rs.Next() {
				rs.Scan(&merging)
			}
			rs.Close()
			if merging == 0 {
				break
			}
		}
		// Samples: 2,000 random objects and uids.
		rs, err = s.t.query(ctx, "SELECT toString(tenant_type), toString(tenant_name), toString(regarding_kind), "+
			"toString(regarding_namespace), regarding_name, uid FROM "+s.events()+
			" WHERE cityHash64(seq, 'sample') % {m:UInt64} = 0 LIMIT 2000", map[string]string{"m": strconv.Itoa(max(n/4000, 1))})
		if err != nil {
			bench.err = err
			return
		}
		for rs.Next() {
			var o benchObject
			var u string
			if err := rs.Scan(&o.tenant.Type, &o.tenant.Name, &o.kind, &o.namespace, &o.name, &u); err != nil {
				bench.err = err
				return
			}
			bench.objects = append(bench.objects, o)
			bench.uids = append(bench.uids, benchUID{tenant: o.tenant, uid: u})
		}
		rs.Close()
		if len(bench.objects) == 0 {
			bench.err = fmt.Errorf("no samples")
		}
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
}

// BenchmarkStore measures, on the benchmark store, the newest 100 events of
// one object (Query) and Get by uid, each iteration on another object or
// uid (the query condition cache is on by default).
func BenchmarkStore(b *testing.B) {
	setupBench(b)
	s := bench.store
	ctx := context.Background()
	if bench.genTime > 0 {
		b.Logf("generated %d events in %v (%.0f rows/s)", bench.n, bench.genTime.Round(time.Millisecond),
			float64(bench.n)/bench.genTime.Seconds())
	}
	if rs, err := s.t.query(ctx, "SELECT toUInt64(count()), toUInt64(sum(rows)), toUInt64(sum(data_compressed_bytes)) "+
		"FROM system.parts WHERE active AND database = {db:String} AND table = 'events'", map[string]string{"db": s.cfg.Database}); err == nil {
		var parts, rows, bytes uint64
		for rs.Next() {
			rs.Scan(&parts, &rows, &bytes)
		}
		rs.Close()
		b.Logf("events table: %d rows in %d parts, %.0f MiB compressed (%.0f bytes/row)", rows, parts,
			float64(bytes)/(1<<20), float64(bytes)/float64(max(rows, 1)))
	}
	rv := uint64(bench.n)
	rng := rand.New(rand.NewPCG(1, 2))

	b.Run("QueryObjectNewest100", func(b *testing.B) {
		var lat chtest.Latencies
		for i := 0; i < b.N; i++ {
			o := bench.objects[rng.IntN(len(bench.objects))]
			q := query.List{
				Scope: query.Scope{Tenants: []query.TenantRef{o.tenant}},
				Filter: query.Filter{Regarding: query.ObjectFilter{
					Kind: query.StringSet{In: []string{o.kind}}, Namespace: query.StringSet{In: []string{o.namespace}}, Name: query.StringSet{In: []string{o.name}},
				}},
				PageSize: 100,
			}
			start := time.Now()
			p, err := s.Query(ctx, q, rv)
			lat = append(lat, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
			if len(p.Events) == 0 {
				b.Fatalf("no events for %+v", o)
			}
		}
		lat.Report(b)
	})
	b.Run("GetByUID", func(b *testing.B) {
		var lat chtest.Latencies
		for i := 0; i < b.N; i++ {
			u := bench.uids[rng.IntN(len(bench.uids))]
			start := time.Now()
			ev, err := s.Get(ctx, query.Scope{Tenants: []query.TenantRef{u.tenant}}, query.Lookup{UID: u.uid})
			lat = append(lat, time.Since(start))
			if err != nil || ev.GetUid() != u.uid {
				b.Fatalf("get %s: %v %v", u.uid, ev, err)
			}
		}
		lat.Report(b)
	})
	b.Run("GetByUIDAllTenants", func(b *testing.B) {
		var lat chtest.Latencies
		for i := 0; i < b.N; i++ {
			u := bench.uids[rng.IntN(len(bench.uids))]
			start := time.Now()
			ev, err := s.Get(ctx, query.Scope{All: true}, query.Lookup{UID: u.uid})
			lat = append(lat, time.Since(start))
			if err != nil || ev.GetUid() != u.uid {
				b.Fatalf("get %s: %v %v", u.uid, ev, err)
			}
		}
		lat.Report(b)
	})
	b.Run("QueryAllTenantsNewest100", func(b *testing.B) {
		var lat chtest.Latencies
		for i := 0; i < b.N; i++ {
			start := time.Now()
			p, err := s.Query(ctx, query.List{Scope: all, PageSize: 100}, rv-uint64(rng.IntN(1000)))
			lat = append(lat, time.Since(start))
			if err != nil || len(p.Events) != 100 {
				b.Fatalf("query all: %d events, %v", len(p.Events), err)
			}
		}
		lat.Report(b)
	})
	b.Run("QueryTenantNewest100", func(b *testing.B) {
		var lat chtest.Latencies
		for i := 0; i < b.N; i++ {
			o := bench.objects[rng.IntN(len(bench.objects))]
			start := time.Now()
			p, err := s.Query(ctx, query.List{Scope: query.Scope{Tenants: []query.TenantRef{o.tenant}}, PageSize: 100}, rv)
			lat = append(lat, time.Since(start))
			if err != nil || len(p.Events) != 100 {
				b.Fatalf("query tenant %v: %d events, %v", o.tenant, len(p.Events), err)
			}
		}
		lat.Report(b)
	})
}

// BenchmarkInsert measures Store.Insert throughput (rows/s) of ~600-byte
// events from 1,000 tenants per batch size and transport: what the ingest
// batch size was chosen from.
func BenchmarkInsert(b *testing.B) {
	for _, tr := range chtest.Transports {
		for _, size := range []int{100, 1000, 5000, 10000, 20000} {
			b.Run(fmt.Sprintf("%s/batch=%d", tr.Name, size), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Database = chtest.Database(b)
				s := openStore(b, tr, cfg)
				defer func() {
					s.Close()
					chtest.Engine(b).Exec(context.Background(), "DROP DATABASE IF EXISTS "+quoteIdent(cfg.Database))
				}()
				at := time.Now().Add(-time.Hour)
				batches := make([][]Row, 4)
				for j := range batches {
					batches[j] = make([]Row, size)
					for i := range batches[j] {
						n := j*size + i
						ev := chtest.RealisticEvent(n, 1000, at)
						raw, _ := event.Marshal(ev)
						batches[j][i] = Row{Seq: uint64(n + 1), Subject: event.SubjectOf(ev), Event: ev, StoredAt: at, Raw: raw}
					}
				}
				b.ResetTimer()
				rows := 0
				for i := 0; i < b.N; i++ {
					if err := s.Insert(context.Background(), batches[i%len(batches)]); err != nil {
						b.Fatal(err)
					}
					rows += size
				}
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}
