/* The reference backend: plain scalar C on host memory, the oracle every other backend is
 * compared with. This file is the backend ABI side (see qvl/backend.h): instance, buffers
 * and the op table. The kernels live in ref_<family>.c, one per op (ref_ops.h); each reads
 * every dtype the op contract allows, through qvl/tensor_access.h.
 *
 * Option `fused_ops: false` (plugins.yaml) makes it report every fused op as unsupported:
 * the fusion pass then leaves the graph primitive, which proves that fusion asks the backend
 * and that the model runs on a backend with primitive kernels only. */
#define _DEFAULT_SOURCE /* sysconf(_SC_PHYS_PAGES) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_ops.h"

#define REF_ALIGN 64 /* buffers start on a cache line */

struct qvl_backend {
    bool fused_ops; /* option fused_ops (default true): run fused ops at all */
};

static qvl_status ref_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    *out = NULL;
    bool fused = true;
    if (qvl_options_get_bool(opts, "fused_ops", true, &fused, err) != QVL_OK)
        return qvl_error_prefix(err, "reference");
    qvl_backend *be = calloc(1, sizeof *be);
    if (!be) return qvl_fail(err, QVL_E_NOMEM, "reference: out of memory");
    be->fused_ops = fused;
    *out = be;
    return QVL_OK;
}

static void ref_release(qvl_backend *be) {
    free(be);
}

static uint64_t sysconf_bytes(int pages_name) {
    long pages = sysconf(pages_name), page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page_size;
}

static qvl_status ref_describe(qvl_backend *be, qvl_device_info *info) {
    (void)be;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "reference (scalar C)");
    info->memory_total = sysconf_bytes(_SC_PHYS_PAGES);
    info->memory_free = sysconf_bytes(_SC_AVPHYS_PAGES);
    info->host_memory = true;
    return QVL_OK;
}

/* ---- buffers: host memory; handle is the pointer to free, NULL for wrapped memory ---- */

static qvl_status ref_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                   qvl_error *err) {
    (void)be;
    /* aligned_alloc wants a size that is a multiple of the alignment (and never 0). */
    if (bytes > SIZE_MAX - REF_ALIGN)
        return qvl_fail(err, QVL_E_NOMEM, "reference: %zu bytes is too large", bytes);
    size_t rounded = (bytes + REF_ALIGN - 1) / REF_ALIGN * REF_ALIGN;
    if (rounded == 0) rounded = REF_ALIGN;
    void *p = aligned_alloc(REF_ALIGN, rounded);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "reference: cannot allocate %zu bytes", bytes);
    out->data = p;
    out->size = bytes;
    out->handle = p;
    return QVL_OK;
}

static void ref_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    (void)be;
    if (!buf) return;
    free(buf->handle); /* NULL for wrapped host memory, which the caller owns */
    memset(buf, 0, sizeof *buf);
}

static qvl_status ref_buffer_wrap_host(qvl_backend *be, void *ptr, size_t bytes,
                                       qvl_buffer *out, qvl_error *err) {
    (void)be;
    if (!ptr && bytes > 0)
        return qvl_fail(err, QVL_E_INVALID, "reference: cannot wrap a NULL pointer");
    out->data = ptr;
    out->size = bytes;
    out->handle = NULL;
    return QVL_OK;
}

static qvl_status ref_copy(void *dst, const void *src, size_t bytes, const char *what,
                           qvl_error *err) {
    if (bytes == 0) return QVL_OK;
    if (!dst || !src) return qvl_fail(err, QVL_E_INVALID, "reference: %s with a NULL pointer", what);
    memmove(dst, src, bytes);
    return QVL_OK;
}

static qvl_status ref_upload(qvl_backend *be, void *dst, const void *src_host, size_t bytes,
                             qvl_error *err) {
    (void)be;
    return ref_copy(dst, src_host, bytes, "upload", err);
}

static qvl_status ref_download(qvl_backend *be, void *dst_host, const void *src, size_t bytes,
                               qvl_error *err) {
    (void)be;
    return ref_copy(dst_host, src, bytes, "download", err);
}

static qvl_status ref_synchronize(qvl_backend *be, qvl_error *err) {
    (void)be;
    (void)err;
    return QVL_OK; /* every kernel has finished when it returns */
}

/* ---- ops ---- */

/* Indexed by qvl_op. The base dtypes are read wherever the contract allows them (a 0 slot:
 * QVL_DTYPES_BASE); the weight slots name the 4-bit formats too (read through qvl_elem_get,
 * like every dtype here). VIEW has no kernel: the executor makes the alias. */
#define REF_WEIGHTS (QVL_DTYPES_BASE | QVL_DTYPE_BIT(QVL_Q4_K) | QVL_DTYPE_BIT(QVL_Q6_K))
static const qvl_op_impl ref_ops[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = {ref_get_rows, {REF_WEIGHTS, 0}},                  /* table, ids */
    [QVL_OP_MATMUL] = {ref_matmul, {0, REF_WEIGHTS, 0}},                   /* a, w, bias */
    [QVL_OP_ADD] = {ref_add, {0}},
    [QVL_OP_MUL] = {ref_mul, {0}},
    [QVL_OP_SCALE] = {ref_scale, {0}},
    [QVL_OP_RMS_NORM] = {ref_rms_norm, {0}},
    [QVL_OP_LAYER_NORM] = {ref_layer_norm, {0}},
    [QVL_OP_ROPE] = {ref_rope, {0}},
    [QVL_OP_SOFTMAX] = {ref_softmax, {0}},
    [QVL_OP_SILU] = {ref_silu, {0}},
    [QVL_OP_GELU_TANH] = {ref_gelu_tanh, {0}},
    [QVL_OP_GELU_ERF] = {ref_gelu_erf, {0}},
    [QVL_OP_MASK_CAUSAL] = {ref_mask_causal, {0}},
    [QVL_OP_MASK_SEGMENTS] = {ref_mask_segments, {0}},
    [QVL_OP_VIEW] = {NULL, {0}},
    [QVL_OP_CONT] = {ref_cont, {0}},
    [QVL_OP_STORE_ROWS] = {ref_store_rows, {0}},
    [QVL_OP_NORM_LINEAR] = {ref_norm_linear, {0, 0, 0, REF_WEIGHTS, 0, REF_WEIGHTS, 0, REF_WEIGHTS, 0}},
    [QVL_OP_ATTENTION] = {ref_attention, {0}},
    [QVL_OP_MLP_RESIDUAL] = {ref_mlp_residual, {0, 0, REF_WEIGHTS}},       /* res, a, w_down */
    [QVL_OP_SET_ROWS] = {ref_set_rows, {0}},
    [QVL_OP_ADD_ROWS] = {ref_add_rows, {0}},
    [QVL_OP_STORE_ROWS_AT] = {ref_store_rows_at, {0}},
    [QVL_OP_MASK_CAUSAL_AT] = {ref_mask_causal_at, {0}},
    [QVL_OP_NORM_ROPE] = {ref_norm_rope, {0}},
    [QVL_OP_STORE_SLOT_ROWS] = {ref_store_slot_rows, {0}},
    [QVL_OP_ATTENTION_SLOTS] = {ref_attention_slots, {0}},
    [QVL_OP_ARGMAX] = {ref_argmax, {0}},
};

static qvl_status ref_accepts(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    if (be && !be->fused_ops && qvl_op_is_fused(node->op))
        return qvl_node_fail("reference", node, err, QVL_E_UNSUPPORTED,
                             "fused ops are off (option fused_ops: false)");
    return QVL_OK;
}

static const qvl_backend_iface ref_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "reference",
    .description = "scalar C reference kernels (the oracle: slow, simple, every op)",
    .init = ref_init,
    .release = ref_release,
    .describe = ref_describe,
    .buffer_alloc = ref_buffer_alloc,
    .buffer_free = ref_buffer_free,
    .buffer_wrap_host = ref_buffer_wrap_host,
    .upload = ref_upload,
    .download = ref_download,
    .synchronize = ref_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = ref_ops,
    .accepts = ref_accepts,
    .run_graph = NULL,
    .get_proc_address = NULL,
};

qvl_status ref_begin(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return qvl_kernel_begin(&ref_iface, be, n, err);
}

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &ref_iface;
}
