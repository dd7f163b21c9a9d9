/* The cuda_sm61 backend's private state and the host side of its kernels (cu_ops.c). */
#ifndef QVL_CU_BACKEND_H
#define QVL_CU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qvl/backend.h"

/* Scratch buffers the fused ops need between their steps (device memory, grown on demand). */
enum { CU_SCRATCH_A = 0, CU_SCRATCH_B = 1, CU_N_SCRATCH = 2 };

struct qvl_backend {
    int device;
    cudaStream_t stream;
    void *scratch[CU_N_SCRATCH];
    size_t scratch_bytes[CU_N_SCRATCH];
    int32_t *host_i32; /* pinned-free host copy of ids / segment bounds checked before use */
    size_t host_i32_count;
};

/* "cuda_sm61: <what>: <cudaGetErrorString>" as a QVL_E_BACKEND failure. */
qvl_status cu_cuda_fail(qvl_error *err, cudaError_t e, const char *what);

/* Device scratch slot of at least bytes (the old contents are not kept). */
qvl_status cu_scratch(qvl_backend *be, int slot, size_t bytes, void **out, qvl_error *err);

/* The kernels, one per op (VIEW has none). Each starts by running its check. */
qvl_status cu_op_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_add(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_scale(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_silu(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_cont(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_attention(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);

#endif
