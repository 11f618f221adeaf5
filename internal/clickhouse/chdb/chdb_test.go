package chdb

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The engine shared by the tests of this package (one storage path per
// process), opened by TestMain.
var (
	testEngine   *Engine
	testOpenErr  error
	testDataDir  string
	sigsBeforeGo [64]uintptr // handlers installed before the engine was opened
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chdb-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDataDir = dir
	sigsBeforeGo = signalHandlers()
	testEngine, testOpenErr = Open(Options{DataDir: dir})
	code := m.Run()
	if testEngine != nil {
		testEngine.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// engine returns the shared engine, failing the test with the fetch
// instruction when the library is missing.
func engine(t testing.TB) *Engine {
	t.Helper()
	if testOpenErr != nil {
		if errors.Is(testOpenErr, ErrLibraryNotFound) {
			t.Fatalf("%v\nrun: bash scripts/fetch-chdb.sh (from the repository root)", testOpenErr)
		}
		t.Fatalf("open chDB: %v", testOpenErr)
	}
	return testEngine
}

func mustExec(t testing.TB, e *Engine, sql string) {
	t.Helper()
	if err := e.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// nilDeref dereferences a nil pointer and reports the recovered panic.
//
//go:noinline
func nilDeref() (recovered any) {
	defer func() { recovered = recover() }()
	var p *int
	return *p
}

func TestNilDereferenceStillPanics(t *testing.T) {
	e := engine(t)
	// Run statements first: the handlers must survive queries too.
	if _, err := e.Query(context.Background(), "SELECT sum(number) FROM numbers(100000)", "TSV"); err != nil {
		t.Fatal(err)
	}
	if got := signalHandlers(); got != sigsBeforeGo {
		for s := range got {
			if got[s] != sigsBeforeGo[s] {
				t.Errorf("signal %d: handler %#x before Open, %#x now", s, sigsBeforeGo[s], got[s])
			}
		}
	}
	t.Logf("signals chdb_connect changed (then restored), mask %#x; chdb_set_signal_handlers_enabled present: %v",
		lastConnectSignals, hasSignalControl())

	done := make(chan any, 1)
	go func() { done <- nilDeref() }()
	select {
	case r := <-done:
		err, ok := r.(runtime.Error)
		if !ok || !strings.Contains(err.Error(), "nil pointer dereference") {
			t.Fatalf("recovered %v, want a runtime nil pointer dereference error", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nil dereference did not panic within 10s: chDB's signal handlers are still installed")
	}
}

// hostileValues are raw strings that must reach the engine byte for byte.
var hostileValues = []string{
	"",
	"plain",
	"it's",
	`double "quoted"`,
	`back\slash`,
	`trailing backslash\`,
	`\'`,
	`\N`,
	"line1\nline2",
	"blank\n\nline",
	"tab\tcr\r",
	"'; DROP TABLE params_victim; --",
	"') OR 1=1 --",
	"{s:String}",
	"nul\x00byte",
	"\x00",
	"bad utf8 \xff\xfe\xc3\x28",
	"héllo wörld ✓",
	strings.Repeat("x", 100_000),
}

func TestQueryParamsHostileValues(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	mustExec(t, e, "CREATE TABLE params_victim (id UInt32, v String) ENGINE = MergeTree ORDER BY id")
	defer mustExec(t, e, "DROP TABLE params_victim")

	for i, v := range hostileValues {
		// Round trip through a SELECT: hex() makes the comparison exact.
		out, err := e.QueryParams(ctx, "SELECT hex({v:String}), length({v:String})",
			map[string]string{"v": StringParam(v)}, "TSV")
		if err != nil {
			t.Fatalf("value %d %q: %v", i, v, err)
		}
		want := fmt.Sprintf("%s\t%d\n", strings.ToUpper(hex.EncodeToString([]byte(v))), len(v))
		if string(out) != want {
			t.Fatalf("value %d %q: got %q, want %q", i, v, out, want)
		}

		// Round trip through storage, and look the row up by value.
		if err := e.ExecParams(ctx, "INSERT INTO params_victim SELECT {id:UInt32}, {v:String}",
			map[string]string{"id": fmt.Sprint(i), "v": StringParam(v)}); err != nil {
			t.Fatalf("insert value %d %q: %v", i, v, err)
		}
		out, err = e.QueryParams(ctx, "SELECT id FROM params_victim WHERE v = {v:String} ORDER BY id",
			map[string]string{"v": StringParam(v)}, "TSV")
		if err != nil {
			t.Fatalf("lookup value %d: %v", i, err)
		}
		if string(out) != fmt.Sprintf("%d\n", i) {
			t.Fatalf("lookup value %d %q: got ids %q", i, v, out)
		}
	}

	// Exact bytes back from storage, in a binary format.
	out, err := e.Query(ctx, "SELECT v FROM params_victim ORDER BY id", "RowBinary")
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(out)
	for i, want := range hostileValues {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		got := make([]byte, n)
		if _, err := r.Read(got); err != nil && n > 0 {
			t.Fatalf("row %d: %v", i, err)
		}
		if string(got) != want {
			t.Fatalf("row %d: stored %q, want %q", i, got, want)
		}
	}

	// The table survived every value, including the DROP TABLE attempt.
	out, err = e.Query(ctx, "SELECT count() FROM params_victim", "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != fmt.Sprintf("%d\n", len(hostileValues)) {
		t.Fatalf("count = %q, want %d", out, len(hostileValues))
	}

	// A value bound to a typed placeholder is a value, never SQL: an
	// Identifier parameter holding SQL names a (missing) table.
	_, err = e.QueryParams(ctx, "SELECT count() FROM {t:Identifier}",
		map[string]string{"t": "params_victim; DROP TABLE params_victim"}, "TSV")
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 60 {
		t.Fatalf("identifier injection: got %v, want UNKNOWN_TABLE (60)", err)
	}
	// A number placeholder rejects non-numbers instead of splicing them.
	_, err = e.QueryParams(ctx, "SELECT {n:UInt32}", map[string]string{"n": "1; DROP TABLE params_victim"}, "TSV")
	if !errors.As(err, &ce) || ce.Code != 457 {
		t.Fatalf("number injection: got %v, want BAD_QUERY_PARAMETER (457)", err)
	}
	if out, err := e.Query(ctx, "EXISTS TABLE params_victim", "TSV"); err != nil || string(out) != "1\n" {
		t.Fatalf("table gone after injection attempts: %q %v", out, err)
	}
}

// Values are escaped text, as over HTTP: without StringParam, a backslash
// sequence is decoded and a raw newline is rejected -- never executed.
func TestQueryParamsEscapedTextSemantics(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	out, err := e.QueryParams(ctx, "SELECT hex({v:String})", map[string]string{"v": `a\tb`}, "TSV")
	if err != nil || string(out) != "610962\n" {
		t.Fatalf(`unescaped a\tb: %q %v, want hex of "a<TAB>b"`, out, err)
	}
	_, err = e.QueryParams(ctx, "SELECT {v:String}", map[string]string{"v": "a\nb"}, "TSV")
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != 457 {
		t.Fatalf("raw newline: got %v, want BAD_QUERY_PARAMETER", err)
	}
	// Typed values and arrays use ClickHouse's text forms.
	out, err = e.QueryParams(ctx, "SELECT {n:UInt64} + 1, {d:DateTime64(6, 'UTC')}, {a:Array(String)}",
		map[string]string{"n": "41", "d": "2024-01-02 03:04:05.123456", "a": `['x','it\'s']`}, "TSV")
	if err != nil {
		t.Fatal(err)
	}
	if want := "42\t2024-01-02 03:04:05.123456\t['x','it\\'s']\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	if _, err := e.QueryParams(ctx, "SELECT 1", map[string]string{"bad name": "1"}, "TSV"); err == nil {
		t.Fatal("invalid parameter name accepted")
	}
}

func TestEngineError(t *testing.T) {
	e := engine(t)
	_, err := e.Query(context.Background(), "SELECT * FROM no_such_table", "TSV")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %T %v, want *Error", err, err)
	}
	if ce.Code != 60 || !strings.Contains(ce.Message, "UNKNOWN_TABLE") {
		t.Fatalf("got code %d message %q", ce.Code, ce.Message)
	}
	if _, err := e.Query(context.Background(), "SELEC 1", "TSV"); !errors.As(err, &ce) || ce.Code != 62 {
		t.Fatalf("syntax error: %v", err)
	}
	// The connection is usable after an error.
	if out, err := e.Query(context.Background(), "SELECT 1", "TSV"); err != nil || string(out) != "1\n" {
		t.Fatalf("after error: %q %v", out, err)
	}
}

func TestInsertFileBinarySafe(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	mustExec(t, e, "CREATE TABLE ins (id UInt64, s String, lc LowCardinality(String)) ENGINE = MergeTree ORDER BY id")
	defer mustExec(t, e, "DROP TABLE ins")

	// RowBinary rows whose strings hold blank lines, NUL and invalid UTF-8:
	// exactly what breaks inline INSERT data.
	var buf bytes.Buffer
	putStr := func(s string) {
		buf.Write(binary.AppendUvarint(nil, uint64(len(s))))
		buf.WriteString(s)
	}
	var want []string
	for i := 0; i < 1000; i++ {
		s := hostileValues[i%len(hostileValues)]
		if len(s) > 1000 {
			s = s[:1000]
		}
		s = fmt.Sprintf("%d:%s\n\n", i, s)
		want = append(want, s)
		buf.Write(binary.LittleEndian.AppendUint64(nil, uint64(i)))
		putStr(s)
		putStr("lc\n\n\x00")
	}
	res, err := e.InsertFileResult(ctx, "ins", nil, "RowBinary", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if res.RowsWritten != 1000 {
		t.Errorf("RowsWritten = %d, want 1000", res.RowsWritten)
	}

	// Column subset, qualified name, another format.
	if err := e.InsertFile(ctx, "default.ins", []string{"s", "id"}, "JSONEachRow",
		[]byte(`{"s":"json","id":5000}`+"\n")); err != nil {
		t.Fatal(err)
	}

	out, err := e.Query(ctx, "SELECT s FROM ins WHERE id < 1000 AND lc = 'lc\\n\\n\\0' ORDER BY id", "RowBinary")
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(out)
	for i, w := range want {
		n, _ := binary.ReadUvarint(r)
		got := make([]byte, n)
		r.Read(got)
		if string(got) != w {
			t.Fatalf("row %d: %q, want %q", i, got, w)
		}
	}
	if out, err := e.Query(ctx, "SELECT s FROM ins WHERE id = 5000", "TSV"); err != nil || string(out) != "json\n" {
		t.Fatalf("JSONEachRow row: %q %v", out, err)
	}

	// Failures are reported, and the temporary file is removed either way.
	if err := e.InsertFile(ctx, "no_such_table", nil, "RowBinary", buf.Bytes()); err == nil {
		t.Fatal("insert into a missing table succeeded")
	}
	if err := e.InsertFile(ctx, "ins", nil, "RowBinary", []byte("\x01")); err == nil {
		t.Fatal("truncated RowBinary accepted")
	}
	left, _ := filepath.Glob(filepath.Join(testDataDir, "tmp", "eventgate-insert-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestPoolWaitHonoursContext(t *testing.T) {
	e := engine(t)
	var held []*conn
	for i := 0; i < e.PoolSize(); i++ {
		c, err := e.acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.Query(ctx, "SELECT 1", "TSV")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("waited %v", d)
	}
	for _, c := range held {
		e.release(c)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if _, err := e.Query(cctx, "SELECT 1", "TSV"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestConcurrentQueries(t *testing.T) {
	e := engine(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				out, err := e.QueryParams(context.Background(), "SELECT {a:UInt32} * {b:UInt32}",
					map[string]string{"a": fmt.Sprint(g), "b": fmt.Sprint(i)}, "TSV")
				if err != nil {
					errs <- err
					return
				}
				if string(out) != fmt.Sprintf("%d\n", g*i) {
					errs <- fmt.Errorf("%d*%d = %q", g, i, out)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOneStoragePathPerProcess(t *testing.T) {
	engine(t)
	other := t.TempDir()
	if _, err := Open(Options{DataDir: other}); err == nil || !strings.Contains(err.Error(), "one storage path per process") {
		t.Fatalf("second data dir: got %v, want a one-storage-path error", err)
	}

	// Another Engine on the same directory shares the storage; closing it
	// leaves the first usable, and a closed Engine refuses statements.
	e2, err := Open(Options{DataDir: testDataDir, PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := e2.Query(context.Background(), "SELECT 2", "TSV"); err != nil || string(out) != "2\n" {
		t.Fatalf("second engine: %q %v", out, err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.Query(context.Background(), "SELECT 1", "TSV"); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed engine: %v", err)
	}
	if _, err := testEngine.Query(context.Background(), "SELECT 1", "TSV"); err != nil {
		t.Fatalf("first engine after closing the second: %v", err)
	}
}

func TestLibraryNotFound(t *testing.T) {
	_, err := Open(Options{LibPath: filepath.Join(t.TempDir(), "libchdb.so"), DataDir: testDataDir})
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("got %v, want ErrLibraryNotFound", err)
	}
	for _, hint := range []string{"scripts/fetch-chdb.sh", EnvLibPath, "--chdb-lib", "--clickhouse-dsn"} {
		if !strings.Contains(err.Error(), hint) {
			t.Errorf("error %q does not mention %s", err, hint)
		}
	}
}

func TestDefaultLibPath(t *testing.T) {
	t.Setenv(EnvLibPath, "/x/libchdb.so")
	if got := DefaultLibPath(); got != "/x/libchdb.so" {
		t.Fatalf("got %q", got)
	}
	t.Setenv(EnvLibPath, "")
	t.Setenv("HOME", "/home/u")
	if got, want := DefaultLibPath(), "/home/u/.cache/eventgate/chdb/"+Version+"/libchdb.so"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestQuoteIdentifier(t *testing.T) {
	for in, want := range map[string]string{"a": "`a`", "a`b": "`a\\`b`", `a\b`: "`a\\\\b`", "db.t": "`db.t`"} {
		if got, err := QuoteIdentifier(in); err != nil || got != want {
			t.Errorf("QuoteIdentifier(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := QuoteIdentifier("a\x00"); err == nil {
		t.Error("NUL accepted")
	}
}

// The engine loads its tables while it starts, not on the first statements
// that need them (see connect): started again on a directory with a
// table, it answers for the table at once, with async_load_databases off.
func TestEngineLoadsTablesWhenItStarts(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	mustExec(t, e, "CREATE TABLE IF NOT EXISTS default.loaded_at_start (a UInt64) ENGINE = MergeTree ORDER BY a")
	mustExec(t, e, "INSERT INTO default.loaded_at_start VALUES (1), (2)")
	// Stop the engine (the process's only one) and start it again.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	testEngine, testOpenErr = Open(Options{DataDir: testDataDir})
	e = engine(t)
	out, err := e.Query(ctx, "SELECT value FROM system.server_settings WHERE name = 'async_load_databases'", "TSV")
	if err != nil || string(out) != "0\n" {
		t.Fatalf("async_load_databases = %q (%v), want 0", out, err)
	}
	if out, err := e.Query(ctx, "SELECT count() FROM default.loaded_at_start", "TSV"); err != nil || string(out) != "2\n" {
		t.Fatalf("table after the restart: %q %v", out, err)
	}
}

// The engine's allocator is configured before the library loads, unless the
// environment configures it: an operator's JE_MALLOC_CONF (even empty) wins.
func TestAllocatorConfigurationLeavesTheOperatorsOwn(t *testing.T) {
	t.Setenv(MallocConfEnv, "dirty_decay_ms:2000")
	configureAllocator()
	if got := os.Getenv(MallocConfEnv); got != "dirty_decay_ms:2000" {
		t.Errorf("%s = %q after configureAllocator, want the operator's", MallocConfEnv, got)
	}
	t.Setenv(MallocConfEnv, "")
	configureAllocator()
	if got, set := os.LookupEnv(MallocConfEnv); !set || got != "" {
		t.Errorf("%s = %q (set %v), want the operator's empty value", MallocConfEnv, got, set)
	}
	os.Unsetenv(MallocConfEnv)
	configureAllocator()
	if got := os.Getenv(MallocConfEnv); got != DefaultMallocConf {
		t.Errorf("%s = %q without one set, want %q", MallocConfEnv, got, DefaultMallocConf)
	}
}

// Options.MergeThreads sets the engine's merge pool when it starts: that
// many threads, one merge each.
func TestMergeThreadsSetTheMergePool(t *testing.T) {
	e := engine(t)
	ctx := context.Background()
	setting := func(e *Engine, name string) string {
		t.Helper()
		out, err := e.QueryParams(ctx, "SELECT value FROM system.server_settings WHERE name = {n:String}", map[string]string{"n": StringParam(name)}, "TSV")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}
	defaultPool := setting(e, "background_pool_size")
	t.Logf("the engine's own background_pool_size: %s, concurrency ratio %s", defaultPool, setting(e, "background_merges_mutations_concurrency_ratio"))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the other tests get the shared engine back
	// with the default options.
	defer func() {
		if testEngine != nil {
			testEngine.Close()
		}
		testEngine, testOpenErr = Open(Options{DataDir: testDataDir})
		if got := setting(engine(t), "background_pool_size"); got != defaultPool {
			t.Errorf("background_pool_size after reopening with the defaults = %s, want %s", got, defaultPool)
		}
	}()
	testEngine, testOpenErr = Open(Options{DataDir: testDataDir, MergeThreads: 1})
	e = engine(t)
	if got := setting(e, "background_pool_size"); got != "1" {
		t.Errorf("background_pool_size = %s, want 1 (the engine's default is %s)", got, defaultPool)
	}
	if got := setting(e, "background_merges_mutations_concurrency_ratio"); got != "1" {
		t.Errorf("background_merges_mutations_concurrency_ratio = %s, want 1", got)
	}
}
