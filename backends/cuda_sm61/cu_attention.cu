/* ATTENTION with online softmax: one block per (query, head), CU_ATTN_WARPS warps.
 *
 * Each warp walks its share of the visible keys (key j goes to warp j % warps): the lanes
 * split the dot product q . k_j over D and a shuffle reduction gives the score; the warp keeps
 * its own running max m, sum l and output accumulator acc[D] (in shared memory, lanes split
 * D). At the end the warps' partial results are merged with the usual rescaling. The visible
 * keys of a query form one range: [0, L) without a mask, [0, n_past + i] causal, the query's
 * own segment with segments; hidden keys are simply not visited (exp(-inf) = 0), and a query
 * that sees no key gets 0, as softmax of an all -inf row does in the reference. */
#include "cu_device.cuh"

#define CU_ATTN_WARPS 4

/* Segment of position i (see cu_softmax.cu; repeated to keep each file self-contained). */
__device__ __forceinline__ int64_t cu_attn_segment_of(const int32_t *seg, int64_t stride,
                                                      int64_t n_bounds, int64_t i) {
    int64_t lo = 1, hi = n_bounds;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (seg[mid * stride] <= i) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

__global__ void k_attention(cu_view q, cu_view k, cu_view v, float scale, int mask,
                            int64_t n_past, const int32_t *seg, int64_t seg_stride,
                            int64_t n_bounds, float *out) {
    __shared__ float q_s[CU_ATTN_MAX_D];
    __shared__ float acc_s[CU_ATTN_WARPS][CU_ATTN_MAX_D];
    __shared__ float m_s[CU_ATTN_WARPS], l_s[CU_ATTN_WARPS];

    int64_t Hq = q.shape[1], D = q.shape[2], L = k.shape[0], Hkv = k.shape[1];
    int64_t i = blockIdx.x / Hq, h = blockIdx.x % Hq, g = h / (Hq / Hkv);
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;

    int64_t j0 = 0, j1 = L;
    if (mask == QVL_MASK_CAUSAL) {
        j1 = n_past + i + 1 < L ? n_past + i + 1 : L;
    } else if (mask == QVL_MASK_SEGMENTS) {
        int64_t sg = cu_attn_segment_of(seg, seg_stride, n_bounds, i);
        j0 = seg[sg * seg_stride];
        j1 = seg[(sg + 1) * seg_stride];
    }

    int64_t q_base = i * q.stride[0] + h * q.stride[1];
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
        q_s[d] = cu_view_load(q, q_base + d * q.stride[2]);
    for (int64_t d = lane; d < D; d += CU_WARP) acc_s[warp][d] = 0.0f;
    __syncthreads();

    float m = -INFINITY, l = 0.0f;
    for (int64_t j = j0 + warp; j < j1; j += CU_ATTN_WARPS) {
        int64_t k_base = j * k.stride[0] + g * k.stride[1];
        float dot = 0.0f;
        for (int64_t d = lane; d < D; d += CU_WARP)
            dot += q_s[d] * cu_view_load(k, k_base + d * k.stride[2]);
        float sc = cu_warp_sum(dot) * scale;
        if (sc == -INFINITY) continue; /* weight exp(-inf) = 0 */
        float m_new = fmaxf(m, sc);
        float corr = expf(m - m_new); /* 0 while m is still -inf */
        float p = expf(sc - m_new);
        l = l * corr + p;
        m = m_new;
        int64_t v_base = j * v.stride[0] + g * v.stride[1];
        for (int64_t d = lane; d < D; d += CU_WARP)
            acc_s[warp][d] = acc_s[warp][d] * corr + p * cu_view_load(v, v_base + d * v.stride[2]);
    }
    if (lane == 0) {
        m_s[warp] = m;
        l_s[warp] = l;
    }
    __syncthreads();

    float M = -INFINITY;
    for (int w = 0; w < CU_ATTN_WARPS; w++) M = fmaxf(M, m_s[w]);
    float total = 0.0f, weight[CU_ATTN_WARPS];
    for (int w = 0; w < CU_ATTN_WARPS; w++) {
        weight[w] = m_s[w] == -INFINITY ? 0.0f : expf(m_s[w] - M);
        total += l_s[w] * weight[w];
    }
    float *o = out + (i * Hq + h) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float y = 0.0f;
        for (int w = 0; w < CU_ATTN_WARPS; w++) y += acc_s[w][d] * weight[w];
        o[d] = total > 0.0f ? y / total : 0.0f;
    }
}

extern "C" int cu_launch_attention(cu_stream s, cu_view q, cu_view k, cu_view v, float scale,
                                   int mask, int64_t n_past, const int32_t *seg,
                                   int64_t seg_stride, int64_t n_bounds, float *out) {
    int64_t blocks = q.shape[0] * q.shape[1];
    if (q.shape[2] > CU_ATTN_MAX_D || blocks > 0x7fffffff)
        return (int)cudaErrorInvalidConfiguration;
    k_attention<<<(unsigned)blocks, CU_ATTN_WARPS * CU_WARP, 0, s>>>(
        q, k, v, scale, mask, n_past, seg, seg_stride, n_bounds, out);
    return (int)cudaGetLastError();
}
