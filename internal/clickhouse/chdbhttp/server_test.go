package chdbhttp

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

var (
	testEngine  *chdb.Engine
	testOpenErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chdbhttp-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testEngine, testOpenErr = chdb.Open(chdb.Options{DataDir: dir})
	code := m.Run()
	if testEngine != nil {
		testEngine.Close()
	}
	os.RemoveAll(dir)
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

func connect(t testing.TB, comp *clickhouse.Compression) driver.Conn {
	t.Helper()
	addr := Start(t, engine(t))
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{addr},
		Protocol:    clickhouse.HTTP,
		Compression: comp,
		DialTimeout: 5 * time.Second,
		ReadTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	return conn
}

var hostile = []string{
	"plain",
	"line\nbreak",
	"blank\n\nline",
	"\n\n",
	"it's 'quoted'",
	`double "quoted"`,
	`back\slash \N \t \0`,
	"nul\x00byte",
	"tab\tcr\r",
	"'; DROP TABLE events; --",
	"bad utf8 \xff\xfe\xc3\x28",
	"ünïcødé ✓",
	"",
}

type event struct {
	ID uint64
	S  string
	TS time.Time
	LC string
	M  map[string]string
}

func makeEvent(i int, base time.Time) event {
	h := hostile[i%len(hostile)]
	return event{
		ID: uint64(i),
		S:  fmt.Sprintf("%d|%s", i, h),
		TS: base.Add(time.Duration(i) * 1234567 * time.Microsecond),
		LC: fmt.Sprintf("reason-%d%s", i%7, hostile[i%3]),
		M:  map[string]string{"k" + h: h + "v", fmt.Sprint(i % 5): "x\n\ny"},
	}
}

const createEvents = `CREATE TABLE %s (
	id UInt64,
	s String,
	ts DateTime64(6, 'UTC'),
	lc LowCardinality(String),
	m Map(String, String)
) ENGINE = MergeTree ORDER BY id`

func TestClickHouseGoHTTPRoundTrip(t *testing.T) {
	conn := connect(t, nil)
	ctx := context.Background()
	if err := conn.Exec(ctx, fmt.Sprintf(createEvents, "events")); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "DROP TABLE events")

	const n = 10_000
	base := time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC)
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO events")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]event, n)
	for i := range want {
		want[i] = makeEvent(i, base)
		ev := want[i]
		if err := batch.Append(ev.ID, ev.S, ev.TS, ev.LC, ev.M); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send: %v", err)
	}

	var count uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM events").Scan(&count); err != nil || count != n {
		t.Fatalf("count = %d, %v; want %d", count, err, n)
	}

	// Read everything back through named parameters.
	rows, err := conn.Query(ctx,
		"SELECT id, s, ts, lc, m FROM events WHERE id >= {lo:UInt64} AND id < {hi:UInt64} AND ts >= {since:DateTime64(6, 'UTC')} ORDER BY id",
		clickhouse.Named("lo", "0"), clickhouse.Named("hi", fmt.Sprint(n)), clickhouse.Named("since", base.Add(-time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	for rows.Next() {
		var got event
		if err := rows.Scan(&got.ID, &got.S, &got.TS, &got.LC, &got.M); err != nil {
			t.Fatal(err)
		}
		w := want[i]
		if got.ID != w.ID || got.S != w.S || !got.TS.Equal(w.TS) || got.LC != w.LC || !reflect.DeepEqual(got.M, w.M) {
			t.Fatalf("row %d:\n got %#v\nwant %#v", i, got, w)
		}
		i++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if i != n {
		t.Fatalf("read %d rows, want %d", i, n)
	}

	// Hostile strings as bound parameters find exactly their rows.
	for j, h := range hostile {
		var id uint64
		var s string
		err := conn.QueryRow(ctx, "SELECT id, s FROM events WHERE s = {s:String}",
			clickhouse.Named("s", want[j].S)).Scan(&id, &s)
		if err != nil || id != uint64(j) || s != want[j].S {
			t.Fatalf("lookup %q: id %d s %q err %v", h, id, s, err)
		}
		var c uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM events WHERE m[{k:String}] = {v:String}",
			clickhouse.Named("k", "k"+h), clickhouse.Named("v", h+"v")).Scan(&c); err != nil {
			t.Fatal(err)
		}
		if wantC := uint64(countHostile(n, j)); c != wantC {
			t.Fatalf("map lookup %q: %d rows, want %d", h, c, wantC)
		}
	}
	if err := conn.QueryRow(ctx, "EXISTS TABLE events").Scan(new(uint8)); err != nil {
		t.Fatal(err)
	}
}

func countHostile(n, j int) int {
	c := 0
	for i := 0; i < n; i++ {
		if i%len(hostile) == j {
			c++
		}
	}
	return c
}

func TestClickHouseGoHTTPErrors(t *testing.T) {
	conn := connect(t, nil)
	ctx := context.Background()
	_, err := conn.Query(ctx, "SELECT * FROM no_such_table")
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || ex.Code != 60 {
		t.Fatalf("got %v, want *clickhouse.Exception code 60", err)
	}
	if err := conn.Exec(ctx, "CREATE TABLE broken ("); !errors.As(err, &ex) || ex.Code != 62 {
		t.Fatalf("syntax error: got %v", err)
	}
	err = conn.QueryRow(ctx, "SELECT {n:UInt8}", clickhouse.Named("n", "1; DROP TABLE x")).Scan(new(uint8))
	if !errors.As(err, &ex) || ex.Code != 457 {
		t.Fatalf("bad parameter: got %v", err)
	}
	// A batch into a missing table fails at prepare (DESCRIBE TABLE).
	if _, err := conn.PrepareBatch(ctx, "INSERT INTO no_such_table"); !errors.As(err, &ex) || ex.Code != 60 {
		t.Fatalf("prepare into missing table: %v", err)
	}
}

func TestClickHouseGoHTTPCompression(t *testing.T) {
	methods := map[string]*clickhouse.Compression{
		"lz4":     {Method: clickhouse.CompressionLZ4},
		"zstd":    {Method: clickhouse.CompressionZSTD},
		"gzip":    {Method: clickhouse.CompressionGZIP, Level: 1},
		"deflate": {Method: clickhouse.CompressionDeflate, Level: 1},
		"br":      {Method: clickhouse.CompressionBrotli, Level: 1},
	}
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, comp := range methods {
		t.Run(name, func(t *testing.T) {
			conn := connect(t, comp)
			ctx := context.Background()
			table := "events_" + name
			if err := conn.Exec(ctx, fmt.Sprintf(createEvents, table)); err != nil {
				t.Fatal(err)
			}
			defer conn.Exec(ctx, "DROP TABLE "+table)
			batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" (id, s, ts, lc, m)")
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 500; i++ {
				ev := makeEvent(i, base)
				if err := batch.Append(ev.ID, ev.S, ev.TS, ev.LC, ev.M); err != nil {
					t.Fatal(err)
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatalf("send: %v", err)
			}
			for _, i := range []int{0, 2, 3, 7, 499} {
				want := makeEvent(i, base)
				var got event
				err := conn.QueryRow(ctx, "SELECT id, s, ts, lc, m FROM "+table+" WHERE s = {s:String}",
					clickhouse.Named("s", want.S)).Scan(&got.ID, &got.S, &got.TS, &got.LC, &got.M)
				if err != nil {
					t.Fatal(err)
				}
				if got.ID != want.ID || got.S != want.S || !got.TS.Equal(want.TS) || got.LC != want.LC || !reflect.DeepEqual(got.M, want.M) {
					t.Fatalf("got %#v\nwant %#v", got, want)
				}
			}
			var s string
			if err := conn.QueryRow(ctx, "SELECT repeat('abcd', 1000000)").Scan(&s); err != nil || len(s) != 4_000_000 {
				t.Fatalf("large value: len %d, %v", len(s), err)
			}
		})
	}
}

func TestParseInsert(t *testing.T) {
	for sql, want := range map[string]insert{
		"INSERT INTO events FORMAT Native":                                  {table: "events", format: "Native"},
		"insert into db.t (a, `b c`, \"d\") FORMAT RowBinary":               {table: "db.t", columns: []string{"a", "b c", "d"}, format: "RowBinary"},
		"INSERT INTO `my db`.`t` (a) SETTINGS async_insert=1 FORMAT Native": {table: "my db.t", columns: []string{"a"}, format: "Native"},
	} {
		got, ok := parseInsert(sql)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("parseInsert(%q) = %+v, %v; want %+v", sql, got, ok, want)
		}
	}
	for _, sql := range []string{"SELECT 1", "INSERT INTO t VALUES (1)", "INSERT INTO t SELECT 1 FORMAT Native; DROP"} {
		if got, ok := parseInsert(sql); ok {
			t.Errorf("parseInsert(%q) = %+v, want no match", sql, got)
		}
	}
}

// BenchmarkBatchInsert10k measures clickhouse-go PrepareBatch/Append/Send of
// 10,000 rows over HTTP through the fixture into chDB.
func BenchmarkBatchInsert10k(b *testing.B) {
	conn := connect(b, nil)
	ctx := context.Background()
	if err := conn.Exec(ctx, fmt.Sprintf(createEvents, "bench_events")); err != nil {
		b.Fatal(err)
	}
	defer conn.Exec(ctx, "DROP TABLE bench_events")
	base := time.Now().UTC()
	evs := make([]event, 10_000)
	for i := range evs {
		evs[i] = makeEvent(i, base)
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO bench_events")
		if err != nil {
			b.Fatal(err)
		}
		for _, ev := range evs {
			if err := batch.Append(ev.ID+uint64(it)*10_000, ev.S, ev.TS, ev.LC, ev.M); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "rows/s")
	var count uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM bench_events").Scan(&count); err != nil || count != uint64(b.N*len(evs)) {
		b.Fatalf("count = %d, %v; want %d", count, err, b.N*len(evs))
	}
}

// Plain HTTP clients (curl-style) work too.
func TestRawHTTP(t *testing.T) {
	addr := Start(t, engine(t))
	get := func(path string, hdr map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}
	if res, b := get("/ping", nil); res.StatusCode != 200 || string(b) != "Ok.\n" {
		t.Fatalf("ping: %d %q", res.StatusCode, b)
	}
	q := url.Values{"query": {"SELECT hex({s:String}) AS h"}, "param_s": {`a'b\\c\n`}}
	res, b := get("/?"+q.Encode(), nil)
	if res.StatusCode != 200 || string(b) != "6127625C630A\n" || res.Header.Get("X-ClickHouse-Format") != "TabSeparated" {
		t.Fatalf("param query: %d %q %v", res.StatusCode, b, res.Header)
	}
	if !strings.Contains(res.Header.Get("X-ClickHouse-Summary"), `"read_rows":"1"`) {
		t.Errorf("summary: %q", res.Header.Get("X-ClickHouse-Summary"))
	}
	q = url.Values{"query": {"SELECT number FROM numbers(1000)"}, "enable_http_compression": {"1"}}
	res, b = get("/?"+q.Encode(), map[string]string{"Accept-Encoding": "gzip"})
	if res.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("no gzip: %v", res.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := io.ReadAll(zr)
	if !strings.HasPrefix(string(plain), "0\n1\n2\n") || strings.Count(string(plain), "\n") != 1000 {
		t.Fatalf("gzip body: %q", plain[:20])
	}
	res, b = get("/?query=SELECT+*+FROM+nope", nil)
	if res.StatusCode != 500 || res.Header.Get("X-ClickHouse-Exception-Code") != "60" || !strings.HasPrefix(string(b), "Code: 60. DB::Exception:") {
		t.Fatalf("error: %d %q %v", res.StatusCode, b, res.Header)
	}
}
