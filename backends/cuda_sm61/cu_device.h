/* The cuda_sm61 backend's private state and the device helpers every layer of it uses
 * (cu_device.c). The bottom of the backend's files: it includes nothing of them.
 *
 *   cu_backend.c (the ABI table, init, buffers, transfers)
 *     -> cu_graph.c (run_graph: capture and replay) -> cu_launch_groups.c -> cu_ops.c
 *     -> cu_ops.c (host side of every kernel) -> cu_check.c, cu_kernels.h (the .cu launches)
 *     -> cu_device.c (this header) */
#ifndef QVL_CU_DEVICE_H
#define QVL_CU_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qvl/backend_helpers.h"

/* Scratch buffers the kernels need between their steps (device memory, grown on demand):
 * A the normed rows of NORM_LINEAR, B the activations of MLP_RESIDUAL, C the split-KV
 * partials of ATTENTION, Q8 the int8-quantised activations of q8_0 GEMVs. */
enum { CU_SCRATCH_A = 0, CU_SCRATCH_B = 1, CU_SCRATCH_C = 2, CU_SCRATCH_Q8 = 3, CU_N_SCRATCH = 4 };

typedef struct cu_graph_cache cu_graph_cache; /* cu_graph.c */

/* Pieces of a staged transfer that is pipelined (cu_backend.c): CU_STAGING_MAX / 1 MiB. */
#define CU_STAGING_PIECES 32
/* Blocks of page-locked host memory callers may hold at once (extension QVL_EXT_HOST_ALLOC):
 * a model's logits buffers, a few per instance. */
#define CU_HOST_BLOCKS 8

struct qvl_backend {
    const qvl_backend_iface *iface; /* this backend's table: kernels check nodes against it */
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
    cudaEvent_t piece_done[CU_STAGING_PIECES]; /* a staged download's pieces (NULL until used) */
    void *host_blocks[CU_HOST_BLOCKS]; /* page-locked memory handed out by host_alloc (NULL: free) */
    size_t host_block_bytes[CU_HOST_BLOCKS];
    void *ring;        /* pinned slices of queued small uploads (cu_backend.c; NULL until used) */
    size_t ring_used;  /* bytes of it handed out since the stream was last waited for */
    size_t buffer_bytes, n_buffers; /* device memory handed out by buffer_alloc */
    size_t mem_limit; /* option memory_limit_mib in bytes; 0: no budget but the device's own */
    bool graphs;                    /* run_graph captures and replays (option `graphs`) */
    cu_graph_cache *graphs_cache;
};

/* "cuda_sm61: <what>: <cudaGetErrorString>" as a QVL_E_BACKEND failure. */
qvl_status cu_cuda_fail(qvl_error *err, cudaError_t e, const char *what);

/* Device scratch slot of at least bytes (the old contents are not kept). */
qvl_status cu_scratch(qvl_backend *be, int slot, size_t bytes, void **out, qvl_error *err);

/* The device-memory budget (option memory_limit_mib). What this instance holds on the device
 * and counts against it: buffers, scratch, and CU_UNCOUNTED_RESERVE for what the runtime
 * allocates on its behalf without saying how much: the context's own memory, the kernels'
 * module images, local memory (stack) the driver sizes per launch, instantiated CUDA graphs.
 * None of those can be read per process through the runtime API (cudaMemGetInfo is the whole
 * device's, other processes included), so a fixed estimate stands in for them (an estimate,
 * not a per-card measurement; docs/BENCHMARKS.md gives what a context took where measured).
 * Pinned host memory (staging, ring) is host memory and not counted. */
#define CU_UNCOUNTED_RESERVE ((size_t)96 << 20)
size_t cu_mem_used(const qvl_backend *be);
/* QVL_OK when `bytes` more (after `releasing` bytes this instance frees first) fit the budget;
 * otherwise QVL_E_NOMEM and one line: what did not fit, how much was asked, how much of the
 * budget is free, and the option / flag to raise. */
qvl_status cu_mem_reserve(const qvl_backend *be, size_t bytes, size_t releasing, const char *what,
                          qvl_error *err);

#endif
