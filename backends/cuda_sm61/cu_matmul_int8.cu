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

#include "cu_kquant.cuh"
#include "cu_matmul.cuh"

#define CU_I8_WARPS 8

/* ---- decode GEMVs: q4_k, q6_k ------------------------------------------------------------- */

/* A warp per output column n, all M rows at once (each weight byte is read once); 8 lanes per
 * super-block (cu_kquant.cuh), so a warp covers 4 neighbouring super-blocks per step,
 * CU_K_UNROLL steps loaded before any is used. */
#define CU_K_UNROLL 2

template <int DT, int MR>
__global__ void __launch_bounds__(CU_I8_WARPS *CU_WARP)
    k_gemv_k(cu_mm_args p, const int8_t *qa, const float *da, const float *sa) {
    int lane = threadIdx.x % CU_WARP, g = lane / 8, part = lane % 8;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int nsb = (int)(p.K / QVL_QK_K), K = (int)p.K, nb = K / CU_I8_BLOCK;
    int M = (int)p.M;
    const unsigned char *wbase = (const unsigned char *)p.w.data;
    for (int64_t n = warp; n < p.N; n += n_warps) { /* warp-uniform loop */
        const unsigned char *wrow = wbase + (n * p.w.row_stride / QVL_QK_K) * (int64_t)cu_kq<DT>::BB;
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int s0 = g; s0 < nsb; s0 += 4 * CU_K_UNROLL) {
            cu_kraw raw[CU_K_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int sb = s0 + 4 * u;
                if (sb < nsb) cu_kq<DT>::load(wrow + sb * (int64_t)cu_kq<DT>::BB, part, raw[u]);
                else raw[u].a = raw[u].b = make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int sb = s0 + 4 * u;
                if (sb < nsb) cu_kq<DT>::template dot<MR>(raw[u], part, sb, M, qa, K, da, sa, nb, acc);
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

/* Column group cg (CU_I8_WARPS / KS columns) of matmul p: what one block of k_gemv_k_split
 * does per step of its loop. Every thread of the block calls it (cu_split_sum_store's barriers). */
template <int DT, int MR, int KS, bool RES>
__device__ __forceinline__ void cu_gemv_k_split_group(const cu_mm_args &p, int64_t cg,
                                                      const int8_t *qa, const float *da,
                                                      const float *sa, float (*red)[MR]) {
    const int CPB = CU_I8_WARPS / KS;
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP, g = lane / 8, part = lane % 8;
    int col = warp / KS, kp = warp % KS;
    int nsb = (int)(p.K / QVL_QK_K), K = (int)p.K, nb = K / CU_I8_BLOCK;
    int M = (int)p.M;
    const unsigned char *wbase = (const unsigned char *)p.w.data;
    int64_t n = cg * CPB + col;
    float acc[MR];
#pragma unroll
    for (int m = 0; m < MR; m++) acc[m] = 0.0f;
    if (n < p.N) { /* warp-uniform */
        const unsigned char *wrow =
            wbase + (n * p.w.row_stride / QVL_QK_K) * (int64_t)cu_kq<DT>::BB;
        for (int s0 = 4 * kp + g; s0 < nsb; s0 += 4 * KS * CU_K_UNROLL) {
            cu_kraw raw[CU_K_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int sb = s0 + 4 * KS * u;
                if (sb < nsb) cu_kq<DT>::load(wrow + sb * (int64_t)cu_kq<DT>::BB, part, raw[u]);
                else raw[u].a = raw[u].b = make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < CU_K_UNROLL; u++) {
                int sb = s0 + 4 * KS * u;
                if (sb < nsb)
                    cu_kq<DT>::template dot<MR>(raw[u], part, sb, M, qa, K, da, sa, nb, acc);
            }
        }
    }
    cu_split_sum_store<MR, KS, 1, RES>(red, acc, p, 0, cg * CPB);
}

/* The same for 2..CU_GEMV_I8_MAX_ROWS rows with each column's super-blocks split between KS
 * warps of a block (CU_I8_WARPS / KS columns per block). One warp per column left most SMs with
 * a few warps that each waited out a long chain of activation loads per row (2048 columns:
 * half a wave, the schedulers idle four cycles in five); KS warps per column give KS times the
 * warps, each with 1/KS of the chain. The warps' sums meet in shared memory and are added in
 * part order (the same result every run). */
template <int DT, int MR, int KS>
__global__ void __launch_bounds__(CU_I8_WARPS *CU_WARP)
    k_gemv_k_split(cu_mm_args p, const int8_t *qa, const float *da, const float *sa) {
    __shared__ float red[CU_I8_WARPS][MR];
    const int64_t groups = (p.N + CU_I8_WARPS / KS - 1) / (CU_I8_WARPS / KS);
    for (int64_t cg = blockIdx.x; cg < groups; cg += gridDim.x) /* block-uniform loop */
        cu_gemv_k_split_group<DT, MR, KS, true>(p, cg, qa, da, sa, red);
}

/* k_gemv_k_split for up to CU_MM_GROUP_MAX matmuls of the same int8 rows and K (NORM_LINEAR's
 * projections) in one launch: the blocks walk the parts' column groups one after the other
 * (part i's from g.first[i]). One launch instead of one per projection, and a wave that the
 * small projections (k, v: few columns) no longer leave mostly idle. Parts may mix q4_k and
 * q6_k (a Q4_K_M layer's v is q6_k in half the layers): a column group lies in one part, so
 * the choice is block-uniform. */
template <int MR, int KS>
__global__ void __launch_bounds__(CU_I8_WARPS *CU_WARP)
    k_gemv_k_split_parts(cu_mm_group g, const int8_t *qa, const float *da, const float *sa) {
    __shared__ float red[CU_I8_WARPS][MR];
    const int64_t groups = g.n == 2 ? g.first[2] : g.first[3];
    for (int64_t cg = blockIdx.x; cg < groups; cg += gridDim.x) { /* block-uniform */
        int64_t own = cg;
        const cu_mm_args p = cu_group_part(g, &own);
        if (p.w.dtype == QVL_Q4_K) cu_gemv_k_split_group<QVL_Q4_K, MR, KS, false>(p, own, qa, da, sa, red);
        else cu_gemv_k_split_group<QVL_Q6_K, MR, KS, false>(p, own, qa, da, sa, red);
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
    k_gemm_i8(cu_mm_args p, const int8_t *qa, const float *da, const float *sa, int splits,
              int kbs, float *part) {
    const int TM = BM / 16, TN = BN / 16;
    const int NWR = BN * 4 / CU_I8_THREADS; /* weight rows per thread per step (4 threads a row) */
    __shared__ __align__(16) int a_s[2][8][BM + 4];
    __shared__ __align__(16) int w_s[2][8][BN + 4];
    __shared__ float ad_s[2][BM], as_s[2][BM], wa_s[2][BN], wb_s[2][BN];

    int tid = threadIdx.x, lane = tid % CU_WARP, warp = tid / CU_WARP;
    int tx = (warp % 2) * 8 + lane % 8, ty = (warp / 2) * 4 + lane / 8;
    int split = (int)(blockIdx.z % splits); /* activation blocks [kb0, kb1) of this block */
    int64_t b = blockIdx.z / splits, m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;
    const int nkb = (int)(p.K / CU_I8_BLOCK), kb0 = split * kbs, kb1 = min(nkb, kb0 + kbs);
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
        bool in = kb < kb1;
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

    fetch(kb0);
    stash(0);
    __syncthreads();
    int buf = 0;
    for (int kb = kb0; kb < kb1; kb++) {
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
            if (n >= p.N) continue;
            if (splits > 1) part[(((int64_t)split * p.batches + b) * p.M + m) * p.N + n] = acc[i][j];
            else cu_mm_store(p, b, m, n, acc[i][j]);
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
    if (M <= CU_GEMV_I8_MAX_ROWS) { /* q8_0: k_gemv_q8 (cu_matmul.cu) */
        /* k_gemv_k's offsets into the int8 rows (m K + k) are ints */
        bool k_gemv = w.dtype != QVL_Q8_0 && batches == 1 &&
                      w.cols <= INT_MAX / CU_GEMV_I8_MAX_ROWS;
        return k_gemv ? 1 : 0;
    }
    if (cu_int8_env_off() || batches > 65535 || (M + 63) / 64 > 65535 || w.cols / CU_I8_BLOCK > INT_MAX)
        return 0;
    return 2;
}

/* Split K. A short prompt (or 9-16 batched decode rows) against 2048 output columns makes
 * few 64 x 64 tiles: 64 for 128 rows, where a GPU of many SMs holds two blocks on each of 132.
 * Then each tile's activation blocks are cut into `splits` runs of kbs, computed by separate
 * blocks into f32 partial sums placed after the int8 activations in the scratch, and added in
 * split order by cu_gemm_split_sum (the same result every run). Splits fill the SMs' two
 * resident blocks once at most (more would add rounds), each of at least CU_I8_MIN_KBS blocks
 * (shorter runs spend more on the partial sums' round trip than they save).
 * QVL_CUDA_I8_SPLIT=N forces N where K allows it, =0 (or 1) turns the split off (A/B runs,
 * tests); unset or =auto plans as above. */
#define CU_I8_MIN_KBS 8
#define CU_I8_MAX_SPLITS 8
#define CU_I8_MAX_PART_BYTES ((int64_t)32 << 20)

struct cu_i8_plan {
    bool big;        /* 128 x 64 tiles, else 64 x 64 */
    int splits, kbs; /* splits runs of kbs activation blocks (the last may be shorter) */
};

/* 128 x 64 tiles unless they leave SMs without two blocks each (64 x 64 then, and K split
 * where even those are too few). */
static cu_i8_plan cu_i8_plan_for(int64_t batches, int64_t M, int64_t N, int64_t K) {
    const int nkb = (int)(K / CU_I8_BLOCK);
    const int64_t sms = cu_current_sm_count(1);
    cu_i8_plan none = {false, 1, nkb};
    if (batches * ((M + 127) / 128) * ((N + 63) / 64) >= 2 * sms) {
        none.big = true;
        return none;
    }
    int64_t tiles = batches * ((M + 63) / 64) * ((N + 63) / 64);
    const char *env = getenv("QVL_CUDA_I8_SPLIT");
    const bool planned = !env || !*env || strcmp(env, "auto") == 0;
    int64_t want = planned ? 2 * sms / tiles : atoi(env);
    if (planned && want > nkb / CU_I8_MIN_KBS) want = nkb / CU_I8_MIN_KBS;
    if (want > CU_I8_MAX_SPLITS) want = CU_I8_MAX_SPLITS;
    if (want > nkb) want = nkb;
    if (want < 2) return none;
    int kbs = (int)((nkb + want - 1) / want);
    int splits = (nkb + kbs - 1) / kbs; /* no empty run */
    if (splits < 2 || splits * batches > 65535 ||
        splits * batches * M * N * (int64_t)sizeof(float) > CU_I8_MAX_PART_BYTES)
        return none;
    cu_i8_plan pl = {false, splits, kbs};
    return pl;
}

/* Bytes of the int8 activations (qa, da, sa) at the start of the scratch, rounded up to 16. */
static int64_t cu_i8_rows_bytes(int64_t rows, int64_t K) {
    int64_t b = rows * K + 2 * rows * (K / CU_I8_BLOCK) * (int64_t)sizeof(float);
    return (b + 15) / 16 * 16;
}

int64_t cu_matmul_int8_scratch_bytes(const cu_mat &w, int64_t batches, int64_t M) {
    int path = cu_int8_path(w, batches, M);
    if (!path) return 0;
    int64_t bytes = cu_i8_rows_bytes(batches * M, w.cols);
    if (path == 2) {
        cu_i8_plan sp = cu_i8_plan_for(batches, M, w.rows, w.cols);
        if (sp.splits > 1) bytes += sp.splits * batches * M * w.rows * (int64_t)sizeof(float);
    }
    return bytes;
}

template <int DT, int BM, int BN, int MINB>
static void cu_gemm_i8_launch(cu_stream s, const cu_mm_args &p, const int8_t *qa,
                              const float *da, const float *sa, cu_i8_plan sp, float *part) {
    dim3 grid((unsigned)((p.N + BN - 1) / BN), (unsigned)((p.M + BM - 1) / BM),
              (unsigned)(p.batches * sp.splits));
    k_gemm_i8<DT, BM, BN, MINB><<<grid, CU_I8_THREADS, 0, s>>>(p, qa, da, sa, sp.splits, sp.kbs, part);
    if (sp.splits > 1) cu_gemm_split_sum(s, p, sp.splits, part);
}

template <int DT>
static void cu_gemm_i8_pick(cu_stream s, const cu_mm_args &p, const int8_t *qa,
                            const float *da, const float *sa, float *part) {
    cu_i8_plan pl = cu_i8_plan_for(p.batches, p.M, p.N, p.K);
    if (pl.big) cu_gemm_i8_launch<DT, 128, 64, 2>(s, p, qa, da, sa, pl, part);
    else cu_gemm_i8_launch<DT, 64, 64, 2>(s, p, qa, da, sa, pl, part);
}

template <int MR>
static void cu_gemv_k_launch(cu_stream s, unsigned grid, unsigned threads, const cu_mm_args &p,
                             const int8_t *qa, const float *da, const float *sa) {
    if (p.w.dtype == QVL_Q4_K) k_gemv_k<QVL_Q4_K, MR><<<grid, threads, 0, s>>>(p, qa, da, sa);
    else k_gemv_k<QVL_Q6_K, MR><<<grid, threads, 0, s>>>(p, qa, da, sa);
}

template <int DT, int MR>
static void cu_gemv_k_split_launch(cu_stream s, const cu_mm_args &p, const int8_t *qa,
                                   const float *da, const float *sa, int ks) {
    int64_t groups = (p.N + CU_I8_WARPS / ks - 1) / (CU_I8_WARPS / ks);
    unsigned g = (unsigned)(groups > 65535 ? 65535 : groups), t = CU_I8_WARPS * CU_WARP;
    if (ks == 4) k_gemv_k_split<DT, MR, 4><<<g, t, 0, s>>>(p, qa, da, sa);
    else if (ks == 2) k_gemv_k_split<DT, MR, 2><<<g, t, 0, s>>>(p, qa, da, sa);
    else k_gemv_k_split<DT, MR, 1><<<g, t, 0, s>>>(p, qa, da, sa);
}

template <int MR>
static void cu_gemv_k_rows_launch(cu_stream s, unsigned grid, unsigned threads,
                                  const cu_mm_args &p, const int8_t *qa, const float *da,
                                  const float *sa) {
    int ks = cu_gemv_split_parts((p.K / QVL_QK_K + 3) / 4); /* a warp step: 4 super-blocks */
    if (ks == 0) cu_gemv_k_launch<MR>(s, grid, threads, p, qa, da, sa);
    else if (p.w.dtype == QVL_Q4_K) cu_gemv_k_split_launch<QVL_Q4_K, MR>(s, p, qa, da, sa, ks);
    else cu_gemv_k_split_launch<QVL_Q6_K, MR>(s, p, qa, da, sa, ks);
}

template <int MR>
static void cu_gemv_k_parts_launch(cu_stream s, const cu_mm_group &g, const int8_t *qa,
                                   const float *da, const float *sa, int ks) {
    unsigned grid = (unsigned)(g.first[g.n] > 65535 ? 65535 : g.first[g.n]);
    unsigned t = CU_I8_WARPS * CU_WARP;
    if (ks == 4) k_gemv_k_split_parts<MR, 4><<<grid, t, 0, s>>>(g, qa, da, sa);
    else if (ks == 2) k_gemv_k_split_parts<MR, 2><<<grid, t, 0, s>>>(g, qa, da, sa);
    else k_gemv_k_split_parts<MR, 1><<<grid, t, 0, s>>>(g, qa, da, sa);
}

bool cu_gemv_group_on(void) {
    const char *v = getenv("QVL_CUDA_GEMV_GROUP");
    return !(v && strcmp(v, "0") == 0);
}

bool cu_matmul_int8_group(cu_stream s, const cu_mm_args *ps, int n, void *scratch) {
    if (!cu_gemv_group_on() || n < 2 || n > CU_MM_GROUP_MAX || !scratch) return false;
    const cu_mm_args &p0 = ps[0];
    if (p0.M < 2) return false;
    for (int i = 0; i < n; i++)
        if (cu_int8_path(ps[i].w, ps[i].batches, ps[i].M) != 1 ||
            (ps[i].w.dtype != QVL_Q4_K && ps[i].w.dtype != QVL_Q6_K) || ps[i].K != p0.K ||
            ps[i].M != p0.M)
            return false;
    cu_i8_rows q = cu_i8_rows_of(scratch, p0.M, p0.K); /* quantised already (the caller's norm) */
    if (cu_gemv_rows_regs_k_group(s, ps, n, q)) return true;
    int ks = cu_gemv_split_parts((p0.K / QVL_QK_K + 3) / 4); /* as cu_gemv_k_rows_launch */
    if (ks == 0) return false;
    cu_mm_group g;
    g.n = n;
    g.first[0] = 0;
    const int64_t cpb = CU_I8_WARPS / ks;
    for (int i = 0; i < n; i++) {
        g.p[i] = ps[i];
        g.first[i + 1] = g.first[i] + (ps[i].N + cpb - 1) / cpb;
    }
    if (p0.M <= 4) cu_gemv_k_parts_launch<4>(s, g, q.qa, q.da, q.sa, ks);
    else cu_gemv_k_parts_launch<CU_GEMV_I8_MAX_ROWS>(s, g, q.qa, q.da, q.sa, ks);
    return true;
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
        if (cu_gemv_rows_regs_k(s, p, q)) return true;
        int64_t blocks = (p.N + CU_I8_WARPS - 1) / CU_I8_WARPS;
        if (blocks > 65535) blocks = 65535;
        unsigned g = (unsigned)blocks, t = CU_I8_WARPS * CU_WARP;
        /* instantiated per row count: more accumulators than rows would cost the occupancy
         * that keeps enough loads in flight (one row above all) */
        if (p.M == 1) cu_gemv_k_launch<1>(s, g, t, p, qa, da, sa);
        else if (p.M <= 4) cu_gemv_k_rows_launch<4>(s, g, t, p, qa, da, sa);
        else cu_gemv_k_rows_launch<CU_GEMV_I8_MAX_ROWS>(s, g, t, p, qa, da, sa);
        return true;
    }
    float *part = (float *)((char *)scratch + cu_i8_rows_bytes(rows, p.K));
    switch (p.w.dtype) {
    case QVL_Q8_0: cu_gemm_i8_pick<QVL_Q8_0>(s, p, qa, da, sa, part); break;
    case QVL_Q4_K: cu_gemm_i8_pick<QVL_Q4_K>(s, p, qa, da, sa, part); break;
    default: cu_gemm_i8_pick<QVL_Q6_K>(s, p, qa, da, sa, part); break;
    }
    return true;
}
