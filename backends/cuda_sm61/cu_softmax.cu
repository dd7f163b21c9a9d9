/* SOFTMAX and ARGMAX (one block per row) and the masks (element-wise copies): causal with n_past from
 * the node or, for MASK_CAUSAL_AT, from device memory; segments. */
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

extern "C" int cu_launch_argmax(cu_stream s, cu_view x, int32_t *out) {
    int64_t V = x.shape[x.ndim - 1], rows = 1;
    for (int d = 0; d < x.ndim - 1; d++) rows *= x.shape[d];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    if (rows > 0) k_argmax<<<(unsigned)rows, CU_SOFTMAX_THREADS, 0, s>>>(x, V, out);
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
