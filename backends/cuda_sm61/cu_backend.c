/* The cuda_sm61 backend: the ABI side (see qvl/backend.h) — instance, device memory,
 * transfers, accepts() and the op table: the top of the backend's files (cu_device.h draws
 * the layers). Kernels live in cu_*.cu, their host side in cu_ops.c, this backend's limits
 * beyond the op contract in cu_check.c, CUDA graph capture and replay (run_graph) in
 * cu_graph.c with its launch groups in cu_launch_groups.c.
 *
 * One instance drives one device (option `device`, default 0) through one stream; every
 * kernel and every replayed graph is queued on it and synchronize() waits for it. Transfers
 * go through the same stream, and the host memory handed to upload/download may be reused on
 * return: downloads and big uploads wait for their copy (up to CU_STAGING_MAX through a pinned
 * staging buffer, from 2 MiB on in pieces whose host copies, on a few threads, overlap the
 * DMA of the others: a pageable copy costs the driver an extra staging step and a slower
 * path); uploads of at most 4 KiB are copied into a pinned ring and queued without waiting
 * (ring_upload). Host memory from this instance's host_alloc (page-locked) moves by DMA alone.
 *
 * Options: `device` (index, default 0); `graphs` (1 = capture and replay node sequences as
 * CUDA graphs, the default; 0 = plain launches). QVL_CUDA_GRAPHS=0|1 in the environment
 * overrides `graphs` (for A/B benchmarks without editing plugins.yaml). `memory_limit_mib`
 * (a positive integer; absent: none) makes the instance behave as if the device had that much
 * memory: describe() reports it as the total, and allocations past it fail (cu_mem_reserve in
 * cu_device.c says what counts), so one big GPU can stand in for a 2 GiB or 4 GiB card. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_check.h"
#include "cu_device.h"
#include "cu_graph.h"
#include "cu_host_copy.h"
#include "cu_ops.h"

/* cu_probe.cu: runs one tiny kernel and waits for it. */
int cu_probe_kernel(cudaStream_t s);
/* cu_roofline.cu: the QVL_EXT_PROBE extension (a qvl_backend_probe_fn). */
qvl_status cu_probe(qvl_backend *be, size_t bytes, qvl_device_probe *out, qvl_error *err);

static const qvl_backend_iface cu_iface;


static void cu_release(qvl_backend *be) {
    if (!be) return;
    cudaSetDevice(be->device);
    if (be->stream) cudaStreamSynchronize(be->stream);
    cu_graph_cache_free(be);
    for (int i = 0; i < CU_N_SCRATCH; i++) cudaFree(be->scratch[i]);
    if (be->staging) cudaFreeHost(be->staging);
    for (int i = 0; i < CU_STAGING_PIECES; i++)
        if (be->piece_done[i]) cudaEventDestroy(be->piece_done[i]);
    if (be->ring) cudaFreeHost(be->ring);
    for (int i = 0; i < CU_HOST_BLOCKS; i++) /* a caller that broke the contract: no leak */
        if (be->host_blocks[i]) cudaFreeHost(be->host_blocks[i]);
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be->host_i32);
    free(be);
}

/* memory_limit_mib: absent (0: no budget) or a positive whole number of MiB whose bytes fit
 * a size_t. */
static qvl_status parse_mem_limit(const qvl_options *opts, size_t *out, qvl_error *err) {
    const char *v = qvl_options_get(opts, "memory_limit_mib");
    *out = 0;
    if (!v) return QVL_OK;
    char *end = NULL;
    errno = 0;
    long long mib = strtoll(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || !isdigit((unsigned char)v[0]) || mib <= 0 ||
        (unsigned long long)mib > (SIZE_MAX >> 20))
        return qvl_fail(err, QVL_E_INVALID,
                        "cuda_sm61: option memory_limit_mib = '%.32s': expected a positive whole "
                        "number of MiB",
                        v);
    *out = (size_t)mib << 20;
    return QVL_OK;
}

static qvl_status cu_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    *out = NULL;
    long device = 0, graphs = 1;
    qvl_status s = qvl_options_get_int(opts, "device", 0, &device, err);
    if (s == QVL_OK) s = qvl_options_get_int(opts, "graphs", 1, &graphs, err);
    if (s != QVL_OK) return s;
    const char *env = getenv("QVL_CUDA_GRAPHS");
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0)) graphs = env[0] == '1';
    if (graphs != 0 && graphs != 1)
        return qvl_fail(err, QVL_E_INVALID, "cuda_sm61: option graphs = %ld, expected 0 or 1",
                        graphs);
    size_t mem_limit = 0;
    if ((s = parse_mem_limit(opts, &mem_limit, err)) != QVL_OK) return s;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cuda_sm61: no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    if (count < 1)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cuda_sm61: no CUDA device (cudaGetDeviceCount: 0 devices)");
    if (device < 0 || device >= count)
        return qvl_fail(err, QVL_E_INVALID,
                        "cuda_sm61: option device = %ld, but there are %d devices", device, count);
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, (int)device)) != cudaSuccess)
        return cu_cuda_fail(err, e, "cudaGetDeviceProperties");
    if (prop.major < 6 || (prop.major == 6 && prop.minor < 1))
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cuda_sm61: %s has compute capability %d.%d, below the 6.1 it needs",
                        prop.name, prop.major, prop.minor);
    if ((e = cudaSetDevice((int)device)) != cudaSuccess)
        return cu_cuda_fail(err, e, "cudaSetDevice");

    qvl_backend *be = calloc(1, sizeof *be);
    if (!be) return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61: out of memory");
    be->iface = &cu_iface;
    be->device = (int)device;
    be->graphs = graphs == 1;
    be->mem_limit = mem_limit;
    be->sm_count = prop.multiProcessorCount;
    if ((e = cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cu_release(be);
        return cu_cuda_fail(err, e, "cudaStreamCreate");
    }
    /* A build without code for this GPU fails here, cleanly, instead of at the first node. */
    int rc = cu_probe_kernel(be->stream);
    if (rc != 0) {
        cu_release(be);
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "cuda_sm61: %s (sm_%d%d) cannot run this build's kernels: %s", prop.name,
                        prop.major, prop.minor, cudaGetErrorString((cudaError_t)rc));
    }
    *out = be;
    return QVL_OK;
}

static qvl_status cu_describe(qvl_backend *be, qvl_device_info *info) {
    memset(info, 0, sizeof *info);
    struct cudaDeviceProp prop;
    /* The device, then what this instance holds on it: buffers (weights, KV caches, arenas),
     * fused-op scratch and captured graphs. */
    size_t scratch = 0;
    for (int i = 0; i < CU_N_SCRATCH; i++) scratch += be->scratch_bytes[i];
    char dev[64];
    if (cudaGetDeviceProperties(&prop, be->device) == cudaSuccess)
        snprintf(dev, sizeof dev, "%.48s (sm_%d%d)", prop.name, prop.major, prop.minor);
    else
        snprintf(dev, sizeof dev, "CUDA device %d", be->device);
    snprintf(info->name, sizeof info->name,
             "%s; qvl: %.1f MiB in %zu buffers, %.1f MiB scratch, %zu CUDA graphs", dev,
             (double)be->buffer_bytes / (1 << 20), be->n_buffers, (double)scratch / (1 << 20),
             cu_graph_count(be));
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(be->device);
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info->memory_free = free_b;
        info->memory_total = total_b;
    }
    if (be->mem_limit) { /* the budget, never more than the device really has free */
        size_t used = cu_mem_used(be) + CU_UNCOUNTED_RESERVE;
        size_t left = used < be->mem_limit ? be->mem_limit - used : 0;
        info->memory_total = be->mem_limit;
        info->memory_free = left < free_b ? left : free_b;
    }
    info->host_memory = false;
    return QVL_OK;
}


static qvl_status cu_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                  qvl_error *err) {
    void *p = NULL;
    qvl_status s = cu_mem_reserve(be, bytes, 0, "a buffer", err);
    if (s != QVL_OK) return s;
    cudaSetDevice(be->device);
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory error is not sticky: clear it */
        return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61: cannot allocate %zu bytes: %s", bytes,
                        cudaGetErrorString(e));
    }
    out->data = p;
    out->size = bytes;
    out->handle = p;
    be->buffer_bytes += bytes;
    be->n_buffers++;
    return QVL_OK;
}

static void cu_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    if (!buf) return;
    if (buf->handle) {
        cudaSetDevice(be->device);
        cudaStreamSynchronize(be->stream); /* queued kernels may still use it */
        cudaFree(buf->handle);
        be->buffer_bytes -= buf->size <= be->buffer_bytes ? buf->size : be->buffer_bytes;
        if (be->n_buffers) be->n_buffers--;
    }
    memset(buf, 0, sizeof *buf);
}

/* Bigger transfers go direct (weights at load). A 1024x768 picture's pixels (about 19 MB)
 * still go through staging. */
#define CU_STAGING_MAX ((size_t)CU_STAGING_PIECES << 20)
#define CU_PIECE ((size_t)1 << 20) /* a pipelined transfer's pieces */

/* Pinned staging of at least bytes (<= CU_STAGING_MAX), or NULL (then the copy goes direct).
 * Every transfer waits for its copy, so the buffer is free again when this is called. */
static void *staging(qvl_backend *be, size_t bytes) {
    if (bytes > CU_STAGING_MAX) return NULL;
    if (bytes > be->staging_bytes) {
        size_t size = 64u << 10;
        while (size < bytes) size *= 2;
        if (be->staging) cudaFreeHost(be->staging);
        be->staging = NULL;
        be->staging_bytes = 0;
        if (cudaHostAlloc(&be->staging, size, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            be->staging = NULL;
            return NULL;
        }
        be->staging_bytes = size;
    }
    return be->staging;
}

/* Small uploads (a decode step's ids, positions and `at`: three per step) are queued without
 * waiting for them: each is copied into its own slice of a pinned ring and sent from there, and
 * a slice is used again only after the stream has been waited for (every download and
 * synchronize waits; a full ring waits first), so no copy in flight reads a reused slice.
 * Later kernels, downloads and uploads on the stream come after the copy. */
#define CU_RING_BYTES ((size_t)64 << 10)
#define CU_RING_MAX ((size_t)4 << 10) /* bigger uploads take the staging path and wait */

/* Waits for the stream; once it has, every queued upload is done and the ring is free. */
static cudaError_t wait_stream(qvl_backend *be) {
    cudaError_t e = cudaStreamSynchronize(be->stream);
    if (e == cudaSuccess) be->ring_used = 0;
    return e;
}

/* Queues the upload through the ring; false when it is not for the ring (too big, no pinned
 * memory), *e the CUDA status otherwise. */
static bool ring_upload(qvl_backend *be, void *dst, const void *src, size_t bytes,
                        cudaError_t *e) {
    if (bytes > CU_RING_MAX) return false;
    if (!be->ring && cudaHostAlloc(&be->ring, CU_RING_BYTES, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        be->ring = NULL;
        return false;
    }
    size_t slice = (bytes + 15) & ~(size_t)15;
    if (be->ring_used + slice > CU_RING_BYTES && (*e = wait_stream(be)) != cudaSuccess)
        return true;
    unsigned char *at = (unsigned char *)be->ring + be->ring_used;
    memcpy(at, src, bytes);
    *e = cudaMemcpyAsync(dst, at, bytes, cudaMemcpyHostToDevice, be->stream);
    be->ring_used += slice;
    return true;
}

/* A staged transfer of 2 MiB or more, pipelined: its pieces are copied by a few threads
 * (cu_host_copy_pieces), and each piece's DMA is queued as soon as the piece is in pinned
 * memory (up) or its copy starts as soon as its DMA has arrived (down, one event per piece),
 * so the DMA and the host copies overlap instead of following one another. */
typedef struct staged_copy {
    qvl_backend *be;
    unsigned char *pin, *dev;
} staged_copy;

static void staged_thread_start(void *ctx) {
    const staged_copy *c = ctx;
    cudaSetDevice(c->be->device); /* helper threads start on device 0 */
}

static int staged_up_after(void *ctx, size_t off, size_t len) {
    const staged_copy *c = ctx;
    return (int)cudaMemcpyAsync(c->dev + off, c->pin + off, len, cudaMemcpyHostToDevice,
                                c->be->stream);
}

static int staged_down_before(void *ctx, size_t off, size_t len) {
    (void)len;
    const staged_copy *c = ctx;
    return (int)cudaEventSynchronize(c->be->piece_done[off / CU_PIECE]);
}

static bool pipelined(qvl_backend *be, size_t bytes) {
    if (bytes < ((size_t)2 << 20) || bytes > CU_PIECE * CU_STAGING_PIECES) return false;
    for (size_t i = 0; i < (bytes + CU_PIECE - 1) / CU_PIECE; i++) {
        if (be->piece_done[i]) continue;
        if (cudaEventCreateWithFlags(&be->piece_done[i], cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            be->piece_done[i] = NULL;
            return false;
        }
    }
    return true;
}

static cudaError_t staged_up(qvl_backend *be, void *dst, const void *src, size_t bytes,
                             void *pin) {
    if (!pipelined(be, bytes)) {
        cu_host_copy(pin, src, bytes);
        return cudaMemcpyAsync(dst, pin, bytes, cudaMemcpyHostToDevice, be->stream);
    }
    staged_copy c = {be, pin, dst};
    cu_copy_hooks h = {&c, staged_thread_start, NULL, staged_up_after};
    return (cudaError_t)cu_host_copy_pieces(pin, src, bytes, CU_PIECE, &h);
}

/* Queues the pieces' DMAs and events; then copies each piece once it has arrived. */
static cudaError_t staged_down(qvl_backend *be, void *dst, const void *src, size_t bytes,
                               void *pin) {
    if (!pipelined(be, bytes)) {
        cudaError_t e = cudaMemcpyAsync(pin, src, bytes, cudaMemcpyDeviceToHost, be->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
        if (e == cudaSuccess) cu_host_copy(dst, pin, bytes);
        return e;
    }
    for (size_t off = 0; off < bytes; off += CU_PIECE) {
        size_t len = bytes - off < CU_PIECE ? bytes - off : CU_PIECE;
        cudaError_t e = cudaMemcpyAsync((unsigned char *)pin + off, (const unsigned char *)src + off,
                                        len, cudaMemcpyDeviceToHost, be->stream);
        if (e == cudaSuccess) e = cudaEventRecord(be->piece_done[off / CU_PIECE], be->stream);
        if (e != cudaSuccess) return e;
    }
    staged_copy c = {be, pin, NULL};
    cu_copy_hooks h = {&c, staged_thread_start, staged_down_before, NULL};
    return (cudaError_t)cu_host_copy_pieces(dst, pin, bytes, CU_PIECE, &h);
}

/* Extension QVL_EXT_HOST_ALLOC / QVL_EXT_HOST_FREE: page-locked host memory that transfers
 * reach by DMA alone (cu_copy finds it in host_blocks). QVL_CUDA_HOST_ALLOC=0 in the
 * environment hands out none (A/B runs: the callers' malloc'd memory through staging). */
static void *cu_host_alloc(qvl_backend *be, size_t bytes) {
    const char *env = getenv("QVL_CUDA_HOST_ALLOC");
    if (env && strcmp(env, "0") == 0) return NULL;
    for (int i = 0; i < CU_HOST_BLOCKS; i++) {
        if (be->host_blocks[i]) continue;
        cudaSetDevice(be->device);
        void *p = NULL;
        if (bytes == 0 || cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            return NULL;
        }
        be->host_blocks[i] = p;
        be->host_block_bytes[i] = bytes;
        return p;
    }
    return NULL; /* all in use: the caller takes malloc's */
}

static void cu_host_free(qvl_backend *be, void *ptr) {
    for (int i = 0; ptr && i < CU_HOST_BLOCKS; i++) {
        if (be->host_blocks[i] != ptr) continue;
        cudaSetDevice(be->device);
        cudaStreamSynchronize(be->stream); /* a queued copy may still use it */
        cudaFreeHost(ptr);
        be->host_blocks[i] = NULL;
        be->host_block_bytes[i] = 0;
        return;
    }
}

/* Whether [p, p + bytes) lies inside one of the blocks host_alloc handed out. */
static bool in_host_block(const qvl_backend *be, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)p;
    for (int i = 0; i < CU_HOST_BLOCKS; i++) {
        const uintptr_t b = (uintptr_t)be->host_blocks[i];
        if (b && a >= b && a - b <= be->host_block_bytes[i] &&
            bytes <= be->host_block_bytes[i] - (a - b))
            return true;
    }
    return false;
}

static qvl_status cu_copy(qvl_backend *be, void *dst, const void *src, size_t bytes,
                          enum cudaMemcpyKind kind, const char *what, qvl_error *err) {
    if (bytes == 0) return QVL_OK;
    if (!dst || !src)
        return qvl_fail(err, QVL_E_INVALID, "cuda_sm61: %s with a NULL pointer", what);
    cudaError_t e;
    if (kind == cudaMemcpyHostToDevice && ring_upload(be, dst, src, bytes, &e))
        return e == cudaSuccess ? QVL_OK : cu_cuda_fail(err, e, what);
    const bool locked = in_host_block(be, kind == cudaMemcpyHostToDevice ? src : dst, bytes);
    void *pin = locked ? NULL : staging(be, bytes);
    if (pin && kind == cudaMemcpyHostToDevice) {
        e = staged_up(be, dst, src, bytes, pin);
        cudaError_t w = wait_stream(be); /* the pieces queued before an error, too */
        if (e == cudaSuccess) e = w;
    } else if (pin) {
        e = staged_down(be, dst, src, bytes, pin);
        cudaError_t w = wait_stream(be);
        if (e == cudaSuccess) e = w;
    } else {
        e = cudaMemcpyAsync(dst, src, bytes, kind, be->stream);
        if (e == cudaSuccess) e = wait_stream(be);
    }
    if (e != cudaSuccess) return cu_cuda_fail(err, e, what);
    return QVL_OK;
}

static qvl_status cu_upload(qvl_backend *be, void *dst, const void *src_host, size_t bytes,
                            qvl_error *err) {
    return cu_copy(be, dst, src_host, bytes, cudaMemcpyHostToDevice, "upload", err);
}

static qvl_status cu_download(qvl_backend *be, void *dst_host, const void *src, size_t bytes,
                              qvl_error *err) {
    return cu_copy(be, dst_host, src, bytes, cudaMemcpyDeviceToHost, "download", err);
}

static qvl_status cu_synchronize(qvl_backend *be, qvl_error *err) {
    cudaError_t e = wait_stream(be);
    if (e != cudaSuccess) return cu_cuda_fail(err, e, "synchronize");
    return QVL_OK;
}

/* ---- ops ---- */

/* The base dtypes (dtypes all 0: QVL_DTYPES_BASE) wherever the op contract allows them, and
 * the 4-bit formats in every weight slot (and GET_ROWS's table); cu_accepts adds the limits. */
#define CU_WEIGHTS (QVL_DTYPES_BASE | QVL_DTYPE_BIT(QVL_Q4_K) | QVL_DTYPE_BIT(QVL_Q6_K))
static const qvl_op_impl cu_ops[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = {cu_op_get_rows, {CU_WEIGHTS, 0}},          /* table, ids */
    [QVL_OP_MATMUL] = {cu_op_matmul, {0, CU_WEIGHTS, 0}},           /* a, w, bias */
    [QVL_OP_ADD] = {cu_op_add, {0}},
    [QVL_OP_MUL] = {cu_op_mul, {0}},
    [QVL_OP_SCALE] = {cu_op_scale, {0}},
    [QVL_OP_RMS_NORM] = {cu_op_rms_norm, {0}},
    [QVL_OP_LAYER_NORM] = {cu_op_layer_norm, {0}},
    [QVL_OP_ROPE] = {cu_op_rope, {0}},
    [QVL_OP_SOFTMAX] = {cu_op_softmax, {0}},
    [QVL_OP_SILU] = {cu_op_silu, {0}},
    [QVL_OP_GELU_TANH] = {cu_op_gelu_tanh, {0}},
    [QVL_OP_GELU_ERF] = {cu_op_gelu_erf, {0}},
    [QVL_OP_MASK_CAUSAL] = {cu_op_mask_causal, {0}},
    [QVL_OP_MASK_SEGMENTS] = {cu_op_mask_segments, {0}},
    [QVL_OP_VIEW] = {NULL, {0}},
    [QVL_OP_CONT] = {cu_op_cont, {0}},
    [QVL_OP_STORE_ROWS] = {cu_op_store_rows, {0}},
    [QVL_OP_NORM_LINEAR] = {cu_op_norm_linear, {0, 0, 0, CU_WEIGHTS, 0, CU_WEIGHTS, 0, CU_WEIGHTS, 0}},
    [QVL_OP_ATTENTION] = {cu_op_attention, {0}},
    [QVL_OP_MLP_RESIDUAL] = {cu_op_mlp_residual, {0, 0, CU_WEIGHTS}}, /* res, a, w_down */
    [QVL_OP_SET_ROWS] = {cu_op_set_rows, {0}},
    [QVL_OP_ADD_ROWS] = {cu_op_add_rows, {0}},
    [QVL_OP_STORE_ROWS_AT] = {cu_op_store_rows_at, {0}},
    [QVL_OP_STORE_SLOT_ROWS] = {cu_op_store_rows_at, {0}},
    [QVL_OP_ATTENTION_SLOTS] = {cu_op_attention_slots, {0}},
    [QVL_OP_ARGMAX] = {cu_op_argmax, {0}},
    [QVL_OP_MASK_CAUSAL_AT] = {cu_op_mask_causal_at, {0}},
    [QVL_OP_NORM_ROPE] = {cu_op_norm_rope, {0}},
};


/* Extensions by name: the device probe for qvl-bench (cu_roofline.cu), the scratch a node
 * grows for placement (cu_ops.c), page-locked host memory for downloads (above). */
static qvl_proc_fn cu_get_proc_address(const char *name) {
    if (strcmp(name, QVL_EXT_PROBE) == 0) return (qvl_proc_fn)cu_probe;
    if (strcmp(name, QVL_EXT_SCRATCH) == 0) return (qvl_proc_fn)cu_scratch_need;
    if (strcmp(name, QVL_EXT_HOST_ALLOC) == 0) return (qvl_proc_fn)cu_host_alloc;
    if (strcmp(name, QVL_EXT_HOST_FREE) == 0) return (qvl_proc_fn)cu_host_free;
    return NULL;
}

static const qvl_backend_iface cu_iface = {
    .abi = QVL_BACKEND_ABI,
    .name = "cuda_sm61",
    .description = "CUDA kernels for compute capability 6.1 and newer (f32 math, every op)",
    .init = cu_init,
    .release = cu_release,
    .describe = cu_describe,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .buffer_wrap_host = NULL,
    .upload = cu_upload,
    .download = cu_download,
    .synchronize = cu_synchronize,
    .n_ops = QVL_OP_COUNT,
    .ops = cu_ops,
    .accepts = cu_accepts,
    .run_graph = cu_run_graph,
    .get_proc_address = cu_get_proc_address,
};


QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &cu_iface;
}
