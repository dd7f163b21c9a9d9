/* A test plugin that stands in for a small GPU on a machine without one: it loads another
 * plugin (option `inner`: its library's path, the reference in the tests) and runs everything
 * there, but says it is a device (host_memory false, so qvl moves data through upload and
 * download) with a budget of its own (option `memory_limit_mib`, or `memory_limit_kib` for
 * the tiny fixtures): describe() reports the budget as the total and the budget less what
 * its buffers hold as free, and a buffer past the budget is refused, as cuda_sm61's
 * memory_limit_mib does. With option `scratch_per_row` (bytes) it also answers the scratch
 * extension (QVL_EXT_SCRATCH) for matmuls and fused norm+linear nodes: that many bytes per
 * row of their input, in slot 0, so placement's count of a backend's scratch can be checked.
 *
 * The instance qvl sees is the inner plugin's own (kernels receive it unchanged); what this
 * plugin keeps per instance sits in a small table keyed by it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/backend.h"
#include "qvl/backend_helpers.h"
#include "qvl/tensor_access.h"

#define MAX_INSTANCES 16

typedef struct instance {
    qvl_backend *be; /* the inner plugin's */
    size_t limit, used, scratch_per_row;
} instance;

static const qvl_backend_iface *inner;
static void *inner_lib;
static instance instances[MAX_INSTANCES];
static qvl_op_impl no_ops[QVL_OP_COUNT]; /* until init: the inner plugin's table is not known */
static qvl_backend_iface mf_iface;

static instance *find(const qvl_backend *be) {
    for (int i = 0; i < MAX_INSTANCES; i++)
        if (be && instances[i].be == be) return &instances[i];
    return NULL;
}

static qvl_status load_inner(const char *path, qvl_error *err) {
    if (inner) return QVL_OK;
    if (!path) return qvl_fail(err, QVL_E_INVALID, "memfree: option inner (a plugin's path) is missing");
    inner_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    qvl_backend_entry_fn entry =
        inner_lib ? (qvl_backend_entry_fn)dlsym(inner_lib, QVL_BACKEND_ENTRY_SYMBOL) : NULL;
    inner = entry ? entry() : NULL;
    if (!inner || inner->abi != QVL_BACKEND_ABI)
        return qvl_fail(err, QVL_E_INVALID, "memfree: cannot load inner plugin %s", path);
    mf_iface.n_ops = inner->n_ops;
    mf_iface.ops = inner->ops;
    mf_iface.accepts = inner->accepts;
    return QVL_OK;
}

static qvl_status mf_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    long mib = 0, kib = 0, per_row = 0;
    qvl_status s = qvl_options_get_int(opts, "memory_limit_mib", 0, &mib, err);
    if (s == QVL_OK) s = qvl_options_get_int(opts, "memory_limit_kib", 0, &kib, err);
    if (s == QVL_OK) s = qvl_options_get_int(opts, "scratch_per_row", 0, &per_row, err);
    if (s == QVL_OK) s = load_inner(qvl_options_get(opts, "inner"), err);
    if (s != QVL_OK) return s;
    instance *slot = find(NULL);
    for (int i = 0; !slot && i < MAX_INSTANCES; i++)
        if (!instances[i].be) slot = &instances[i];
    if (!slot) return qvl_fail(err, QVL_E_LIMIT, "memfree: too many instances");
    qvl_options none = {0, NULL, NULL}; /* the inner plugin gets its defaults */
    if ((s = inner->init(&none, out, err)) != QVL_OK) return s;
    *slot = (instance){*out, (size_t)mib << 20 | (size_t)kib << 10, 0, (size_t)per_row};
    return QVL_OK;
}

static void mf_release(qvl_backend *be) {
    instance *in = find(be);
    if (in) memset(in, 0, sizeof *in);
    inner->release(be);
}

static qvl_status mf_describe(qvl_backend *be, qvl_device_info *info) {
    memset(info, 0, sizeof *info);
    const instance *in = find(be);
    snprintf(info->name, sizeof info->name, "memfree over %s", inner->name);
    info->memory_total = in ? in->limit : 0;
    info->memory_free = in && in->used < in->limit ? in->limit - in->used : 0;
    info->host_memory = false;
    return QVL_OK;
}

static qvl_status mf_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                  qvl_error *err) {
    instance *in = find(be);
    if (in && in->limit && bytes > in->limit - (in->used < in->limit ? in->used : in->limit))
        return qvl_fail(err, QVL_E_NOMEM, "memfree: a buffer of %zu bytes does not fit the budget",
                        bytes);
    qvl_status s = inner->buffer_alloc(be, bytes, out, err);
    if (s == QVL_OK && in) in->used += out->size;
    return s;
}

static void mf_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    instance *in = find(be);
    if (in && buf && buf->data) in->used -= buf->size < in->used ? buf->size : in->used;
    inner->buffer_free(be, buf);
}

static qvl_status mf_upload(qvl_backend *be, void *dst, const void *src, size_t bytes,
                            qvl_error *err) {
    return inner->upload(be, dst, src, bytes, err);
}

static qvl_status mf_download(qvl_backend *be, void *dst, const void *src, size_t bytes,
                              qvl_error *err) {
    return inner->download(be, dst, src, bytes, err);
}

static qvl_status mf_synchronize(qvl_backend *be, qvl_error *err) {
    return inner->synchronize(be, err);
}

static void mf_scratch(qvl_backend *be, const qvl_node *node, size_t slot_bytes[QVL_SCRATCH_SLOTS]) {
    const instance *in = find(be);
    if (!in || (node->op != QVL_OP_MATMUL && node->op != QVL_OP_NORM_LINEAR) || !node->src[0])
        return;
    size_t need = (size_t)qvl_desc_n_rows(&node->src[0]->desc) * in->scratch_per_row;
    if (need > slot_bytes[0]) slot_bytes[0] = need;
}

static qvl_proc_fn mf_get_proc_address(const char *name) {
    if (strcmp(name, QVL_EXT_SCRATCH) == 0) return (qvl_proc_fn)mf_scratch;
    return inner && inner->get_proc_address ? inner->get_proc_address(name) : NULL;
}

static qvl_backend_iface mf_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "memfree",
    .description = "test plugin: another plugin's kernels behind a device-like memory budget",
    .init = mf_init,
    .release = mf_release,
    .describe = mf_describe,
    .buffer_alloc = mf_buffer_alloc,
    .buffer_free = mf_buffer_free,
    .upload = mf_upload,
    .download = mf_download,
    .synchronize = mf_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = no_ops,
    .get_proc_address = mf_get_proc_address,
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) { return &mf_iface; }
