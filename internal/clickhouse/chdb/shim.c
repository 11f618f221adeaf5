#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef eg_chdb_connection * (*fn_connect)(int, char **);
typedef void (*fn_close_conn)(eg_chdb_connection *);
typedef eg_chdb_result * (*fn_query_n)(eg_chdb_connection, const char *, size_t, const char *, size_t);
typedef eg_chdb_result * (*fn_query_with_params_n)(
    eg_chdb_connection, const char *, size_t, const char *, size_t,
    const char * const *, const size_t *, const char * const *, const size_t *, size_t);
typedef char * (*fn_result_buffer)(eg_chdb_result *);
typedef size_t (*fn_result_length)(eg_chdb_result *);
typedef double (*fn_result_elapsed)(eg_chdb_result *);
typedef uint64_t (*fn_result_u64)(eg_chdb_result *);
typedef const char * (*fn_result_error)(eg_chdb_result *);
typedef void (*fn_destroy)(eg_chdb_result *);
typedef void (*fn_set_signal_handlers_enabled)(int);

static struct
{
    void * handle;
    fn_connect connect;
    fn_close_conn close_conn;
    fn_query_n query_n;
    fn_query_with_params_n query_with_params_n;
    fn_result_buffer result_buffer;
    fn_result_length result_length;
    fn_result_elapsed result_elapsed;
    fn_result_u64 result_rows_read;
    fn_result_u64 result_bytes_read;
    fn_result_u64 result_rows_written;   // optional
    fn_result_u64 result_bytes_written;  // optional
    fn_result_error result_error;
    fn_destroy destroy;
    fn_set_signal_handlers_enabled set_signal_handlers_enabled; // optional
} lib;

static char * eg_errorf(const char * fmt, const char * a, const char * b)
{
    size_t n = strlen(fmt) + (a ? strlen(a) : 0) + (b ? strlen(b) : 0) + 1;
    char * out = malloc(n);
    if (out)
        snprintf(out, n, fmt, a ? a : "", b ? b : "");
    return out;
}

char * eg_load(const char * path)
{
    if (lib.handle)
        return NULL;
    dlerror();
    void * h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
    {
        const char * e = dlerror();
        return eg_errorf("dlopen: %s%s", e ? e : "unknown error", NULL);
    }

#define EG_REQUIRE(field, type, name) \
    do { \
        lib.field = (type)dlsym(h, name); \
        if (!lib.field) \
        { \
            dlclose(h); \
            memset(&lib, 0, sizeof(lib)); \
            return eg_errorf("libchdb is missing the symbol %s%s (wrong library version?)", name, NULL); \
        } \
    } while (0)

    EG_REQUIRE(connect, fn_connect, "chdb_connect");
    EG_REQUIRE(close_conn, fn_close_conn, "chdb_close_conn");
    EG_REQUIRE(query_n, fn_query_n, "chdb_query_n");
    EG_REQUIRE(query_with_params_n, fn_query_with_params_n, "chdb_query_with_params_n");
    EG_REQUIRE(result_buffer, fn_result_buffer, "chdb_result_buffer");
    EG_REQUIRE(result_length, fn_result_length, "chdb_result_length");
    EG_REQUIRE(result_elapsed, fn_result_elapsed, "chdb_result_elapsed");
    EG_REQUIRE(result_rows_read, fn_result_u64, "chdb_result_rows_read");
    EG_REQUIRE(result_bytes_read, fn_result_u64, "chdb_result_bytes_read");
    EG_REQUIRE(result_error, fn_result_error, "chdb_result_error");
    EG_REQUIRE(destroy, fn_destroy, "chdb_destroy_query_result");
#undef EG_REQUIRE

    lib.result_rows_written = (fn_result_u64)dlsym(h, "chdb_result_rows_written");
    lib.result_bytes_written = (fn_result_u64)dlsym(h, "chdb_result_bytes_written");
    lib.set_signal_handlers_enabled = (fn_set_signal_handlers_enabled)dlsym(h, "chdb_set_signal_handlers_enabled");
    lib.handle = h;
    return NULL;
}

int eg_has_signal_control(void)
{
    return lib.set_signal_handlers_enabled != NULL;
}

// Signals whose handlers chDB installs, plus everything else a process can
// catch: saving and restoring all of them costs microseconds and also covers
// dispositions (SIGPIPE, SIGINT, ...) a future engine version might touch.
#define EG_MAX_SIG 65

static uintptr_t eg_fingerprint(const struct sigaction * sa)
{
    if (sa->sa_flags & SA_SIGINFO)
        return (uintptr_t)sa->sa_sigaction;
    return (uintptr_t)sa->sa_handler;
}

eg_chdb_connection * eg_connect(int argc, char ** argv, uint64_t * changed)
{
    static struct sigaction saved[EG_MAX_SIG];
    static int have[EG_MAX_SIG];
    int max = SIGRTMAX < EG_MAX_SIG ? SIGRTMAX : EG_MAX_SIG - 1;

    for (int s = 1; s <= max; s++)
    {
        have[s] = 0;
        if (s == SIGKILL || s == SIGSTOP)
            continue;
        have[s] = sigaction(s, NULL, &saved[s]) == 0;
    }

    if (lib.set_signal_handlers_enabled)
        lib.set_signal_handlers_enabled(0);
    eg_chdb_connection * conn = lib.connect(argc, argv);
    if (lib.set_signal_handlers_enabled)
        lib.set_signal_handlers_enabled(0);

    uint64_t mask = 0;
    for (int s = 1; s <= max; s++)
    {
        if (!have[s])
            continue;
        struct sigaction now;
        if (sigaction(s, NULL, &now) == 0)
        {
            if (eg_fingerprint(&now) != eg_fingerprint(&saved[s]) || now.sa_flags != saved[s].sa_flags)
            {
                if (s < 64)
                    mask |= (uint64_t)1 << s;
            }
        }
        sigaction(s, &saved[s], NULL);
    }
    if (changed)
        *changed = mask;
    return conn;
}

void eg_close(eg_chdb_connection * conn)
{
    if (conn)
        lib.close_conn(conn);
}

eg_chdb_result * eg_query(eg_chdb_connection * conn, const char * sql, size_t sql_len, const char * fmt, size_t fmt_len)
{
    return lib.query_n(*conn, sql, sql_len, fmt, fmt_len);
}

eg_chdb_result * eg_query_params(
    eg_chdb_connection * conn,
    const char * sql, size_t sql_len,
    const char * fmt, size_t fmt_len,
    const char * const * names, const size_t * name_lens,
    const char * const * values, const size_t * value_lens,
    size_t count)
{
    return lib.query_with_params_n(*conn, sql, sql_len, fmt, fmt_len, names, name_lens, values, value_lens, count);
}

void eg_result(eg_chdb_result * res, eg_result_info * info)
{
    memset(info, 0, sizeof(*info));
    if (!res)
    {
        info->error = "chDB returned no result";
        return;
    }
    info->error = lib.result_error(res);
    info->buf = lib.result_buffer(res);
    info->len = lib.result_length(res);
    info->elapsed = lib.result_elapsed(res);
    info->rows_read = lib.result_rows_read(res);
    info->bytes_read = lib.result_bytes_read(res);
    if (lib.result_rows_written)
        info->rows_written = lib.result_rows_written(res);
    if (lib.result_bytes_written)
        info->bytes_written = lib.result_bytes_written(res);
}

void eg_destroy(eg_chdb_result * res)
{
    if (res)
        lib.destroy(res);
}

void eg_signal_handlers(uintptr_t out[64])
{
    for (int s = 0; s < 64; s++)
    {
        out[s] = 0;
        if (s == 0 || s == SIGKILL || s == SIGSTOP || s > SIGRTMAX)
            continue;
        struct sigaction sa;
        if (sigaction(s, NULL, &sa) == 0)
            out[s] = eg_fingerprint(&sa);
    }
}
