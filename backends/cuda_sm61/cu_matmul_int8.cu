/* MATMUL with block-quantised weights on int8 __dp4a: the q4_k / q6_k decode GEMVs and the
 * tiled GEMM for q8_0, q4_k and q6_k (prefill, vision). cu_launch_matmul (cu_matmul.cu) asks
 * cu_matmul_int8 first.
 *
 * Both quantise the activation rows once per matmul (cu_quantize.cu): int8 blocks of 32 with one
 * f32 scale da = max|x| / 127 per block, and for q4_k the block's sum sa = da * sum(q) that its
 * mins multiply. A weight block's quants are turned into int8 in registers (q8_0 as stored,
 * q4_k's nibbles 0..15, q6_k's 6-bit q - 32), multiplied 4 pairs per __dp4a into int32, and the
 * int sums scaled in f32 per 32 values (16 for q6_k's scales):
 *     q8_0: d * da * sum(q qa)
 *     q4_k: d sc_j * da * sum(q qa) - dmin m_j * sa     (value = d sc_j q - dmin m_j)
 *     q6_k: d sc * da * sum((q - 32) qa)
 * so the result is sum_k w_k x'_k for the int8-rounded activations x' (each moved by at most
 * max|x_block| / 254), in f32: the rounding tests/conformance allows int8 kernels.
 *
 * Only compute capability 6.1: __dp4a, 16-byte loads, static shared memory below 48 KiB. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cu_matmul.cuh"

#define CU_I8_WARPS 8

/* x (int8 quants in a word, each 0..63) minus 32 per byte, as signed int8: setting each byte's
 * top bit first keeps the subtraction from borrowing across bytes. */
__device__ __forceinline__ int cu_minus32(uint32_t x) {
    return (int)(((x | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
}

/* (float)i for |i| < 2^22, exactly, with an integer add and a float subtract: both full-rate
 * instructions, where the int-to-float conversion runs at a quarter of the FMA rate (Pascal and
 * later). Every int sum here is within 32 * 127 * 127 < 2^22 in magnitude. */
__device__ __forceinline__ float cu_i2f_small(int i) {
    return __int_as_float(i + 0x4B400000) - 12582912.0f; /* 0x4B400000 is 1.5 * 2^23 */
}

__device__ __forceinline__ uint32_t cu_ld16(const unsigned char *p) {
    return *(const uint16_t *)p;
}

/* Two 16-bit loads as one word (q8_0 and q6_k blocks are only 2-byte aligned). */
__device__ __forceinline__ uint32_t cu_ld32_2(const unsigned char *p) {
    return cu_ld16(p) | (cu_ld16(p + 2) << 16);
}

/* q4_k sub-block j's 6-bit scale and min from the 12 scale bytes held in words y (bytes 4-7 of
 * the block), z (8-11), w (12-15), without indexing an array at run time. */
__device__ __forceinline__ void cu_q4k_sc_m(uint32_t y, uint32_t z, uint32_t w, int j, int &sc,
                                            int &m) {
    int t = 8 * (j % 4);
    uint32_t by = (y >> t) & 0xffu, bz = (z >> t) & 0xffu, bw = (w >> t) & 0xffu;
    if (j < 4) {
        sc = (int)(by & 63u);
        m = (int)(bz & 63u);
    } else {
        sc = (int)((bw & 0xFu) | ((by >> 6) << 4));
        m = (int)((bw >> 4) | ((bz >> 6) << 4));
    }
}

/* ---- decode GEMVs: q4_k, q6_k ------------------------------------------------------------- */

/* A warp per output column n, all M rows at once (each weight byte is read once); 8 lanes per
 * super-block, so a warp covers 4 neighbouring super-blocks per step, CU_K_UNROLL steps
 * loaded before any is used.
 * q4_k: lane part p (0..7) reads the block's 16-byte header and 16 bytes of quants, bytes
 *   32c + 16h .. + 15 (c = p / 2, h = p % 2): the low nibbles are sub-block 2c, the high ones
 *   sub-block 2c + 1, 16 values each; the lanes with h = 0 add the mins' term of both.
 * q6_k: lane part p takes half hf = p / 4 and positions l0 = 8 (p % 4) .. l0 + 7 of all four
 *   quarters: 32 values, 8 in each 32-value activation block, one scale each. */
#define CU_K_UNROLL 2

struct cu_q4k_raw {
    uint4 hdr, qs;
};
struct cu_q6k_raw {
    uint32_t ql0[2], ql1[2], qh[2], sc, d;
};

__device__ __forceinline__ void cu_k_load(const unsigned char *blk, int part, cu_q4k_raw &r) {
    r.hdr = __ldg((const uint4 *)blk);
    r.qs = __ldg((const uint4 *)(blk + 16 + 16 * part));
}

__device__ __forceinline__ void cu_k_load(const unsigned char *blk, int part, cu_q6k_raw &r) {
    int hf = part / 4, l0 = (part % 4) * 8;
    const unsigned char *ql = blk + 64 * hf + l0, *qh = blk + 128 + 32 * hf + l0;
    r.ql0[0] = cu_ld32_2(ql);
    r.ql0[1] = cu_ld32_2(ql + 4);
    r.ql1[0] = cu_ld32_2(ql + 32);
    r.ql1[1] = cu_ld32_2(ql + 36);
    r.qh[0] = cu_ld32_2(qh);
    r.qh[1] = cu_ld32_2(qh + 4);
    /* scales[8 hf + 2 r + (p % 4) / 2] for quarters r = 0..3: bytes of 4 16-bit words */
    const unsigned char *s = blk + 192 + 8 * hf;
    int shift = 8 * ((part % 4) / 2);
    r.sc = ((cu_ld16(s) >> shift) & 0xffu) | (((cu_ld16(s + 2) >> shift) & 0xffu) << 8) |
           (((cu_ld16(s + 4) >> shift) & 0xffu) << 16) | (((cu_ld16(s + 6) >> shift) & 0xffu) << 24);
    r.d = cu_ld16(blk + 208);
}

__device__ __forceinline__ void cu_k_zero(cu_q4k_raw &r) {
    r.hdr = make_uint4(0, 0, 0, 0);
    r.qs = make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ void cu_k_zero(cu_q6k_raw &r) {
    r.ql0[0] = r.ql0[1] = r.ql1[0] = r.ql1[1] = r.qh[0] = r.qh[1] = r.sc = r.d = 0;
}

/* Super-block sb of the row against the M (<= MR) activation rows, into acc. */
template <int MR>
__device__ __forceinline__ void cu_k_dot(const cu_q4k_raw &r, int part, int64_t sb, int M,
                                         int64_t K, const int8_t *qa, const float *da,
                                         const float *sa, float (&acc)[MR]) {
    int c = part / 2, h = part % 2;
    int sc0, m0, sc1, m1;
    cu_q4k_sc_m(r.hdr.y, r.hdr.z, r.hdr.w, 2 * c, sc0, m0);
    cu_q4k_sc_m(r.hdr.y, r.hdr.z, r.hdr.w, 2 * c + 1, sc1, m1);
    float d = cu_f16_to_f32((uint16_t)(r.hdr.x & 0xffffu));
    float dmin = h == 0 ? cu_f16_to_f32((uint16_t)(r.hdr.x >> 16)) : 0.0f;
    float dsc0 = d * (float)sc0, dsc1 = d * (float)sc1;
    float dm0 = dmin * (float)m0, dm1 = dmin * (float)m1;
    uint32_t qw[4] = {r.qs.x, r.qs.y, r.qs.z, r.qs.w};
    int lo[4], hi[4];
#pragma unroll
    for (int t = 0; t < 4; t++) {
        lo[t] = (int)(qw[t] & 0x0F0F0F0Fu);
        hi[t] = (int)((qw[t] >> 4) & 0x0F0F0F0Fu);
    }
    int64_t e = sb * QVL_QK_K + 64 * c + 16 * h, b0 = sb * 8 + 2 * c, nb = K / CU_I8_BLOCK;
#pragma unroll
    for (int m = 0; m < MR; m++) {
        if (m >= M) continue; /* (not break: clang then cannot unroll the callers' loops) */
        const int8_t *row = qa + m * K;
        int4 x0 = *(const int4 *)(row + e), x1 = *(const int4 *)(row + e + 32);
        int s0 = __dp4a(lo[0], x0.x, __dp4a(lo[1], x0.y, __dp4a(lo[2], x0.z, __dp4a(lo[3], x0.w, 0))));
        int s1 = __dp4a(hi[0], x1.x, __dp4a(hi[1], x1.y, __dp4a(hi[2], x1.z, __dp4a(hi[3], x1.w, 0))));
        const float *dr = da + m * nb, *sr = sa + m * nb;
        acc[m] += dr[b0] * (dsc0 * cu_i2f_small(s0)) + dr[b0 + 1] * (dsc1 * cu_i2f_small(s1)) -
                  (dm0 * sr[b0] + dm1 * sr[b0 + 1]);
    }
}

template <int MR>
__device__ __forceinline__ void cu_k_dot(const cu_q6k_raw &r, int part, int64_t sb, int M,
                                         int64_t K, const int8_t *qa, const float *da,
                                         const float *sa, float (&acc)[MR]) {
    (void)sa;
    int hf = part / 4, l0 = (part % 4) * 8;
    float d = cu_f16_to_f32((uint16_t)r.d);
    int q[4][2];
    float ds[4];
#pragma unroll
    for (int qr = 0; qr < 4; qr++) {
#pragma unroll
        for (int t = 0; t < 2; t++) {
            uint32_t l = qr % 2 == 0 ? r.ql0[t] : r.ql1[t];
            l = qr < 2 ? l & 0x0F0F0F0Fu : (l >> 4) & 0x0F0F0F0Fu;
            uint32_t hb = ((r.qh[t] >> (2 * qr)) & 0x03030303u) << 4;
            q[qr][t] = cu_minus32(l | hb);
        }
        ds[qr] = d * (float)(int8_t)((r.sc >> (8 * qr)) & 0xffu);
    }
    int64_t e = sb * QVL_QK_K + 128 * hf + l0, b0 = sb * 8 + 4 * hf, nb = K / CU_I8_BLOCK;
#pragma unroll
    for (int m = 0; m < MR; m++) {
        if (m >= M) continue;
        const int8_t *row = qa + m * K;
        const float *dr = da + m * nb;
        float y = 0.0f;
#pragma unroll
        for (int qr = 0; qr < 4; qr++) {
            int2 x = *(const int2 *)(row + e + 32 * qr);
            int s = __dp4a(q[qr][0], x.x, __dp4a(q[qr][1], x.y, 0));
            y += dr[b0 + qr] * (ds[qr] * cu_i2f_small(s));
        }
        acc[m] += y;
    }
}

template <typename RAW, int BBYTES, int MR>
__global__ void __launch_bounds__(CU_I8_WARPS *CU_WARP)
    k_gemv_k(cu_mm_args p, const int8_t *qa, const float *da, const float *sa) {
    int lane = threadIdx.x % CU_WARP, g = lane / 8, part = lane % 8;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t nsb = p.K / QVL_QK_K;
    int M = (int)p.M;
    const unsigned char *wbase = (const unsigned char *)p.w.data;
    for (int64_t n = warp; n < p.N; n += n_warps) { /* warp-uniform loop */
        const unsigned char *wrow = wbase + (n * p.w.row_stride / QVL_QK_K) * (int64_t)BBYTES;
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int64_t s0 = g; s0 < nsb; s0 += 4 * CU_K_UNROLL) {
            RAW raw[CU_K_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int64_t sb = s0 + 4 * u;
                if (sb < nsb) cu_k_load(wrow + sb * BBYTES, part, raw[u]);
                else cu_k_zero(raw[u]);
            }
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int64_t sb = s0 + 4 * u;
                if (sb < nsb) cu_k_dot<MR>(raw[u], part, sb, M, p.K, qa, da, sa, acc);
            }
        }
#pragma unroll
        for (int m = 0; m < MR; m++) {
            if (m >= M) continue;
            float y = cu_warp_sum(acc[m]);
            if (lane == 0) cu_mm_store(p, 0, m, n, y);
        }
    }
}

/* ---- the dp4a GEMM -------------------------------------------------------------------------- */

/* A block of 256 threads computes a BM x BN tile (128 x 64 or 64 x 64), each thread TM x TN
 * outputs (rows ty*4 + i%4 + 64 (i/4), columns tx*4 + j%4 + 64 (j/4), as cu_gemm.cu's
 * k_gemm_reg), walking K 32 values (one activation block, one weight sub-block) per step.
 * Per step the activation tile (int8, 8 words per row) and the weight tile (unpacked to int8)
 * are stored k-major in shared memory (x_s[word][row]: a thread's 4 rows of a word are one
 * int4 read, conflict-free as in k_gemm_reg), with the per-row scales beside them; each thread
 * sums 8 __dp4a per output into int32, then scales the sums into its f32 accumulators (q6_k:
 * twice, once per 16-value scale). The next step's tiles are loaded into registers while this
 * one is multiplied, and stored into the other buffer: one barrier per step. */
#define CU_I8_THREADS 256

template <int DT>
struct cu_i8w; /* per weight format: block bytes and elements, the per-step load */

/* A thread's share of one weight row's 32-value step: 2 words of int8 quants (words wq, wq + 1
 * of the step), and for the thread with wq = 0 the row's scale(s) for the step. */
struct cu_i8w_regs {
    uint32_t q0, q1;
    float sa, sb;
};

template <>
struct cu_i8w<QVL_Q8_0> {
    static const int BE = QVL_Q8_0_BLOCK, BB = 34;
    static __device__ __forceinline__ void load(const unsigned char *row, int kb, int wq,
                                                cu_i8w_regs &r) {
        const unsigned char *blk = row + (int64_t)kb * BB;
        r.q0 = cu_ld32_2(blk + 2 + 4 * wq);
        r.q1 = cu_ld32_2(blk + 6 + 4 * wq);
        r.sa = wq == 0 ? cu_f16_to_f32((uint16_t)cu_ld16(blk)) : 0.0f;
        r.sb = 0.0f;
    }
};

template <>
struct cu_i8w<QVL_Q4_K> {
    static const int BE = QVL_QK_K, BB = 144;
    static __device__ __forceinline__ void load(const unsigned char *row, int kb, int wq,
                                                cu_i8w_regs &r) {
        const unsigned char *blk = row + (int64_t)(kb / 8) * BB;
        int j = kb % 8, c = j / 2, h = j % 2;
        uint2 w = __ldg((const uint2 *)(blk + 16 + 32 * c + 4 * wq));
        r.q0 = (w.x >> (4 * h)) & 0x0F0F0F0Fu;
        r.q1 = (w.y >> (4 * h)) & 0x0F0F0F0Fu;
        r.sa = r.sb = 0.0f;
        if (wq == 0) {
            uint4 hd = __ldg((const uint4 *)blk);
            int sc, m;
            cu_q4k_sc_m(hd.y, hd.z, hd.w, j, sc, m);
            r.sa = cu_f16_to_f32((uint16_t)(hd.x & 0xffffu)) * (float)sc;
            r.sb = cu_f16_to_f32((uint16_t)(hd.x >> 16)) * (float)m;
        }
    }
};

template <>
struct cu_i8w<QVL_Q6_K> {
    static const int BE = QVL_QK_K, BB = 210;
    static __device__ __forceinline__ void load(const unsigned char *row, int kb, int wq,
                                                cu_i8w_regs &r) {
        const unsigned char *blk = row + (int64_t)(kb / 8) * BB;
        int j = kb % 8, hf = j / 4, qr = j % 4; /* values 128 hf + 32 qr + l, l < 32 */
        const unsigned char *ql = blk + 64 * hf + 32 * (qr % 2) + 4 * wq;
        const unsigned char *qh = blk + 128 + 32 * hf + 4 * wq;
        int ls = qr < 2 ? 0 : 4, hs = 2 * qr;
        uint32_t l0 = cu_ld32_2(ql), l1 = cu_ld32_2(ql + 4);
        uint32_t h0 = cu_ld32_2(qh), h1 = cu_ld32_2(qh + 4);
        r.q0 = (uint32_t)cu_minus32(((l0 >> ls) & 0x0F0F0F0Fu) | (((h0 >> hs) & 0x03030303u) << 4));
        r.q1 = (uint32_t)cu_minus32(((l1 >> ls) & 0x0F0F0F0Fu) | (((h1 >> hs) & 0x03030303u) << 4));
        r.sa = r.sb = 0.0f;
        if (wq == 0) {
            float d = cu_f16_to_f32((uint16_t)cu_ld16(blk + 208));
            uint32_t s = cu_ld16(blk + 192 + 8 * hf + 2 * qr); /* scales of values 0-15, 16-31 */
            r.sa = d * (float)(int8_t)(s & 0xffu);
            r.sb = d * (float)(int8_t)(s >> 8);
        }
    }
};

template <int DT, int BM, int BN, int MINB>
__global__ void __launch_bounds__(CU_I8_THREADS, MINB)
    k_gemm_i8(cu_mm_args p, const int8_t *qa, const float *da, const float *sa) {
    const int TM = BM / 16, TN = BN / 16;
    const int NWR = BN * 4 / CU_I8_THREADS; /* weight rows per thread per step (4 threads a row) */
    __shared__ __align__(16) int a_s[2][8][BM + 4];
    __shared__ __align__(16) int w_s[2][8][BN + 4];
    __shared__ float ad_s[2][BM], as_s[2][BM], wa_s[2][BN], wb_s[2][BN];

    int tid = threadIdx.x, lane = tid % CU_WARP, warp = tid / CU_WARP;
    int tx = (warp % 2) * 8 + lane % 8, ty = (warp / 2) * 4 + lane / 8;
    int64_t b = blockIdx.z, m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    const int nkb = (int)(p.K / CU_I8_BLOCK);
    const int64_t K = p.K;

    /* activations: thread tid < 2 BM loads 16 bytes (half tid % 2 of row tid / 2) per step,
     * thread tid < BM the scale (and sum) of row tid */
    const int arow = tid / 2, ahalf = tid % 2;
    const bool a_ld = tid < 2 * BM && m0 + arow < p.M;
    const int8_t *a_ptr = qa + (a_ld ? (b * p.M + m0 + arow) * K : 0) + 16 * ahalf;
    const bool s_ld = tid < BM && m0 + tid < p.M;
    const int64_t s_off = s_ld ? (b * p.M + m0 + tid) * (int64_t)nkb : 0;
    /* weights: 4 threads per row, words 2 (tid % 4) and 2 (tid % 4) + 1 of the step */
    const int wq = 2 * (tid % 4);
    const unsigned char *w_ptr[NWR];
    bool w_ld[NWR];
#pragma unroll
    for (int r = 0; r < NWR; r++) {
        int row = tid / 4 + r * (CU_I8_THREADS / 4);
        w_ld[r] = n0 + row < p.N;
        int64_t off = (b / p.per_w) * p.w.batch_stride + (w_ld[r] ? n0 + row : 0) * p.w.row_stride;
        w_ptr[r] = (const unsigned char *)p.w.data + (off / cu_i8w<DT>::BE) * cu_i8w<DT>::BB;
    }

    int4 a_nx;
    float ad_nx = 0.0f, as_nx = 0.0f;
    cu_i8w_regs w_nx[NWR];
    auto fetch = [&](int kb) {
        bool in = kb < nkb;
        a_nx = a_ld && in ? __ldg((const int4 *)(a_ptr + (int64_t)kb * CU_I8_BLOCK))
                          : make_int4(0, 0, 0, 0);
        ad_nx = s_ld && in ? __ldg(da + s_off + kb) : 0.0f;
        if (DT == QVL_Q4_K) as_nx = s_ld && in ? __ldg(sa + s_off + kb) : 0.0f;
#pragma unroll
        for (int r = 0; r < NWR; r++) {
            if (w_ld[r] && in) cu_i8w<DT>::load(w_ptr[r], kb, wq, w_nx[r]);
            else w_nx[r] = {0u, 0u, 0.0f, 0.0f};
        }
    };
    auto stash = [&](int buf) {
        if (tid < 2 * BM) {
            a_s[buf][4 * ahalf + 0][arow] = a_nx.x;
            a_s[buf][4 * ahalf + 1][arow] = a_nx.y;
            a_s[buf][4 * ahalf + 2][arow] = a_nx.z;
            a_s[buf][4 * ahalf + 3][arow] = a_nx.w;
        }
        if (tid < BM) {
            ad_s[buf][tid] = ad_nx;
            as_s[buf][tid] = as_nx;
        }
#pragma unroll
        for (int r = 0; r < NWR; r++) {
            int row = tid / 4 + r * (CU_I8_THREADS / 4);
            w_s[buf][wq][row] = (int)w_nx[r].q0;
            w_s[buf][wq + 1][row] = (int)w_nx[r].q1;
            if (wq == 0) {
                wa_s[buf][row] = w_nx[r].sa;
                wb_s[buf][row] = w_nx[r].sb;
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    fetch(0);
    stash(0);
    __syncthreads();
    int buf = 0;
    for (int kb = 0; kb < nkb; kb++) {
        fetch(kb + 1); /* in flight while this step is multiplied (zeros past the end) */
        float ad[TM], wa[TN], wb[TN];
#pragma unroll
        for (int i = 0; i < TM; i++) ad[i] = ad_s[buf][(i / 4) * 64 + ty * 4 + i % 4];
#pragma unroll
        for (int j = 0; j < TN; j++) {
            wa[j] = wa_s[buf][(j / 4) * 64 + tx * 4 + j % 4];
            wb[j] = wb_s[buf][(j / 4) * 64 + tx * 4 + j % 4];
        }
        const int NPASS = DT == QVL_Q6_K ? 2 : 1; /* q6_k: a scale per 16 values */
        /* not unrolled: the two passes' int sums would be live at once (spills under 128) */
#pragma unroll 1
        for (int pass = 0; pass < NPASS; pass++) {
            int isum[TM][TN];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) isum[i][j] = 0;
#pragma unroll
            for (int kw = pass * (8 / NPASS); kw < (pass + 1) * (8 / NPASS); kw++) {
                int av[TM], wv[TN];
#pragma unroll
                for (int h = 0; h < TM / 4; h++) {
                    int4 x = *(const int4 *)&a_s[buf][kw][h * 64 + ty * 4];
                    av[4 * h] = x.x;
                    av[4 * h + 1] = x.y;
                    av[4 * h + 2] = x.z;
                    av[4 * h + 3] = x.w;
                }
#pragma unroll
                for (int h = 0; h < TN / 4; h++) {
                    int4 x = *(const int4 *)&w_s[buf][kw][h * 64 + tx * 4];
                    wv[4 * h] = x.x;
                    wv[4 * h + 1] = x.y;
                    wv[4 * h + 2] = x.z;
                    wv[4 * h + 3] = x.w;
                }
#pragma unroll
                for (int i = 0; i < TM; i++)
#pragma unroll
                    for (int j = 0; j < TN; j++) isum[i][j] = __dp4a(av[i], wv[j], isum[i][j]);
            }
#pragma unroll
            for (int j = 0; j < TN; j++) {
                float ws = DT == QVL_Q6_K && pass == 1 ? wb[j] : wa[j];
#pragma unroll
                for (int i = 0; i < TM; i++) acc[i][j] = fmaf(ad[i] * ws, cu_i2f_small(isum[i][j]), acc[i][j]);
            }
        }
        if (DT == QVL_Q4_K) { /* the mins: - dmin m_j * da * sum(qa) */
#pragma unroll
            for (int i = 0; i < TM; i++) {
                float s = as_s[buf][(i / 4) * 64 + ty * 4 + i % 4];
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(-wb[j], s, acc[i][j]);
            }
        }
        stash(buf ^ 1); /* that buffer was last read before the previous barrier */
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int64_t m = m0 + (i / 4) * 64 + ty * 4 + i % 4;
        if (m >= p.M) continue;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int64_t n = n0 + (j / 4) * 64 + tx * 4 + j % 4;
            if (n < p.N) cu_mm_store(p, b, m, n, acc[i][j]);
        }
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

static bool cu_int8_env_off(void) {
    const char *v = getenv("QVL_CUDA_INT8_GEMM"); /* A/B runs: 0 = the f32 GEMMs for q8_0 */
    return v && strcmp(v, "0") == 0;
}

/* Which int8 kernel runs this matmul: 1 the q4_k/q6_k GEMV, 2 the GEMM, 0 none. The weight
 * rows (and batches) must be whole blocks read with unit stride, at the alignment the loads
 * need: 16 bytes for q4_k (its 144-byte blocks then all are), 2 for q8_0 and q6_k. */
static int cu_int8_path(const cu_mat &w, int64_t batches, int64_t M) {
    int64_t be;
    uintptr_t align;
    switch (w.dtype) {
    case QVL_Q8_0: be = QVL_Q8_0_BLOCK, align = 2; break;
    case QVL_Q4_K: be = QVL_QK_K, align = 16; break;
    case QVL_Q6_K: be = QVL_QK_K, align = 2; break;
    default: return 0;
    }
    if (w.col_stride != 1 || w.cols % be != 0 || w.row_stride % be != 0 ||
        w.batch_stride % be != 0 || (uintptr_t)w.data % align != 0 || w.cols > INT_MAX / 2 ||
        M < 1)
        return 0;
    bool q8_gemv = w.dtype == QVL_Q8_0 && M <= CU_GEMV_Q8_MAX_ROWS; /* k_gemv_q8 (cu_matmul.cu) */
    if (M <= CU_GEMV_MAX_ROWS && !q8_gemv && w.dtype != QVL_Q8_0) return batches == 1 ? 1 : 0;
    if (q8_gemv) return 0;
    if (cu_int8_env_off() || batches > 65535 || (M + 63) / 64 > 65535 || w.cols / CU_I8_BLOCK > INT_MAX)
        return 0;
    return 2;
}

int64_t cu_matmul_int8_scratch_bytes(const cu_mat &w, int64_t batches, int64_t M) {
    if (!cu_int8_path(w, batches, M)) return 0;
    int64_t rows = batches * M, nb = w.cols / CU_I8_BLOCK;
    return rows * w.cols + 2 * rows * nb * (int64_t)sizeof(float); /* qa, da, sa */
}

template <int DT, int BM, int BN, int MINB>
static void cu_gemm_i8_launch(cu_stream s, const cu_mm_args &p, const int8_t *qa,
                              const float *da, const float *sa) {
    dim3 grid((unsigned)((p.N + BN - 1) / BN), (unsigned)((p.M + BM - 1) / BM), (unsigned)p.batches);
    k_gemm_i8<DT, BM, BN, MINB><<<grid, CU_I8_THREADS, 0, s>>>(p, qa, da, sa);
}

/* 128 x 64 tiles unless they leave SMs without two blocks each (64 x 64 then). */
template <int DT>
static void cu_gemm_i8_pick(cu_stream s, const cu_mm_args &p, const int8_t *qa,
                            const float *da, const float *sa, int sms) {
    int64_t big = p.batches * ((p.M + 127) / 128) * ((p.N + 63) / 64);
    if (big >= 2 * (int64_t)sms) cu_gemm_i8_launch<DT, 128, 64, 2>(s, p, qa, da, sa);
    else cu_gemm_i8_launch<DT, 64, 64, 2>(s, p, qa, da, sa);
}

extern "C" int cu_matmul_int8_takes(cu_mat w, int64_t batches, int64_t M) {
    return cu_int8_path(w, batches, M) != 0;
}

bool cu_matmul_int8(cu_stream s, const cu_mm_args &p, void *scratch, bool ready) {
    int path = cu_int8_path(p.w, p.batches, p.M);
    if (!path || !scratch) return false;
    int64_t rows = p.batches * p.M;
    cu_i8_rows q = cu_i8_rows_of(scratch, rows, p.K);
    const int8_t *qa = q.qa;
    const float *da = q.da, *sa = q.sa;
    /* sa always: a later matmul of the same rows (ready) may have q4_k weights */
    if (!ready) cu_quantize_i8_rows(s, p.a, rows, p.K, q);
    if (path == 1) {
        int64_t blocks = (p.N + CU_I8_WARPS - 1) / CU_I8_WARPS;
        if (blocks > 65535) blocks = 65535;
        unsigned g = (unsigned)blocks, t = CU_I8_WARPS * CU_WARP;
        /* instantiated per row count (cu_by_rows): more accumulators than rows would cost
         * the occupancy that keeps enough loads in flight (one row above all) */
        cu_by_rows(p.M, [&](auto mr) {
            const int MR = decltype(mr)::value;
            if (p.w.dtype == QVL_Q4_K) k_gemv_k<cu_q4k_raw, 144, MR><<<g, t, 0, s>>>(p, qa, da, sa);
            else k_gemv_k<cu_q6k_raw, 210, MR><<<g, t, 0, s>>>(p, qa, da, sa);
        });
        return true;
    }
    int dev = 0, sms = 1;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        sms = 1;
    switch (p.w.dtype) {
    case QVL_Q8_0: cu_gemm_i8_pick<QVL_Q8_0>(s, p, qa, da, sa, sms); break;
    case QVL_Q4_K: cu_gemm_i8_pick<QVL_Q4_K>(s, p, qa, da, sa, sms); break;
    default: cu_gemm_i8_pick<QVL_Q6_K>(s, p, qa, da, sa, sms); break;
    }
    return true;
}
