package clickhouse

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clickhousego "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

// transport runs the store's SQL on one ClickHouse. Statements carry
// {name:Type} placeholders; params holds their values in ClickHouse's
// escaped text form (what param_<name> carries over HTTP), built by
// paramSet. Both transports hand the values to the engine as bound
// parameters: chdb_query_with_params_n for the embedded engine, query
// parameters (HTTP param_ / native protocol parameters) for clickhouse-go.
type transport interface {
	kind() string
	exec(ctx context.Context, sql string, params map[string]string) error
	// query runs a SELECT; rows are scanned into *uint64, *int64 or *string
	// (the SQL casts its result columns to UInt64, Int64 or String).
	query(ctx context.Context, sql string, params map[string]string) (rows, error)
	// encode does a batch's client-side work: it builds and encodes the
	// rows in the form insert sends (CPU only, no I/O).
	encode(b *eventBatch) error
	// insert appends an encoded batch to db.table (validated, unquoted
	// identifiers; a table with eventColumns) as one INSERT.
	insert(ctx context.Context, db, table string, b *eventBatch) error
	ping(ctx context.Context) error
	close() error
}

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

// paramSet names and encodes bound parameters; each method returns the
// placeholder to write into the SQL text.
type paramSet struct {
	m map[string]string
}

func newParams() *paramSet { return &paramSet{m: map[string]string{}} }

func (p *paramSet) add(typ, value string) string {
	name := "p" + strconv.Itoa(len(p.m))
	p.m[name] = value
	return "{" + name + ":" + typ + "}"
}

// str binds an arbitrary string (any bytes).
func (p *paramSet) str(s string) string { return p.add("String", chdb.StringParam(s)) }

func (p *paramSet) u64(v uint64) string { return p.add("UInt64", strconv.FormatUint(v, 10)) }

func (p *paramSet) i64(v int64) string { return p.add("Int64", strconv.FormatInt(v, 10)) }

// micros binds a time as microseconds since the epoch and converts it to
// DateTime64(6, 'UTC') in SQL.
func (p *paramSet) micros(us int64) string {
	return "fromUnixTimestamp64Micro(" + p.i64(us) + ", 'UTC')"
}

// ---- embedded engine ----

type chdbTransport struct {
	e   *chdb.Engine
	own bool // close closes e
}

func (t *chdbTransport) kind() string { return "chdb" }

func (t *chdbTransport) exec(ctx context.Context, sql string, params map[string]string) error {
	return t.e.ExecParams(ctx, sql, params)
}

func (t *chdbTransport) query(ctx context.Context, sql string, params map[string]string) (rows, error) {
	sql, limits := withReadLimits(ctx, sql)
	r, err := t.e.Do(ctx, sql, params, "RowBinary")
	if err != nil {
		return nil, readLimitError(err, limits)
	}
	return &rowBinary{b: r.Data, stats: readStats{resultRows: r.RowsRead, resultBytes: r.BytesRead, engine: r.Elapsed, wait: r.Wait}}, nil
}

// encode builds the batch as one Native block, column by column with
// ch-go's typed columns (eventBlock).
func (t *chdbTransport) encode(b *eventBatch) error { return b.encodeNative() }

// insert inserts the Native block binary-safely through a file
// (chdb.Engine.InsertFrom).
func (t *chdbTransport) insert(ctx context.Context, db, table string, b *eventBatch) error {
	if !b.encoded {
		return errors.New("clickhouse: batch not encoded")
	}
	return t.e.InsertFrom(ctx, db+"."+table, eventColumnNames, "Native", b.native)
}

func (t *chdbTransport) ping(ctx context.Context) error {
	_, err := t.e.Query(ctx, "SELECT 1", "TabSeparated")
	return err
}

func (t *chdbTransport) close() error {
	if t.own {
		return t.e.Close()
	}
	return nil
}

// rowBinary reads RowBinary output. RowBinary carries no types: a Nullable
// column's null-marker byte would be read as part of its value, so the
// store's statements return no Nullable columns (a scalar subquery is
// one; see engineMemorySQL).
type rowBinary struct {
	b   []byte
	err error
	cur bool

	stats readStats // the engine's statistics of the read
}

func (r *rowBinary) readStats() readStats { return r.stats }

var (
	errShortRow     = errors.New("clickhouse: truncated RowBinary result")
	errRowUnscanned = errors.New("clickhouse: Next before the previous row was scanned (RowBinary rows are found only by reading them)")
)

// Next reports whether a row follows. A row must be scanned before the
// next Next: RowBinary carries no row lengths, so an unscanned row cannot
// be skipped, and Next then stops with an error instead of finding the
// same row forever.
func (r *rowBinary) Next() bool {
	if r.err != nil || len(r.b) == 0 {
		return false
	}
	if r.cur {
		r.err = errRowUnscanned
		return false
	}
	r.cur = true
	return true
}

func (r *rowBinary) Scan(dest ...any) error {
	if !r.cur {
		return errors.New("clickhouse: Scan without Next")
	}
	r.cur = false
	for _, d := range dest {
		switch d := d.(type) {
		case *uint64:
			if len(r.b) < 8 {
				r.err = errShortRow
				return r.err
			}
			*d = binary.LittleEndian.Uint64(r.b)
			r.b = r.b[8:]
		case *int64:
			if len(r.b) < 8 {
				r.err = errShortRow
				return r.err
			}
			*d = int64(binary.LittleEndian.Uint64(r.b))
			r.b = r.b[8:]
		case *string:
			n, k := binary.Uvarint(r.b)
			if k <= 0 || uint64(len(r.b)-k) < n {
				r.err = errShortRow
				return r.err
			}
			*d = string(r.b[k : k+int(n)])
			r.b = r.b[k+int(n):]
		default:
			r.err = fmt.Errorf("clickhouse: cannot scan into %T", d)
			return r.err
		}
	}
	return nil
}

func (r *rowBinary) Err() error   { return r.err }
func (r *rowBinary) Close() error { return nil }

// ---- clickhouse-go/v2 ----

type goTransport struct {
	conn driver.Conn
}

func openGo(ctx context.Context, dsn string, poolSize int) (*goTransport, error) {
	opts, err := clickhousego.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: parse dsn: %w", err)
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	if poolSize <= 0 {
		poolSize = 8
	}
	if opts.MaxOpenConns == 0 {
		opts.MaxOpenConns = poolSize
	}
	if opts.MaxIdleConns == 0 {
		opts.MaxIdleConns = poolSize
	}
	if opts.ClientInfo.Products == nil {
		opts.ClientInfo.Products = []struct{ Name, Version string }{{Name: "eventgate", Version: "1"}}
	}
	conn, err := clickhousego.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: open %s: %w", redactDSN(dsn), err)
	}
	return &goTransport{conn: conn}, nil
}

// redactDSN drops credentials from a DSN for messages.
func redactDSN(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return "(dsn)"
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "***@" + rest[at+1:]
	}
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	return scheme + "://" + rest
}

func (t *goTransport) kind() string { return "clickhouse-go" }

func withParams(ctx context.Context, params map[string]string) context.Context {
	if len(params) == 0 {
		return ctx
	}
	return clickhousego.Context(ctx, clickhousego.WithParameters(clickhousego.Parameters(params)))
}

func (t *goTransport) exec(ctx context.Context, sql string, params map[string]string) error {
	return t.conn.Exec(withParams(ctx, params), sql)
}

func (t *goTransport) query(ctx context.Context, sql string, params map[string]string) (rows, error) {
	sql, limits := withReadLimits(ctx, sql)
	rs, err := t.conn.Query(withParams(ctx, params), sql)
	if err != nil {
		return nil, readLimitError(err, limits)
	}
	return limitedRows{rs, limits}, nil
}

// encode gives each row its values in the columns' Go types: the
// driver's batch API takes rows of values.
func (t *goTransport) encode(b *eventBatch) error { return b.encodeValues() }

func (t *goTransport) insert(ctx context.Context, db, table string, eb *eventBatch) error {
	if eb.values == nil {
		return errors.New("clickhouse: batch not encoded")
	}
	names := make([]string, len(eventColumns))
	for i, c := range eventColumns {
		names[i] = quoteIdent(c.name)
	}
	b, err := t.conn.PrepareBatch(ctx, "INSERT INTO "+quoteIdent(db)+"."+quoteIdent(table)+" ("+strings.Join(names, ", ")+")")
	if err != nil {
		return err
	}
	for _, r := range eb.values {
		if err := b.Append(r...); err != nil {
			b.Abort()
			return err
		}
	}
	return b.Send()
}

func (t *goTransport) ping(ctx context.Context) error { return t.conn.Ping(ctx) }

func (t *goTransport) close() error { return t.conn.Close() }
