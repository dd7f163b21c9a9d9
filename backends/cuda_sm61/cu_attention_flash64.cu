/* ATTENTION for many queries with head size 64 over f32 q, k and v (the vision tower; k and
 * v in unit-stride rows at 16-byte aligned addresses, q any view): a
 * FlashAttention-2 style kernel for fp32 FMA units in which each warp owns its queries
 * outright, so the online softmax runs in registers with warp shuffles and no barrier.
 *
 * A block of 4 warps takes 64 queries of one head (warp w: queries 16w .. 16w + 15) and
 * walks the keys its queries can see in tiles of 64. Per tile:
 *   - all threads stage K^T (kp[d][key]) and V (v_s[key][d]) into shared memory; barrier;
 *   - each warp computes S = (c * Q) K^T for its 16 queries: lane (qg, kg) = (lane / 8,
 *     lane % 8) holds 4 queries (4qg ..) x 8 keys (4kg .. and 32 + 4kg ..), read per
 *     dimension as one float4 of Q^T and two of K^T;
 *   - barrier (the warps have read K^T); the row maximum and sum over the 8 lanes of a
 *     query group by xor-shuffles; P = exp(S - m) overwrites K^T as P^T[key][query];
 *   - each warp accumulates O += P V for its queries, lane (qg, kg) holding 4 queries x 8
 *     dimensions (4kg .. and 32 + 4kg ..): the same queries as its S tile, so the
 *     rescaling factors stay in registers; only the warp's own P^T columns are read, so
 *     __syncwarp suffices; barrier before the next tile's staging.
 * Shared memory is exactly 48 KiB (Q^T, K^T / P^T, V: 64 x 64 floats each), Pascal's limit
 * per block, so nothing is padded: the staging maps consecutive lanes to consecutive keys or
 * queries (conflict-free transposing stores), and P^T's 4-float groups are XOR-swizzled by
 * key (group g of row k at g ^ ((k / 4) % 8)), which spreads a warp's P^T stores over all
 * banks while its reads stay broadcasts.
 *
 * Masks as cu_attn_range gives them. A tile inside every query's range (all of a single
 * picture's tiles) is not masked at all; other tiles compute each lane's 4 ranges and set
 * hidden scores to -inf. Keys past the block's union of ranges are neither read nor visited,
 * and staged rows past it are zeros, so unwritten cache rows (NaN in the tests) never reach
 * the sums. */
#include "cu_attention.cuh"

#define CU_F64_THREADS 128
#define CU_F64_D 64  /* head size */
#define CU_F64_BQ 64 /* queries per block */
#define CU_F64_BK 64 /* keys per tile */
/* Resident blocks per SM the registers must allow: shared memory allows 2 on Pascal (96 KiB
 * per SM), where more registers then cost nothing (and 128 make clang's code spill); 4 on
 * the sm_90 build (228 KiB), where nvcc's code fits 128 registers without spills. */
#ifndef CU_F64_MIN_BLOCKS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#define CU_F64_MIN_BLOCKS 2
#else
#define CU_F64_MIN_BLOCKS 4
#endif
#endif

/* Index in P^T of the 4-float group holding queries 4g .. 4g + 3 at key k. */
__device__ __forceinline__ int cu_f64_p_at(int k, int g) {
    return k * CU_F64_BQ + 4 * (g ^ ((k >> 2) & 7));
}

/* acc[a][b] += x[a] * y[b]: x the 4 floats at xs, y the 4 at ys and the 4 at ys + 32 (the
 * lane's 4 queries against its 8 keys in S, or against its 8 dimensions in O). */
__device__ __forceinline__ void cu_f64_outer(float acc[4][8], const float *xs, const float *ys) {
    float4 xa = *(const float4 *)xs;
    float4 y0 = *(const float4 *)ys;
    float4 y1 = *(const float4 *)(ys + 32);
    float x[4] = {xa.x, xa.y, xa.z, xa.w};
    float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) acc[a][b] += x[a] * y[b];
}

/* Row `row` of view x at head `head` as float4 c (unit-stride, 16-byte aligned rows). */
__device__ __forceinline__ float4 cu_f64_row4(const cu_view &x, int64_t row, int64_t head, int c) {
    const float *base = (const float *)x.data + row * x.stride[0] + head * x.stride[1];
    return ((const float4 *)base)[c];
}

__global__ void __launch_bounds__(CU_F64_THREADS, CU_F64_MIN_BLOCKS) k_attention_flash64(cu_attn_job p) {
    __shared__ __align__(16) float q_t[CU_F64_D * CU_F64_BQ]; /* c * Q, transposed */
    __shared__ __align__(16) float kp[CU_F64_D * CU_F64_BK];  /* K^T, then P^T */
    __shared__ __align__(16) float v_s[CU_F64_BK * CU_F64_D];
    static_assert(sizeof(q_t) + sizeof(kp) + sizeof(v_s) <= 48 * 1024, "Pascal's 48 KiB");

    const cu_view &q = p.q, &k = p.k, &v = p.v;
    const int64_t N = q.shape[0], Hq = q.shape[1], L = k.shape[0], Hkv = k.shape[1];
    const int64_t h = blockIdx.y, g = h / (Hq / Hkv);
    /* the last query blocks see the most keys under a causal mask: start them first */
    const int64_t q0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * CU_F64_BQ;
    const int tid = threadIdx.x, lane = tid % CU_WARP, w = tid / CU_WARP;
    const int qg = lane / 8, kg = lane % 8;

    /* The block's key ranges, reduced in kp before K lands there: [lo, hi) the union of its
     * queries' ranges, [all0, all1) their intersection (a tile inside it needs no mask). */
    int *rng = (int *)kp;
    if (tid == 0) {
        rng[0] = (int)L;
        rng[1] = 0;
        rng[2] = 0;
        rng[3] = (int)L;
    }
    __syncthreads();
    if (tid < CU_F64_BQ && q0 + tid < N) {
        int64_t a, b;
        cu_attn_range(p, q0 + tid, N, L, &a, &b);
        if (b > a) {
            atomicMin(&rng[0], (int)a);
            atomicMax(&rng[1], (int)b);
        }
        atomicMax(&rng[2], (int)a);
        atomicMin(&rng[3], (int)b);
    }
    /* Q^T: thread tid stages query tid % 64 at dimensions tid / 64 + 2u (q may be any f32
     * view: it is read once per block), times c = cu_attn_base2_scale(scale) */
    const float qscale = cu_attn_base2_scale(p.scale);
    const int sq = tid % CU_F64_BQ, sc = 2 * (tid / CU_F64_BQ);
    {
        const bool in = q0 + sq < N;
        const float *qd = (const float *)q.data + (in ? q0 + sq : 0) * q.stride[0] + h * q.stride[1];
#pragma unroll 8
        for (int u = 0; u < CU_F64_D / 2; u++) {
            int d = tid / CU_F64_BQ + 2 * u;
            q_t[d * CU_F64_BQ + sq] = in ? qd[d * q.stride[2]] * qscale : 0.0f;
        }
    }
    __syncthreads();
    const int lo = rng[0], hi = rng[1], all0 = rng[2], all1 = rng[3];
    __syncthreads(); /* rng is read before K^T overwrites it */

    const int qrow = 16 * w + 4 * qg; /* the lane's first query within the block */
    float o[4][8], m[4], l[4];
#pragma unroll
    for (int a = 0; a < 4; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; c++) o[a][c] = 0.0f;
    }

    for (int t0 = lo; t0 < hi; t0 += CU_F64_BK) {
        /* ---- stage K^T (key tid % 64, float4s sc + 4u + {0, 1}) and V (a warp two whole
         * rows per step) ---- */
#pragma unroll
        for (int u = 0; u < 4; u++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int c = sc + 4 * u + e, j = t0 + sq;
                float4 x = j < hi ? cu_f64_row4(k, j, g, c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                kp[(4 * c + 0) * CU_F64_BK + sq] = x.x;
                kp[(4 * c + 1) * CU_F64_BK + sq] = x.y;
                kp[(4 * c + 2) * CU_F64_BK + sq] = x.z;
                kp[(4 * c + 3) * CU_F64_BK + sq] = x.w;
            }
        }
#pragma unroll
        for (int u = 0; u < CU_F64_BK * CU_F64_D / 4 / CU_F64_THREADS; u++) {
            int idx = tid + CU_F64_THREADS * u, key = idx / (CU_F64_D / 4), c = idx % (CU_F64_D / 4);
            int j = t0 + key;
            float4 x = j < hi ? cu_f64_row4(v, j, g, c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *(float4 *)&v_s[key * CU_F64_D + 4 * c] = x;
        }
        __syncthreads();

        /* ---- S = (c Q) K^T: 4 queries x 8 keys per lane ---- */
        float s[4][8];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 8; b++) s[a][b] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < CU_F64_D; d++)
            cu_f64_outer(s, &q_t[d * CU_F64_BQ + qrow], &kp[d * CU_F64_BK + 4 * kg]);
        /* hidden scores -> -inf, only in tiles that reach outside some query's range */
        if (!(t0 >= all0 && t0 + CU_F64_BK <= all1)) {
#pragma unroll
            for (int a = 0; a < 4; a++) {
                int64_t j0, j1;
                cu_attn_range(p, q0 + qrow + a, N, L, &j0, &j1);
#pragma unroll
                for (int b = 0; b < 8; b++) {
                    int j = t0 + 4 * kg + (b & 3) + 32 * (b >> 2);
                    if (j < j0 || j >= j1) s[a][b] = -INFINITY;
                }
            }
        }

        /* ---- online softmax over the 8 lanes of a query group ---- */
        float corr[4];
#pragma unroll
        for (int a = 0; a < 4; a++) {
            float mx = s[a][0];
#pragma unroll
            for (int b = 1; b < 8; b++) mx = fmaxf(mx, s[a][b]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            float m_new = fmaxf(m[a], mx);
            float sum = 0.0f;
#pragma unroll
            for (int b = 0; b < 8; b++) {
                s[a][b] = m_new == -INFINITY ? 0.0f : exp2f(s[a][b] - m_new); /* 2^-inf = 0 */
                sum += s[a][b];
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            sum += __shfl_xor_sync(0xffffffffu, sum, 4);
            corr[a] = m[a] == -INFINITY ? 0.0f : exp2f(m[a] - m_new);
            l[a] = l[a] * corr[a] + sum;
            m[a] = m_new;
#pragma unroll
            for (int c = 0; c < 8; c++) o[a][c] *= corr[a];
        }
        __syncthreads(); /* every warp is done with K^T */
#pragma unroll
        for (int b = 0; b < 8; b++) {
            int key = 4 * kg + (b & 3) + 32 * (b >> 2);
            *(float4 *)&kp[cu_f64_p_at(key, qrow / 4)] = make_float4(s[0][b], s[1][b], s[2][b], s[3][b]);
        }
        __syncwarp();

        /* ---- O += P V: 4 queries x 8 dimensions per lane ---- */
#pragma unroll 8
        for (int j = 0; j < CU_F64_BK; j++)
            cu_f64_outer(o, &kp[cu_f64_p_at(j, qrow / 4)], &v_s[j * CU_F64_D + 4 * kg]);
        __syncthreads(); /* kp and v_s are free for the next tile */
    }

#pragma unroll
    for (int a = 0; a < 4; a++) {
        int64_t i = q0 + qrow + a;
        if (i >= N) continue;
        float *row = p.out + (i * Hq + h) * CU_F64_D;
        float r[8];
#pragma unroll
        for (int c = 0; c < 8; c++) r[c] = l[a] > 0.0f ? o[a][c] / l[a] : 0.0f;
        *(float4 *)&row[4 * kg] = make_float4(r[0], r[1], r[2], r[3]);
        *(float4 *)&row[32 + 4 * kg] = make_float4(r[4], r[5], r[6], r[7]);
    }
}

/* Every row of x at 16-byte aligned addresses, unit stride along the head (k and v). */
static bool cu_f64_rows_aligned(const cu_view &x) {
    return x.dtype == QVL_F32 && x.stride[2] == 1 && x.stride[0] % 4 == 0 && x.stride[1] % 4 == 0 &&
           ((uintptr_t)x.data % 16) == 0;
}

int cu_launch_attention_flash64(cu_stream s, const cu_attn_job &p) {
    int64_t N = p.q.shape[0], Hq = p.q.shape[1], D = p.q.shape[2], L = p.k.shape[0];
    if (D != CU_F64_D || p.k.shape[2] != D || p.v.shape[2] != D || p.q.dtype != QVL_F32 ||
        !cu_f64_rows_aligned(p.k) || !cu_f64_rows_aligned(p.v) || ((uintptr_t)p.out % 16) != 0 ||
        N < CU_F64_BQ / 2 || L > 0x7fffffff - CU_F64_BK || Hq > 65535 ||
        (N + CU_F64_BQ - 1) / CU_F64_BQ > 0x7fffffff)
        return -1;
    dim3 grid((unsigned)((N + CU_F64_BQ - 1) / CU_F64_BQ), (unsigned)Hq);
    k_attention_flash64<<<grid, CU_F64_THREADS, 0, s>>>(p);
    return (int)cudaGetLastError();
}
