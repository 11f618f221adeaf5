// Package chdbhttp is a test fixture that serves an embedded chDB engine
// over (enough of) ClickHouse's HTTP interface for
// github.com/ClickHouse/clickhouse-go/v2 with Protocol: clickhouse.HTTP:
// Ping, Exec, Query/QueryRow with {name:Type} parameters, and
// PrepareBatch/Append/Send inserts.
//
// What it implements, following clickhouse-go's HTTP transport
// (conn_http*.go):
//
//   - The statement comes from the `query` URL argument (then the body is
//     the data of an INSERT … FORMAT <fmt>) or, without it, from the body.
//   - param_<name> URL arguments are bound to {name:Type} placeholders with
//     chdb.Engine.QueryParams; the values are passed through unchanged, so
//     they keep the server's escaped-text semantics.
//   - `default_format` selects the output format (TabSeparated if absent).
//     chDB writes Native blocks as for protocol revision 0; when the client
//     sends client_protocol_version (clickhouse-go always does and decodes
//     with block info and per-column serialization flags), the blocks are
//     re-encoded for that revision with clickhouse-go's own block codec.
//   - INSERT … [(cols)] [SETTINGS …] FORMAT <fmt> with a body is executed
//     binary-safely with chdb.Engine.InsertFile (temporary file + file()).
//   - Request bodies may be Content-Encoding gzip, deflate (zlib) or br, or
//     ClickHouse-framed LZ4/ZSTD (decompress=1). Responses are framed with
//     LZ4/ZSTD when the client asks with compress=1, and gzip/deflate/br
//     encoded when enable_http_compression=1 and Accept-Encoding allow it.
//   - Success answers carry X-ClickHouse-Summary, X-ClickHouse-Format,
//     X-ClickHouse-Timezone and X-ClickHouse-Query-Id. Errors answer HTTP 500
//     with the engine's "Code: N. DB::Exception: …" text and the
//     X-ClickHouse-Exception-Code header, which clickhouse-go turns into a
//     *clickhouse.Exception.
//
// Not implemented: sessions (session_id; every statement may run on another
// pooled connection), a `database` other than default, external tables
// (multipart bodies), and other settings passed as URL arguments (ignored).
package chdbhttp

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	chcompress "github.com/ClickHouse/ch-go/compress"
	chproto "github.com/ClickHouse/ch-go/proto"
	"github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
	"github.com/andybalholm/brotli"

	"github.com/eventgate/eventgate/internal/clickhouse/chdb"
)

// ClickHouse error codes used for errors raised by the fixture itself.
const (
	codeNotImplemented   = 48
	codeBadArguments     = 36
	codeCannotDecompress = 271
	codeUnknownException = 1002
)

// Server is the http.Handler returned by NewServer.
type Server struct {
	e *chdb.Engine

	infoOnce sync.Once
	info     serverInfo
	infoErr  error
}

type serverInfo struct {
	displayName string
	version     string
	timezone    string
	ctx         column.ServerContext // for decoding/encoding Native blocks
}

// NewServer returns a handler serving e over ClickHouse's HTTP interface.
func NewServer(e *chdb.Engine) http.Handler { return &Server{e: e} }

// Start serves e on 127.0.0.1 on a free port until the test ends and
// returns the address (host:port) to give clickhouse-go as Addr.
func Start(t testing.TB, e *chdb.Engine) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("chdbhttp: listen: %v", err)
	}
	srv := &http.Server{Handler: NewServer(e), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// chError is an error answered to the client as a ClickHouse exception.
type chError struct {
	code int
	name string
	msg  string
}

func (e *chError) Error() string {
	return fmt.Sprintf("Code: %d. DB::Exception: %s. (%s)", e.code, e.msg, e.name)
}

func fixtureError(code int, name, format string, args ...any) error {
	return &chError{code: code, name: name, msg: "chdbhttp: " + fmt.Sprintf(format, args...)}
}

func (s *Server) serverInfo(ctx context.Context) (serverInfo, error) {
	s.infoOnce.Do(func() {
		out, err := s.e.Query(ctx, "SELECT displayName(), version(), revision(), timezone()", "TabSeparated")
		if err != nil {
			s.infoErr = err
			return
		}
		f := strings.Split(strings.TrimRight(string(out), "\n"), "\t")
		if len(f) != 4 {
			s.infoErr = fmt.Errorf("chdbhttp: unexpected server info %q", out)
			return
		}
		loc, err := time.LoadLocation(f[3])
		if err != nil {
			loc = time.UTC
		}
		rev, _ := strconv.ParseUint(f[2], 10, 64)
		var v [3]uint64
		for i, p := range strings.SplitN(f[1], ".", 4) {
			if i < 3 {
				v[i], _ = strconv.ParseUint(p, 10, 64)
			}
		}
		s.info = serverInfo{
			displayName: f[0], version: f[1], timezone: f[3],
			ctx: column.ServerContext{Revision: rev, VersionMajor: v[0], VersionMinor: v[1], VersionPatch: v[2], Timezone: loc},
		}
	})
	return s.info, s.infoErr
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ping":
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		io.WriteString(w, "Ok.\n")
		return
	case "/", "":
	default:
		http.NotFound(w, r)
		return
	}
	if err := s.serve(w, r); err != nil {
		writeError(w, err)
	}
}

func writeError(w http.ResponseWriter, err error) {
	code := codeUnknownException
	msg := err.Error()
	var ce *chdb.Error
	var fe *chError
	switch {
	case errors.As(err, &ce):
		msg = ce.Message
		if ce.Code != 0 {
			code = ce.Code
		} else {
			msg = fmt.Sprintf("Code: %d. DB::Exception: %s. (UNKNOWN_EXCEPTION)", code, msg)
		}
	case errors.As(err, &fe):
		code = fe.code
	default:
		msg = fmt.Sprintf("Code: %d. DB::Exception: %s. (UNKNOWN_EXCEPTION)", code, msg)
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=UTF-8")
	h.Set("X-ClickHouse-Exception-Code", strconv.Itoa(code))
	body := msg + "\n"
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusInternalServerError)
	io.WriteString(w, body)
}

// serve answers one request: the statement from the query or the body, run
// on the engine, its output in the format asked.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	args := r.URL.Query()
	info, err := s.serverInfo(ctx)
	if err != nil {
		return err
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
		return fixtureError(codeNotImplemented, "NOT_IMPLEMENTED", "external tables (multipart requests) are not supported")
	}
	if db := args.Get("database"); db != "" && db != "default" {
		return fixtureError(codeNotImplemented, "NOT_IMPLEMENTED", "database %q: only the default database is supported", db)
	}

	body, err := readBody(r, args)
	if err != nil {
		return err
	}

	sql, data := args.Get("query"), []byte(nil)
	if sql != "" {
		data = body
	} else {
		sql = string(body)
	}
	if strings.TrimSpace(sql) == "" {
		return fixtureError(codeBadArguments, "BAD_ARGUMENTS", "empty query")
	}

	res, format, err := s.run(ctx, args, sql, data)
	if err != nil {
		return err
	}

	out := res.Data
	if format == "Native" && len(out) > 0 {
		if rev, _ := strconv.ParseUint(args.Get("client_protocol_version"), 10, 64); rev > 0 {
			if t, err := transcodeNative(out, rev, info.ctx); err == nil {
				out = t
			}
			// On failure the output was not Native after all (a FORMAT
			// clause in the query overrides default_format): send it as is.
		}
	}

	return respond(w, r, args, info, res, out, format)
}

// run runs sql, with the data of an INSERT when there is some, and returns
// the result and its format.
func (s *Server) run(ctx context.Context, args url.Values, sql string, data []byte) (*chdb.Result, string, error) {
	params := map[string]string{}
	for k, vs := range args {
		if name, ok := strings.CutPrefix(k, "param_"); ok && len(vs) > 0 {
			params[name] = vs[0]
		}
	}

	format := args.Get("default_format")
	if format == "" {
		format = "TabSeparated"
	}

	var res *chdb.Result
	var err error
	if len(data) > 0 {
		ins, ok := parseInsert(sql)
		if !ok {
			return nil, "", fixtureError(codeNotImplemented, "NOT_IMPLEMENTED",
				"a request body after the query must be the data of INSERT INTO t [(cols)] FORMAT <format>")
		}
		res, err = s.e.InsertFileResult(ctx, ins.table, ins.columns, ins.format, data)
		format = ins.format
	} else {
		res, err = s.e.Do(ctx, sql, params, format)
	}
	if err != nil {
		return nil, "", err
	}
	return res, format, nil
}

// respond answers res, whose output is out in format, with ClickHouse's
// headers, compressed as args and the request ask.
func respond(w http.ResponseWriter, r *http.Request, args url.Values, info serverInfo, res *chdb.Result, out []byte, format string) error {
	var err error
	h := w.Header()
	h.Set("Content-Type", contentType(format))
	h.Set("X-ClickHouse-Format", format)
	h.Set("X-ClickHouse-Timezone", info.timezone)
	h.Set("X-ClickHouse-Server-Display-Name", info.displayName)
	qid := args.Get("query_id")
	if qid == "" {
		qid = newQueryID()
	}
	h.Set("X-ClickHouse-Query-Id", qid)
	h.Set("X-ClickHouse-Summary", summary(res, len(res.Data)))

	if len(out) > 0 && args.Get("compress") == "1" {
		out, err = frameCompress(out, args.Get("network_compression_method"))
		if err != nil {
			return err
		}
	} else if len(out) > 0 && args.Get("enable_http_compression") == "1" {
		enc, encoded, err := httpCompress(out, r.Header.Get("Accept-Encoding"))
		if err != nil {
			return err
		}
		if enc != "" {
			h.Set("Content-Encoding", enc)
			out = encoded
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(out)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(out)
	if err != nil {
		// Headers are gone; nothing more to tell the client.
		return nil
	}
	return nil
}

// readBody reads the request body, undoing Content-Encoding and, with
// decompress=1, ClickHouse's block compression framing.
func readBody(r *http.Request, args map[string][]string) ([]byte, error) {
	var rd io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fixtureError(codeCannotDecompress, "CANNOT_DECOMPRESS", "gzip body: %v", err)
		}
		defer zr.Close()
		rd = zr
	case "deflate":
		zr, err := zlib.NewReader(r.Body)
		if err != nil {
			return nil, fixtureError(codeCannotDecompress, "CANNOT_DECOMPRESS", "deflate body: %v", err)
		}
		defer zr.Close()
		rd = zr
	case "br":
		rd = brotli.NewReader(r.Body)
	default:
		return nil, fixtureError(codeNotImplemented, "NOT_IMPLEMENTED", "Content-Encoding %q is not supported", enc)
	}
	framed := false
	if v := args["decompress"]; len(v) > 0 && v[0] == "1" {
		rd, framed = chcompress.NewReader(rd), true
	}
	b, err := io.ReadAll(rd)
	if framed && errors.Is(err, io.EOF) {
		// The framed reader reports the clean end of the stream (no bytes
		// of a next block header) as a wrapped io.EOF; a truncated block
		// is io.ErrUnexpectedEOF.
		err = nil
	}
	if err != nil {
		return nil, fixtureError(codeCannotDecompress, "CANNOT_DECOMPRESS", "read body: %v", err)
	}
	return b, nil
}

// transcodeNative re-encodes Native blocks written for protocol revision 0
// (chDB's output) for the client's protocol revision: block info plus a
// per-column custom-serialization flag.
func transcodeNative(data []byte, revision uint64, sc column.ServerContext) (out []byte, err error) {
	defer func() {
		// Output that is not Native after all must not take the test down.
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("chdbhttp: not Native data: %v", r)
		}
	}()
	rd := chproto.NewReader(bytes.NewReader(data))
	var buf chproto.Buffer
	for n := 0; ; n++ {
		ctx := sc
		block := proto.Block{ServerContext: &ctx}
		if err := block.Decode(rd, 0); err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				break
			}
			return nil, err
		}
		if err := block.Encode(&buf, revision); err != nil {
			return nil, err
		}
	}
	return buf.Buf, nil
}

// frameCompress applies ClickHouse's block compression framing (as for
// compress=1) in chunks of at most 1 MiB.
func frameCompress(data []byte, method string) ([]byte, error) {
	m := chcompress.LZ4
	switch strings.ToUpper(method) {
	case "", "LZ4":
	case "ZSTD":
		m = chcompress.ZSTD
	case "NONE":
		m = chcompress.None
	default:
		return nil, fixtureError(codeBadArguments, "BAD_ARGUMENTS", "network_compression_method %q is not supported", method)
	}
	w := chcompress.NewWriter(chcompress.LevelZero, m)
	const chunk = 1 << 20
	var out []byte
	for len(data) > 0 {
		n := min(chunk, len(data))
		if err := w.Compress(data[:n]); err != nil {
			return nil, err
		}
		out = append(out, w.Data...)
		data = data[n:]
	}
	return out, nil
}

func httpCompress(data []byte, accept string) (string, []byte, error) {
	var b bytes.Buffer
	for _, enc := range strings.Split(accept, ",") {
		enc = strings.ToLower(strings.TrimSpace(strings.SplitN(enc, ";", 2)[0]))
		var wc io.WriteCloser
		switch enc {
		case "gzip":
			wc = gzip.NewWriter(&b)
		case "deflate":
			wc = zlib.NewWriter(&b)
		case "br":
			wc = brotli.NewWriter(&b)
		default:
			continue
		}
		if _, err := wc.Write(data); err != nil {
			return "", nil, err
		}
		if err := wc.Close(); err != nil {
			return "", nil, err
		}
		return enc, b.Bytes(), nil
	}
	return "", nil, nil
}

func summary(r *chdb.Result, resultBytes int) string {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	b, _ := json.Marshal(map[string]string{
		"read_rows":          u(r.RowsRead),
		"read_bytes":         u(r.BytesRead),
		"written_rows":       u(r.RowsWritten),
		"written_bytes":      u(r.BytesWritten),
		"total_rows_to_read": "0",
		"result_rows":        "0",
		"result_bytes":       strconv.Itoa(resultBytes),
		"elapsed_ns":         strconv.FormatInt(r.Elapsed.Nanoseconds(), 10),
	})
	return string(b)
}

func contentType(format string) string {
	switch format {
	case "TabSeparated", "TSV", "TabSeparatedWithNames", "TSVWithNames", "TabSeparatedWithNamesAndTypes", "TSVWithNamesAndTypes":
		return "text/tab-separated-values; charset=UTF-8"
	case "CSV", "CSVWithNames", "CSVWithNamesAndTypes":
		return "text/csv; charset=UTF-8; header=absent"
	case "JSON", "JSONCompact", "JSONEachRow", "JSONCompactEachRow", "JSONStrings", "JSONObjectEachRow":
		return "application/json; charset=UTF-8"
	default:
		return "application/octet-stream"
	}
}

func newQueryID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// insert is a parsed INSERT INTO t [(cols)] [SETTINGS …] FORMAT f.
type insert struct {
	table   string // name or db.name, unquoted
	columns []string
	format  string
}

const identRe = "(?:`(?:[^`\\\\]|\\\\.)*`|\"(?:[^\"\\\\]|\\\\.)*\"|[A-Za-z_][A-Za-z0-9_$]*)"

var insertRe = regexp.MustCompile(`(?is)^\s*INSERT\s+INTO\s+(?:TABLE\s+)?(` + identRe + `(?:\s*\.\s*` + identRe + `)?)` +
	`\s*(?:\((.*)\))?\s*(?:SETTINGS\s+.*?)?\s*FORMAT\s+([A-Za-z0-9_]+)\s*;?\s*$`)

var identTokRe = regexp.MustCompile(identRe)

func parseInsert(sql string) (insert, bool) {
	m := insertRe.FindStringSubmatch(sql)
	if m == nil {
		return insert{}, false
	}
	var parts []string
	for _, p := range identTokRe.FindAllString(m[1], -1) {
		u, ok := unquoteIdent(p)
		if !ok || strings.Contains(u, ".") {
			return insert{}, false
		}
		parts = append(parts, u)
	}
	ins := insert{table: strings.Join(parts, "."), format: m[3]}
	if cols := strings.TrimSpace(m[2]); cols != "" {
		for _, c := range splitColumns(cols) {
			u, ok := unquoteIdent(strings.TrimSpace(c))
			if !ok {
				return insert{}, false
			}
			ins.columns = append(ins.columns, u)
		}
	}
	return ins, true
}

// splitColumns splits a column list at commas outside quotes.
func splitColumns(s string) []string {
	var out []string
	var quote byte
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '`' || c == '"'):
			quote = c
		case quote == 0 && c == ',':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func unquoteIdent(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	if q := s[0]; q == '`' || q == '"' {
		if len(s) < 2 || s[len(s)-1] != q {
			return "", false
		}
		var b strings.Builder
		in := s[1 : len(s)-1]
		for i := 0; i < len(in); i++ {
			if in[i] == '\\' && i+1 < len(in) {
				i++
			}
			b.WriteByte(in[i])
		}
		return b.String(), true
	}
	if !identTokRe.MatchString(s) || identTokRe.FindString(s) != s {
		return "", false
	}
	return s, true
}
