/* Status codes and error messages shared by every layer.
 *
 * Functions that can fail return a qvl_status and, when given a non-NULL qvl_error, leave one
 * readable line in it (no trailing newline). Library code never prints errors itself and never
 * exits: the tool at the top decides what to do. */
#ifndef QVL_STATUS_H
#define QVL_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define QVL_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define QVL_PRINTF(fmt_idx, arg_idx)
#endif

typedef enum qvl_status {
    QVL_OK = 0,
    QVL_E_INVALID,     /* bad argument or malformed input */
    QVL_E_IO,          /* file missing, unreadable, short read */
    QVL_E_PARSE,       /* YAML/JSON/header syntax */
    QVL_E_NOMEM,       /* allocation failed */
    QVL_E_UNSUPPORTED, /* op, dtype or feature not offered (by a backend, or at all) */
    QVL_E_SHAPE,       /* shapes or arity do not fit */
    QVL_E_DTYPE,       /* dtype does not fit */
    QVL_E_ABI,         /* plugin built against another backend ABI, or not a plugin */
    QVL_E_BACKEND,     /* a backend failed at run time (device error) */
    QVL_E_NOT_FOUND,   /* named thing (tensor, backend, key) absent */
    QVL_E_LIMIT,       /* a size or count limit exceeded (context, pixels, header size) */
    QVL_E_MISMATCH,    /* cross-check or parity found a difference beyond tolerance */
    QVL_STATUS_COUNT
} qvl_status;

/* Short readable name of a status, e.g. "invalid input". Never NULL. */
const char *qvl_status_str(qvl_status s);

typedef struct qvl_error {
    qvl_status status;
    char msg[1024];
} qvl_error;

/* Record a failure in err (when non-NULL) and return s, so callers can write
 * `return qvl_fail(err, QVL_E_IO, "%s: cannot open: %s", path, strerror(errno));` */
qvl_status qvl_fail(qvl_error *err, qvl_status s, const char *fmt, ...) QVL_PRINTF(3, 4);
qvl_status qvl_failv(qvl_error *err, qvl_status s, const char *fmt, va_list ap);

/* Prepend context to an existing message: "ctx: old message". Returns err->status. */
qvl_status qvl_error_prefix(qvl_error *err, const char *fmt, ...) QVL_PRINTF(2, 3);

/* Clear an error record. */
void qvl_error_clear(qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
