/* The prefill / vision GEMM for operands laid out plainly: activation rows f32, contiguous
 * and 16-byte aligned; weight rows contiguous with 16-byte chunks (f32, f16, bf16) or whole
 * q8_0 blocks. Other views take k_gemm_tiled (cu_matmul.cu).
 *
 * A block of 256 threads computes a BM x BN output tile (128 x 128, 128 x 64 or 64 x 64),
 * each thread a TM x TN micro-tile (8 x 8 down to 4 x 4) in registers. K is walked in steps
 * of BK (8 or 16) through two shared-memory buffers: while the tile of one step is multiplied
 * out of one buffer, the next step's elements come from global memory into registers
 * (16-byte loads) and are then stored, converted to f32, into the other, so one barrier per
 * step suffices. Tiles are stored k-major (x_s[k][row]) so that each thread reads its 4 or 8
 * rows and columns of a k as float4s; a warp covers 4 x 8 threads, so its float4 reads of
 * one k touch 4 and 8 neighbouring chunks (no bank conflicts, broadcast within the warp).
 * When the tiles are too few to fill the GPU, K is also split across blocks (partial sums in
 * the matmul's scratch, added in a fixed order by k_gemm_split_sum).
 *
 * The tile shape and split follow from the shapes and the SM count (cu_gemm_plan_for); the
 * environment variable QVL_CUDA_GEMM_TILE=128x128|128x64|64x64 forces the tile shape,
 * =generic the generic k_gemm_tiled for every layout, and QVL_CUDA_GEMM_SPLIT=1|2|3|4|6|8 the
 * K split where the shapes allow it (A/B runs, tests).
 *
 * Only compute capability 6.1 features: f32 FMAs, 16-byte global loads, static shared
 * memory below 48 KiB, f16 -> f32 through cvt. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_matmul.cuh"

#define CU_GTHREADS 256   /* 16 x 16 threads */

/* Four floats of shared memory (16-byte aligned) into registers with one float4 read. */
__device__ __forceinline__ void cu_unpack4(const float *src, float *dst) {
    float4 x = *(const float4 *)src;
    dst[0] = x.x;
    dst[1] = x.y;
    dst[2] = x.z;
    dst[3] = x.w;
}

/* One 16-byte chunk of weights from global memory, kept raw until it is stored to shared
 * memory: 4 f32 or 8 f16/bf16, or for q8_0 8 quants (x, y) and the block scale (z). */
template <int DT>
__device__ __forceinline__ uint4 cu_gemm_load_w(const unsigned char *row, int64_t k) {
    if (DT == QVL_Q8_0) {
        const unsigned char *blk = row + (k / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        const uint16_t *h = (const uint16_t *)blk; /* blocks are 2-byte aligned */
        int q = (int)(k % QVL_Q8_0_BLOCK) / 2;      /* 16-bit word of the quants */
        uint4 r;
        r.x = (uint32_t)__ldg(&h[1 + q]) | ((uint32_t)__ldg(&h[2 + q]) << 16);
        r.y = (uint32_t)__ldg(&h[3 + q]) | ((uint32_t)__ldg(&h[4 + q]) << 16);
        r.z = __ldg(&h[0]);
        r.w = 0;
        return r;
    }
    return __ldg((const uint4 *)(row + k * (DT == QVL_F32 ? 4 : 2)));
}

/* Weight element t (0..7; 0..3 for f32) of a raw chunk, as f32. */
template <int DT>
__device__ __forceinline__ float cu_gemm_w_elem(const uint4 &c, int t) {
    uint32_t words[4] = {c.x, c.y, c.z, c.w};
    if (DT == QVL_F32) return __uint_as_float(words[t]);
    if (DT == QVL_Q8_0) {
        int8_t q = (int8_t)((words[t / 4] >> (8 * (t % 4))) & 0xffu);
        return cu_f16_to_f32((uint16_t)c.z) * (float)q;
    }
    uint16_t h = (uint16_t)(words[t / 2] >> (16 * (t % 2)));
    return DT == QVL_F16 ? cu_f16_to_f32(h) : cu_bf16_to_f32(h);
}

/* The output activation over the tm x tn outputs a thread of k_gemm_reg has just stored (no
 * res: cu_gemm_fast), read back from L2 rather than applied in the unrolled epilogue: there
 * nvcc's register choices for the main loop changed and spilled. Not inlined, for the same
 * reason; the accumulators are dead when it is called. The thread's outputs are rows of 4
 * consecutive columns (chunk c: row (c / cpr / 4) * 64 + ty * 4 + c / cpr % 4, columns
 * (c % cpr) * 64 + tx * 4 + 0..3, cpr chunks a row); CU_ACT_BATCH chunks are loaded before
 * any is used, as float4s where out's rows are 16-byte aligned (vec), so that the pass waits
 * for L2 a few times rather than once per output. */
#define CU_ACT_BATCH 4
__device__ __attribute__((noinline)) void cu_gemm_act_pass(float *out, int64_t ldo, int64_t M,
                                                           int64_t N, int act, bool vec,
                                                           int64_t m0, int64_t n0, int tx,
                                                           int ty, int tm, int tn) {
    const int cpr = tn / 4, chunks = tm * cpr;
    for (int c0 = 0; c0 < chunks; c0 += CU_ACT_BATCH) {
        float4 v[CU_ACT_BATCH];
        float *at[CU_ACT_BATCH];
        int64_t left[CU_ACT_BATCH]; /* columns of the chunk inside N (0 if its row is not) */
#pragma unroll
        for (int u = 0; u < CU_ACT_BATCH; u++) {
            const int c = c0 + u, i = c / cpr, h = c % cpr;
            const int64_t m = m0 + (i / 4) * 64 + ty * 4 + i % 4, n = n0 + h * 64 + tx * 4;
            at[u] = out + m * ldo + n;
            left[u] = c < chunks && m < M && n < N ? (N - n < 4 ? N - n : 4) : 0;
            if (vec && left[u] == 4) v[u] = *(const float4 *)at[u];
        }
#pragma unroll
        for (int u = 0; u < CU_ACT_BATCH; u++) {
            if (vec && left[u] == 4) {
                *(float4 *)at[u] = make_float4(cu_mm_act(act, v[u].x), cu_mm_act(act, v[u].y),
                                               cu_mm_act(act, v[u].z), cu_mm_act(act, v[u].w));
            } else {
                for (int k = 0; k < left[u]; k++) at[u][k] = cu_mm_act(act, at[u][k]);
            }
        }
    }
}

template <int DT, int BM, int BN, int BK, int MINB>
__global__ void __launch_bounds__(CU_GTHREADS, MINB)
    k_gemm_reg(cu_mm_args p, int splits, int ks, float *part) {
    const int TM = BM / 16, TN = BN / 16;
    const int WPER = DT == QVL_F32 ? 4 : 8;                  /* weights per chunk */
    const int ACH = BM * BK / 4;                              /* a chunks (float4) per step */
    const int NA = (ACH + CU_GTHREADS - 1) / CU_GTHREADS;     /* ... per thread */
    const int WCH = BN * BK / WPER;                           /* weight chunks per step */
    const int NW = (WCH + CU_GTHREADS - 1) / CU_GTHREADS;     /* ... per thread */
    __shared__ __align__(16) float a_s[2][BK][BM + 4];
    __shared__ __align__(16) float w_s[2][BK][BN + 4];

    int tid = threadIdx.x, lane = tid % CU_WARP, warp = tid / CU_WARP;
    int tx = (warp % 2) * 8 + lane % 8, ty = (warp / 2) * 4 + lane / 8;
    int split = (int)(blockIdx.z % splits); /* K range [kbeg, kend) of this block */
    int64_t b = blockIdx.z / splits;
    const int kbeg = split * ks, kend = min((int)p.K, kbeg + ks); /* K fits an int */
    int64_t m0 = (int64_t)blockIdx.y * BM, n0 = (int64_t)blockIdx.x * BN;

    /* The rows each thread loads never change: their addresses are worked out once. */
    const float *a_row[NA];
    int a_k[NA];
    bool a_in[NA];
#pragma unroll
    for (int r = 0; r < NA; r++) {
        int c = tid + r * CU_GTHREADS, row = c / (BK / 4);
        a_k[r] = (c % (BK / 4)) * 4;
        a_in[r] = c < ACH && m0 + row < p.M;
        a_row[r] = (const float *)p.a.data +
                   (a_in[r] ? cu_row_offset(p.a, b * p.M + m0 + row) : 0);
    }
    const int esz = DT == QVL_F32 ? 4 : 2;
    const unsigned char *w_row[NW];
    int w_k[NW];
    bool w_in[NW];
#pragma unroll
    for (int r = 0; r < NW; r++) {
        int c = tid + r * CU_GTHREADS, row = c / (BK / WPER);
        w_k[r] = (c % (BK / WPER)) * WPER;
        w_in[r] = c < WCH && n0 + row < p.N;
        int64_t off = (b / p.per_w) * p.w.batch_stride + (w_in[r] ? n0 + row : 0) * p.w.row_stride;
        w_row[r] = (const unsigned char *)p.w.data +
                   (DT == QVL_Q8_0 ? (off / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0)
                                   : off * esz);
    }

    float4 a_nx[NA];
    uint4 w_nx[NW];
    auto fetch = [&](int k0) {
#pragma unroll
        for (int r = 0; r < NA; r++) {
            int k = k0 + a_k[r];
            a_nx[r] = a_in[r] && k < kend ? __ldg((const float4 *)(a_row[r] + k))
                                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int r = 0; r < NW; r++) {
            int k = k0 + w_k[r];
            w_nx[r] = w_in[r] && k < kend ? cu_gemm_load_w<DT>(w_row[r], k) : make_uint4(0, 0, 0, 0);
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int r = 0; r < NA; r++) {
            int c = tid + r * CU_GTHREADS, row = c / (BK / 4);
            if (c < ACH) {
                a_s[buf][a_k[r] + 0][row] = a_nx[r].x;
                a_s[buf][a_k[r] + 1][row] = a_nx[r].y;
                a_s[buf][a_k[r] + 2][row] = a_nx[r].z;
                a_s[buf][a_k[r] + 3][row] = a_nx[r].w;
            }
        }
#pragma unroll
        for (int r = 0; r < NW; r++) {
            int c = tid + r * CU_GTHREADS, row = c / (BK / WPER);
            if (c < WCH) {
#pragma unroll
                for (int t = 0; t < WPER; t++)
                    w_s[buf][w_k[r] + t][row] = cu_gemm_w_elem<DT>(w_nx[r], t);
            }
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;

    fetch(kbeg);
    stash(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = kbeg; k0 < kend; k0 += BK) {
        /* The next step's loads are issued here, in flight while this step is multiplied.
         * Unconditionally (past kend they load zeros): loads under a branch would be sunk by
         * the compiler to their use in stash, after the FMAs. */
        fetch(k0 + BK);
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float av[TM], wv[TN];
#pragma unroll
            for (int h = 0; h < TM / 4; h++) cu_unpack4(&a_s[buf][kk][h * 64 + ty * 4], av + 4 * h);
#pragma unroll
            for (int h = 0; h < TN / 4; h++) cu_unpack4(&w_s[buf][kk][h * 64 + tx * 4], wv + 4 * h);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(av[i], wv[j], acc[i][j]);
        }
        stash(buf ^ 1); /* that buffer was last read before the previous barrier */
        __syncthreads();
        buf ^= 1;
    }

    if (splits > 1) { /* partial sums, added up by k_gemm_split_sum */
        float *mine = part + ((int64_t)split * p.batches + b) * p.M * p.N;
#pragma unroll
        for (int i = 0; i < TM; i++) {
            int64_t m = m0 + (i / 4) * 64 + ty * 4 + i % 4;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                int64_t n = n0 + (j / 4) * 64 + tx * 4 + j % 4;
                if (m < p.M && n < p.N) mine[m * p.N + n] = acc[i][j];
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < TM; i++) {
        int64_t m = m0 + (i / 4) * 64 + ty * 4 + i % 4;
        if (m >= p.M) continue;
#pragma unroll
        for (int j = 0; j < TN; j++) {
            int64_t n = n0 + (j / 4) * 64 + tx * 4 + j % 4;
            if (n < p.N) cu_mm_store<false>(p, b, m, n, acc[i][j]);
        }
    }
    if (p.act != QVL_ACT_NONE) {
        float *out = p.out + b * p.M * p.ldo + p.col0;
        bool vec = (uintptr_t)out % 16 == 0 && p.ldo % 4 == 0;
        cu_gemm_act_pass(out, p.ldo, p.M, p.N, p.act, vec, m0, n0, tx, ty, TM, TN);
    }
}

/* Split K: the partial sums part[split][row][n] of the blocks, added in split order (the
 * same result every run), then the epilogue. */
__global__ void k_gemm_split_sum(cu_mm_args p, int splits, const float *part) {
    /* A block per output row (grid-stride), threads along it: the row's residual offset is
     * found once per row; 64-bit divisions per element made this pass compute-bound. The
     * epilogue is cu_mm_store's, written out here so that the GEMMs' own code (which inlines
     * cu_mm_store) stays as it is. */
    int64_t rows = p.batches * p.M, total = rows * p.N;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *src = part + row * p.N;
        float *dst = p.out + row * p.ldo + p.col0;
        int64_t res_row = p.res.data ? cu_row_offset_unrolled(p.res, row) : 0;
        int64_t res_step = p.res.data ? cu_inner_stride(p.res) : 0;
        for (int64_t n = threadIdx.x; n < p.N; n += blockDim.x) {
            float y = 0.0f;
            for (int s = 0; s < splits; s++) y += src[s * total + n];
            if (p.bias.data) y += cu_view_load(p.bias, n * p.bias.stride[0]);
            if (p.act != QVL_ACT_NONE) y = cu_mm_act(p.act, y);
            if (p.res.data) y = cu_view_load(p.res, res_row + n * res_step) + y;
            dst[n] = y;
        }
    }
}

void cu_gemm_split_sum(cu_stream s, const cu_mm_args &p, int splits, const float *part) {
    int64_t rows = p.batches * p.M;
    unsigned blocks = (unsigned)(rows < 1 ? 1 : rows > 65535 ? 65535 : rows);
    k_gemm_split_sum<<<blocks, 256, 0, s>>>(p, splits, part);
}

/* Can k_gemm_reg read weights w (K = w.cols) in chunks: rows contiguous, 16-byte chunks
 * (f32, f16, bf16) or whole q8_0 blocks, every row and batch starting on a chunk? */
static bool cu_gemm_w_ok(const cu_mat &w, int64_t K) {
    if (K % 4 != 0 || K > INT_MAX - 64 || w.col_stride != 1) return false;
    switch (w.dtype) {
    case QVL_F32:
        return w.row_stride % 4 == 0 && w.batch_stride % 4 == 0 && (uintptr_t)w.data % 16 == 0;
    case QVL_F16:
    case QVL_BF16:
        return K % 8 == 0 && w.row_stride % 8 == 0 && w.batch_stride % 8 == 0 &&
               (uintptr_t)w.data % 16 == 0;
    case QVL_Q8_0:
        return K % QVL_Q8_0_BLOCK == 0 && w.row_stride % QVL_Q8_0_BLOCK == 0 &&
               w.batch_stride % QVL_Q8_0_BLOCK == 0 && (uintptr_t)w.data % 2 == 0;
    default: return false;
    }
}

/* ... and the activation rows as float4s? */
static bool cu_gemm_fast_ok(const cu_mm_args &p) {
    return cu_rows_f32_aligned(p.a) && cu_gemm_w_ok(p.w, p.K);
}

/* Tile shape. The tiles are dealt to the SMs, each holding up to `resident` blocks at once;
 * an SM full of blocks computes at `speed` (relative outputs per unit of time), one holding
 * k < resident blocks at `speed * fill[k - 1]`. The cost of a shape is the time of the
 * busiest SM, which gets ceil(tiles / SMs) blocks, as many at a time as fit: big tiles are
 * fastest per output, but few of them leave SMs idle or under-filled (M = 512 prefill
 * against N = 2048 columns gives 64 tiles of 128 x 128 for 132 SMs). Speeds and fills are
 * calibrated on an H200 (full SMs: 70%, 60%, 48% of the FMA peak) to reproduce its timings
 * of the prefill and vision shapes. */
enum { CU_T128x128 = 0, CU_T128x64, CU_T64x64, CU_N_TILES };
#define CU_MAX_RESIDENT 4
static const int cu_tile_m[CU_N_TILES] = {128, 128, 64};
static const int cu_tile_n[CU_N_TILES] = {128, 64, 64};
static const int cu_tile_resident[CU_N_TILES] = {2, 2, 4};
static const double cu_tile_speed[CU_N_TILES] = {0.70, 0.60, 0.48};
static const double cu_tile_fill[CU_N_TILES][CU_MAX_RESIDENT] = {
    {0.65, 1.0, 1.0, 1.0}, {0.55, 1.0, 1.0, 1.0}, {0.45, 0.75, 0.95, 1.0}};

/* Split K: when the tiles alone leave SMs idle (prefill's M = 512), each tile's K range is cut
 * into `splits` parts of ks (a multiple of 16, at least CU_MIN_KS) computed by separate
 * blocks into scratch, then added up by k_gemm_split_sum. That costs the partial sums' round
 * trip through memory (counted at 16 bytes per SM per cycle) and a launch. Either every tile
 * is split, or only the tile rows past the full rounds (the first `main` rows of tiles fill the
 * SMs' resident blocks a whole number of times at most and run unsplit; the rest would leave
 * most SMs idle in a last, partly filled round: vision's 576 tiles of 128 x 128 on 132 SMs
 * holding 2 each). The latter for one batch only: the rows past `main` then run as a matmul
 * of their own (cu_gemm_rows_from), so the kernels stay as they are. */
#define CU_MIN_KS 256
#define CU_MAX_SPLIT_BYTES ((int64_t)64 << 20)
static const int cu_split_choices[] = {1, 2, 3, 4, 6, 8};

struct cu_gemm_plan {
    int tile;
    int64_t rows, cols, main; /* tile rows and columns; the first `main` rows run unsplit */
    int splits, ks;           /* the others: K cut into splits parts of ks */
};

/* Cycles of one SM's share when `blocks` blocks of tile t, each ks deep, are dealt out. */
static double cu_gemm_rounds_cost(int t, int64_t blocks, int64_t ks, int sms) {
    int64_t left = (blocks + sms - 1) / sms, r = cu_tile_resident[t];
    int64_t full = left / r * r, rest = left - full; /* full rounds, then the rest */
    double rounds = (double)full + (rest ? (double)rest / cu_tile_fill[t][rest - 1] : 0.0);
    return rounds * cu_tile_m[t] * cu_tile_n[t] * (double)ks / (128.0 * cu_tile_speed[t]);
}

/* Estimated cycles of a plan for K deep tiles. */
static double cu_gemm_cost(const cu_gemm_plan &pl, int64_t K, int sms) {
    int64_t split_tiles = (pl.rows - pl.main) * pl.cols;
    double cycles = cu_gemm_rounds_cost(pl.tile, pl.main * pl.cols, K, sms) +
                    cu_gemm_rounds_cost(pl.tile, split_tiles * pl.splits, pl.ks, sms);
    if (pl.splits > 1)
        cycles += (2.0 * pl.splits + 1.0) * split_tiles * cu_tile_m[pl.tile] * cu_tile_n[pl.tile] *
                      4.0 / (16.0 * sms) + 1e4;
    return cycles;
}

/* The tile shape and K split for these shapes (can_split: scratch is available).
 * QVL_CUDA_GEMM_TILE=128x128|128x64|64x64 forces the tile shape. */
static cu_gemm_plan cu_gemm_plan_for(int64_t batches, int64_t M, int64_t N, int64_t K,
                                     bool can_split) {
    const int sms = cu_current_sm_count(1);
    const char *force = getenv("QVL_CUDA_GEMM_TILE");
    int only = -1; /* the forced tile shape */
    for (int t = 0; force && t < CU_N_TILES; t++) {
        char name[16];
        snprintf(name, sizeof name, "%dx%d", cu_tile_m[t], cu_tile_n[t]);
        if (strcmp(force, name) == 0) only = t;
    }
    const char *fs = getenv("QVL_CUDA_GEMM_SPLIT");
    const int force_split = fs ? atoi(fs) : 0; /* A/B runs; where no shape allows it, ignored */
    cu_gemm_plan best = {};
    double best_cost = -1.0;
    /* pass 0: only the forced split; pass 1 (or when no shape allowed it): all */
    for (int pass = force_split > 0 ? 0 : 1; pass < 2 && best_cost < 0.0; pass++)
    for (int t = 0; t < CU_N_TILES; t++) {
        if (only >= 0 && t != only) continue;
        int64_t rows = batches * ((M + cu_tile_m[t] - 1) / cu_tile_m[t]),
                cols = (N + cu_tile_n[t] - 1) / cu_tile_n[t];
        int64_t full = rows * cols / ((int64_t)sms * cu_tile_resident[t]) *
                       ((int64_t)sms * cu_tile_resident[t]); /* tiles in full rounds */
        for (size_t i = 0; i < sizeof cu_split_choices / sizeof *cu_split_choices; i++) {
            int want = cu_split_choices[i];
            if (pass == 0 && want != force_split) continue;
            int64_t ks = want == 1 ? K : ((K + want - 1) / want + 15) / 16 * 16;
            int splits = want == 1 ? 1 : (int)((K + ks - 1) / ks); /* no empty part */
            if (splits != want || (splits > 1 && (!can_split || ks < CU_MIN_KS))) continue;
            /* every tile split, or only those past the full rounds */
            int64_t mains[2] = {splits == 1 ? rows : 0, batches == 1 ? full / cols : 0};
            for (int v = 0; v < (splits > 1 && mains[1] > 0 ? 2 : 1); v++) {
                cu_gemm_plan pl = {t, rows, cols, mains[v], splits, (int)ks};
                int64_t split_rows = batches * M - pl.main * cu_tile_m[t]; /* output rows */
                if (splits > 1 && (splits * batches > 65535 ||
                                   splits * split_rows * N * 4 > CU_MAX_SPLIT_BYTES))
                    continue;
                double cost = cu_gemm_cost(pl, K, sms);
                if (best_cost < 0.0 || cost < best_cost) {
                    best = pl;
                    best_cost = cost;
                }
            }
        }
    }
    return best;
}

/* The variants: BK 16 (one barrier per 16 k) and as many resident blocks as cu_tile_resident
 * says. 128 x 128 tiles have 64 accumulators per thread in the 128 registers that two blocks
 * per SM allow: with f32 or q8_0 weights (two chunks per thread per step, or a block scale
 * beside the quants) BK 16 spills, so they take BK 8. */
template <int DT, int BM, int BN, int BK, int MINB>
static void cu_gemm_launch(cu_stream s, const cu_mm_args &p, int splits, int ks, float *part) {
    dim3 grid((unsigned)((p.N + BN - 1) / BN), (unsigned)((p.M + BM - 1) / BM),
              (unsigned)(p.batches * splits));
    k_gemm_reg<DT, BM, BN, BK, MINB><<<grid, CU_GTHREADS, 0, s>>>(p, splits, ks, part);
    if (splits > 1) cu_gemm_split_sum(s, p, splits, part);
}

template <int DT>
static void cu_gemm_launch_tile(cu_stream s, const cu_mm_args &p, int tile, int splits, int ks,
                                float *part) {
    const int bk = DT == QVL_F16 || DT == QVL_BF16 ? 16 : 8; /* 128 x 128: above */
    if (tile == CU_T128x128) cu_gemm_launch<DT, 128, 128, bk, 2>(s, p, splits, ks, part);
    else if (tile == CU_T128x64) cu_gemm_launch<DT, 128, 64, 16, 2>(s, p, splits, ks, part);
    else cu_gemm_launch<DT, 64, 64, 16, 4>(s, p, splits, ks, part);
}

static void cu_gemm_launch_dtype(cu_stream s, const cu_mm_args &p, int tile, int splits, int ks,
                                 float *part) {
    switch (p.w.dtype) {
    case QVL_F32: cu_gemm_launch_tile<QVL_F32>(s, p, tile, splits, ks, part); break;
    case QVL_F16: cu_gemm_launch_tile<QVL_F16>(s, p, tile, splits, ks, part); break;
    case QVL_BF16: cu_gemm_launch_tile<QVL_BF16>(s, p, tile, splits, ks, part); break;
    default: cu_gemm_launch_tile<QVL_Q8_0>(s, p, tile, splits, ks, part); break;
    }
}

static bool cu_gemm_env_generic(void) {
    const char *force = getenv("QVL_CUDA_GEMM_TILE"); /* A/B runs: the generic kernel */
    return force && strcmp(force, "generic") == 0;
}

/* The rows from `first` on of p, as a matmul of their own: the same kernels then compute the
 * split tiles past the full rounds. Only where the row offsets are plain (one batch, 2-D
 * activation and residual views); otherwise the plan splits every tile or none. */
static bool cu_gemm_rows_from(const cu_mm_args &p, int64_t first, cu_mm_args *out) {
    size_t res_size = 0; /* bytes per element */
    if (p.batches != 1 || p.a.ndim != 2 ||
        (p.res.data && (p.res.ndim != 2 || qvl_dtype_is_quant((qvl_dtype)p.res.dtype) ||
                        !qvl_dtype_row_bytes((qvl_dtype)p.res.dtype, 1, &res_size))))
        return false;
    *out = p;
    out->a.data = (const float *)p.a.data + first * p.a.stride[0];
    out->a.shape[0] -= first;
    if (p.res.data) {
        out->res.data = (const char *)p.res.data + first * p.res.stride[0] * (int64_t)res_size;
        out->res.shape[0] -= first;
    }
    out->out = p.out + first * p.ldo;
    out->M = p.M - first;
    return true;
}

int64_t cu_gemm_scratch_bytes(int64_t batches, int64_t M, const cu_mat &w) {
    if (!cu_gemm_w_ok(w, w.cols) || cu_gemm_env_generic()) return 0;
    cu_gemm_plan plan = cu_gemm_plan_for(batches, M, w.rows, w.cols, true);
    if (plan.splits == 1) return 0;
    return plan.splits * (batches * M - plan.main * cu_tile_m[plan.tile]) * w.rows *
           (int64_t)sizeof(float);
}

bool cu_gemm_fast(cu_stream s, const cu_mm_args &p, void *scratch) {
    if (!cu_gemm_fast_ok(p) || cu_gemm_env_generic()) return false;
    if (p.act != QVL_ACT_NONE && p.res.data) return false; /* k_gemm_reg's activation pass */
    if ((p.N + 63) / 64 > 0x7fffffff || (p.M + 63) / 64 > 65535 || p.batches > 65535) return false;
    cu_gemm_plan plan = cu_gemm_plan_for(p.batches, p.M, p.N, p.K, scratch != NULL);
    float *part = (float *)scratch;
    cu_mm_args rest;
    if (plan.main > 0 && plan.main < plan.rows &&
        cu_gemm_rows_from(p, plan.main * cu_tile_m[plan.tile], &rest)) {
        cu_mm_args first = p; /* the full rounds unsplit, then the rest split */
        first.M = plan.main * cu_tile_m[plan.tile];
        first.a.shape[0] = first.M;
        cu_gemm_launch_dtype(s, first, plan.tile, 1, (int)p.K, NULL);
        cu_gemm_launch_dtype(s, rest, plan.tile, plan.splits, plan.ks, part);
    } else if (plan.main > 0 && plan.main < plan.rows) { /* rows not offset plainly */
        cu_gemm_launch_dtype(s, p, plan.tile, 1, (int)p.K, NULL);
    } else {
        cu_gemm_launch_dtype(s, p, plan.tile, plan.splits, plan.ks, part);
    }
    return true;
}
