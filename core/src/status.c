/* Status names and the error record. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[QVL_STATUS_COUNT] = {
    [QVL_OK] = "ok",
    [QVL_E_INVALID] = "invalid input",
    [QVL_E_IO] = "I/O error",
    [QVL_E_PARSE] = "parse error",
    [QVL_E_NOMEM] = "out of memory",
    [QVL_E_UNSUPPORTED] = "unsupported",
    [QVL_E_SHAPE] = "shape mismatch",
    [QVL_E_DTYPE] = "dtype mismatch",
    [QVL_E_ABI] = "ABI mismatch",
    [QVL_E_BACKEND] = "backend failure",
    [QVL_E_NOT_FOUND] = "not found",
    [QVL_E_LIMIT] = "limit exceeded",
    [QVL_E_MISMATCH] = "results differ",
};

const char *qvl_status_str(qvl_status s) {
    if ((int)s < 0 || s >= QVL_STATUS_COUNT) return "unknown status";
    return status_names[s];
}

/* Messages quote names and values from hostile files: control bytes (a newline, a terminal
 * escape) would break the one-line rule or reach the user's terminal, so they become '?'. */
static void keep_one_line(char *msg) {
    for (unsigned char *p = (unsigned char *)msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
}

qvl_status qvl_failv(qvl_error *err, qvl_status s, const char *fmt, va_list ap) {
    if (err) {
        err->status = s;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        keep_one_line(err->msg);
    }
    return s;
}

qvl_status qvl_fail(qvl_error *err, qvl_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    qvl_failv(err, s, fmt, ap);
    va_end(ap);
    return s;
}

qvl_status qvl_error_prefix(qvl_error *err, const char *fmt, ...) {
    if (!err) return QVL_E_INVALID;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    int plen = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (plen < 0) return err->status;
    size_t p = (size_t)plen < sizeof prefix ? (size_t)plen : sizeof prefix - 1;
    /* New message = prefix + ": " + old message, cut to fit. */
    size_t cap = sizeof err->msg - 1;
    size_t old_len = strnlen(err->msg, cap);
    size_t head = p + 2 < cap ? p + 2 : cap;
    size_t keep = old_len < cap - head ? old_len : cap - head;
    memmove(err->msg + head, err->msg, keep);
    memcpy(err->msg, prefix, head < p ? head : p);
    if (head >= p + 2) memcpy(err->msg + p, ": ", 2);
    err->msg[head + keep] = '\0';
    keep_one_line(err->msg);
    return err->status;
}

void qvl_error_clear(qvl_error *err) {
    if (!err) return;
    err->status = QVL_OK;
    err->msg[0] = '\0';
}
