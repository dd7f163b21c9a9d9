/* The minimal backend: written by following docs/writing-a-backend.md and nothing else, to
 * prove that the document is enough. Host memory, the primitive ops only (no fused op: the
 * fusion pass asks and leaves the graphs primitive), f32 arithmetic in plain loops.
 *
 * This file is the plugin side: the op table, the instance, memory and the one exported
 * symbol. The kernels are in minimal_kernels.c; each starts with qvl_kernel_begin (the op
 * contract, this table, memory present), so it meets only well-formed nodes, and checks the
 * values that are data (ids, segment bounds, `at`) with core's qvl_check_indices,
 * qvl_check_segments and qvl_check_at, which refuse bad ones the way qvl_node_fail words it.
 * q8_0 is deliberately absent from the table: a q8_0 graph is refused, naming the slot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minimal.h"

struct qvl_backend {
    int unused; /* no state: every kernel works on what the node gives it */
};

/* ---- the op table: a kernel per op, and the dtypes each input slot is read in ---- */

#define F32 QVL_DTYPE_BIT(QVL_F32)
#define I32 QVL_DTYPE_BIT(QVL_I32)
#define FLOATS (QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_F16) | QVL_DTYPE_BIT(QVL_BF16))

static const qvl_op_impl min_ops[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = {k_get_rows, {FLOATS, I32}},
    [QVL_OP_MATMUL] = {k_matmul, {F32, FLOATS, FLOATS}},
    [QVL_OP_ADD] = {k_add, {F32, F32}},
    [QVL_OP_MUL] = {k_mul, {F32, F32}},
    [QVL_OP_SCALE] = {k_scale, {F32}},
    [QVL_OP_RMS_NORM] = {k_rms_norm, {F32, FLOATS}},
    [QVL_OP_LAYER_NORM] = {k_layer_norm, {F32, FLOATS, FLOATS}},
    [QVL_OP_ROPE] = {k_rope, {F32, I32}},
    [QVL_OP_SOFTMAX] = {k_softmax, {F32}},
    [QVL_OP_SILU] = {k_silu, {F32}},
    [QVL_OP_GELU_TANH] = {k_gelu_tanh, {F32}},
    [QVL_OP_GELU_ERF] = {k_gelu_erf, {F32}},
    [QVL_OP_MASK_CAUSAL] = {k_mask_causal, {F32}},
    [QVL_OP_MASK_SEGMENTS] = {k_mask_segments, {F32, I32}},
    [QVL_OP_CONT] = {k_cont, {FLOATS}},
    [QVL_OP_STORE_ROWS] = {k_store_rows, {FLOATS, F32}},
    [QVL_OP_SET_ROWS] = {k_set_rows, {F32, I32, F32}},
    [QVL_OP_ADD_ROWS] = {k_add_rows, {F32, I32, F32}},
    [QVL_OP_STORE_ROWS_AT] = {k_store_rows_at, {FLOATS, F32, I32}},
    [QVL_OP_MASK_CAUSAL_AT] = {k_mask_causal_at, {F32, I32}},
    /* VIEW never reaches a kernel; the fused ops are not offered. */
};

/* ---- instance and memory: plain host memory ---- */

static qvl_status min_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    (void)opts; /* no options of its own (`weights:` is read by the model, not by us) */
    *out = calloc(1, sizeof **out);
    return *out ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, NAME ": out of memory");
}

static void min_release(qvl_backend *be) {
    free(be);
}

static qvl_status min_describe(qvl_backend *be, qvl_device_info *info) {
    (void)be;
    memset(info, 0, sizeof *info); /* memory sizes 0: unknown */
    snprintf(info->name, sizeof info->name, "host (minimal f32 loops)");
    info->host_memory = true;
    return QVL_OK;
}

static qvl_status min_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                   qvl_error *err) {
    (void)be;
    void *p = malloc(bytes ? bytes : 1); /* contents undefined, as the ABI allows */
    if (!p) return qvl_fail(err, QVL_E_NOMEM, NAME ": cannot allocate %zu bytes", bytes);
    *out = (qvl_buffer){.data = p, .size = bytes, .handle = p};
    return QVL_OK;
}

static void min_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    (void)be;
    free(buf->handle);
    *buf = (qvl_buffer){0};
}

static qvl_status min_upload(qvl_backend *be, void *dst, const void *src, size_t bytes,
                             qvl_error *err) {
    (void)be;
    (void)err;
    if (bytes) memcpy(dst, src, bytes);
    return QVL_OK;
}

static qvl_status min_download(qvl_backend *be, void *dst, const void *src, size_t bytes,
                               qvl_error *err) {
    return min_upload(be, dst, src, bytes, err);
}

static qvl_status min_synchronize(qvl_backend *be, qvl_error *err) {
    (void)be;
    (void)err;
    return QVL_OK; /* kernels finish before they return */
}

static const qvl_backend_iface min_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = NAME,
    .description = "minimal host backend from docs/writing-a-backend.md (primitive ops, f32)",
    .init = min_init,
    .release = min_release,
    .describe = min_describe,
    .buffer_alloc = min_buffer_alloc,
    .buffer_free = min_buffer_free,
    .buffer_wrap_host = NULL, /* weights are copied into our buffers */
    .upload = min_upload,
    .download = min_download,
    .synchronize = min_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = min_ops,
    .accepts = NULL,
    .run_graph = NULL,
    .get_proc_address = NULL,
};

qvl_status min_begin(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return qvl_kernel_begin(&min_iface, be, node, err);
}

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &min_iface;
}
