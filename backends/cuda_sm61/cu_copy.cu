/* Data movement: GET_ROWS (table lookup), CONT (contiguous copy in the same dtype),
 * STORE_ROWS (the KV-cache write, converting to the cache's dtype), STORE_ROWS_AT (the same
 * write at a row read from device memory, so one launch serves every decode step) and
 * STORE_SLOT_ROWS (each row at its own slot and row, read from device memory). */
#include <string.h>

#include "cu_device.cuh"

__global__ void k_get_rows(cu_view table, cu_view ids, int64_t n, float *out) {
    int64_t D = table.shape[1];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / D, d = e % D;
        int32_t id = ((const int32_t *)ids.data)[r * ids.stride[0]];
        out[e] = cu_load_w(table.data, table.dtype, id * table.stride[0] + d * table.stride[1]);
    }
}

extern "C" int cu_launch_get_rows(cu_stream s, cu_view table, cu_view ids, float *out) {
    int64_t n = ids.shape[0] * table.shape[1];
    k_get_rows<<<cu_blocks_for(n), CU_THREADS, 0, s>>>(table, ids, n, out);
    return (int)cudaGetLastError();
}

/* Elements of 4 or 2 bytes, copied bit for bit. */
template <typename T>
__global__ void k_cont(cu_view x, int64_t n, T *out) {
    const T *in = (const T *)x.data;
    const int kind = cu_flat_kind(x, n);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        out[e] = in[cu_flat_at(x, e, kind)];
}

/* q8_0: every row is whole blocks (checked on the host); copied byte by byte. */
__global__ void k_cont_q8_0(cu_view x, int64_t row_bytes, int64_t n, unsigned char *out) {
    const unsigned char *in = (const unsigned char *)x.data;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / row_bytes, byte = e % row_bytes;
        int64_t first_block = cu_row_offset_unrolled(x, r) / QVL_Q8_0_BLOCK;
        out[e] = in[first_block * (int64_t)sizeof(qvl_block_q8_0) + byte];
    }
}

extern "C" int cu_launch_cont(cu_stream s, cu_view x, void *out) {
    int64_t n = cu_nelem(x);
    if (x.dtype == QVL_Q8_0) {
        int64_t len = x.shape[x.ndim - 1];
        int64_t row_bytes = len / QVL_Q8_0_BLOCK * (int64_t)sizeof(qvl_block_q8_0);
        int64_t bytes = n / len * row_bytes;
        k_cont_q8_0<<<cu_blocks_for(bytes), CU_THREADS, 0, s>>>(x, row_bytes, bytes,
                                                                (unsigned char *)out);
    } else if (x.dtype == QVL_F16 || x.dtype == QVL_BF16) {
        k_cont<uint16_t><<<cu_blocks_for(n), CU_THREADS, 0, s>>>(x, n, (uint16_t *)out);
    } else {
        k_cont<uint32_t><<<cu_blocks_for(n), CU_THREADS, 0, s>>>(x, n, (uint32_t *)out);
    }
    return (int)cudaGetLastError();
}

/* A q8_0 dst is written a block per warp: n, first and the grid stride are multiples of 32
 * (rows are whole blocks, blocks of CU_THREADS threads), so each warp's 32 lanes hold one
 * block's 32 elements and go round the loop together. */
__global__ void k_store_rows(cu_view src, int64_t n, void *dst, int32_t dst_dtype,
                             int64_t first) {
    const int kind = cu_flat_kind(src, n);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        float v = cu_view_load(src, cu_flat_at(src, e, kind));
        if (dst_dtype == QVL_Q8_0) cu_store_q8_0_warp(dst, first + e, v);
        else cu_store(dst, dst_dtype, first + e, v);
    }
}

extern "C" int cu_launch_store_rows(cu_stream s, cu_view src, void *dst, int32_t dst_dtype,
                                    int64_t first_elem) {
    int64_t n = cu_nelem(src);
    k_store_rows<<<cu_blocks_for(n), CU_THREADS, 0, s>>>(src, n, dst, dst_dtype, first_elem);
    return (int)cudaGetLastError();
}

/* The places come from device memory (at, and slot with one): every thread reads its row's,
 * so the host never waits for them. A place out of range writes nothing (the host cannot check
 * it without a sync; ops.h allows a GPU backend to skip the write). Up to two independent
 * jobs per launch (the K and V cache writes of a decode step): the first blocks[0] blocks
 * serve job 0. The source element is loaded before the place is looked at, so the loads
 * overlap. */
struct cu_sra_args {
    cu_store_at_job job[2];
    int n_jobs;
    int64_t blocks[2]; /* per job; job 1's blocks follow job 0's */
};

__global__ void k_store_rows_at(cu_sra_args a) {
    int j = a.n_jobs > 1 && blockIdx.x >= a.blocks[0];
    cu_store_rows_at_part(a.job[j], (int64_t)blockIdx.x - (j ? a.blocks[0] : 0), a.blocks[j]);
}

extern "C" int cu_launch_store_rows_at(cu_stream s, const cu_store_at_job *jobs, int n_jobs) {
    if (n_jobs < 1 || n_jobs > 2) return (int)cudaErrorInvalidConfiguration;
    cu_sra_args a;
    memset(&a, 0, sizeof a);
    a.n_jobs = n_jobs;
    unsigned blocks = 0;
    for (int j = 0; j < n_jobs; j++) {
        a.job[j] = jobs[j];
        a.blocks[j] = cu_blocks_for(cu_nelem(jobs[j].src)) / n_jobs; /* 2 x 65535 fits a grid */
        if (a.blocks[j] < 1) a.blocks[j] = 1;
        blocks += (unsigned)a.blocks[j];
    }
    k_store_rows_at<<<blocks, CU_THREADS, 0, s>>>(a);
    return (int)cudaGetLastError();
}
