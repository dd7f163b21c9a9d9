/* A minimal valid backend for the registry tests: host-memory buffers, no kernels.
 * Options: `fail: 1` makes init fail with a message, `fail: 2` without one (the registry must
 * still say what happened); `label: X` shows up in describe(). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/backend_helpers.h"

struct qvl_backend {
    char label[64];
};

static qvl_status dummy_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    long fail = 0;
    qvl_status st = qvl_options_get_int(opts, "fail", 0, &fail, err);
    if (st != QVL_OK) return st;
    if (fail == 2) return QVL_E_BACKEND;
    if (fail)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "dummy refuses to start (option fail: %ld)",
                        fail);
    qvl_backend *be = calloc(1, sizeof *be);
    if (!be) return qvl_fail(err, QVL_E_NOMEM, "dummy: out of memory");
    const char *label = qvl_options_get(opts, "label");
    snprintf(be->label, sizeof be->label, "%s", label ? label : "plain");
    *out = be;
    return QVL_OK;
}

static void dummy_release(qvl_backend *be) { free(be); }

static qvl_status dummy_describe(qvl_backend *be, qvl_device_info *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "dummy %s", be->label);
    info->host_memory = true;
    return QVL_OK;
}

static qvl_status dummy_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                     qvl_error *err) {
    (void)be;
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) return qvl_fail(err, QVL_E_NOMEM, "dummy: cannot allocate %zu bytes", bytes);
    out->size = bytes;
    out->handle = NULL;
    return QVL_OK;
}

static void dummy_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    (void)be;
    free(buf->data);
    buf->data = NULL;
    buf->size = 0;
}

static qvl_status dummy_upload(qvl_backend *be, void *dst, const void *src, size_t bytes,
                               qvl_error *err) {
    (void)be;
    (void)err;
    memcpy(dst, src, bytes);
    return QVL_OK;
}

static qvl_status dummy_download(qvl_backend *be, void *dst, const void *src, size_t bytes,
                                 qvl_error *err) {
    (void)be;
    (void)err;
    memcpy(dst, src, bytes);
    return QVL_OK;
}

static qvl_status dummy_synchronize(qvl_backend *be, qvl_error *err) {
    (void)be;
    (void)err;
    return QVL_OK;
}

static const qvl_op_impl dummy_ops[QVL_OP_COUNT]; /* all NULL: no op supported */

static const qvl_backend_iface dummy_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "dummy",
    .description = "registry test backend (no kernels)",
    .init = dummy_init,
    .release = dummy_release,
    .describe = dummy_describe,
    .buffer_alloc = dummy_buffer_alloc,
    .buffer_free = dummy_buffer_free,
    .upload = dummy_upload,
    .download = dummy_download,
    .synchronize = dummy_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = dummy_ops,
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) { return &dummy_iface; }
