/* Decode attention: few queries with heads of 128 over a cache of f32, f16, bf16 or q8_0 rows
 * (unit stride, aligned: cu_dec_vec_ok), k and v of one dtype.
 *
 * One block serves GB query heads that read the same kv head (grouped-query attention: Hq / Hkv
 * query heads share each kv head), so each k and v row is loaded once for all GB heads instead
 * of once per head; blockIdx.y is the split under split-KV (cu_attn_split_share). A lane owns
 * the 4 neighbouring elements d = 4 lane .. 4 lane + 3 of a head: one 16-byte (f32), 8-byte
 * (f16, bf16) or three 2-byte (q8_0) loads per row. Each of the CU_DEC_WARPS warps takes KU
 * keys at a time and issues the next KU keys' loads before it multiplies these: decode
 * attention reads few bytes per block, so without that overlap each round trip to memory would
 * be waited out in full. The KU scores of a round update the running maximum once (one
 * rescale of the accumulator per KU keys, not per key). Warps merge in shared memory and splits
 * through cu_attn_split_done, as in k_attention. */
#include "cu_attention.cuh"

/* 8 warps of a block share the block's keys: a round of 8 x KU keys per memory trip, so a
 * split walks its keys in fewer serial round trips than with 4 (the depth-4000 decode of the
 * 2B: 17 against 19.4 us a layer, docs/BENCHMARKS.md). */
#ifndef CU_DEC_WARPS
#define CU_DEC_WARPS 8
#endif
#define CU_DEC_D 128
/* Keys per warp per round: 4, whose loads are in flight while the previous 4 are multiplied.
 * 8 needed 180 registers (clang, sm_61) against 110 and cost a block per SM: slower. */
#ifndef CU_DEC_KU_F32
#define CU_DEC_KU_F32 4
#endif
#ifndef CU_DEC_KU_16
#define CU_DEC_KU_16 4
#endif

/* The raw k and v loads of keys jg .. jg + KU - 1, head g (zeros from j1 on: 0.0f in every
 * dtype, and nothing past j1 is read). Row starts are multiples of 4 (cu_dec_vec_ok). */
template <int DT, int KU>
__device__ __forceinline__ void cu_dec_fetch(const cu_view &k, const cu_view &v, int64_t jg,
                                             int64_t j1, int64_t g, int lane, uint4 (&kw)[KU],
                                             uint4 (&vw)[KU]) {
#pragma unroll
    for (int u = 0; u < KU; u++) {
        int64_t j = jg + u;
        kw[u] = vw[u] = make_uint4(0u, 0u, 0u, 0u);
        if (j < j1) {
            kw[u] = cu_vec4_raw_as<DT>(k.data, (j * k.stride[0] + g * k.stride[1]) / 4 + lane);
            vw[u] = cu_vec4_raw_as<DT>(v.data, (j * v.stride[0] + g * v.stride[1]) / 4 + lane);
        }
    }
}

/* DT: the cache's dtype; GB: query heads per block (dividing Hq / Hkv); KU: keys per warp per
 * round. Grid (N * Hq / GB, splits). */
template <int DT, int GB, int KU, bool SLOTS>
__global__ void __launch_bounds__(CU_DEC_WARPS *CU_WARP) k_attention_decode(cu_attn_args p) {
    __shared__ float acc_s[CU_DEC_WARPS][GB][CU_DEC_D];
    __shared__ float m_s[CU_DEC_WARPS][GB], l_s[CU_DEC_WARPS][GB];

    const cu_view &q = p.q;
    int64_t N = q.shape[0], Hq = q.shape[1], L = p.k.shape[0], Hkv = p.k.shape[1];
    int64_t per_token = Hq / GB, i = blockIdx.x / per_token, h0 = (blockIdx.x % per_token) * GB;
    const cu_view k = cu_attn_kv_of<SLOTS>(p.k, p, i, N), v = cu_attn_kv_of<SLOTS>(p.v, p, i, N);
    int64_t g = h0 / (Hq / Hkv);
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;

    /* q first: its loads do not wait for the key range (a load of `at` for CAUSAL_AT) */
    float qr[GB][4], acc[GB][4], m[GB], l[GB];
#pragma unroll
    for (int c = 0; c < GB; c++) {
        int64_t base = i * q.stride[0] + (h0 + c) * q.stride[1];
#pragma unroll
        for (int t = 0; t < 4; t++) {
            qr[c][t] = cu_view_load(q, base + (4 * lane + t) * q.stride[2]);
            acc[c][t] = 0.0f;
        }
        m[c] = -INFINITY;
        l[c] = 0.0f;
    }

    int64_t j0, j1;
    int busy;
    cu_attn_range<SLOTS>(p, i, N, L, &j0, &j1);
    if (!cu_attn_split_share(p.splits, &j0, &j1, &busy)) return;

    uint4 kw[KU], vw[KU];
    int64_t jg = j0 + (int64_t)warp * KU;
    cu_dec_fetch<DT, KU>(k, v, jg, j1, g, lane, kw, vw);
    for (; jg < j1; jg += CU_DEC_WARPS * KU) {
        float4 kf[KU], vf[KU];
#pragma unroll
        for (int u = 0; u < KU; u++) {
            kf[u] = cu_vec4_cvt(DT, kw[u]);
            vf[u] = cu_vec4_cvt(DT, vw[u]);
        }
        cu_dec_fetch<DT, KU>(k, v, jg + CU_DEC_WARPS * KU, j1, g, lane, kw, vw);
        float sc[GB][KU];
#pragma unroll
        for (int c = 0; c < GB; c++)
#pragma unroll
            for (int u = 0; u < KU; u++) {
                float dot = 0.0f;
                dot += qr[c][0] * kf[u].x;
                dot += qr[c][1] * kf[u].y;
                dot += qr[c][2] * kf[u].z;
                dot += qr[c][3] * kf[u].w;
                sc[c][u] = dot;
            }
#pragma unroll
        for (int o = CU_WARP / 2; o > 0; o /= 2)
#pragma unroll
            for (int c = 0; c < GB; c++)
#pragma unroll
                for (int u = 0; u < KU; u++) sc[c][u] += __shfl_xor_sync(0xffffffffu, sc[c][u], o);
#pragma unroll
        for (int c = 0; c < GB; c++) {
            float x[KU], top = -INFINITY;
            bool any = false; /* a key of this round counts (NaN scores count: they poison) */
#pragma unroll
            for (int u = 0; u < KU; u++) {
                x[u] = jg + u < j1 ? sc[c][u] * p.scale : -INFINITY; /* weight exp(-inf) = 0 */
                top = fmaxf(top, x[u]);
                any |= x[u] != -INFINITY;
            }
            if (!any) continue;
            float m_new = fmaxf(m[c], top);
            float corr = expf(m[c] - m_new); /* 0 while m is still -inf */
            float pr[KU], sum = 0.0f;
#pragma unroll
            for (int u = 0; u < KU; u++) {
                pr[u] = expf(x[u] - m_new);
                sum += pr[u];
            }
            l[c] = l[c] * corr + sum;
            m[c] = m_new;
            float a0 = acc[c][0] * corr, a1 = acc[c][1] * corr, a2 = acc[c][2] * corr,
                  a3 = acc[c][3] * corr;
#pragma unroll
            for (int u = 0; u < KU; u++) {
                a0 += pr[u] * vf[u].x;
                a1 += pr[u] * vf[u].y;
                a2 += pr[u] * vf[u].z;
                a3 += pr[u] * vf[u].w;
            }
            acc[c][0] = a0, acc[c][1] = a1, acc[c][2] = a2, acc[c][3] = a3;
        }
    }
#pragma unroll
    for (int c = 0; c < GB; c++) {
#pragma unroll
        for (int t = 0; t < 4; t++) acc_s[warp][c][4 * lane + t] = acc[c][t];
        if (lane == 0) {
            m_s[warp][c] = m[c];
            l_s[warp][c] = l[c];
        }
    }
    __syncthreads();
    int64_t r0 = i * Hq + h0;
    for (int c = 0; c < GB; c++)
        cu_attn_write_row<CU_DEC_WARPS>(p, &acc_s[0][c][0], GB * CU_DEC_D, &m_s[0][c], &l_s[0][c],
                                        GB, CU_DEC_D, r0 + c);
    if (p.splits > 1) cu_attn_split_done(p, r0, GB, busy, CU_DEC_D);
}

/* Can the kernel read x's rows 4 elements at a time (f32, f16, bf16: unit stride, every row
 * and head start, hence every 4-element group, aligned to the group's bytes)? A q8_0 cache
 * always can once its base is 2-byte aligned: the layout rule (tensor.h) makes every row and
 * head start a whole block, and a block's 4-element groups never straddle it. */
static bool cu_dec_vec_ok(const cu_view &x) {
    if (x.dtype == QVL_Q8_0) return x.ndim == 3 && x.stride[2] == 1 && (uintptr_t)x.data % 2 == 0;
    int64_t esize = x.dtype == QVL_F32 ? 4 : x.dtype == QVL_F16 || x.dtype == QVL_BF16 ? 2 : 0;
    return esize && x.ndim == 3 && x.stride[2] == 1 && x.stride[0] % 4 == 0 &&
           x.stride[1] % 4 == 0 && (uintptr_t)x.data % (4 * esize) == 0;
}

template <int DT, int KU, bool SLOTS>
static void cu_dec_launch_as(dim3 grid, int gb, cu_stream s, const cu_attn_args &p) {
    unsigned threads = CU_DEC_WARPS * CU_WARP;
    if (gb == 4) k_attention_decode<DT, 4, KU, SLOTS><<<grid, threads, 0, s>>>(p);
    else if (gb == 2) k_attention_decode<DT, 2, KU, SLOTS><<<grid, threads, 0, s>>>(p);
    else k_attention_decode<DT, 1, KU, SLOTS><<<grid, threads, 0, s>>>(p);
}

template <int DT, int KU>
static void cu_dec_launch(dim3 grid, int gb, cu_stream s, const cu_attn_args &p) {
    if (p.mask == CU_MASK_SLOTS) cu_dec_launch_as<DT, KU, true>(grid, gb, s, p);
    else cu_dec_launch_as<DT, KU, false>(grid, gb, s, p);
}

int cu_launch_attention_decode(cu_stream s, const cu_attn_args &p) {
    const cu_view &q = p.q, &k = p.k, &v = p.v;
    int64_t N = q.shape[0], Hq = q.shape[1], Hkv = k.shape[1];
    if (q.shape[2] != CU_DEC_D || k.dtype != v.dtype || Hkv < 1 || Hq % Hkv != 0 ||
        !cu_dec_vec_ok(k) || !cu_dec_vec_ok(v) || (p.mask == CU_MASK_SLOTS && p.slot_elems % 4))
        return -1;
    int gb = cu_attn_heads_per_block(Hq, Hkv);
    int64_t blocks = N * (Hq / gb);
    if (blocks > 0x7fffffff) return -1;
    dim3 grid((unsigned)blocks, (unsigned)p.splits);
    switch (k.dtype) {
    case QVL_F32: cu_dec_launch<QVL_F32, CU_DEC_KU_F32>(grid, gb, s, p); break;
    case QVL_F16: cu_dec_launch<QVL_F16, CU_DEC_KU_16>(grid, gb, s, p); break;
    case QVL_BF16: cu_dec_launch<QVL_BF16, CU_DEC_KU_16>(grid, gb, s, p); break;
    case QVL_Q8_0: cu_dec_launch<QVL_Q8_0, CU_DEC_KU_16>(grid, gb, s, p); break;
    default: return -1;
    }
    return 0;
}
