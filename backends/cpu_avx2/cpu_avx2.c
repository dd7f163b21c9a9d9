/* The cpu_avx2 backend: AVX2/FMA/F16C kernels on host memory with a persistent thread pool.
 * This file is the backend ABI side (see qvl/backend.h): instance, buffers and the op table;
 * the kernels live in avx_<family>.c.
 *
 * Every node of the base dtypes that the op contract allows is accepted (0 slots in the
 * table), and q4_k / q6_k in the weight slots: strided and permuted inputs of any of them are
 * converted to f32 rows on the way in, so the fast paths are for the common layouts and the
 * rest is correct, not fast. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "avx_common.h"
#include "avx_kernels.h"

#define AVX_ALIGN 64   /* buffers start on a cache line */
#define AVX_MAX_THREADS 64

static qvl_status avx_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    *out = NULL;
    const char *off = getenv("QVL_CPU_AVX2_DISABLE");
    if (off && strcmp(off, "1") == 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cpu_avx2: AVX2/FMA not available (QVL_CPU_AVX2_DISABLE is set)");
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cpu_avx2: AVX2/FMA not available (this CPU lacks AVX2, FMA or F16C)");
    long threads = 0;
    qvl_status s = qvl_options_get_int(opts, "threads", 0, &threads, err);
    if (s != QVL_OK) return qvl_error_prefix(err, "cpu_avx2");
    if (threads < 0 || threads > AVX_MAX_THREADS)
        return qvl_fail(err, QVL_E_INVALID, "cpu_avx2: option threads is %ld, not 0..%d", threads,
                        AVX_MAX_THREADS);
    if (threads == 0) { /* all online CPUs */
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        threads = online < 1 ? 1 : online > AVX_MAX_THREADS ? AVX_MAX_THREADS : online;
    }
    qvl_backend *be = calloc(1, sizeof *be);
    if (!be) return qvl_fail(err, QVL_E_NOMEM, "cpu_avx2: out of memory");
    be->n_threads = (int)threads;
    if (!(be->pool = avx_pool_create(be->n_threads))) {
        free(be);
        return qvl_fail(err, QVL_E_NOMEM, "cpu_avx2: cannot start %ld threads", threads);
    }
    *out = be;
    return QVL_OK;
}

static void avx_release(qvl_backend *be) {
    if (!be) return;
    avx_pool_destroy(be->pool);
    free(be);
}

static uint64_t sysconf_bytes(int pages_name) {
    long pages = sysconf(pages_name), page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page_size;
}

static qvl_status avx_describe(qvl_backend *be, qvl_device_info *info) {
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "x86-64 AVX2/FMA/F16C, %d threads",
             be ? be->n_threads : 0);
    info->memory_total = sysconf_bytes(_SC_PHYS_PAGES);
    info->memory_free = sysconf_bytes(_SC_AVPHYS_PAGES);
    info->host_memory = true;
    return QVL_OK;
}

/* ---- buffers: host memory; handle is the pointer to free, NULL for wrapped memory ---- */

static qvl_status avx_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                   qvl_error *err) {
    (void)be;
    if (bytes > SIZE_MAX - AVX_ALIGN)
        return qvl_fail(err, QVL_E_NOMEM, "cpu_avx2: %zu bytes is too large", bytes);
    /* Large buffers (converted weights, the KV cache) on huge pages (avx_alloc): fewer page
     * faults shorten copying converted weights at load; a long KV cache written in part is
     * resident in whole 2 MiB pages. */
    void *p = avx_alloc(bytes, AVX_ALIGN);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "cpu_avx2: cannot allocate %zu bytes", bytes);
    out->data = p;
    out->size = bytes;
    out->handle = p;
    return QVL_OK;
}

static void avx_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    (void)be;
    if (!buf) return;
    free(buf->handle);
    memset(buf, 0, sizeof *buf);
}

/* Weights mapped from safetensors are used in place: the kernels use unaligned loads, so
 * 2-byte alignment (bf16/f16) is all they need. */
static qvl_status avx_buffer_wrap_host(qvl_backend *be, void *ptr, size_t bytes,
                                       qvl_buffer *out, qvl_error *err) {
    (void)be;
    if (!ptr && bytes > 0)
        return qvl_fail(err, QVL_E_INVALID, "cpu_avx2: cannot wrap a NULL pointer");
    out->data = ptr;
    out->size = bytes;
    out->handle = NULL;
    return QVL_OK;
}

static qvl_status avx_copy(void *dst, const void *src, size_t bytes, const char *what,
                           qvl_error *err) {
    if (bytes == 0) return QVL_OK;
    if (!dst || !src) return qvl_fail(err, QVL_E_INVALID, "cpu_avx2: %s with a NULL pointer", what);
    memmove(dst, src, bytes);
    return QVL_OK;
}

static qvl_status avx_upload(qvl_backend *be, void *dst, const void *src_host, size_t bytes,
                             qvl_error *err) {
    (void)be;
    return avx_copy(dst, src_host, bytes, "upload", err);
}

static qvl_status avx_download(qvl_backend *be, void *dst_host, const void *src, size_t bytes,
                               qvl_error *err) {
    (void)be;
    return avx_copy(dst_host, src, bytes, "download", err);
}

static qvl_status avx_synchronize(qvl_backend *be, qvl_error *err) {
    (void)be;
    (void)err;
    return QVL_OK; /* every kernel has finished (all threads joined the op) when it returns */
}

/* ---- ops ---- */

/* The weight slots (matrix weights and the embedding table) also read q4_k and q6_k:
 * int8 decode kernels and dequantising GEMM panels (avx_kquant.h). */
#define AVX_WEIGHTS (QVL_DTYPES_BASE | QVL_DTYPE_BIT(QVL_Q4_K) | QVL_DTYPE_BIT(QVL_Q6_K))
static const qvl_op_impl avx_ops[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = {avx_get_rows, {AVX_WEIGHTS, 0}},                /* table, ids */
    [QVL_OP_MATMUL] = {avx_matmul, {0, AVX_WEIGHTS, 0}},                 /* a, w, bias */
    [QVL_OP_ADD] = {avx_add, {0}},
    [QVL_OP_MUL] = {avx_mul, {0}},
    [QVL_OP_SCALE] = {avx_scale, {0}},
    [QVL_OP_RMS_NORM] = {avx_rms_norm, {0}},
    [QVL_OP_LAYER_NORM] = {avx_layer_norm, {0}},
    [QVL_OP_ROPE] = {avx_rope, {0}},
    [QVL_OP_SOFTMAX] = {avx_softmax, {0}},
    [QVL_OP_SILU] = {avx_silu, {0}},
    [QVL_OP_GELU_TANH] = {avx_gelu_tanh, {0}},
    [QVL_OP_GELU_ERF] = {avx_gelu_erf, {0}},
    [QVL_OP_MASK_CAUSAL] = {avx_mask_causal, {0}},
    [QVL_OP_MASK_SEGMENTS] = {avx_mask_segments, {0}},
    [QVL_OP_VIEW] = {NULL, {0}},
    [QVL_OP_CONT] = {avx_cont, {0}},
    [QVL_OP_STORE_ROWS] = {avx_store_rows, {0}},
    [QVL_OP_NORM_LINEAR] = {avx_norm_linear, {0, 0, 0, AVX_WEIGHTS, 0, AVX_WEIGHTS, 0, AVX_WEIGHTS, 0}},
    [QVL_OP_ATTENTION] = {avx_attention, {0}},
    [QVL_OP_MLP_RESIDUAL] = {avx_mlp_residual, {0, 0, AVX_WEIGHTS}},     /* res, a, w_down */
    [QVL_OP_SET_ROWS] = {avx_set_rows, {0}},
    [QVL_OP_ADD_ROWS] = {avx_add_rows, {0}},
    [QVL_OP_STORE_ROWS_AT] = {avx_store_rows_at, {0}},
    [QVL_OP_MASK_CAUSAL_AT] = {avx_mask_causal_at, {0}},
    [QVL_OP_NORM_ROPE] = {avx_norm_rope, {0}},
    [QVL_OP_STORE_SLOT_ROWS] = {avx_store_slot_rows, {0}},
    [QVL_OP_ATTENTION_SLOTS] = {avx_attention_slots, {0}},
    [QVL_OP_ARGMAX] = {avx_argmax, {0}},
};

static const qvl_backend_iface avx_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "cpu_avx2",
    .description = "AVX2/FMA/F16C CPU kernels with a thread pool (f32/f16/bf16/q8_0/q4_k/q6_k weights)",
    .init = avx_init,
    .release = avx_release,
    .describe = avx_describe,
    .buffer_alloc = avx_buffer_alloc,
    .buffer_free = avx_buffer_free,
    .buffer_wrap_host = avx_buffer_wrap_host,
    .upload = avx_upload,
    .download = avx_download,
    .synchronize = avx_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = avx_ops,
    .accepts = NULL,
    .run_graph = NULL,
    .get_proc_address = NULL,
};

qvl_status avx_begin(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return qvl_kernel_begin(&avx_iface, be, n, err);
}

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &avx_iface;
}
