package chdb

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// connectMu serialises chdb_connect, whose signal-handler save/restore must
// not interleave with another connect.
var connectMu sync.Mutex

// lastConnectSignals is the mask of signals whose disposition the last
// chdb_connect changed (before it was restored); for tests.
var lastConnectSignals uint64

func loadLibrary(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.eg_load(cpath); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		return errors.New(C.GoString(msg))
	}
	return nil
}

type conn struct {
	c *C.eg_chdb_connection
}

// connect opens a connection to the engine on dataDir, starting the engine
// when this process has none. The engine loads its tables while it starts
// (async_load_databases off): loaded lazily, on the first statements that
// need them, a table's load could fail with ASYNC_LOAD_WAIT_FAILED
// ("recursive_mutex lock failed") when several statements waited for it at
// once, and the table then stayed unusable in that process. settings are
// more server settings (serverArgs); they take effect when the engine
// starts.
func connect(dataDir string, settings []string) (*conn, error) {
	args := append([]string{"clickhouse", "--path=" + dataDir, "--async_load_databases=0"}, settings...)
	argv := C.malloc(C.size_t(len(args)) * C.size_t(unsafe.Sizeof(uintptr(0))))
	defer C.free(argv)
	av := unsafe.Slice((**C.char)(argv), len(args))
	for i, a := range args {
		av[i] = C.CString(a)
	}
	defer func() {
		for _, p := range av {
			C.free(unsafe.Pointer(p))
		}
	}()

	connectMu.Lock()
	defer connectMu.Unlock()
	var changed C.uint64_t
	c := C.eg_connect(C.int(len(args)), (**C.char)(argv), &changed)
	lastConnectSignals = uint64(changed)
	if c == nil {
		return nil, fmt.Errorf("%w for path %s (the engine allows one storage path per process, and the directory must be writable)",
			ErrConnect, dataDir)
	}
	return &conn{c: c}, nil
}

func (c *conn) close() {
	if c.c != nil {
		C.eg_close(c.c)
		c.c = nil
	}
}

// cstr returns a pointer to s's bytes for a C call that does not retain it.
// cgo allows passing Go memory that holds no Go pointers.
func cstr(s string) *C.char {
	if len(s) == 0 {
		return (*C.char)(unsafe.Pointer(&zeroByte))
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

var zeroByte byte

func (c *conn) query(sql, format string, params map[string]string) (*Result, error) {
	var res *C.eg_chdb_result
	if len(params) == 0 {
		res = C.eg_query(c.c, cstr(sql), C.size_t(len(sql)), cstr(format), C.size_t(len(format)))
	} else {
		// The arrays hold pointers, so they and the strings they point to
		// live in C memory (cgo forbids Go memory holding Go pointers).
		n := len(params)
		ptrSize := C.size_t(unsafe.Sizeof(uintptr(0)))
		names := C.malloc(C.size_t(n) * ptrSize)
		values := C.malloc(C.size_t(n) * ptrSize)
		nameLens := C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.size_t(0))))
		valueLens := C.malloc(C.size_t(n) * C.size_t(unsafe.Sizeof(C.size_t(0))))
		defer C.free(names)
		defer C.free(values)
		defer C.free(nameLens)
		defer C.free(valueLens)
		ns := unsafe.Slice((**C.char)(names), n)
		vs := unsafe.Slice((**C.char)(values), n)
		nl := unsafe.Slice((*C.size_t)(nameLens), n)
		vl := unsafe.Slice((*C.size_t)(valueLens), n)
		i := 0
		for k, v := range params {
			ns[i] = (*C.char)(C.CBytes([]byte(k)))
			vs[i] = (*C.char)(C.CBytes([]byte(v)))
			nl[i] = C.size_t(len(k))
			vl[i] = C.size_t(len(v))
			i++
		}
		defer func() {
			for j := 0; j < n; j++ {
				C.free(unsafe.Pointer(ns[j]))
				C.free(unsafe.Pointer(vs[j]))
			}
		}()
		res = C.eg_query_params(c.c, cstr(sql), C.size_t(len(sql)), cstr(format), C.size_t(len(format)),
			(**C.char)(names), (*C.size_t)(nameLens), (**C.char)(values), (*C.size_t)(valueLens), C.size_t(n))
	}
	defer C.eg_destroy(res)

	var info C.eg_result_info
	C.eg_result(res, &info)
	if info.error != nil {
		return nil, newError(C.GoString(info.error))
	}
	r := &Result{
		RowsRead:     uint64(info.rows_read),
		BytesRead:    uint64(info.bytes_read),
		RowsWritten:  uint64(info.rows_written),
		BytesWritten: uint64(info.bytes_written),
		Elapsed:      time.Duration(float64(info.elapsed) * float64(time.Second)),
	}
	if info.len > 0 && info.buf != nil {
		r.Data = make([]byte, int(info.len))
		copy(r.Data, unsafe.Slice((*byte)(unsafe.Pointer(info.buf)), int(info.len)))
	}
	return r, nil
}

// signalHandlers returns the installed handler address of each signal < 64.
func signalHandlers() [64]uintptr {
	var out [64]C.uintptr_t
	C.eg_signal_handlers(&out[0])
	var r [64]uintptr
	for i := range out {
		r[i] = uintptr(out[i])
	}
	return r
}

func hasSignalControl() bool { return C.eg_has_signal_control() != 0 }
