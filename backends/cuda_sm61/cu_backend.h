/* The cuda_sm61 backend's private state and the host side of its kernels (cu_ops.c). */
#ifndef QVL_CU_BACKEND_H
#define QVL_CU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qvl/backend.h"

/* Scratch buffers the kernels need between their steps (device memory, grown on demand):
 * A the normed rows of NORM_LINEAR, B the activations of MLP_RESIDUAL, C the split-KV
 * partials of ATTENTION, Q8 the int8-quantised activations of q8_0 GEMVs. */
enum { CU_SCRATCH_A = 0, CU_SCRATCH_B = 1, CU_SCRATCH_C = 2, CU_SCRATCH_Q8 = 3, CU_N_SCRATCH = 4 };

typedef struct cu_graph_cache cu_graph_cache; /* cu_graph.c */

struct qvl_backend {
    int device;
    int sm_count; /* multiprocessors, to size grids that loop */
    cudaStream_t stream;
    void *scratch[CU_N_SCRATCH];
    size_t scratch_bytes[CU_N_SCRATCH];
    uint64_t scratch_gen; /* bumped whenever a scratch slot moves (captured graphs go stale) */
    int32_t *host_i32; /* host copy of ids / segment bounds checked before use */
    size_t host_i32_count;
    void *staging; /* pinned host memory for small transfers (NULL until first needed) */
    size_t staging_bytes;
    void *ring;        /* pinned slices of queued small uploads (cu_backend.c; NULL until used) */
    size_t ring_used;  /* bytes of it handed out since the stream was last waited for */
    size_t buffer_bytes, n_buffers; /* device memory handed out by buffer_alloc */
    bool graphs;                    /* run_graph captures and replays (option `graphs`) */
    cu_graph_cache *graphs_cache;
};

/* The kernel of op, NULL when there is none (the ABI's table, for run_graph). */
qvl_kernel_fn cu_kernel_for(qvl_op op);

/* cu_graph.c: the run_graph entry, its cache's release, and how many graphs it holds. */
qvl_status cu_run_graph(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                        qvl_error *err);
void cu_graph_cache_free(qvl_backend *be);
size_t cu_graph_count(const qvl_backend *be);

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
qvl_status cu_op_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* Two nodes of the same small op (NORM_ROPE, STORE_ROWS_AT) that do not touch each other's
 * outputs, as one launch (run_graph pairs the q/k rotations and the K/V cache writes). */
bool cu_pairable(const qvl_node *a, const qvl_node *b);
qvl_status cu_run_pair(qvl_backend *be, const qvl_node *a, const qvl_node *b, qvl_error *err);
/* A decode step's [NORM_ROPE, NORM_ROPE, STORE_ROWS_AT of one's output, independent
 * STORE_ROWS_AT] (n[0..3]): q and k rotated, K and V cached, in one launch. */
bool cu_rope_store_group(const qvl_node *const *n);
qvl_status cu_run_rope_store_group(qvl_backend *be, const qvl_node *const *n, qvl_error *err);
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
qvl_status cu_op_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err);

#endif
