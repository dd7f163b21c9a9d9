/* SOFTMAX and ARGMAX (one block per row; ARGMAX of aligned f32 rows with vector loads) and the
 * masks (element-wise copies): causal with n_past from the node or, for MASK_CAUSAL_AT, from
 * device memory; segments. */
#include <stdlib.h>
#include <string.h>

#include "cu_device.cuh"

#define CU_SOFTMAX_THREADS 256

__global__ void k_softmax(cu_view x, int64_t L, float *out) {
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t base = cu_row_offset_unrolled(x, r), step = cu_inner_stride(x);
    float *o = out + r * L;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        float v = cu_view_load(x, base + j * step);
        o[j] = v;
        mx = fmaxf(mx, v);
    }
    mx = cu_block_reduce(mx, true, scratch);
    if (mx == -INFINITY) { /* nothing visible: the row contributes nothing */
        for (int64_t j = threadIdx.x; j < L; j += blockDim.x) o[j] = 0.0f;
        return;
    }
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
        float e = expf(o[j] - mx); /* each thread re-reads only what it wrote itself */
        o[j] = e;
        sum += e;
    }
    float inv = 1.0f / cu_block_reduce(sum, false, scratch);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) o[j] *= inv;
}

/* ARGMAX (ops.h): one block per row; each thread keeps the largest value of its strided share
 * and its first index (and whether it saw a NaN or +inf), then the block keeps the largest,
 * the lower index on ties, through shared memory in a fixed tree. */
__global__ void k_argmax(cu_view x, int64_t V, int32_t *out) {
    __shared__ float best_v[CU_SOFTMAX_THREADS];
    __shared__ int64_t best_i[CU_SOFTMAX_THREADS];
    __shared__ int any_bad;
    int64_t r = blockIdx.x;
    int64_t base = cu_row_offset_unrolled(x, r), step = cu_inner_stride(x);
    if (threadIdx.x == 0) any_bad = 0;
    __syncthreads();
    float bv = -INFINITY;
    int64_t bi = -1;
    bool bad = false;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float v = cu_view_load(x, base + j * step);
        bad |= isnan(v) || v == INFINITY;
        if (v > bv) bv = v, bi = j; /* -inf never counts: bi stays -1 on a row of -inf */
    }
    if (bad) any_bad = 1;
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int half = CU_SOFTMAX_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) {
            float ov = best_v[threadIdx.x + half];
            int64_t oi = best_i[threadIdx.x + half];
            if (oi >= 0 && (best_i[threadIdx.x] < 0 || ov > best_v[threadIdx.x] ||
                            (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x]))) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[r] = any_bad ? -1 : (int32_t)best_i[0];
}

/* ARGMAX over rows of contiguous, 16-byte aligned f32 (a step's logits): one block of
 * CU_ARGMAX_THREADS per row, each thread with CU_ARGMAX_LOADS float4 loads in flight. A decode
 * step runs a few rows of about 150,000 values: with one strided load in flight per thread,
 * as k_argmax has, a row is a chain of hundreds of memory round trips, so the step waited on
 * this one block per row. A thread visits its elements in increasing index order and keeps
 * a value only when it is larger, so on ties it holds its lowest index; the block then keeps
 * the largest, the lower index on ties, as k_argmax does. */
#define CU_ARGMAX_THREADS 1024
#define CU_ARGMAX_LOADS 4

__device__ __forceinline__ void cu_argmax_keep(float v, int64_t j, float &bv, int64_t &bi, bool &bad) {
    bad |= isnan(v) || v == INFINITY;
    if (v > bv) bv = v, bi = j; /* -inf never counts */
}

/* The better of (bv, bi) and (ov, oi): larger value, lower index on ties; -1 holds nothing. */
__device__ __forceinline__ void cu_argmax_merge(float ov, int64_t oi, float &bv, int64_t &bi) {
    if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
}

__global__ void __launch_bounds__(CU_ARGMAX_THREADS)
k_argmax_f32(cu_view x, int64_t V, int32_t *out) {
    __shared__ float warp_v[CU_ARGMAX_THREADS / 32];
    __shared__ int64_t warp_i[CU_ARGMAX_THREADS / 32];
    const int64_t r = blockIdx.x;
    const float *row = (const float *)x.data + cu_row_offset_unrolled(x, r);
    const float4 *row4 = (const float4 *)row; /* 16-byte aligned: checked by the launch */
    const int64_t n4 = V / 4, per_pass = (int64_t)CU_ARGMAX_THREADS * CU_ARGMAX_LOADS;
    float bv = -INFINITY;
    int64_t bi = -1;
    bool bad = false;
    int64_t k0 = threadIdx.x;
    /* Whole passes: every load in range, so all are issued before the first compare. */
    for (; k0 + (CU_ARGMAX_LOADS - 1) * CU_ARGMAX_THREADS < n4; k0 += per_pass) {
        float4 q[CU_ARGMAX_LOADS];
#pragma unroll
        for (int u = 0; u < CU_ARGMAX_LOADS; u++) q[u] = __ldg(row4 + k0 + u * CU_ARGMAX_THREADS);
#pragma unroll
        for (int u = 0; u < CU_ARGMAX_LOADS; u++) {
            const int64_t j = 4 * (k0 + (int64_t)u * CU_ARGMAX_THREADS);
            cu_argmax_keep(q[u].x, j, bv, bi, bad);
            cu_argmax_keep(q[u].y, j + 1, bv, bi, bad);
            cu_argmax_keep(q[u].z, j + 2, bv, bi, bad);
            cu_argmax_keep(q[u].w, j + 3, bv, bi, bad);
        }
    }
    for (; k0 < n4; k0 += CU_ARGMAX_THREADS) { /* the last pass's vectors */
        const float4 q = __ldg(row4 + k0);
        cu_argmax_keep(q.x, 4 * k0, bv, bi, bad);
        cu_argmax_keep(q.y, 4 * k0 + 1, bv, bi, bad);
        cu_argmax_keep(q.z, 4 * k0 + 2, bv, bi, bad);
        cu_argmax_keep(q.w, 4 * k0 + 3, bv, bi, bad);
    }
    for (int64_t j = 4 * n4 + threadIdx.x; j < V; j += CU_ARGMAX_THREADS) /* the last V % 4 */
        cu_argmax_keep(row[j], j, bv, bi, bad);
    const bool any_bad = __syncthreads_or(bad);
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_down_sync(0xffffffffu, bv, off);
        long long oi = __shfl_down_sync(0xffffffffu, (long long)bi, off);
        cu_argmax_merge(ov, (int64_t)oi, bv, bi);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
    __syncthreads();
    if (warp != 0) return;
    bv = warp_v[lane];
    bi = warp_i[lane];
    for (int off = 16; off > 0; off /= 2) {
        float ov = __shfl_down_sync(0xffffffffu, bv, off);
        long long oi = __shfl_down_sync(0xffffffffu, (long long)bi, off);
        cu_argmax_merge(ov, (int64_t)oi, bv, bi);
    }
    if (lane == 0) out[r] = any_bad ? -1 : (int32_t)bi;
}

/* Whether k_argmax_f32 may read x: f32, unit inner stride, every row 16-byte aligned.
 * QVL_CUDA_ARGMAX_VEC=0 in the environment: never (A/B runs; k_argmax then). */
static bool argmax_vector_rows(const cu_view &x) {
    const char *env = getenv("QVL_CUDA_ARGMAX_VEC");
    if (env && strcmp(env, "0") == 0) return false;
    if (x.dtype != QVL_F32 || x.stride[x.ndim - 1] != 1 || ((uintptr_t)x.data & 15u) != 0)
        return false;
    for (int d = 0; d < x.ndim - 1; d++)
        if (x.shape[d] > 1 && x.stride[d] % 4 != 0) return false;
    return true;
}

extern "C" int cu_launch_argmax(cu_stream s, cu_view x, int32_t *out) {
    int64_t V = x.shape[x.ndim - 1], rows = 1;
    for (int d = 0; d < x.ndim - 1; d++) rows *= x.shape[d];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    if (rows > 0 && argmax_vector_rows(x))
        k_argmax_f32<<<(unsigned)rows, CU_ARGMAX_THREADS, 0, s>>>(x, V, out);
    else if (rows > 0)
        k_argmax<<<(unsigned)rows, CU_SOFTMAX_THREADS, 0, s>>>(x, V, out);
    return (int)cudaGetLastError();
}

extern "C" int cu_launch_softmax(cu_stream s, cu_view x, float *out) {
    int64_t L = x.shape[x.ndim - 1], rows = 1;
    for (int d = 0; d < x.ndim - 1; d++) rows *= x.shape[d];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    k_softmax<<<(unsigned)rows, CU_SOFTMAX_THREADS, 0, s>>>(x, L, out);
    return (int)cudaGetLastError();
}

/* Segment of position i: the g with seg[g] <= i < seg[g+1], i.e. the number of bounds
 * seg[1..G] that are <= i (bounds are non-decreasing, checked on the host). */
__device__ __forceinline__ int64_t cu_segment_of(const int32_t *seg, int64_t stride,
                                                 int64_t n_bounds, int64_t i) {
    int64_t lo = 1, hi = n_bounds; /* first g in [1, n_bounds) with seg[g] > i, else n_bounds */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (seg[mid * stride] <= i) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

__global__ void k_mask(cu_view x, int64_t n_past, const int32_t *at, const int32_t *seg,
                       int64_t seg_stride, int64_t n_bounds, int64_t n, float *out) {
    int64_t L = x.shape[x.ndim - 1], N = x.shape[x.ndim - 2];
    if (at) n_past = at[0]; /* MASK_CAUSAL_AT: n_past from device memory */
    const int kind = cu_flat_kind(x, n);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e % L, i = (e / L) % N;
        bool hidden = seg ? cu_segment_of(seg, seg_stride, n_bounds, i) !=
                                cu_segment_of(seg, seg_stride, n_bounds, j)
                          : j > n_past + i;
        out[e] = hidden ? -INFINITY : cu_view_load(x, cu_flat_at(x, e, kind));
    }
}

extern "C" int cu_launch_mask(cu_stream s, cu_view x, int64_t n_past, const int32_t *at,
                              const int32_t *seg, int64_t seg_stride, int64_t n_bounds,
                              float *out) {
    int64_t n = 1;
    for (int d = 0; d < x.ndim; d++) n *= x.shape[d];
    k_mask<<<cu_blocks_for(n), CU_THREADS, 0, s>>>(x, n_past, at, seg, seg_stride, n_bounds, n,
                                                   out);
    return (int)cudaGetLastError();
}
