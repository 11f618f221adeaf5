// Package chdb binds the embedded ClickHouse engine (libchdb.so, "chDB") for
// the eventgate gateway. The library is loaded at run time with dlopen, so
// binaries build and run without it; only Open needs it. Fetch the pinned
// build with scripts/fetch-chdb.sh (npm package @chdb/lib-linux-x64-gnu,
// version Version).
//
// The connection pool, the signal handlers chdb_connect installs, bound
// query parameters and binary-safe inserts are described in
// docs/design/chdb.md.
package chdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Version is the pinned version of the npm package @chdb/lib-linux-x64-gnu
// that provides libchdb.so (engine 26.5.1.1). Keep it in step with
// scripts/fetch-chdb.sh.
const Version = "26.5.3"

// EnvLibPath names the environment variable that overrides DefaultLibPath.
const EnvLibPath = "EVENTGATE_CHDB_LIB"

// DefaultPoolSize is the number of connections Open creates when
// Options.PoolSize is zero.
const DefaultPoolSize = 4

// ErrLibraryNotFound is returned (wrapped, with the path tried) by Open when
// libchdb.so is not on disk.
var ErrLibraryNotFound = errors.New("chDB library libchdb.so not found: run scripts/fetch-chdb.sh " +
	"(or set " + EnvLibPath + " / --chdb-lib to an existing libchdb.so), " +
	"or point --clickhouse-dsn at a ClickHouse server instead")

// ErrClosed is returned by statements on an Engine that has been closed.
var ErrClosed = errors.New("chdb: engine closed")

// ErrConnect is returned by Open when the engine refused a connection: it
// failed to start on the directory (the engine writes why to stderr).
var ErrConnect = errors.New("chdb: chdb_connect failed")

// CodeAsyncLoadWaitFailed is the engine's error code ASYNC_LOAD_WAIT_FAILED:
// a statement needed a table whose load failed.
const CodeAsyncLoadWaitFailed = 695

// Error is an error reported by the engine for a statement.
type Error struct {
	// Code is the ClickHouse error code ("Code: 60. DB::Exception: …"), or
	// 0 when the message carries none.
	Code int
	// Message is the engine's message, verbatim.
	Message string
}

func (e *Error) Error() string { return "chdb: " + e.Message }

var codeRe = regexp.MustCompile(`^\s*Code:\s*(\d+)\.`)

func newError(msg string) *Error {
	e := &Error{Message: strings.TrimRight(msg, "\n")}
	if m := codeRe.FindStringSubmatch(msg); m != nil {
		e.Code, _ = strconv.Atoi(m[1])
	}
	return e
}

// DefaultLibPath returns $EVENTGATE_CHDB_LIB if set, else
// $HOME/.cache/eventgate/chdb/<Version>/libchdb.so.
func DefaultLibPath() string {
	if p := os.Getenv(EnvLibPath); p != "" {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "eventgate", "chdb", Version, "libchdb.so")
}

// Options configures Open.
type Options struct {
	// LibPath is the path of libchdb.so; empty means DefaultLibPath().
	LibPath string
	// DataDir is the engine's storage directory, created if missing. Empty
	// means an in-memory engine (":memory:"); temporary insert files then go
	// to a private directory under os.TempDir().
	DataDir string
	// PoolSize is the number of connections; 0 means DefaultPoolSize.
	PoolSize int
	// InsertNice, when above 0, is the Linux nice value (up to 19) of the
	// engine's threads while they run an InsertFile statement and its
	// materialized views (the os_thread_priority setting: the engine sets
	// it on the threads it attaches to the statement and restores them
	// after, which needs CAP_SYS_NICE; without it the setting does
	// nothing).
	InsertNice int
	// BackgroundNice, when above 0, is the Linux nice value (up to 19) of
	// the engine's background threads: merges, moves and their schedulers
	// (BackgroundThreads). They serve no statement, so that the engine's
	// own upkeep yields to the process's other work when the CPUs are
	// saturated. Raising a nice value needs no privilege.
	BackgroundNice int
	// BackgroundIdle puts the background threads under the SCHED_IDLE
	// policy instead (BackgroundNice is then moot): a thread of the
	// process that wakes preempts them at once, where a nice value only
	// shares the CPU by weight and lets a merge finish its time slice
	// first. Every wake-up on the serving path would otherwise wait up to
	// a slice behind a merge. Lowering a policy needs no privilege.
	BackgroundIdle bool
	// MergeThreads, when above 0, is how many merges the engine runs at
	// once: its background pool's threads (background_pool_size), one merge
	// each (background_merges_mutations_concurrency_ratio 1). Otherwise the
	// engine's defaults: two threads, two merges each. Every merge holds
	// its own buffers, so fewer at once bound the engine's memory; on a
	// machine of few CPUs the merges, which yield the CPU to everything
	// else (BackgroundIdle), run no faster side by side.
	MergeThreads int
}

// Result is the outcome of one statement.
type Result struct {
	// Data is the output in the requested format, copied into Go memory.
	Data []byte
	// RowsRead and BytesRead are the library's chdb_result_rows_read and
	// _bytes_read. In 26.5 they count the result's rows and bytes, not
	// what the statement read from its tables (a count over a million
	// rows reports 1 row, 8 bytes).
	RowsRead     uint64
	BytesRead    uint64
	RowsWritten  uint64
	BytesWritten uint64
	Elapsed      time.Duration
	// Wait is how long the statement waited for one of the engine's
	// connections (Options.PoolSize) before it ran.
	Wait time.Duration
}

// Engine is an open chDB instance with a pool of connections. It is safe
// for concurrent use.
type Engine struct {
	dataDir string // key in the process state; ":memory:" for in-memory
	tmpDir  string
	ownTmp  bool // tmpDir was created by Open and is removed by Close

	pool chan *conn
	size int

	insertSettings string // appended to InsertFile's SETTINGS

	closeOnce sync.Once
	done      chan struct{}
}

// process-wide state: the library is loaded once, and the engine allows one
// storage path at a time.
var proc struct {
	mu      sync.Mutex
	libPath string // set once the library is loaded
	dataDir string // storage path of the open engines
	engines int    // open engines
}

// Open loads the library (once per process) and opens opts.PoolSize
// connections to opts.DataDir.
func Open(opts Options) (*Engine, error) {
	libPath := opts.LibPath
	if libPath == "" {
		libPath = DefaultLibPath()
	}
	size := opts.PoolSize
	if size <= 0 {
		size = DefaultPoolSize
	}

	dataDir := ":memory:"
	if opts.DataDir != "" {
		abs, err := filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, fmt.Errorf("chdb: data dir: %w", err)
		}
		dataDir = abs
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("chdb: create data dir: %w", err)
		}
	}

	proc.mu.Lock()
	defer proc.mu.Unlock()

	if err := loadLocked(libPath); err != nil {
		return nil, err
	}
	if proc.engines > 0 && proc.dataDir != dataDir {
		return nil, fmt.Errorf("chdb: this process already has an engine open on %q; "+
			"the engine supports one storage path per process (asked for %q): share that Engine or Close it first",
			proc.dataDir, dataDir)
	}

	e := &Engine{
		dataDir: dataDir,
		pool:    make(chan *conn, size),
		size:    size,
		done:    make(chan struct{}),
	}
	if dataDir == ":memory:" {
		d, err := os.MkdirTemp("", "eventgate-chdb-")
		if err != nil {
			return nil, fmt.Errorf("chdb: temp dir: %w", err)
		}
		e.tmpDir, e.ownTmp = d, true
	} else {
		e.tmpDir = filepath.Join(dataDir, "tmp")
		if err := os.MkdirAll(e.tmpDir, 0o755); err != nil {
			return nil, fmt.Errorf("chdb: create temp dir: %w", err)
		}
	}

	conns := make([]*conn, 0, size)
	for i := 0; i < size; i++ {
		c, err := connect(dataDir, serverArgs(opts))
		if err != nil {
			for _, c := range conns {
				c.close()
			}
			if e.ownTmp {
				os.RemoveAll(e.tmpDir)
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		e.pool <- c
	}
	if n := min(opts.InsertNice, 19); n > 0 {
		e.insertSettings = ", os_thread_priority = " + strconv.Itoa(n)
	}
	// Threads an engine closed before left under SCHED_IDLE would run
	// this one's statements (restoreIdle).
	restoreIdle()
	if n := min(opts.BackgroundNice, 19); n > 0 || opts.BackgroundIdle {
		go e.reniceLoop(n, opts.BackgroundIdle)
	}
	proc.dataDir = dataDir
	proc.engines++
	return e, nil
}

func loadLocked(libPath string) error {
	abs, err := filepath.Abs(libPath)
	if err != nil {
		abs = libPath
	}
	st, err := os.Stat(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w (looked for %s)", ErrLibraryNotFound, abs)
		}
		return fmt.Errorf("chdb: %w", err)
	}
	if st.IsDir() {
		return fmt.Errorf("%w (%s is a directory)", ErrLibraryNotFound, abs)
	}
	if proc.libPath != "" {
		if proc.libPath != abs {
			return fmt.Errorf("chdb: library already loaded from %q; cannot load %q in the same process", proc.libPath, abs)
		}
		return nil
	}
	configureAllocator()
	if err := loadLibrary(abs); err != nil {
		return fmt.Errorf("chdb: load %s: %w", abs, err)
	}
	proc.libPath = abs
	return nil
}

// DataDir returns the engine's storage directory (":memory:" when in-memory).
func (e *Engine) DataDir() string { return e.dataDir }

// PoolSize returns the number of pooled connections.
func (e *Engine) PoolSize() int { return e.size }

func (e *Engine) acquire(ctx context.Context) (*conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-e.done:
		return nil, ErrClosed
	default:
	}
	select {
	case c := <-e.pool:
		select {
		case <-e.done:
			e.pool <- c
			return nil, ErrClosed
		default:
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.done:
		return nil, ErrClosed
	}
}

func (e *Engine) release(c *conn) { e.pool <- c }

// Do runs one statement with the given parameters (nil for none) and output
// format on a pooled connection and returns its output and statistics.
// Parameter values use ClickHouse's escaped text form; see StringParam.
func (e *Engine) Do(ctx context.Context, sql string, params map[string]string, format string) (*Result, error) {
	if format == "" {
		format = "TabSeparated"
	}
	for name := range params {
		if !validParamName(name) {
			return nil, fmt.Errorf("chdb: invalid query parameter name %q", name)
		}
	}
	start := time.Now()
	c, err := e.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer e.release(c)
	wait := time.Since(start)
	r, err := c.query(sql, format, params)
	if r != nil {
		r.Wait = wait
	}
	return r, err
}

// Query runs one statement and returns its output in the given format
// (e.g. "TabSeparated", "JSONEachRow", "Native"; empty means TabSeparated).
// Engine errors are returned as *Error.
func (e *Engine) Query(ctx context.Context, sql string, format string) ([]byte, error) {
	r, err := e.Do(ctx, sql, nil, format)
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// QueryParams runs one statement whose {name:Type} placeholders are bound to
// params server-side (see the package documentation). Values are in
// ClickHouse's escaped text form, as for param_<name> over HTTP: use
// StringParam for a raw string.
func (e *Engine) QueryParams(ctx context.Context, sql string, params map[string]string, format string) ([]byte, error) {
	r, err := e.Do(ctx, sql, params, format)
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// Exec runs one statement and discards its output.
func (e *Engine) Exec(ctx context.Context, sql string) error {
	_, err := e.Do(ctx, sql, nil, "")
	return err
}

// ExecParams runs one statement with bound parameters and discards its output.
func (e *Engine) ExecParams(ctx context.Context, sql string, params map[string]string) error {
	_, err := e.Do(ctx, sql, params, "")
	return err
}

// InsertFile inserts data, encoded in format (e.g. "Native", "RowBinary",
// "JSONEachRow"), into table, binary-safely: the data goes through a
// temporary file under DataDir/tmp read with the file() table function.
// table is a table name or db.table (split at the first dot, so a table
// whose own name holds a dot cannot be used here); both parts are bound as
// Identifier parameters. columns may be nil for all columns, in table order. For formats without a schema (RowBinary, TabSeparated, …) the
// structure is taken from the insertion table.
func (e *Engine) InsertFile(ctx context.Context, table string, columns []string, format string, data []byte) error {
	_, err := e.InsertFileResult(ctx, table, columns, format, data)
	return err
}

// InsertFileResult is InsertFile that also returns the statement's statistics.
func (e *Engine) InsertFileResult(ctx context.Context, table string, columns []string, format string, data []byte) (*Result, error) {
	return e.insertFrom(ctx, table, columns, format, bytes.NewReader(data))
}

// InsertFrom is InsertFile with the data written by src: data held in
// pieces goes to the file without being gathered into one buffer first.
func (e *Engine) InsertFrom(ctx context.Context, table string, columns []string, format string, src io.WriterTo) error {
	_, err := e.insertFrom(ctx, table, columns, format, src)
	return err
}

func (e *Engine) insertFrom(ctx context.Context, table string, columns []string, format string, src io.WriterTo) (*Result, error) {
	if table == "" {
		return nil, errors.New("chdb: InsertFile: empty table name")
	}
	if format == "" {
		return nil, errors.New("chdb: InsertFile: empty format")
	}
	params := map[string]string{}
	var sb strings.Builder
	sb.WriteString("INSERT INTO ")
	if db, tbl, ok := strings.Cut(table, "."); ok {
		// An Identifier parameter names one identifier: "a.b" would be the
		// table `a.b`, so bind the database and the table separately.
		sb.WriteString("{eg_db:Identifier}.{eg_table:Identifier}")
		params["eg_db"], params["eg_table"] = StringParam(db), StringParam(tbl)
	} else {
		sb.WriteString("{eg_table:Identifier}")
		params["eg_table"] = StringParam(table)
	}
	if len(columns) > 0 {
		sb.WriteString(" (")
		for i, col := range columns {
			if i > 0 {
				sb.WriteString(", ")
			}
			q, err := QuoteIdentifier(col)
			if err != nil {
				return nil, err
			}
			sb.WriteString(q)
		}
		sb.WriteString(")")
	}
	sb.WriteString(" SELECT * FROM file({eg_path:String}, {eg_format:String})")
	// Each file is read once: keep its schema out of the inference cache.
	sb.WriteString(" SETTINGS schema_inference_use_cache_for_file = 0")
	sb.WriteString(e.insertSettings)

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(e.tmpDir, "eventgate-insert-*.bin")
	if err != nil {
		return nil, fmt.Errorf("chdb: InsertFile: %w", err)
	}
	path := f.Name()
	defer os.Remove(path)
	if _, err := src.WriteTo(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("chdb: InsertFile: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("chdb: InsertFile: close %s: %w", path, err)
	}
	params["eg_path"], params["eg_format"] = StringParam(path), StringParam(format)
	return e.Do(ctx, sb.String(), params, "")
}

// serverArgs are the engine's server settings opts asks for, as arguments of
// its start.
func serverArgs(opts Options) []string {
	if opts.MergeThreads <= 0 {
		return nil
	}
	return []string{
		"--background_pool_size=" + strconv.Itoa(opts.MergeThreads),
		"--background_merges_mutations_concurrency_ratio=1",
	}
}

// Close closes every connection, waiting for statements in flight. Close
// every Engine before the process exits (closing can take a few hundred
// milliseconds after heavy work). It is safe to call more than once.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.done)
		for i := 0; i < e.size; i++ {
			c := <-e.pool
			c.close()
		}
		if e.ownTmp {
			os.RemoveAll(e.tmpDir)
		}
		proc.mu.Lock()
		proc.engines--
		proc.mu.Unlock()
	})
	return nil
}

// StringParam encodes a raw string as a query-parameter value: ClickHouse
// reads parameter values as escaped (TSV) text, so backslash, tab, newline,
// carriage return and NUL are escaped. Any byte sequence, including invalid
// UTF-8, round-trips exactly through a {name:String} placeholder.
func StringParam(s string) string { return paramEscaper.Replace(s) }

// identEscaper escapes a backquoted identifier.
var identEscaper = strings.NewReplacer("\\", "\\\\", "`", "\\`")

var paramEscaper = strings.NewReplacer(
	`\`, `\\`,
	"\t", `\t`,
	"\n", `\n`,
	"\r", `\r`,
	"\x00", `\0`,
)

// QuoteIdentifier quotes name as one ClickHouse identifier (`name`),
// escaping backslashes and backquotes. It rejects empty names and NUL bytes.
func QuoteIdentifier(name string) (string, error) {
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("chdb: invalid identifier %q", name)
	}
	return "`" + identEscaper.Replace(name) + "`", nil
}

func validParamName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		switch {
		case ch == '_', ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z':
		case ch >= '0' && ch <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// MallocConfEnv is the variable the engine's allocator (a jemalloc of its
// own, prefixed je_) reads its configuration from when the library loads,
// after the configuration compiled into it.
const MallocConfEnv = "JE_MALLOC_CONF"

// DefaultMallocConf is the engine allocator's configuration unless
// MallocConfEnv sets one. The library's own returns freed pages to the
// system 5 s after they were last used (dirty_decay_ms:5000) and purges only
// while it allocates (a background thread would crash the process: the
// library is loaded with dlopen). Under a steady ingest, inserts and merges
// free hundreds of megabytes a second, and the engine's resident memory ran
// 300-500 MiB above what it had in use. Returned after 1 s instead, 2M
// events inserted in batches of 5,000 (docs/design/chdb.md, "Memory")
// peaked at 924-956 MiB of resident memory against 1,007-1,080 MiB, as
// fast; returned at once (dirty_decay_ms:0), at 761-798 MiB, but inserted
// 40% slower: each page used again faulted in. In the gateway, whose
// memory budget lowers the Go limit by what the engine holds, 3 s took
// 15% less of the engine's CPU per event than 1 s at half load (its pages
// faulted 3-14 thousand times a second at 1 s, ~14 us each on a VM) for
// the same peak of the whole process (BENCHMARKS.md, session 59).
const DefaultMallocConf = "dirty_decay_ms:3000"

// configureAllocator sets MallocConfEnv to DefaultMallocConf before the
// library loads, unless the process's environment sets it.
func configureAllocator() {
	if _, set := os.LookupEnv(MallocConfEnv); !set {
		os.Setenv(MallocConfEnv, DefaultMallocConf)
	}
}
