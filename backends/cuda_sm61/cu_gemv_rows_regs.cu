/* The batched decode GEMV for f16 / bf16 weights (3 to 8 rows; with 2 the fused kernel is
 * faster) with the activations held in registers (k_gemv_rows_regs).
 *
 * Why: the per-column GEMVs (k_gemv_rows_split, the fused kernels) load the activations once
 * per weight row they meet: with 8 rows every 16-byte weight chunk costs 16 float4 activation
 * loads, so L1 / shared memory, not DRAM, bounds the step, on a Pascal card as on the H100.
 * Here thread t of a block owns one 16-byte chunk position of K (8 values) in each tile of
 * CU_RR_TILE values: it loads those 8 values of each of the MR rows once (MR * 8 registers)
 * and multiplies them with the chunk at that position of every weight row the block takes.
 * Weight rows are read whole by the block (256 threads x 16 bytes: 4 KiB contiguous), each
 * byte once.
 *
 * The price is a sum per output across the block. Columns go in groups of G = 32 / MR, so a
 * group's partial sums are 32 values a lane (G columns x MR rows); a butterfly reduce-scatter
 * over the warp (31 shuffles for the 32 values) leaves lane l the warp's sum of value l
 * (column l / MR, row l % MR). Each lane adds that into its own shared-memory slot, tile after
 * tile; at the end the 8 warps' slots are added in warp order (the same result every run).
 *
 * A block takes `ng` groups (ng * G columns) a step and strides over the steps; with K within
 * one tile (every matrix of the 2B but the down projection) the activations stay in
 * registers for all of its steps, the LM head's 151,936 columns included. While one group is
 * multiplied, the next group's weights are already loading, across steps and parts too. */
#include "cu_gemv_regs.cuh"

#include <stdlib.h>
#include <string.h>

#define CU_RR_WARPS 8
#define CU_RR_THREADS (CU_RR_WARPS * CU_WARP)
#define CU_RR_TILE (CU_RR_THREADS * 8) /* K values a tile: one 16-byte chunk a thread */
#define CU_RR_MAX_COLS 16              /* columns a block step at most (ng * G) */

/* The 16-byte chunk c of weight rows n0 .. n0 + G - 1 (zeros past the matrix or past K). */
template <int G>
__device__ __forceinline__ void cu_rr_load(uint4 (&q)[G], const char *w, int64_t row_bytes,
                                           int64_t n0, int64_t N, int64_t c, int64_t chunks) {
#pragma unroll
    for (int j = 0; j < G; j++)
        q[j] = c < chunks && n0 + j < N
                   ? __ldg((const uint4 *)(w + (n0 + j) * row_bytes) + c)
                   : make_uint4(0, 0, 0, 0);
}

/* Place p's weights (one 16-byte chunk of each of its G rows); nothing past the last step. The
 * part of a group (cu_group_part: g.first counts steps) has st made its own; a single matmul
 * is read in place (a local copy of its arguments would go to local memory). */
template <int G, bool GROUP>
__device__ __forceinline__ void cu_rr_load_at(uint4 (&q)[G], const cu_rr_pos &p,
                                              const cu_mm_group &g, int cols, int64_t steps,
                                              int64_t chunks) {
    if (p.st >= steps) return;
    const int64_t c = p.t * CU_RR_THREADS + threadIdx.x;
    if (GROUP) {
        int64_t own = p.st;
        const cu_mm_args a = cu_group_part(g, &own);
        cu_rr_load<G>(q, (const char *)a.w.data, a.w.row_stride * 2, own * cols + p.g * G, a.N,
                      c, chunks);
    } else {
        cu_rr_load<G>(q, (const char *)g.p[0].w.data, g.p[0].w.row_stride * 2,
                      p.st * cols + p.g * G, g.p[0].N, c, chunks);
    }
}

/* The output sums of step st: i = column (i / MR) x row (i % MR), the warps' slots added in
 * order, stored through the step's matmul (a group's part has no residual). */
template <int MR, bool GROUP>
__device__ __forceinline__ void cu_rr_store(const cu_mm_group &g, const float (*slot)[CU_RR_MAX_COLS * MR],
                                            int64_t st, int cols) {
    const int i = threadIdx.x, m = i % MR;
    float y = slot[0][i];
#pragma unroll
    for (int v = 1; v < CU_RR_WARPS; v++) y += slot[v][i];
    cu_rr_store_value<GROUP>(g, st, cols, i / MR, m, y);
}

/* One matmul (GROUP false: g.n is 1) or up to CU_MM_GROUP_MAX of the same rows, dtype and K
 * (GROUP true: NORM_LINEAR's projections; no residual), their steps one after another. The
 * next place's weights are in flight while one is multiplied, across steps and parts too (a
 * block of the small k / v projections has one group a step, so a prefetch only within a step
 * would leave it waiting out every load). One place ahead, not two: two cost registers and
 * were slower with 4 rows. */
template <int DT, int MR, bool GROUP>
__global__ void __launch_bounds__(CU_RR_THREADS) k_gemv_rows_regs(cu_mm_group g, int ng) {
    const int G = 32 / MR; /* columns a group */
    __shared__ float slot[CU_RR_WARPS][CU_RR_MAX_COLS * MR];
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const int64_t M = g.p[0].M, K = g.p[0].K;
    const int64_t chunks = K / 8, tiles = (chunks + CU_RR_THREADS - 1) / CU_RR_THREADS;
    const int cols = ng * G; /* a block step */
    /* (g.first[g.n] would index the parameters at run time: a local copy of all of them) */
    const int64_t steps = GROUP ? (g.n == 2 ? g.first[2] : g.first[3]) : (g.p[0].N + cols - 1) / cols;
    if ((int64_t)blockIdx.x >= steps) return; /* block-uniform */
    const float *arow[MR];
#pragma unroll
    for (int m = 0; m < MR; m++)
        arow[m] = (const float *)g.p[0].a.data + (m < M ? cu_row_offset_unrolled(g.p[0].a, m) : 0);
    for (int k = 0; k < ng; k++) slot[warp][k * 32 + lane] = 0.0f;
    cu_rr_pos cur = {blockIdx.x, 0, 0}, ld = cur;
    uint4 next[G]; /* the next place's weights; zero past the end */
#pragma unroll
    for (int j = 0; j < G; j++) next[j] = make_uint4(0, 0, 0, 0);
    cu_rr_load_at<G, GROUP>(next, ld, g, cols, steps, chunks);
    cu_rr_advance(ld, ng, tiles);
    float x[MR][8];
    int64_t x_tile = -1; /* the tile x holds (block-uniform) */
    for (;;) { /* block-uniform loop over the block's places */
        uint4 q[G];
#pragma unroll
        for (int j = 0; j < G; j++) q[j] = next[j];
        cu_rr_load_at<G, GROUP>(next, ld, g, cols, steps, chunks);
        cu_rr_advance(ld, ng, tiles);
        const int64_t c = cur.t * CU_RR_THREADS + threadIdx.x;
        if (cur.t != x_tile) {
#pragma unroll
            for (int m = 0; m < MR; m++) {
                float4 a0 = make_float4(0, 0, 0, 0), a1 = a0;
                if (m < M && c < chunks) {
                    a0 = ((const float4 *)arow[m])[2 * c];
                    a1 = ((const float4 *)arow[m])[2 * c + 1];
                }
                x[m][0] = a0.x, x[m][1] = a0.y, x[m][2] = a0.z, x[m][3] = a0.w;
                x[m][4] = a1.x, x[m][5] = a1.y, x[m][6] = a1.z, x[m][7] = a1.w;
            }
            x_tile = cur.t;
        }
        float acc[32];
#pragma unroll
        for (int j = 0; j < G; j++) {
            float wv[8];
            cu_chunk_unpack<DT>(q[j], wv);
#pragma unroll
            for (int m = 0; m < MR; m++) {
                float y = x[m][0] * wv[0];
#pragma unroll
                for (int k = 1; k < 8; k++) y += x[m][k] * wv[k];
                acc[j * MR + m] = y;
            }
        }
        cu_reduce_scatter32(acc, lane);
        slot[warp][cur.g * 32 + lane] += acc[0];
        const int64_t st = cur.st;
        cu_rr_advance(cur, ng, tiles);
        if (cur.st == st) continue;
        __syncthreads(); /* step st is whole */
        if ((int)threadIdx.x < cols * MR) cu_rr_store<MR, GROUP>(g, slot, st, cols);
        __syncthreads();
        if (cur.st >= steps) break;
        for (int k = 0; k < ng; k++) slot[warp][k * 32 + lane] = 0.0f;
    }
}

int cu_gemv_rows_regs_takes(int64_t M) {
    const char *env = getenv("QVL_CUDA_GEMV_REGS");
    if (env && strcmp(env, "0") == 0) return 0;
    return M >= 3 && M <= 8;
}

/* Groups a block step: as many as fit CU_RR_MAX_COLS, fewer where the steps would not give
 * every SM a block (a 1024-column projection on the H100's 132 SMs). */
template <int MR>
static int cu_rr_groups(int64_t N, int sm_count) {
    const int G = 32 / MR;
    int ng = CU_RR_MAX_COLS / G;
    while (ng > 1 && (N + ng * G - 1) / (ng * G) < sm_count) ng /= 2;
    return ng;
}

template <int DT, int MR, bool GROUP>
static void cu_rr_launch(cu_stream s, cu_mm_group g, int sm_count) {
    int64_t total = 0;
    for (int i = 0; i < g.n; i++) total += g.p[i].N;
    const int ng = cu_rr_groups<MR>(total, sm_count), cols = ng * (32 / MR);
    g.first[0] = 0;
    for (int i = 0; i < g.n; i++) g.first[i + 1] = g.first[i] + (g.p[i].N + cols - 1) / cols;
    const unsigned blocks = cu_one_wave_blocks(k_gemv_rows_regs<DT, MR, GROUP>, CU_RR_THREADS, 0,
                                               g.first[g.n], sm_count);
    k_gemv_rows_regs<DT, MR, GROUP><<<blocks, CU_RR_THREADS, 0, s>>>(g, ng);
}

template <int DT, bool GROUP>
static void cu_rr_launch_any(cu_stream s, const cu_mm_group &g, int sm_count) {
    if (g.p[0].M <= 4) cu_rr_launch<DT, 4, GROUP>(s, g, sm_count);
    else cu_rr_launch<DT, 8, GROUP>(s, g, sm_count);
}

static bool cu_rr_applies(const cu_mm_args &p) {
    return cu_gemv_rows_regs_takes(p.M) && p.batches == 1 && p.K % 8 == 0 &&
           (p.w.dtype == QVL_F16 || p.w.dtype == QVL_BF16);
}

bool cu_gemv_rows_regs(cu_stream s, const cu_mm_args &p) {
    if (!cu_rr_applies(p)) return false;
    cu_mm_group g;
    memset(&g, 0, sizeof g);
    g.p[0] = p;
    g.n = 1;
    if (p.w.dtype == QVL_F16) cu_rr_launch_any<QVL_F16, false>(s, g, cu_current_sm_count(16));
    else cu_rr_launch_any<QVL_BF16, false>(s, g, cu_current_sm_count(16));
    return true;
}

bool cu_gemv_rows_regs_group(cu_stream s, const cu_mm_args *ps, int n) {
    if (n < 2 || n > CU_MM_GROUP_MAX) return false;
    cu_mm_group g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
        if (!cu_rr_applies(ps[i]) || ps[i].w.dtype != ps[0].w.dtype || ps[i].K != ps[0].K ||
            ps[i].M != ps[0].M || ps[i].res.data)
            return false;
        g.p[i] = ps[i];
    }
    g.n = n;
    if (ps[0].w.dtype == QVL_F16) cu_rr_launch_any<QVL_F16, true>(s, g, cu_current_sm_count(16));
    else cu_rr_launch_any<QVL_BF16, true>(s, g, cu_current_sm_count(16));
    return true;
}
