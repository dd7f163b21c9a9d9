/* What the attention kernels share (cu_attention.cu, cu_attention_flash.cu,
 * cu_attention_flash64.cu, cu_attention_decode.cu): the job, the range of keys a query sees
 * under each mask, and split-KV's pieces (a block's share of the keys, its partials, the merge). */
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
    /* ATTENTION_SLOTS (mask CU_MASK_SLOTS): k and v are slot 0 of pools of n_slots slots,
     * slot_elems elements apart; query i reads slot slot[i] and keys [0, at[i]] (both [N],
     * unit stride). */
    const int32_t *slot;
    int64_t n_slots, slot_elems;
};

/* The mask of ATTENTION_SLOTS rows (not a qvl_mask_kind: the op has its own number). */
#define CU_MASK_SLOTS 100

/* Under CU_MASK_SLOTS: the element offset of query i's slot in the pools of k and v (slot 0
 * when out of range or i >= N: cu_attn_range then gives the query no keys). Whole q8_0 blocks:
 * the contract's rows are. */
__device__ __forceinline__ int64_t cu_attn_slot_offset(const cu_attn_job &p, int64_t i, int64_t N) {
    int64_t s = i < N ? p.slot[i] : 0;
    return s < 0 || s >= p.n_slots ? 0 : s * p.slot_elems;
}

/* k or v of query i: in a SLOTS instance (launched for CU_MASK_SLOTS only) its slot of the
 * pool, else x itself. SLOTS is a template argument so that the other instances carry none of
 * this: on sm_61 the extra registers made them spill. */
template <bool SLOTS>
__device__ __forceinline__ cu_view cu_attn_kv_of(cu_view x, const cu_attn_job &p, int64_t i,
                                                int64_t N) {
    if (!SLOTS) return x;
    int64_t e = cu_attn_slot_offset(p, i, N);
    int64_t bytes = x.dtype == QVL_Q8_0 ? e / QVL_Q8_0_BLOCK * (int64_t)sizeof(qvl_block_q8_0)
                    : e * (x.dtype == QVL_F32 ? 4 : 2);
    x.data = (const char *)x.data + bytes;
    return x;
}

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
 * i] causal, its own segment with segments, [0, at[i]] of its slot in a SLOTS instance; empty
 * for i >= N (a block's spare rows). */
template <bool SLOTS = false>
__device__ __forceinline__ void cu_attn_range(const cu_attn_job &p, int64_t i, int64_t N,
                                              int64_t L, int64_t *j0, int64_t *j1) {
    int64_t a = 0, b = L;
    if (i >= N) {
        b = 0;
    } else if (SLOTS) { /* one query of its own sequence */
        int64_t s = p.slot[i], at = p.at[i];
        b = s < 0 || s >= p.n_slots || at < 0 || at >= L ? 0 : at + 1;
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

/* The factor the flash kernels stage Q with: scale * log2(e), so that scores come out in base
 * 2 and the softmax takes exp2f (one MUFU.EX2 per score, where expf's range reduction costs
 * about ten instructions). The weights are the same up to rounding in the last bits. */
__device__ __forceinline__ float cu_attn_base2_scale(float scale) {
    return scale * 1.4426950408889634f;
}

struct cu_attn_args : cu_attn_job {
    float *part;     /* splits > 1: [rows, splits, D + 2] partials */
    unsigned *count; /* splits > 1: per row, splits finished so far (0 between launches) */
    int splits;
};

/* A load that skips L1, where another block's writes may not show (ld.global.cg, as __ldcg;
 * spelled out because older clang CUDA headers lack __ldcg). */
__device__ __forceinline__ float cu_load_cg(const float *p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

/* Most rows one block merges at once (cu_attn_heads_per_block's largest group). */
#define CU_ATTN_MERGE_ROWS 4

/* Merges the first n splits of rows r0 .. r0 + nrows - 1 (partials laid out for `splits`;
 * nrows <= CU_ATTN_MERGE_ROWS), the same rescaling as the warps' merge (cu_attn_write_row). The
 * partials come from other blocks of the same launch: read past L1 (cu_load_cg). Every split's
 * maximum and sum is read into shared memory first, so the loads of the values depend on
 * nothing and all go out at once, for all rows together (a load per split that waited on the
 * split's maximum, or a row at a time, made the merge a chain of memory round trips). Called by
 * a whole block. */
__device__ __forceinline__ void cu_attention_combine_rows(const float *part, int splits, int n,
                                                          int64_t D, int64_t r0, int nrows,
                                                          float *out) {
    __shared__ float m_s[CU_ATTN_MERGE_ROWS * CU_ATTN_MAX_SPLITS];
    __shared__ float w_s[CU_ATTN_MERGE_ROWS * CU_ATTN_MAX_SPLITS];
    __shared__ float l_s[CU_ATTN_MERGE_ROWS * CU_ATTN_MAX_SPLITS];
    const float *pr = part + r0 * splits * (D + 2); /* row r0 + c at pr + c * splits * (D + 2) */
    for (int e = threadIdx.x; e < nrows * n; e += blockDim.x) {
        const float *ps = pr + ((e / n) * splits + e % n) * (D + 2);
        m_s[e] = cu_load_cg(&ps[D]);
        l_s[e] = cu_load_cg(&ps[D + 1]);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < nrows * n; e += blockDim.x) {
        const float *mr = m_s + (e / n) * n;
        float M = -INFINITY;
        for (int s = 0; s < n; s++) M = fmaxf(M, mr[s]);
        w_s[e] = m_s[e] == -INFINITY ? 0.0f : expf(m_s[e] - M);
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < nrows * D; e += blockDim.x) {
        int64_t c = e / D, d = e % D;
        const float *ps = pr + c * splits * (D + 2) + d, *w = w_s + c * n, *l = l_s + c * n;
        float y = 0.0f, total = 0.0f;
        for (int s = 0; s < n; s++) { /* a split whose keys all scored -inf: weight 0, zeros */
            y += cu_load_cg(&ps[s * (D + 2)]) * w[s];
            total += l[s] * w[s];
        }
        out[(r0 + c) * D + d] = total > 0.0f ? y / total : 0.0f;
    }
}

/* The block's result for row `row` from its warps' running (acc, m, l), in shared memory:
 * warp w's accumulator at acc_s + w * acc_stride (D floats), its maximum and sum at
 * m_s[w * ml_stride], l_s[w * ml_stride]. One split: the normalised output row; several: the
 * split's unnormalised partial (acc, M, total) for cu_attention_combine_rows. Called by a whole
 * block after a barrier. */
template <int WARPS>
__device__ __forceinline__ void cu_attn_write_row(const cu_attn_args &p, const float *acc_s,
                                                  int acc_stride, const float *m_s,
                                                  const float *l_s, int ml_stride, int64_t D,
                                                  int64_t row) {
    float M = -INFINITY;
    for (int w = 0; w < WARPS; w++) M = fmaxf(M, m_s[w * ml_stride]);
    float total = 0.0f, weight[WARPS];
    for (int w = 0; w < WARPS; w++) {
        float mw = m_s[w * ml_stride];
        weight[w] = mw == -INFINITY ? 0.0f : expf(mw - M);
        total += l_s[w * ml_stride] * weight[w];
    }
    float *o = p.splits > 1 ? p.part + (row * p.splits + blockIdx.y) * (D + 2) : p.out + row * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float y = 0.0f;
        for (int w = 0; w < WARPS; w++) y += acc_s[w * acc_stride + d] * weight[w];
        o[d] = p.splits > 1 ? y : total > 0.0f ? y / total : 0.0f;
    }
    if (p.splits > 1 && threadIdx.x == 0) {
        o[D] = M;
        o[D + 1] = total;
    }
}

/* Split-KV, after the block wrote its partials of rows r0 .. r0 + nrows - 1: counts the split
 * in count[r0]; the last of the row group's `busy` splits to finish merges the partials of
 * every row (one launch instead of two) and resets the count, so a replayed graph finds it at
 * 0 again. Called by a whole block. */
__device__ __forceinline__ void cu_attn_split_done(const cu_attn_args &p, int64_t r0, int nrows,
                                                   int busy, int64_t D) {
    __shared__ bool last;
    __threadfence(); /* this block's partials are visible before it is counted */
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&p.count[r0], 1u) == (unsigned)busy - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    cu_attention_combine_rows(p.part, p.splits, busy, D, r0, nrows, p.out);
    if (threadIdx.x == 0) p.count[r0] = 0;
}

/* This block's share [*j0, *j1) of the visible keys [j0, j1) under split-KV (splits of at
 * least CU_ATTN_MIN_CHUNK keys; the count comes from L, so late splits may get none); *busy =
 * how many splits have keys (at least 1, so one reports the zeros of an empty range). Returns
 * false when this block's split has none: it writes and merges nothing. */
#define CU_ATTN_MIN_CHUNK 32 /* fewest keys worth a split of their own */
__device__ __forceinline__ bool cu_attn_split_share(int splits, int64_t *j0, int64_t *j1,
                                                    int *busy) {
    *busy = 1;
    if (splits <= 1) return true;
    int64_t vis = *j1 - *j0, chunk = (vis + splits - 1) / splits;
    if (chunk < CU_ATTN_MIN_CHUNK) chunk = CU_ATTN_MIN_CHUNK;
    *busy = vis > 0 ? (int)((vis + chunk - 1) / chunk) : 1;
    if ((int)blockIdx.y >= *busy) return false;
    int64_t a = *j0 + (int64_t)blockIdx.y * chunk;
    *j0 = a < *j1 ? a : *j1;
    *j1 = a + chunk < *j1 ? a + chunk : *j1;
    return true;
}

/* Query heads a decode block serves together (cu_attention_decode.cu): the most of 4, 2, 1
 * that divides the G = Hq / Hkv heads sharing a kv head. */
static inline __host__ __device__ int cu_attn_heads_per_block(int64_t Hq, int64_t Hkv) {
    int64_t G = Hkv > 0 && Hq % Hkv == 0 ? Hq / Hkv : 1;
    return G % 4 == 0 ? 4 : G % 2 == 0 ? 2 : 1;
}

/* The decode kernel (cu_attention_decode.cu) for heads of 128 over unit-stride aligned k and
 * v of one dtype; returns -1 without launching when the shapes do not suit it. */
int cu_launch_attention_decode(cu_stream s, const cu_attn_args &p);

/* The flash kernel (cu_attention_flash.cu) for many queries of head size 64 or 128, one
 * split; returns -1 without launching when the shapes do not suit it. Heads of 64 over
 * f32 q, k and v in aligned unit-stride rows take cu_attention_flash64.cu's kernel, which
 * the one below calls first (returning -1 in the same way). */
int cu_launch_attention_flash(cu_stream s, const cu_attn_job &j);
int cu_launch_attention_flash64(cu_stream s, const cu_attn_job &j);

#endif
