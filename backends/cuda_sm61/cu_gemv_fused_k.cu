/* Fused decode GEMVs with q4_k / q6_k weights: NORM_LINEAR, MLP_RESIDUAL and MATMUL in one
 * kernel each, as cu_gemv_fused.cu does for the other dtypes. Without it a decode step of a
 * Q4_K_M model runs a norm (or activation) kernel that quantises into scratch, then one GEMV
 * per projection: twice the launches, each one a gap in which the GPU idles.
 *
 * Every block builds the M activation rows in shared memory (the prologue of
 * cu_gemv_fused.cuh), quantises them there to int8 blocks of 32 (da = max|x| / 127, q =
 * round(x / da), sa = da * sum(q): the rounding of cu_quantize.cu), then a warp per output
 * column reads its weight row super-block by super-block (8 lanes per super-block, 4
 * super-blocks per step: cu_kquant.cuh) and multiplies on __dp4a against the shared rows.
 * Columns of up to three projections are numbered one after the other; each projection may be
 * q4_k or q6_k (Q4_K_M gives half the layers a q6_k attention-V), the format being a
 * warp-uniform choice per column. As in the other fused kernels, each warp's first weights are
 * in flight during the prologue and the next batch (or the next column's first) during each
 * batch's dot products; the grid is one wave of resident blocks.
 *
 * One row (decode) with an RMS norm leaves the norm's scale for the epilogue
 * (cu_prologue_rms_deferred): the int8 rounding of x * g and of x * g / rms differs only in
 * da, and the dot product is linear in da and sa. */
#include "cu_gemv_fused.cuh"
#include "cu_kquant.cuh"

#define CU_KF_UNROLL 2 /* steps of 4 super-blocks per batch: a 2048-long row is one batch */
/* Two batches of 8 words per lane in flight and the dot products' unpacked quants need about
 * 96 registers (clang, sm_61): two resident blocks per SM, not the three of the other fused
 * kernels, whose 80-register bound made this one spill. */
#ifndef CU_KF_MIN_BLOCKS
#define CU_KF_MIN_BLOCKS 2
#endif

/* The first byte of output column o's weight row and its format (NULL past the last column). */
__device__ __forceinline__ const unsigned char *cu_kf_row(const cu_fused_args &p, int64_t o,
                                                          int64_t total, int *dt) {
    *dt = QVL_Q4_K;
    if (o >= total) return NULL;
    int64_t n;
    int pj = cu_fused_proj(p, o, &n);
    *dt = cu_pick(p.w_dtype, pj);
    int64_t bb = *dt == QVL_Q4_K ? cu_kq<QVL_Q4_K>::BB : cu_kq<QVL_Q6_K>::BB;
    return (const unsigned char *)cu_pick(p.w, pj) + (n * cu_pick(p.w_row_stride, pj) / QVL_QK_K) * bb;
}

/* The batch of super-blocks s0 + g + 4u (u < CU_KF_UNROLL) of a row; zeros past its end. */
__device__ __forceinline__ void cu_kf_fetch(const unsigned char *wrow, int dt, int s0, int nsb,
                                            int g, int part, cu_kraw (&r)[CU_KF_UNROLL]) {
#pragma unroll
    for (int u = 0; u < CU_KF_UNROLL; u++) {
        int sb = s0 + g + 4 * u;
        if (!wrow || sb >= nsb) r[u].a = r[u].b = make_uint4(0, 0, 0, 0);
        else if (dt == QVL_Q4_K) cu_kq<QVL_Q4_K>::load(wrow + sb * cu_kq<QVL_Q4_K>::BB, part, r[u]);
        else cu_kq<QVL_Q6_K>::load(wrow + sb * cu_kq<QVL_Q6_K>::BB, part, r[u]);
    }
}

/* Shared memory: [M, K] floats, [M, K] int8 quants, [M, K / 32] da, [M, K / 32] sa. K is whole
 * super-blocks, so every part starts 16-byte aligned. */
int64_t cu_fused_kquant_smem(int64_t M, int64_t K) {
    return M * K * (int64_t)(sizeof(float) + 1) + 2 * M * (K / CU_KQ_BLOCK) * (int64_t)sizeof(float);
}

template <int MR>
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP, CU_KF_MIN_BLOCKS) k_gemv_fused_k(cu_fused_args p) {
    extern __shared__ float4 xs4[];
    __shared__ float red[32];
    __shared__ float ss[CU_FG_WARPS];
    float *xs = (float *)xs4;
    const int K = (int)p.K, nb = K / CU_KQ_BLOCK, nsb = K / QVL_QK_K, M = (int)p.M;
    int8_t *qs = (int8_t *)(xs + M * K);
    float *ds = (float *)(qs + M * K), *sums = ds + M * nb;
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int g = lane / 8, part = lane % 8; /* super-block g of a step, its lane part (cu_kquant.cuh) */
    int64_t total = cu_pick(p.n_off, p.n_proj);
    int64_t step = (int64_t)gridDim.x * CU_FG_WARPS;
    int64_t o = (int64_t)blockIdx.x * CU_FG_WARPS + warp;

    int dt;
    const unsigned char *wrow = cu_kf_row(p, o, total, &dt);
    cu_kraw next[CU_KF_UNROLL];
    cu_kf_fetch(wrow, dt, 0, nsb, g, part, next); /* in flight during the prologue */
    const bool deferred = cu_fused_deferred<MR>(p);
    float scale[1] = {cu_fused_prologue_i8<MR>(p, xs, red, ss)};

    /* Quantise: 8 lanes to a block of 32 (4 values each), 4 blocks per warp at a time.
     * Warp-uniform trip count: every lane takes part in the shuffles. */
    for (int b0 = warp * 4; b0 < M * nb; b0 += CU_FG_WARPS * 4) {
        int blk = b0 + g;
        bool in = blk < M * nb;
        float4 v = in ? xs4[blk * (CU_KQ_BLOCK / 4) + part] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        uint32_t packed;
        int sum;
        float d = cu_quantize_block8<true>(v, packed, sum);
        if (in) {
            ((uint32_t *)qs)[blk * (CU_KQ_BLOCK / 4) + part] = packed;
            if (part == 0) {
                ds[blk] = d;
                sums[blk] = d * (float)sum;
            }
        }
    }
    __syncthreads();

    for (; o < total; o += step) { /* warp-uniform loop */
        const unsigned char *wnext = NULL;
        int dt_next = dt;
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int s0 = 0; s0 < nsb; s0 += 4 * CU_KF_UNROLL) {
            cu_kraw cur[CU_KF_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_KF_UNROLL; u++) cur[u] = next[u];
            if (s0 + 4 * CU_KF_UNROLL < nsb) {
                cu_kf_fetch(wrow, dt, s0 + 4 * CU_KF_UNROLL, nsb, g, part, next);
            } else {
                wnext = cu_kf_row(p, o + step, total, &dt_next);
                cu_kf_fetch(wnext, dt_next, 0, nsb, g, part, next);
            }
#pragma unroll
            for (int u = 0; u < CU_KF_UNROLL; u++) {
                int sb = s0 + g + 4 * u;
                if (sb >= nsb) continue;
                if (dt == QVL_Q4_K)
                    cu_kq<QVL_Q4_K>::dot<MR>(cur[u], part, sb, M, qs, K, ds, sums, nb, acc);
                else
                    cu_kq<QVL_Q6_K>::dot<MR>(cur[u], part, sb, M, qs, K, ds, sums, nb, acc);
            }
        }
        int64_t n;
        int pj = cu_fused_proj(p, o, &n);
        cu_fused_store<MR>(p, pj, n, o, acc, lane, deferred, scale);
        wrow = wnext;
        dt = dt_next;
    }
}

void cu_fused_run_kquant(const cu_fused_args &p, size_t smem, int sm_count, cu_stream s) {
    if (p.M == 1) cu_fused_run(k_gemv_fused_k<1>, p, smem, sm_count, s);
    else if (p.M <= 4) cu_fused_run(k_gemv_fused_k<4>, p, smem, sm_count, s);
    else cu_fused_run(k_gemv_fused_k<CU_FUSED_MAX_ROWS>, p, smem, sm_count, s);
}
