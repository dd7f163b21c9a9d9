/* ATTENTION with online softmax, for prefill, vision and decode.
 *
 * Grid: one block row per (query, head), and blockIdx.y = split s of `splits` (split-KV, see
 * cu_attention_splits): block (r, s) walks the s-th share of row r's visible keys. Inside a
 * block CU_ATTN_WARPS warps take keys in turn, KU at a time (loaded together); the lanes
 * split the dot product q . k_j over D (lane owns d = lane + 32 t, q and the accumulator in
 * registers) and a shuffle reduction gives the score; each warp keeps its own running max
 * m, sum l and accumulator. The warps' results are merged in shared memory with the usual
 * rescaling. With one split the block writes the output row; with several it writes its
 * unnormalised partial (acc, m, l) and the row's last split to finish merges them
 * (cu_attn_split_done). Heads of 128 over unit-stride aligned k/v rows (decode) take the
 * kernel of cu_attention_decode.cu, which serves the query heads of a kv head together.
 *
 * The visible keys of a query form one range: [0, L) without a mask, [0, n_past + i] causal
 * (n_past read from device memory for CAUSAL_AT, so the launch does not depend on it and one
 * captured launch serves every decode step; the range is clipped to [0, L), so nothing past
 * L is read whatever at holds), the query's own segment with segments. Hidden keys are not
 * visited (exp(-inf) = 0); a query that sees no key gets 0, as softmax of an all -inf row
 * does in the reference. */
#include "cu_attention.cuh"

#define CU_ATTN_WARPS 4
#define CU_ATTN_REGS (CU_ATTN_MAX_D / CU_WARP) /* per-lane share of a head */
/* Blocks split-KV aims at: a row group's keys are shared among target / groups splits (at
 * least CU_ATTN_MIN_CHUNK keys each, at most CU_ATTN_MAX_SPLITS). A group is the query heads
 * one block serves (cu_attn_heads_per_block). 128 blocks of the decode kernel's 8 warps about
 * fill a 132-SM GPU once (one wave: a second wave of blocks doubles the serial chain of round
 * trips); 256 and 512 were slower at depth 4000 (docs/BENCHMARKS.md). The split count comes
 * from the key count L, never from `at` (a captured launch serves every step), so splits
 * whose share holds no visible key leave at once. */
#ifndef CU_ATTN_TARGET_BLOCKS
#define CU_ATTN_TARGET_BLOCKS 128
#endif

/* The lane's elements d = lane + 32 t < D of keys jg .. jg + KU - 1 (zeros past j1 and D) of
 * k or v [L, Hkv, D] as f32; `head` is the element offset of the head in key 0 (and of the
 * slot, for ATTENTION_SLOTS). DT is x's dtype, or -1: x.dtype, looked at per load. */
template <int DT, int REGS, int KU>
__device__ __forceinline__ void cu_attn_rows_dt(const cu_view &x, int64_t jg, int64_t j1,
                                                int64_t head, int lane, int64_t D,
                                                float (&r)[KU][REGS]) {
    int32_t dt = DT < 0 ? x.dtype : DT;
    uint32_t raw[KU][REGS]; /* every load in flight before the first conversion (cu_load_raw) */
#pragma unroll
    for (int u = 0; u < KU; u++) {
        int64_t j = jg + u, base = j * x.stride[0] + head;
#pragma unroll
        for (int t = 0; t < REGS; t++) {
            int64_t d = lane + CU_WARP * t;
            raw[u][t] = j < j1 && d < D ? cu_load_raw(x.data, dt, base + d * x.stride[2]) : 0u;
        }
    }
#pragma unroll
    for (int u = 0; u < KU; u++)
#pragma unroll
        for (int t = 0; t < REGS; t++) r[u][t] = cu_raw_to_f32(dt, raw[u][t]);
}

/* The same for x's dtype: q8_0 when Q8 (its own kernel instance, below), else f32, f16 or
 * bf16. clang's code chooses the float dtype once for all KU * REGS loads: with the dtype switch
 * inside every load it needed more registers than a thread has and spilled, and so it did with
 * q8_0 as a fourth copy. nvcc's code keeps the switch per load, which costs it fewer registers
 * than the three copies. */
template <int REGS, int KU, bool Q8>
__device__ __forceinline__ void cu_attn_rows(const cu_view &x, int64_t jg, int64_t j1,
                                             int64_t head, int lane, int64_t D,
                                             float (&r)[KU][REGS]) {
    if (Q8) {
        cu_attn_rows_dt<QVL_Q8_0, REGS, KU>(x, jg, j1, head, lane, D, r);
        return;
    }
    if (!CU_CLANG_DEVICE) {
        cu_attn_rows_dt<-1, REGS, KU>(x, jg, j1, head, lane, D, r);
        return;
    }
    switch (x.dtype) {
    case QVL_F32: cu_attn_rows_dt<QVL_F32, REGS, KU>(x, jg, j1, head, lane, D, r); break;
    case QVL_F16: cu_attn_rows_dt<QVL_F16, REGS, KU>(x, jg, j1, head, lane, D, r); break;
    case QVL_BF16: cu_attn_rows_dt<QVL_BF16, REGS, KU>(x, jg, j1, head, lane, D, r); break;
    default: /* no other dtype gets here (q8_0 takes the Q8 instance) */
#pragma unroll
        for (int u = 0; u < KU; u++)
#pragma unroll
            for (int t = 0; t < REGS; t++) r[u][t] = 0.0f;
    }
}

/* REGS: per-lane share of a head (D <= 32 * REGS), lane owning d = lane + 32 t; KU: keys a
 * warp loads together (their k and v rows are all requested before any is used, so one memory
 * round trip serves KU keys instead of one: decode attention is latency-bound otherwise).
 * Heads of 128 over unit-stride aligned rows take cu_attention_decode.cu instead. */
template <int REGS, int KU, bool KQ8, bool VQ8, bool SLOTS>
__global__ void __launch_bounds__(CU_ATTN_WARPS *CU_WARP) k_attention(cu_attn_args p) {
    __shared__ float acc_s[CU_ATTN_WARPS][CU_ATTN_MAX_D];
    __shared__ float m_s[CU_ATTN_WARPS], l_s[CU_ATTN_WARPS];

    const cu_view &q = p.q, &k = p.k, &v = p.v;
    int64_t Hq = q.shape[1], D = q.shape[2], L = k.shape[0], Hkv = k.shape[1];
    int64_t row = blockIdx.x, i = row / Hq, h = row % Hq, g = h / (Hq / Hkv);
    /* element offsets of head g (in slot slot[i] of the pool for SLOTS: an offset, not a
     * shifted copy of the views, which cost registers this kernel does not have on sm_61) */
    int64_t k_head = g * k.stride[1], v_head = g * v.stride[1];
    if (SLOTS) {
        int64_t o = cu_attn_slot_offset(p, i, q.shape[0]);
        k_head += o;
        v_head += o;
    }
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;

    /* q first: its loads do not wait for the key range (a load of `at` for CAUSAL_AT) */
    float qr[REGS], acc[REGS];
    int64_t q_base = i * q.stride[0] + h * q.stride[1];
#pragma unroll
    for (int t = 0; t < REGS; t++) {
        int64_t d = lane + CU_WARP * t;
        qr[t] = d < D ? cu_view_load(q, q_base + d * q.stride[2]) : 0.0f;
        acc[t] = 0.0f;
    }

    int64_t j0, j1;
    int busy;
    cu_attn_range<SLOTS>(p, i, q.shape[0], L, &j0, &j1);
    if (!cu_attn_split_share(p.splits, &j0, &j1, &busy)) return;

    float m = -INFINITY, l = 0.0f;
    for (int64_t jg = j0 + (int64_t)warp * KU; jg < j1; jg += CU_ATTN_WARPS * KU) {
        float kr[KU][REGS], vr[KU][REGS];
        cu_attn_rows<REGS, KU, KQ8>(k, jg, j1, k_head, lane, D, kr);
        cu_attn_rows<REGS, KU, VQ8>(v, jg, j1, v_head, lane, D, vr);
        float sc[KU];
#pragma unroll
        for (int u = 0; u < KU; u++) {
            float dot = 0.0f;
#pragma unroll
            for (int t = 0; t < REGS; t++) dot += qr[t] * kr[u][t];
            sc[u] = dot;
        }
#pragma unroll
        for (int o = CU_WARP / 2; o > 0; o /= 2)
#pragma unroll
            for (int u = 0; u < KU; u++) sc[u] += __shfl_xor_sync(0xffffffffu, sc[u], o);
#pragma unroll
        for (int u = 0; u < KU; u++) {
            float x = sc[u] * p.scale;
            if (jg + u >= j1 || x == -INFINITY) continue; /* weight exp(-inf) = 0 */
            float m_new = fmaxf(m, x);
            float corr = expf(m - m_new); /* 0 while m is still -inf */
            float pr = expf(x - m_new);
            l = l * corr + pr;
            m = m_new;
#pragma unroll
            for (int t = 0; t < REGS; t++) acc[t] = acc[t] * corr + pr * vr[u][t];
        }
    }
#pragma unroll
    for (int t = 0; t < REGS; t++) {
        int64_t d = lane + CU_WARP * t;
        if (d < D) acc_s[warp][d] = acc[t];
    }
    if (lane == 0) {
        m_s[warp] = m;
        l_s[warp] = l;
    }
    __syncthreads();
    cu_attn_write_row<CU_ATTN_WARPS>(p, &acc_s[0][0], CU_ATTN_MAX_D, m_s, l_s, 1, D, row);
    if (p.splits > 1) cu_attn_split_done(p, row, 1, busy, D);
}

/* Many queries, head size <= 64 (the vision tower, long prompts of small-head models): a
 * block takes CU_AT_Q queries of one head, a thread per query with its q row and output
 * accumulator in registers. Keys go by in tiles of CU_AT_K: the block loads a tile of k and v
 * rows into shared memory once, and every thread reads them as broadcasts (all threads the
 * same address), 16 bytes at a time. Scores are taken CU_AT_S keys at a time so the running
 * max and the rescale of the accumulator happen once per CU_AT_S keys, not per key. Each
 * thread skips the keys its mask hides; the tiles cover the union of the block's ranges. */
#define CU_AT_Q 64
#define CU_AT_K 64
#define CU_AT_S 16
#define CU_AT_D 64

__global__ void __launch_bounds__(CU_AT_Q) k_attention_tiled(cu_attn_args p) {
    __shared__ float4 ks4[CU_AT_K][CU_AT_D / 4], vs4[CU_AT_K][CU_AT_D / 4];
    __shared__ int range_s[2];
    const cu_view &q = p.q, &k = p.k, &v = p.v;
    int64_t N = q.shape[0], Hq = q.shape[1], D = q.shape[2], L = k.shape[0], Hkv = k.shape[1];
    int64_t h = blockIdx.y, g = h / (Hq / Hkv), i = (int64_t)blockIdx.x * CU_AT_Q + threadIdx.x;
    bool live = i < N;

    int64_t j0, j1; /* this query's visible keys */
    cu_attn_range(p, i, N, L, &j0, &j1);
    if (threadIdx.x == 0) {
        range_s[0] = (int)L;
        range_s[1] = 0;
    }
    __syncthreads();
    if (j1 > j0) {
        atomicMin(&range_s[0], (int)j0);
        atomicMax(&range_s[1], (int)j1);
    }
    __syncthreads();
    const int64_t lo = range_s[0], hi = range_s[1];

    float qr[CU_AT_D], acc[CU_AT_D];
    int64_t q_base = live ? i * q.stride[0] + h * q.stride[1] : 0;
#pragma unroll
    for (int d = 0; d < CU_AT_D; d++) {
        qr[d] = live && d < D ? cu_view_load(q, q_base + d * q.stride[2]) * p.scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    float *ks = (float *)ks4, *vs = (float *)vs4;
    for (int64_t t0 = lo; t0 < hi; t0 += CU_AT_K) {
        for (int e = threadIdx.x; e < CU_AT_K * CU_AT_D; e += CU_AT_Q) {
            int jj = e / CU_AT_D, d = e % CU_AT_D;
            int64_t j = t0 + jj;
            bool in = j < hi && d < D;
            ks[e] = in ? cu_view_load(k, j * k.stride[0] + g * k.stride[1] + d * k.stride[2]) : 0.0f;
            vs[e] = in ? cu_view_load(v, j * v.stride[0] + g * v.stride[1] + d * v.stride[2]) : 0.0f;
        }
        __syncthreads();
        for (int s0 = 0; s0 < CU_AT_K; s0 += CU_AT_S) {
            float sc[CU_AT_S], bmax = -INFINITY;
#pragma unroll
            for (int u = 0; u < CU_AT_S; u++) {
                int64_t j = t0 + s0 + u;
                float dot = 0.0f;
#pragma unroll
                for (int d4 = 0; d4 < CU_AT_D / 4; d4++) {
                    float4 kv = ks4[s0 + u][d4];
                    dot += qr[4 * d4] * kv.x + qr[4 * d4 + 1] * kv.y + qr[4 * d4 + 2] * kv.z +
                           qr[4 * d4 + 3] * kv.w;
                }
                sc[u] = j >= j0 && j < j1 ? dot : -INFINITY;
                bmax = fmaxf(bmax, sc[u]);
            }
            if (bmax == -INFINITY) continue; /* nothing visible to this query here */
            float m_new = fmaxf(m, bmax);
            float corr = expf(m - m_new); /* 0 while m is -inf */
            l *= corr;
#pragma unroll
            for (int d = 0; d < CU_AT_D; d++) acc[d] *= corr;
#pragma unroll
            for (int u = 0; u < CU_AT_S; u++) {
                float pr = expf(sc[u] - m_new); /* exp(-inf) = 0 for hidden keys */
                l += pr;
#pragma unroll
                for (int d4 = 0; d4 < CU_AT_D / 4; d4++) {
                    float4 vv = vs4[s0 + u][d4];
                    acc[4 * d4] += pr * vv.x;
                    acc[4 * d4 + 1] += pr * vv.y;
                    acc[4 * d4 + 2] += pr * vv.z;
                    acc[4 * d4 + 3] += pr * vv.w;
                }
            }
            m = m_new;
        }
        __syncthreads();
    }
    if (!live) return;
    float *o = p.out + (i * Hq + h) * D;
    for (int d = 0; d < CU_AT_D; d++)
        if (d < D) o[d] = l > 0.0f ? acc[d] / l : 0.0f;
}

/* Few (query, head) rows and many keys (decode over a long cache): split the keys so that
 * the GPU gets enough blocks. Depends on the shapes only (L is the cache size, not the number
 * of keys written), so a captured launch stays valid at every step. */
extern "C" int cu_attention_splits(int64_t N, int64_t Hq, int64_t Hkv, int64_t L) {
    int64_t rows = N * Hq, groups = rows / cu_attn_heads_per_block(Hq, Hkv);
    if (rows >= CU_ATTN_COUNTERS || L < 2 * CU_ATTN_MIN_CHUNK) return 1;
    int64_t by_keys = (L + CU_ATTN_MIN_CHUNK - 1) / CU_ATTN_MIN_CHUNK;
    int64_t by_rows = (CU_ATTN_TARGET_BLOCKS + groups - 1) / groups;
    int64_t s = by_keys < by_rows ? by_keys : by_rows;
    if (s > CU_ATTN_MAX_SPLITS) s = CU_ATTN_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

/* k_attention, instantiated for whether k and v are q8_0 and whether rows read pool slots. */
template <int REGS, int KU, bool SLOTS>
static void cu_attention_rows_launch_as(dim3 grid, unsigned threads, cu_stream s,
                                        const cu_attn_args &p) {
    bool kq = p.k.dtype == QVL_Q8_0, vq = p.v.dtype == QVL_Q8_0;
    if (kq && vq) k_attention<REGS, KU, true, true, SLOTS><<<grid, threads, 0, s>>>(p);
    else if (kq) k_attention<REGS, KU, true, false, SLOTS><<<grid, threads, 0, s>>>(p);
    else if (vq) k_attention<REGS, KU, false, true, SLOTS><<<grid, threads, 0, s>>>(p);
    else k_attention<REGS, KU, false, false, SLOTS><<<grid, threads, 0, s>>>(p);
}

template <int REGS, int KU>
static void cu_attention_rows_launch(dim3 grid, unsigned threads, cu_stream s,
                                     const cu_attn_args &p) {
    if (p.mask == CU_MASK_SLOTS) cu_attention_rows_launch_as<REGS, KU, true>(grid, threads, s, p);
    else cu_attention_rows_launch_as<REGS, KU, false>(grid, threads, s, p);
}

/* Few queries: the decode kernel where it applies, else a block per (query, head). */
static int cu_attention_few_rows(cu_stream s, const cu_attn_args &p) {
    if (cu_launch_attention_decode(s, p) != -1) return (int)cudaGetLastError();
    dim3 grid((unsigned)(p.q.shape[0] * p.q.shape[1]), (unsigned)p.splits);
    unsigned threads = CU_ATTN_WARPS * CU_WARP;
    if (p.q.shape[2] <= 4 * CU_WARP) cu_attention_rows_launch<4, 4>(grid, threads, s, p);
    else cu_attention_rows_launch<CU_ATTN_REGS, 1>(grid, threads, s, p);
    return (int)cudaGetLastError();
}

extern "C" int cu_launch_attention(cu_stream s, cu_view q, cu_view k, cu_view v, float scale,
                                   int mask, int64_t n_past, const int32_t *at,
                                   const int32_t *seg, int64_t seg_stride, int64_t n_bounds,
                                   int splits, float *part, float *out) {
    int64_t rows = q.shape[0] * q.shape[1], D = q.shape[2];
    if (D > CU_ATTN_MAX_D || rows > 0x7fffffff || splits < 1 || splits > CU_ATTN_MAX_SPLITS ||
        (splits > 1 && (!part || rows > CU_ATTN_COUNTERS)))
        return (int)cudaErrorInvalidConfiguration;
    cu_attn_job job = {q, k, v, scale, mask, n_past, at, seg, seg_stride, n_bounds, out,
                       NULL, 0, 0};
    cu_attn_args p;
    static_cast<cu_attn_job &>(p) = job;
    p.count = (unsigned *)part;
    p.part = part ? part + CU_ATTN_COUNTERS : NULL;
    p.splits = splits;
    int64_t N = q.shape[0], Hq = q.shape[1];
    if (splits == 1) { /* head size 64 or 128 and many queries: the flash kernel */
        int r = cu_launch_attention_flash(s, job);
        if (r != -1) return r;
    }
    if (splits == 1 && N >= CU_AT_Q && D <= CU_AT_D && k.shape[0] < 0x7fffffff &&
        Hq <= 65535) { /* many queries: the tiled kernel */
        dim3 tgrid((unsigned)((N + CU_AT_Q - 1) / CU_AT_Q), (unsigned)Hq);
        k_attention_tiled<<<tgrid, CU_AT_Q, 0, s>>>(p);
        return (int)cudaGetLastError();
    }
    return cu_attention_few_rows(s, p);
}

extern "C" int cu_launch_attention_slots(cu_stream s, cu_view q, cu_view k, cu_view v,
                                         float scale, const int32_t *slot, const int32_t *at,
                                         int64_t n_slots, int64_t slot_elems, int splits,
                                         float *part, float *out) {
    int64_t rows = q.shape[0] * q.shape[1], D = q.shape[2];
    if (D > CU_ATTN_MAX_D || rows > 0x7fffffff || splits < 1 || splits > CU_ATTN_MAX_SPLITS ||
        (splits > 1 && (!part || rows > CU_ATTN_COUNTERS)))
        return (int)cudaErrorInvalidConfiguration;
    cu_attn_job job = {q, k, v, scale, CU_MASK_SLOTS, 0, at, NULL, 0, 0, out,
                       slot, n_slots, slot_elems};
    cu_attn_args p;
    static_cast<cu_attn_job &>(p) = job;
    p.count = (unsigned *)part;
    p.part = part ? part + CU_ATTN_COUNTERS : NULL;
    p.splits = splits;
    return cu_attention_few_rows(s, p); /* one query per sequence: never the tiled kernels */
}
