/* The batched decode GEMV for q4_k / q6_k weights on int8 activation rows (3 to 8 rows) with
 * the activations held in registers (k_gemv_rows_regs_k): the int8 counterpart of
 * k_gemv_rows_regs (cu_gemv_rows_regs.cu).
 *
 * Why: the split GEMV (k_gemv_k_split) loads each lane's activations again for every weight
 * column: per 32 bytes of a q4_k lane share, 32 bytes of int8 values and four scales per row,
 * so with 8 rows L1 moves about ten times the weight bytes. Here a thread keeps its share of
 * every row for the tile of K it owns and meets every column of its block with it.
 *
 * Layout. A block is 4 teams of 64 threads (2 warps each); thread i of a team owns lane share
 * `part` = i % 8 of super-block i / 8 of the tile (8 super-blocks, 2048 values of K), as the
 * other int8 GEMVs split a super-block between 8 lanes (cu_kquant.cuh). A place is a tile and
 * 16 columns, 4 to each team; the lane's partial sums (4 columns x MR rows, padded to 32) go
 * through the warp reduce-scatter, and each lane adds the sum it ends with into its warp's
 * shared-memory slot. At the end of a block step a column's two warps' slots are added in
 * order (the same result every run). Columns past N and super-blocks past K load as zeros
 * (a zero q4_k / q6_k share has d = dmin = 0, so it adds nothing).
 *
 * The parts of a group (NORM_LINEAR's projections) may mix q4_k and q6_k (a Q4_K_M layer's v):
 * a step lies in one part, so the format is block-uniform; the two formats' lane shares cover
 * different values of a super-block, so the activations are loaded again when the format or
 * the tile changes. The next place's weights are in flight while one is multiplied. */
#include "cu_gemv_regs.cuh"
#include "cu_kquant.cuh"

#include <stdlib.h>
#include <string.h>

#define CU_RK_WARPS 8
#define CU_RK_THREADS (CU_RK_WARPS * CU_WARP)
#define CU_RK_TEAM 64            /* threads of a team: 8 super-blocks x 8 lane shares */
#define CU_RK_TEAMS (CU_RK_THREADS / CU_RK_TEAM)
#define CU_RK_TILE_SB 8          /* super-blocks of a tile */
#define CU_RK_G 4                /* columns a team takes per place */
#define CU_RK_PLACE_COLS (CU_RK_TEAMS * CU_RK_G)
#define CU_RK_MAX_GROUPS 4       /* places a block step at most */

/* What one place reads and the format it is in. */
struct cu_rk_place {
    const unsigned char *w; /* the block's first column of the place, at the thread's super-block */
    int64_t row_bytes, n0, N;
    bool q6;
};

/* Place p: its part (a group's, or the one matmul), the first column of the thread's team and
 * the weights' row bytes. */
template <bool GROUP>
__device__ __forceinline__ cu_rk_place cu_rk_place_at(const cu_rr_pos &p, const cu_mm_group &g,
                                                      int cols, int team, int sb) {
    cu_rk_place r;
    const int64_t col_in_step = (int64_t)p.g * CU_RK_PLACE_COLS + team * CU_RK_G;
    int dtype;
    const void *data;
    int64_t row_stride;
    if (GROUP) {
        int64_t own = p.st;
        const cu_mm_args a = cu_group_part(g, &own);
        dtype = a.w.dtype, data = a.w.data, row_stride = a.w.row_stride, r.N = a.N;
        r.n0 = own * cols + col_in_step;
    } else {
        dtype = g.p[0].w.dtype, data = g.p[0].w.data, row_stride = g.p[0].w.row_stride;
        r.N = g.p[0].N;
        r.n0 = p.st * cols + col_in_step;
    }
    r.q6 = dtype == QVL_Q6_K;
    const int64_t bb = r.q6 ? cu_kq<QVL_Q6_K>::BB : cu_kq<QVL_Q4_K>::BB;
    r.row_bytes = row_stride / QVL_QK_K * bb;
    r.w = (const unsigned char *)data + sb * bb;
    return r;
}

/* The thread's lane share of the team's CU_RK_G columns at place p (zeros past the end, past
 * N or past K). */
template <bool GROUP>
__device__ __forceinline__ void cu_rk_load(cu_kraw (&q)[CU_RK_G], const cu_rr_pos &p,
                                           const cu_mm_group &g, int cols, int64_t steps,
                                           int team, int sbl, int part, int nsb) {
#pragma unroll
    for (int j = 0; j < CU_RK_G; j++) q[j].a = q[j].b = make_uint4(0, 0, 0, 0);
    const int sb = (int)p.t * CU_RK_TILE_SB + sbl;
    if (p.st >= steps || sb >= nsb) return;
    const cu_rk_place pl = cu_rk_place_at<GROUP>(p, g, cols, team, sb);
#pragma unroll
    for (int j = 0; j < CU_RK_G; j++) {
        if (pl.n0 + j >= pl.N) continue;
        const unsigned char *blk = pl.w + (pl.n0 + j) * pl.row_bytes;
        if (pl.q6) cu_kq<QVL_Q6_K>::load(blk, part, q[j]);
        else cu_kq<QVL_Q4_K>::load(blk, part, q[j]);
    }
}

/* The thread's share of the MR rows for super-block sb (zeros past K and past M): q4_k: x =
 * the 16 values of each of its two sub-blocks, s = (da, da, sa, sa) of them; q6_k: x = 8
 * values of each quarter, s = their blocks' da. */
template <int MR>
__device__ __forceinline__ void cu_rk_rows(int (&x)[MR][8], float (&s)[MR][4], bool q6, int sb,
                                           int part, int nsb, int M, int K, const int8_t *qa,
                                           const float *da, const float *sa) {
    const int nb = K / CU_KQ_BLOCK;
#pragma unroll
    for (int m = 0; m < MR; m++) {
#pragma unroll
        for (int k = 0; k < 8; k++) x[m][k] = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) s[m][k] = 0.0f;
        if (m >= M || sb >= nsb) continue;
        const int8_t *row = qa + m * K;
        const float *dr = da + m * nb, *sr = sa + m * nb;
        if (q6) {
            const int e = cu_kq<QVL_Q6_K>::first_value(sb, part);
            const int b0 = cu_kq<QVL_Q6_K>::first_block(sb, part);
#pragma unroll
            for (int qr = 0; qr < 4; qr++) {
                int2 v = *(const int2 *)(row + e + 32 * qr);
                x[m][2 * qr] = v.x, x[m][2 * qr + 1] = v.y;
                s[m][qr] = dr[b0 + qr];
            }
        } else {
            const int e = cu_kq<QVL_Q4_K>::first_value(sb, part);
            const int b0 = cu_kq<QVL_Q4_K>::first_block(sb, part);
            int4 v0 = *(const int4 *)(row + e), v1 = *(const int4 *)(row + e + 32);
            x[m][0] = v0.x, x[m][1] = v0.y, x[m][2] = v0.z, x[m][3] = v0.w;
            x[m][4] = v1.x, x[m][5] = v1.y, x[m][6] = v1.z, x[m][7] = v1.w;
            s[m][0] = dr[b0], s[m][1] = dr[b0 + 1], s[m][2] = sr[b0], s[m][3] = sr[b0 + 1];
        }
    }
}

/* The outputs of step st: column c of the step = team (c % 16) / 4's column c % 4 of group
 * c / 16; value index (c % 4) * MR + m in its two warps' slots, added in warp order. */
template <int MR, bool GROUP>
__device__ __forceinline__ void cu_rk_store(const cu_mm_group &g,
                                            const float (*slot)[CU_RK_MAX_GROUPS * 32],
                                            int64_t st, int cols) {
    for (int o = threadIdx.x; o < cols * MR; o += CU_RK_THREADS) {
        const int c = o / MR, m = o % MR;
        const int grp = c / CU_RK_PLACE_COLS, team = c % CU_RK_PLACE_COLS / CU_RK_G;
        const int v = grp * 32 + c % CU_RK_G * MR + m;
        const float y = slot[2 * team][v] + slot[2 * team + 1][v];
        cu_rr_store_value<GROUP>(g, st, cols, c, m, y);
    }
}

/* One matmul (GROUP false: g.n is 1; a residual allowed) or up to CU_MM_GROUP_MAX of the same
 * int8 rows and K (GROUP true: NORM_LINEAR's projections; no residual), their steps one after
 * another. qa, da, sa: the rows quantised (cu_i8_rows_of, M rows of K). */
template <int MR, bool GROUP>
__global__ void __launch_bounds__(CU_RK_THREADS)
    k_gemv_rows_regs_k(cu_mm_group g, int ng, const int8_t *qa, const float *da, const float *sa) {
    __shared__ float slot[CU_RK_WARPS][CU_RK_MAX_GROUPS * 32];
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const int team = threadIdx.x / CU_RK_TEAM, sbl = threadIdx.x % CU_RK_TEAM / 8,
              part = threadIdx.x % 8;
    const int M = (int)g.p[0].M, K = (int)g.p[0].K, nsb = K / QVL_QK_K;
    const int64_t tiles = (nsb + CU_RK_TILE_SB - 1) / CU_RK_TILE_SB;
    const int cols = ng * CU_RK_PLACE_COLS; /* a block step */
    /* (g.first[g.n] would index the parameters at run time: a local copy of all of them) */
    const int64_t steps = GROUP ? (g.n == 2 ? g.first[2] : g.first[3]) : (g.p[0].N + cols - 1) / cols;
    if ((int64_t)blockIdx.x >= steps) return; /* block-uniform */
    for (int k = 0; k < ng; k++) slot[warp][k * 32 + lane] = 0.0f;
    cu_rr_pos cur = {blockIdx.x, 0, 0}, ld = cur;
    cu_kraw next[CU_RK_G];
    cu_rk_load<GROUP>(next, ld, g, cols, steps, team, sbl, part, nsb);
    cu_rr_advance(ld, ng, tiles);
    int x[MR][8];
    float xs[MR][4];
    int64_t x_key = -1; /* tile * 2 + format of the rows x holds (block-uniform) */
    for (;;) { /* block-uniform loop over the block's places */
        cu_kraw q[CU_RK_G];
#pragma unroll
        for (int j = 0; j < CU_RK_G; j++) q[j] = next[j];
        cu_rk_load<GROUP>(next, ld, g, cols, steps, team, sbl, part, nsb);
        cu_rr_advance(ld, ng, tiles);
        bool q6;
        if (GROUP) {
            int64_t own = cur.st;
            q6 = cu_group_part(g, &own).w.dtype == QVL_Q6_K;
        } else {
            q6 = g.p[0].w.dtype == QVL_Q6_K;
        }
        const int sb = (int)cur.t * CU_RK_TILE_SB + sbl;
        if (cur.t * 2 + q6 != x_key) {
            cu_rk_rows<MR>(x, xs, q6, sb, part, nsb, M, K, qa, da, sa);
            x_key = cur.t * 2 + q6;
        }
        float acc[32];
#pragma unroll
        for (int i = 0; i < 32; i++) acc[i] = 0.0f;
        if (q6) {
#pragma unroll
            for (int j = 0; j < CU_RK_G; j++) {
                const cu_kq<QVL_Q6_K>::w_t w = cu_kq<QVL_Q6_K>::unpack(q[j], part);
#pragma unroll
                for (int m = 0; m < MR; m++) acc[j * MR + m] = cu_kq<QVL_Q6_K>::row(w, x[m], xs[m]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < CU_RK_G; j++) {
                const cu_kq<QVL_Q4_K>::w_t w = cu_kq<QVL_Q4_K>::unpack(q[j], part);
#pragma unroll
                for (int m = 0; m < MR; m++)
                    acc[j * MR + m] = cu_kq<QVL_Q4_K>::row(
                        w, make_int4(x[m][0], x[m][1], x[m][2], x[m][3]),
                        make_int4(x[m][4], x[m][5], x[m][6], x[m][7]), xs[m][0], xs[m][1],
                        xs[m][2], xs[m][3]);
            }
        }
        cu_reduce_scatter32(acc, lane);
        slot[warp][cur.g * 32 + lane] += acc[0];
        const int64_t st = cur.st;
        cu_rr_advance(cur, ng, tiles);
        if (cur.st == st) continue;
        __syncthreads(); /* step st is whole */
        cu_rk_store<MR, GROUP>(g, slot, st, cols);
        __syncthreads();
        if (cur.st >= steps) break;
        for (int k = 0; k < ng; k++) slot[warp][k * 32 + lane] = 0.0f;
    }
}

/* Places a block step: as many as CU_RK_MAX_GROUPS, fewer where the steps would not give every
 * SM a block. */
static int cu_rk_groups(int64_t N, int sm_count) {
    int ng = CU_RK_MAX_GROUPS;
    while (ng > 1 && (N + ng * CU_RK_PLACE_COLS - 1) / (ng * CU_RK_PLACE_COLS) < sm_count) ng /= 2;
    return ng;
}

template <int MR, bool GROUP>
static void cu_rk_launch(cu_stream s, cu_mm_group g, const cu_i8_rows &q) {
    const int sms = cu_current_sm_count(16);
    int64_t total = 0;
    for (int i = 0; i < g.n; i++) total += g.p[i].N;
    const int ng = cu_rk_groups(total, sms), cols = ng * CU_RK_PLACE_COLS;
    g.first[0] = 0;
    for (int i = 0; i < g.n; i++) g.first[i + 1] = g.first[i] + (g.p[i].N + cols - 1) / cols;
    const unsigned blocks = cu_one_wave_blocks(k_gemv_rows_regs_k<MR, GROUP>, CU_RK_THREADS, 0,
                                               g.first[g.n], sms);
    k_gemv_rows_regs_k<MR, GROUP><<<blocks, CU_RK_THREADS, 0, s>>>(g, ng, q.qa, q.da, q.sa);
}

/* Rows, dtype and layout it takes: cu_int8_path's GEMV (checked by the callers) for the rows
 * the register GEMVs take. */
static bool cu_rk_applies(const cu_mm_args &p) {
    return cu_gemv_rows_regs_takes(p.M) && p.batches == 1 &&
           (p.w.dtype == QVL_Q4_K || p.w.dtype == QVL_Q6_K) && p.K % QVL_QK_K == 0;
}

bool cu_gemv_rows_regs_k(cu_stream s, const cu_mm_args &p, const cu_i8_rows &q) {
    if (!cu_rk_applies(p)) return false;
    cu_mm_group g;
    memset(&g, 0, sizeof g);
    g.p[0] = p;
    g.n = 1;
    if (p.M <= 4) cu_rk_launch<4, false>(s, g, q);
    else cu_rk_launch<8, false>(s, g, q);
    return true;
}

bool cu_gemv_rows_regs_k_group(cu_stream s, const cu_mm_args *ps, int n, const cu_i8_rows &q) {
    if (n < 2 || n > CU_MM_GROUP_MAX) return false;
    cu_mm_group g;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < n; i++) {
        if (!cu_rk_applies(ps[i]) || ps[i].K != ps[0].K || ps[i].M != ps[0].M || ps[i].res.data)
            return false;
        g.p[i] = ps[i];
    }
    g.n = n;
    if (ps[0].M <= 4) cu_rk_launch<4, true>(s, g, q);
    else cu_rk_launch<8, true>(s, g, q);
    return true;
}
