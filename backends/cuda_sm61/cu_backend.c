/* The cuda_sm61 backend: the ABI side (see qvl/backend.h) — instance, device memory,
 * transfers, supports() and the kernel table. Kernels live in cu_*.cu, their host side in
 * cu_ops.c, their checks (the reference's, plus this backend's limits) in cu_check.c.
 *
 * One instance drives one device (option `device`, default 0) through one stream; every
 * kernel is queued on it and synchronize() waits for it. Transfers go through the same stream
 * and wait for it, so the host memory handed to upload/download may be reused on return. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_backend.h"
#include "cu_check.h"

/* cu_probe.cu: runs one tiny kernel and waits for it. */
int cu_probe_kernel(cudaStream_t s);

qvl_status cu_cuda_fail(qvl_error *err, cudaError_t e, const char *what) {
    return qvl_fail(err, QVL_E_BACKEND, "cuda_sm61: %s: %s", what, cudaGetErrorString(e));
}

static void cu_release(qvl_backend *be) {
    if (!be) return;
    cudaSetDevice(be->device);
    if (be->stream) cudaStreamSynchronize(be->stream);
    for (int i = 0; i < CU_N_SCRATCH; i++) cudaFree(be->scratch[i]);
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be->host_i32);
    free(be);
}

static qvl_status cu_init(const qvl_options *opts, qvl_backend **out, qvl_error *err) {
    *out = NULL;
    long device = 0;
    qvl_status s = qvl_options_get_int(opts, "device", 0, &device, err);
    if (s != QVL_OK) return s;
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
    be->device = (int)device;
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
    if (cudaGetDeviceProperties(&prop, be->device) == cudaSuccess)
        snprintf(info->name, sizeof info->name, "%.100s (sm_%d%d)", prop.name, prop.major,
                 prop.minor);
    else
        snprintf(info->name, sizeof info->name, "CUDA device %d", be->device);
    size_t free_b = 0, total_b = 0;
    cudaSetDevice(be->device);
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        info->memory_free = free_b;
        info->memory_total = total_b;
    }
    info->host_memory = false;
    return QVL_OK;
}

qvl_status cu_scratch(qvl_backend *be, int slot, size_t bytes, void **out, qvl_error *err) {
    if (bytes > be->scratch_bytes[slot]) {
        /* The old scratch may still be read by queued kernels: wait before freeing it. */
        cudaError_t e = cudaStreamSynchronize(be->stream);
        if (e != cudaSuccess) return cu_cuda_fail(err, e, "synchronize before growing scratch");
        cudaFree(be->scratch[slot]);
        be->scratch[slot] = NULL;
        be->scratch_bytes[slot] = 0;
        if ((e = cudaMalloc(&be->scratch[slot], bytes)) != cudaSuccess) {
            be->scratch[slot] = NULL;
            return qvl_fail(err, QVL_E_NOMEM, "cuda_sm61: cannot allocate %zu bytes of scratch: %s",
                            bytes, cudaGetErrorString(e));
        }
        be->scratch_bytes[slot] = bytes;
    }
    *out = be->scratch[slot];
    return QVL_OK;
}

static qvl_status cu_buffer_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out,
                                  qvl_error *err) {
    void *p = NULL;
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
    return QVL_OK;
}

static void cu_buffer_free(qvl_backend *be, qvl_buffer *buf) {
    if (!buf) return;
    if (buf->handle) {
        cudaSetDevice(be->device);
        cudaStreamSynchronize(be->stream); /* queued kernels may still use it */
        cudaFree(buf->handle);
    }
    memset(buf, 0, sizeof *buf);
}

static qvl_status cu_copy(qvl_backend *be, void *dst, const void *src, size_t bytes,
                          enum cudaMemcpyKind kind, const char *what, qvl_error *err) {
    if (bytes == 0) return QVL_OK;
    if (!dst || !src)
        return qvl_fail(err, QVL_E_INVALID, "cuda_sm61: %s with a NULL pointer", what);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
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
    cudaError_t e = cudaStreamSynchronize(be->stream);
    if (e != cudaSuccess) return cu_cuda_fail(err, e, "synchronize");
    return QVL_OK;
}

/* ---- ops ---- */

static const qvl_kernel_fn cu_kernels[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = cu_op_get_rows,
    [QVL_OP_MATMUL] = cu_op_matmul,
    [QVL_OP_ADD] = cu_op_add,
    [QVL_OP_MUL] = cu_op_mul,
    [QVL_OP_SCALE] = cu_op_scale,
    [QVL_OP_RMS_NORM] = cu_op_rms_norm,
    [QVL_OP_LAYER_NORM] = cu_op_layer_norm,
    [QVL_OP_ROPE] = cu_op_rope,
    [QVL_OP_SOFTMAX] = cu_op_softmax,
    [QVL_OP_SILU] = cu_op_silu,
    [QVL_OP_GELU_TANH] = cu_op_gelu_tanh,
    [QVL_OP_GELU_ERF] = cu_op_gelu_erf,
    [QVL_OP_MASK_CAUSAL] = cu_op_mask_causal,
    [QVL_OP_MASK_SEGMENTS] = cu_op_mask_segments,
    [QVL_OP_VIEW] = NULL,
    [QVL_OP_CONT] = cu_op_cont,
    [QVL_OP_STORE_ROWS] = cu_op_store_rows,
    [QVL_OP_NORM_LINEAR] = cu_op_norm_linear,
    [QVL_OP_ATTENTION] = cu_op_attention,
    [QVL_OP_MLP_RESIDUAL] = cu_op_mlp_residual,
    [QVL_OP_SET_ROWS] = cu_op_set_rows,
    [QVL_OP_ADD_ROWS] = cu_op_add_rows,
};

/* The reference checks, plus this backend's own limits for matmul and attention. */
static ref_check_fn cu_check_for(const qvl_node *node) {
    if (node && node->op == QVL_OP_MATMUL) return cu_check_matmul;
    if (node && node->op == QVL_OP_ATTENTION) return cu_check_attention;
    return ref_check_for(node);
}

static bool cu_supports(qvl_backend *be, const qvl_node *node) {
    (void)be;
    ref_check_fn check = cu_check_for(node);
    return check && check(node, NULL) == QVL_OK;
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
    .supports = cu_supports,
    .run_graph = NULL,
    .n_kernels = QVL_OP_COUNT,
    .kernels = cu_kernels,
};

QVL_EXPORT const qvl_backend_iface *qvl_backend_entry(void) {
    return &cu_iface;
}
