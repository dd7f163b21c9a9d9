/* ATTENTION for many queries with head size 64 or 128 (prefill, the vision tower): a tiled
 * kernel in the manner of FlashAttention-2, written for fp32 FMA units (no tensor cores).
 *
 * A block of 128 threads takes BQ = 4096 / D queries of one head and walks the keys its
 * queries can see in tiles of 64. Per tile it does two small GEMMs out of shared memory:
 *   S = (c * Q) K^T       (BQ x 64; each thread a 4 x SK register tile, SK = BQ / 8)
 *   O = O * corr + P V    (BQ x D;  each thread a 4 x 8 register tile)
 * with the online softmax between them (running max m and sum l per query; corr rescales O
 * when the max grows). Q is stored transposed so that one 16-byte load gives 4 queries; K is
 * staged transposed 32 dimensions at a time and V 2048 / D keys at a time through one buffer,
 * which keeps the block under Pascal's 48 KiB of shared memory. Rows of the staged tiles are
 * padded by 4 floats: the transposing stores then hit 8 banks instead of 1.
 *
 * Masks as cu_attn_range (cu_attention.cuh) gives them: each query sees one range of keys
 * [j0, j1); hidden scores are -inf, so exp gives 0; a query that sees nothing gets 0. Keys past
 * the block's union of ranges are neither read nor visited, so rows of a cache not yet written
 * (NaN in the tests) never reach the sums. */
#include <stdlib.h>
#include <string.h>

#include "cu_attention.cuh"

#define CU_FA_THREADS 128
#define CU_FA_BK 64 /* keys per tile */
#define CU_FA_DC 32 /* dimensions of K staged at a time */
#define CU_FA_PAD 4
/* Resident blocks per SM the registers must allow: 3 fits the register tiles without spills
 * (4 makes the compiler spill; with no bound it takes more registers and fewer blocks fit).
 * Measured alternatives: docs/BENCHMARKS.md. */
#ifndef CU_FA_MIN_BLOCKS
#define CU_FA_MIN_BLOCKS 3
#endif

/* A staged chunk is 2048 values, 16 per thread: keys t0 + row0 + rstep * u (u < 16) at one
 * column col of x (a K or V view, kv head g); keys at or past hi read as 0. */
#define CU_FA_PER_THREAD (2048 / CU_FA_THREADS)
#define CU_FA_FETCH_ARGS                                                                         \
    const cu_view &x, int64_t g, int t0, int row0, int rstep, int64_t col, int hi,            \
        float r[CU_FA_PER_THREAD]
__device__ __forceinline__ void cu_fa_fetch_f32(CU_FA_FETCH_ARGS) { /* nothing to convert */
    int64_t base = g * x.stride[1] + col * x.stride[2];
#pragma unroll
    for (int u = 0; u < CU_FA_PER_THREAD; u++) {
        int j = t0 + row0 + rstep * u;
        r[u] = j < hi ? ((const float *)x.data)[j * x.stride[0] + base] : 0.0f;
    }
}

/* KV: the dtype of k and v (F16 or BF16) known at compile time, or CU_FA_ANY: x.dtype, read
 * per load. With the dtype read per load the conversions' branches keep more values live than
 * the registers hold (nvcc spills over 500 bytes a thread), so the 16-bit caches of the text
 * model have instances of their own. */
#define CU_FA_ANY (-1)
template <int KV> __device__ __forceinline__ void cu_fa_fetch_raw(CU_FA_FETCH_ARGS) {
    const int32_t dt = KV == CU_FA_ANY ? x.dtype : KV;
    int64_t base = g * x.stride[1] + col * x.stride[2];
    uint32_t raw[CU_FA_PER_THREAD]; /* every load in flight before the first conversion */
#pragma unroll
    for (int u = 0; u < CU_FA_PER_THREAD; u++) {
        int j = t0 + row0 + rstep * u;
        raw[u] = j < hi ? cu_load_raw(x.data, dt, j * x.stride[0] + base) : 0u;
    }
#pragma unroll
    for (int u = 0; u < CU_FA_PER_THREAD; u++) r[u] = cu_raw_to_f32(dt, raw[u]);
}

/* KV: the dtype of k and v (QVL_F32, QVL_F16, QVL_BF16) or CU_FA_ANY. */
template <int KV>
__device__ __forceinline__ void cu_fa_fetch(CU_FA_FETCH_ARGS) {
    if (KV == QVL_F32) cu_fa_fetch_f32(x, g, t0, row0, rstep, col, hi, r);
    else cu_fa_fetch_raw<KV>(x, g, t0, row0, rstep, col, hi, r);
}

/* KV: the dtype of k and v, or CU_FA_ANY. F32 (the vision tower, an f32 cache) is loaded as
 * it is; the others as raw bits, converted after every load of a chunk is in flight
 * (cu_load_raw). One instance serving f32 and the others spilled (clang, sm_61) and cost the
 * f32 case a fifth of its speed. */
template <int D, int KV>
__global__ void __launch_bounds__(CU_FA_THREADS, CU_FA_MIN_BLOCKS) k_attention_flash(cu_attn_job p) {
    constexpr int BQ = 4096 / D;           /* queries per block */
    constexpr int QS = BQ + CU_FA_PAD;     /* row length of q_t and p_t */
    constexpr int KS = CU_FA_BK + CU_FA_PAD; /* row length of the staged K^T */
    constexpr int VC = 2048 / D;           /* keys of V staged at a time */
    constexpr int NQG = BQ / 4;            /* query groups of 4 */
    constexpr int SK = CU_FA_BK * NQG / CU_FA_THREADS; /* keys per thread in S */
    constexpr int PARTS = CU_FA_THREADS / BQ; /* threads per query in the softmax */
    constexpr int BUF = CU_FA_DC * KS > VC * D ? CU_FA_DC * KS : VC * D;
    static_assert(SK % 4 == 0 && D % 32 == 0 && CU_FA_BK % PARTS == 0, "tile shape");

    __shared__ __align__(16) float q_t[D * QS];        /* c * Q, transposed */
    __shared__ __align__(16) float p_t[CU_FA_BK * QS]; /* S, then P, transposed */
    __shared__ __align__(16) float buf[BUF];           /* K^T chunk or V chunk */
    __shared__ float m_s[BQ], l_s[BQ], corr_s[BQ], red_m[PARTS][BQ], red_l[PARTS][BQ];
    __shared__ int j0_s[BQ], j1_s[BQ], range_s[2];

    const cu_view &q = p.q, &k = p.k, &v = p.v;
    const int64_t N = q.shape[0], Hq = q.shape[1], L = k.shape[0], Hkv = k.shape[1];
    const int64_t h = blockIdx.y, g = h / (Hq / Hkv);
    /* the last query blocks see the most keys under a causal mask: start them first */
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BQ;
    const int tid = threadIdx.x;

    if (tid == 0) {
        range_s[0] = (int)L;
        range_s[1] = 0;
    }
    __syncthreads();
    if (tid < BQ) {
        int64_t a, b;
        cu_attn_range(p, q0 + tid, N, L, &a, &b);
        j0_s[tid] = (int)a;
        j1_s[tid] = (int)b;
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
        if (b > a) {
            atomicMin(&range_s[0], (int)a);
            atomicMax(&range_s[1], (int)b);
        }
    }
    const float qscale = cu_attn_base2_scale(p.scale); /* c: scores in base 2 */
    for (int e = tid; e < BQ * D; e += CU_FA_THREADS) {
        int qi = e / D, d = e % D;
        int64_t i = q0 + qi;
        q_t[d * QS + qi] =
            i < N ? cu_view_load(q, i * q.stride[0] + h * q.stride[1] + d * q.stride[2]) * qscale
                  : 0.0f;
    }
    __syncthreads();
    /* key indices are ints: L + CU_FA_BK fits one (the launcher checks), and 64-bit ones cost
     * clang's code registers it does not have */
    const int lo = range_s[0], hi = range_s[1];

    /* S tile: query group sq of 4, keys SK * sk ...; O tile: query group sq, columns 8 * oc */
    const int sq = tid % NQG, sk = tid / NQG, oc = tid / NQG;
    int rj0[4], rj1[4];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        rj0[a] = j0_s[4 * sq + a];
        rj1[a] = j1_s[4 * sq + a];
    }
    float o[4][8];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int c = 0; c < 8; c++) o[a][c] = 0.0f;

    /* Chunks go K^T 0 .. NC-1, then V 0 .. NC-1, tile after tile; the next chunk's loads are
     * issued before the current one is computed, so they are in flight meanwhile. K chunk c:
     * thread tid holds keys tid / 32 + 4u at dimension 32c + tid % 32; V chunk c: keys
     * VC c + tid / D + (128 / D) u at dimension tid % D. */
    constexpr int NC = D / CU_FA_DC;
    const int k_row = tid / CU_FA_DC, k_col = tid % CU_FA_DC;
    const int v_row = tid / D, v_col = tid % D, v_step = CU_FA_THREADS / D;
    float stage[CU_FA_PER_THREAD];
    if (lo < hi) cu_fa_fetch<KV>(k, g, lo, k_row, CU_FA_THREADS / CU_FA_DC, k_col, hi, stage);

    for (int t0 = lo; t0 < hi; t0 += CU_FA_BK) {
        /* ---- S = Q K^T over D, 32 dimensions at a time ---- */
        float s[4][SK];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < SK; b++) s[a][b] = 0.0f;
        for (int c = 0; c < NC; c++) {
            const int dc = c * CU_FA_DC;
            __syncthreads(); /* buf is free */
#pragma unroll
            for (int u = 0; u < CU_FA_PER_THREAD; u++)
                buf[k_col * KS + k_row + (CU_FA_THREADS / CU_FA_DC) * u] = stage[u];
            __syncthreads();
            if (c + 1 < NC)
                cu_fa_fetch<KV>(k, g, t0, k_row, CU_FA_THREADS / CU_FA_DC, dc + CU_FA_DC + k_col, hi,
                            stage);
            else
                cu_fa_fetch<KV>(v, g, t0, v_row, v_step, v_col, hi, stage);
#pragma unroll 8
            for (int d = 0; d < CU_FA_DC; d++) {
                float4 qa = *(const float4 *)&q_t[(dc + d) * QS + 4 * sq];
                float qv[4] = {qa.x, qa.y, qa.z, qa.w};
#pragma unroll
                for (int b4 = 0; b4 < SK / 4; b4++) {
                    float4 kb = *(const float4 *)&buf[d * KS + SK * sk + 4 * b4];
                    float kv[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
                    for (int a = 0; a < 4; a++)
#pragma unroll
                        for (int b = 0; b < 4; b++) s[a][4 * b4 + b] += qv[a] * kv[b];
                }
            }
        }
        /* hidden scores -> -inf, then S into p_t */
#pragma unroll
        for (int b = 0; b < SK; b++) {
            int jj = SK * sk + b;
            int j = t0 + jj;
            float4 col;
            col.x = j >= rj0[0] && j < rj1[0] ? s[0][b] : -INFINITY;
            col.y = j >= rj0[1] && j < rj1[1] ? s[1][b] : -INFINITY;
            col.z = j >= rj0[2] && j < rj1[2] ? s[2][b] : -INFINITY;
            col.w = j >= rj0[3] && j < rj1[3] ? s[3][b] : -INFINITY;
            *(float4 *)&p_t[jj * QS + 4 * sq] = col;
        }
        __syncthreads();

        /* ---- online softmax: PARTS threads per query, CU_FA_BK / PARTS keys each ---- */
        {
            const int r = tid % BQ, part = tid / BQ;
            const int jb = part * (CU_FA_BK / PARTS), je = jb + CU_FA_BK / PARTS;
            float mx = -INFINITY;
#pragma unroll 4 /* clang unrolls these fully, and spills then */
            for (int jj = jb; jj < je; jj++) mx = fmaxf(mx, p_t[jj * QS + r]);
            red_m[part][r] = mx;
            __syncthreads();
            const float m_old = m_s[r];
            float m_new = m_old;
#pragma unroll
            for (int w = 0; w < PARTS; w++) m_new = fmaxf(m_new, red_m[w][r]);
            float sum = 0.0f;
#pragma unroll 4
            for (int jj = jb; jj < je; jj++) {
                float x = p_t[jj * QS + r];
                float e = m_new == -INFINITY ? 0.0f : exp2f(x - m_new); /* 2^-inf = 0 */
                p_t[jj * QS + r] = e;
                sum += e;
            }
            red_l[part][r] = sum;
            __syncthreads();
            if (part == 0) {
                float corr = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
                float l = l_s[r] * corr;
#pragma unroll
                for (int w = 0; w < PARTS; w++) l += red_l[w][r];
                l_s[r] = l;
                m_s[r] = m_new;
                corr_s[r] = corr;
            }
            __syncthreads();
        }

        /* ---- O = O * corr + P V, VC keys of V at a time ---- */
#pragma unroll
        for (int a = 0; a < 4; a++) {
            float c = corr_s[4 * sq + a];
#pragma unroll
            for (int cc = 0; cc < 8; cc++) o[a][cc] *= c;
        }
        for (int c = 0; c < NC; c++) {
            const int vc = c * VC;
            __syncthreads(); /* buf is free */
#pragma unroll
            for (int u = 0; u < CU_FA_PER_THREAD; u++)
                buf[(v_row + v_step * u) * D + v_col] = stage[u];
            __syncthreads();
            if (c + 1 < NC)
                cu_fa_fetch<KV>(v, g, t0 + vc + VC, v_row, v_step, v_col, hi, stage);
            else if (t0 + CU_FA_BK < hi)
                cu_fa_fetch<KV>(k, g, t0 + CU_FA_BK, k_row, CU_FA_THREADS / CU_FA_DC, k_col, hi,
                            stage);
#pragma unroll 4
            for (int jj = 0; jj < VC; jj++) {
                float4 pa = *(const float4 *)&p_t[(vc + jj) * QS + 4 * sq];
                float pv[4] = {pa.x, pa.y, pa.z, pa.w};
                float4 v0 = *(const float4 *)&buf[jj * D + 8 * oc];
                float4 v1 = *(const float4 *)&buf[jj * D + 8 * oc + 4];
                float vv[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int cc = 0; cc < 8; cc++) o[a][cc] += pv[a] * vv[cc];
            }
        }
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        int64_t i = q0 + 4 * sq + a;
        if (i >= N) continue;
        float l = l_s[4 * sq + a];
        float *row = p.out + (i * Hq + h) * D + 8 * oc;
#pragma unroll
        for (int cc = 0; cc < 8; cc++) row[cc] = l > 0.0f ? o[a][cc] / l : 0.0f;
    }
}

/* Instances: heads of 128 for f32, f16 and bf16 k and v and any other dtypes (q8_0, mixed);
 * heads of 64 (the vision tower where flash64 declines) for f32 and any other. */
static void cu_fa_launch(dim3 grid, cu_stream s, const cu_attn_job &p, int64_t D) {
    int kv = p.k.dtype == p.v.dtype ? (int)p.k.dtype : CU_FA_ANY;
    if (D == 64 && kv == QVL_F32) k_attention_flash<64, QVL_F32><<<grid, CU_FA_THREADS, 0, s>>>(p);
    else if (D == 64) k_attention_flash<64, CU_FA_ANY><<<grid, CU_FA_THREADS, 0, s>>>(p);
    else if (kv == QVL_F32) k_attention_flash<128, QVL_F32><<<grid, CU_FA_THREADS, 0, s>>>(p);
    else if (kv == QVL_F16) k_attention_flash<128, QVL_F16><<<grid, CU_FA_THREADS, 0, s>>>(p);
    else if (kv == QVL_BF16) k_attention_flash<128, QVL_BF16><<<grid, CU_FA_THREADS, 0, s>>>(p);
    else k_attention_flash<128, CU_FA_ANY><<<grid, CU_FA_THREADS, 0, s>>>(p);
}

/* Takes the launch when the shapes suit the kernel (head size 64 or 128, enough queries to
 * fill its blocks); returns -1 otherwise, so the caller uses its general kernels. */
int cu_launch_attention_flash(cu_stream s, const cu_attn_job &p) {
    static int use64 = -1; /* QVL_CUDA_FLASH64=0 (A/B runs): f32 heads of 64 take this kernel too */
    if (use64 < 0) {
        const char *e = getenv("QVL_CUDA_FLASH64");
        use64 = !(e && strcmp(e, "0") == 0);
    }
    if (use64) {
        int r = cu_launch_attention_flash64(s, p);
        if (r != -1) return r;
    }
    int64_t N = p.q.shape[0], Hq = p.q.shape[1], D = p.q.shape[2], L = p.k.shape[0];
    if ((D != 64 && D != 128) || N < 4096 / D / 2 || L > 0x7fffffff - CU_FA_BK || Hq > 65535 ||
        (N + 4096 / D - 1) / (4096 / D) > 0x7fffffff)
        return -1;
    int64_t bq = 4096 / D;
    dim3 grid((unsigned)((N + bq - 1) / bq), (unsigned)Hq);
    cu_fa_launch(grid, s, p, D);
    return (int)cudaGetLastError();
}
