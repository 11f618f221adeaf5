// Thin dlopen shim over the chDB C API (chdb.h in chdb-io/chdb-core).
// Only the handful of functions this package needs are resolved; the
// declarations below mirror chdb.h for the pinned library version.
#ifndef EVENTGATE_CHDB_SHIM_H
#define EVENTGATE_CHDB_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef struct eg_chdb_result_ { void * internal_data; } eg_chdb_result;
typedef struct eg_chdb_connection_ { void * internal_data; } * eg_chdb_connection;

// eg_load dlopens path and resolves the symbols. It returns NULL on success,
// otherwise a malloc'd error message the caller frees.
char * eg_load(const char * path);

// eg_has_signal_control reports whether chdb_set_signal_handlers_enabled exists.
int eg_has_signal_control(void);

// eg_connect calls chdb_connect with chDB's signal handlers disabled, and puts
// back every signal disposition that was installed before the call.
// *changed receives a bit mask (bit n = signal n, n < 64) of the signals whose
// disposition chdb_connect had changed before it was restored.
eg_chdb_connection * eg_connect(int argc, char ** argv, uint64_t * changed);

void eg_close(eg_chdb_connection * conn);

eg_chdb_result * eg_query(eg_chdb_connection * conn, const char * sql, size_t sql_len, const char * fmt, size_t fmt_len);

eg_chdb_result * eg_query_params(
    eg_chdb_connection * conn,
    const char * sql, size_t sql_len,
    const char * fmt, size_t fmt_len,
    const char * const * names, const size_t * name_lens,
    const char * const * values, const size_t * value_lens,
    size_t count);

typedef struct eg_result_info
{
    const char * error;   // NULL when the statement succeeded
    const char * buf;
    size_t len;
    double elapsed;
    uint64_t rows_read;
    uint64_t bytes_read;
    uint64_t rows_written;
    uint64_t bytes_written;
} eg_result_info;

void eg_result(eg_chdb_result * res, eg_result_info * info);
void eg_destroy(eg_chdb_result * res);

// eg_signal_handlers returns, for each signal n < 64, a fingerprint of the
// installed handler address in out[n] (0 for SIG_DFL or a failed lookup).
void eg_signal_handlers(uintptr_t out[64]);

#endif
