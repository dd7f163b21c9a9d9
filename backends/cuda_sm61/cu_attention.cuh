/* What the attention kernels share (cu_attention.cu, cu_attention_flash.cu): the job, and the
 * range of keys a query sees under each mask. */
#ifndef QVL_CU_ATTENTION_CUH
#define QVL_CU_ATTENTION_CUH

#include "cu_device.cuh"

/* One ATTENTION node: q [N, Hq, D], k and v [L, Hkv, D] (any dtype, strided), out [N, Hq, D]
 * f32; mask, n_past, at (CAUSAL_AT: n_past read from device memory) and seg as for
 * cu_launch_attention. */
struct cu_attn_job {
    cu_view q, k, v;
    float scale;
    int mask;
    int64_t n_past;
    const int32_t *at;
    const int32_t *seg;
    int64_t seg_stride, n_bounds;
    float *out;
};

/* Segment of position i (the bounds are validated on the host). */
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

/* The keys [*j0, *j1) query i sees, within [0, L): all of them without a mask, [0, n_past +
 * i] causal, its own segment with segments; empty for i >= N (a block's spare rows). */
__device__ __forceinline__ void cu_attn_range(const cu_attn_job &p, int64_t i, int64_t N,
                                              int64_t L, int64_t *j0, int64_t *j1) {
    int64_t a = 0, b = L;
    if (i >= N) {
        b = 0;
    } else if (p.mask == QVL_MASK_CAUSAL || p.mask == QVL_MASK_CAUSAL_AT) {
        int64_t n_past = p.mask == QVL_MASK_CAUSAL_AT ? (int64_t)p.at[0] : p.n_past;
        b = n_past + i + 1 < L ? n_past + i + 1 : L;
    } else if (p.mask == QVL_MASK_SEGMENTS) {
        int64_t sg = cu_attn_segment_of(p.seg, p.seg_stride, p.n_bounds, i);
        a = p.seg[sg * p.seg_stride];
        b = p.seg[(sg + 1) * p.seg_stride];
    }
    if (b < a) b = a;
    *j0 = a;
    *j1 = b;
}

/* The flash kernel (cu_attention_flash.cu) for many queries of head size 64 or 128, one
 * split; returns -1 without launching when the shapes do not suit it. */
int cu_launch_attention_flash(cu_stream s, const cu_attn_job &j);

#endif
