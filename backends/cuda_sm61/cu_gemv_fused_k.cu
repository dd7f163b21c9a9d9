/* Fused decode GEMVs with q4_k / q6_k weights: NORM_LINEAR, MLP_RESIDUAL and MATMUL in one
 * kernel each, as cu_gemv_fused.cu does for the other dtypes. Without it a decode step of a
 * Q4_K_M model runs a norm (or activation) kernel that quantises into scratch, then one GEMV
 * per projection: twice the launches, each one a gap in which the GPU idles.
 *
 * Every block computes the M activation rows (norm, activation or the rows as they are) straight
 * from global memory and keeps only their int8 blocks of 32 in shared memory (da = max|x| / 127,
 * q = round(x / da), sa = da * sum(q): the rounding of cu_quantize.cu), 1.25 bytes an element:
 * 8 rows of K = 2048 take 20 KiB, where f32 rows took 84. Then a warp per output column reads
 * its weight row super-block by super-block (8 lanes per super-block, 4 super-blocks per step:
 * cu_kquant.cuh) and multiplies on __dp4a against the shared rows. Columns of up to three
 * projections are numbered one after the other; each projection may be q4_k or q6_k (Q4_K_M
 * gives half the layers a q6_k attention-V), the format being a warp-uniform choice per column.
 * As in the other fused kernels, each warp's first weights are in flight during the prologue and
 * the next batch (or the next column's first) during each batch's dot products; the grid is one
 * wave of resident blocks.
 *
 * Rows too long for shared memory (8 rows of the MLP's down projection, K = 6144) are taken in
 * chunks of K: every warp runs its columns over one chunk, the block quantises the next chunk,
 * and the warp adds its next partial sums into the outputs it wrote (the same lane writes and
 * re-reads each output, so no other thread sees a partial sum). A norm needs its whole row for
 * its scale, so NORM_LINEAR is fused only where K fits in one chunk.
 *
 * An RMS norm leaves its scale for the epilogue: W (x * g / rms) = (1 / rms) W (x * g), and the
 * int8 rounding of x * g and of x * g / rms differs only in da, while the dot product is linear
 * in da and sa. The sum of squares is gathered while quantising, so no block-wide reduction
 * waits between the loads and the dot products. A layer norm (the vision tower's, whose rows
 * are never this few in practice) takes the unfused path: its statistics and beta cost this
 * kernel registers it does not have to spare at 8 rows. */
#include "cu_gemv_fused.cuh"
#include "cu_kquant.cuh"

#define CU_KF_UNROLL 2 /* steps of 4 super-blocks per batch: a 2048-long row is one batch */
#define CU_KF_CHUNK_SB (4 * CU_KF_UNROLL) /* chunks are whole batches of super-blocks */
/* Two batches of 8 words per lane in flight and the dot products' unpacked quants need about
 * 96 registers (clang, sm_61): two resident blocks per SM, not the three of the other fused
 * kernels, whose 80-register bound made this one spill. */
#ifndef CU_KF_MIN_BLOCKS
#define CU_KF_MIN_BLOCKS 2
#endif

/* Output column o's weight row from super-block c0 on, and its format (NULL past the last
 * column). */
__device__ __forceinline__ const unsigned char *cu_kf_row(const cu_fused_args &p, int o, int total,
                                                          int c0, int *dt) {
    *dt = QVL_Q4_K;
    if (o >= total) return NULL;
    int64_t n;
    int pj = cu_fused_proj(p, o, &n);
    *dt = cu_pick(p.w_dtype, pj);
    int64_t bb = *dt == QVL_Q4_K ? cu_kq<QVL_Q4_K>::BB : cu_kq<QVL_Q6_K>::BB;
    return (const unsigned char *)cu_pick(p.w, pj) + (n * cu_pick(p.w_row_stride, pj) / QVL_QK_K + c0) * bb;
}

/* The batch of super-blocks s0 + g + 4u (u < CU_KF_UNROLL) from wrow on; zeros from `end` on. */
__device__ __forceinline__ void cu_kf_fetch(const unsigned char *wrow, int dt, int s0, int end,
                                            int g, int part, cu_kraw (&r)[CU_KF_UNROLL]) {
#pragma unroll
    for (int u = 0; u < CU_KF_UNROLL; u++) {
        int sb = s0 + g + 4 * u;
        if (!wrow || sb >= end) r[u].a = r[u].b = make_uint4(0, 0, 0, 0);
        else if (dt == QVL_Q4_K) cu_kq<QVL_Q4_K>::load(wrow + sb * cu_kq<QVL_Q4_K>::BB, part, r[u]);
        else cu_kq<QVL_Q6_K>::load(wrow + sb * cu_kq<QVL_Q6_K>::BB, part, r[u]);
    }
}

/* Shared memory for M rows of a chunk of Kc: [M, Kc] int8 quants, [M, Kc / 32] da, then sa.
 * Kc is whole super-blocks, so every part starts 16-byte aligned. */
int64_t cu_fused_kquant_smem(int64_t M, int64_t Kc) {
    return M * Kc + 2 * M * (Kc / CU_KQ_BLOCK) * (int64_t)sizeof(float);
}

int64_t cu_fused_kquant_chunk(int64_t M, int64_t K, int64_t room) {
    int64_t nsb = K / QVL_QK_K;
    for (int64_t n = 1; n <= nsb; n++) {
        int64_t c = (nsb + n - 1) / n;
        if (n > 1) c = (c + CU_KF_CHUNK_SB - 1) / CU_KF_CHUNK_SB * CU_KF_CHUNK_SB;
        if (c > nsb) c = nsb;
        if (cu_fused_kquant_smem(M, c * QVL_QK_K) <= room) return c;
        if (c <= CU_KF_CHUNK_SB) break;
    }
    return 0;
}

/* One lane's 4 elements of a row as loaded: x (f32), and gamma (norm) or up (gated
 * activation), raw as stored where p.vec (cu_vec4_raw), else already f32. */
struct cu_kf_in {
    float4 x;
    uint4 a;
};

/* Elements k .. k + 3 of x's row m. */
__device__ __forceinline__ float4 cu_kf_x4(const cu_fused_args &p, int m, int k) {
    int64_t xr = cu_pick(p.x_row, m);
    if (p.vec) return __ldg((const float4 *)((const float *)p.x.data + xr) + k / 4);
    int64_t sx = cu_inner_stride(p.x);
    return make_float4(cu_view_load(p.x, xr + k * sx), cu_view_load(p.x, xr + (k + 1) * sx),
                       cu_view_load(p.x, xr + (k + 2) * sx), cu_view_load(p.x, xr + (k + 3) * sx));
}

__device__ __forceinline__ uint4 cu_kf_bits(float a, float b, float c, float d) {
    return make_uint4(__float_as_uint(a), __float_as_uint(b), __float_as_uint(c), __float_as_uint(d));
}

/* Elements k .. k + 3 of v at v[off + i * step] (f32 bits). */
__device__ __forceinline__ uint4 cu_kf_strided4(const cu_view &v, int64_t off, int64_t step, int k) {
    return cu_kf_bits(cu_view_load(v, off + k * step), cu_view_load(v, off + (k + 1) * step),
                      cu_view_load(v, off + (k + 2) * step), cu_view_load(v, off + (k + 3) * step));
}

__device__ __forceinline__ void cu_kf_load(const cu_fused_args &p, int m, int k, cu_kf_in &r) {
    r.x = cu_kf_x4(p, m, k);
    r.a = make_uint4(0u, 0u, 0u, 0u);
    if (p.prologue == CU_FUSED_NORM) {
        r.a = p.vec ? cu_vec4_raw(p.aux, k / 4) : cu_kf_strided4(p.aux, 0, p.aux.stride[0], k);
    } else if (p.prologue == CU_FUSED_ACT && p.aux.data) {
        int64_t ar = cu_pick(p.aux_row, m);
        if (p.vec) r.a = __ldg((const uint4 *)((const float *)p.aux.data + ar) + k / 4);
        else r.a = cu_kf_strided4(p.aux, ar, cu_inner_stride(p.aux), k);
    }
}

/* The prologue's 4 values (the RMS norm deferred: x * g, with x's sum of squares added to sq). */
__device__ __forceinline__ float4 cu_kf_value(const cu_fused_args &p, const cu_kf_in &r, float &sq) {
    float4 x = r.x;
    if (p.prologue == CU_FUSED_COPY) return x;
    if (p.prologue == CU_FUSED_ACT)
        return cu_act4(p.act, p.aux.data != NULL, x, cu_vec4_cvt(QVL_F32, r.a));
    float4 g = cu_vec4_cvt(p.vec ? p.aux.dtype : QVL_F32, r.a);
    sq += x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w;
    return make_float4(x.x * g.x, x.y * g.y, x.z * g.z, x.w * g.w);
}

/* Quantise elements [k0, k0 + 32 nbr) of the M rows into the chunk's shared rows (row stride
 * nbc blocks). Blocks are numbered row by row; 8 lanes take a block of 32 (4 values each), a
 * warp 4 neighbouring blocks (one row: nbr is a multiple of 8), QB groups of them loaded before
 * any is used. With ss, each warp adds its rows' sums of squares into ss[m * CU_FG_WARPS + warp]. */
template <int QB>
__device__ __forceinline__ void cu_kf_quantise(const cu_fused_args &p, int k0, int nbr, int nbc,
                                               int8_t *qs, float *ds, float *sums, float *ss) {
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int g = lane / 8, part = lane % 8;
    const int nblk = (int)p.M * nbr;
    for (int b0 = warp * 4; b0 < nblk; b0 += CU_FG_WARPS * 4 * QB) {
        cu_kf_in in[QB];
#pragma unroll
        for (int u = 0; u < QB; u++) {
            int blk = b0 + u * CU_FG_WARPS * 4 + g;
            if (blk < nblk) cu_kf_load(p, blk / nbr, k0 + (blk % nbr) * CU_KQ_BLOCK + part * 4, in[u]);
            else in[u].x = make_float4(0.0f, 0.0f, 0.0f, 0.0f), in[u].a = make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < QB; u++) {
            int bw = b0 + u * CU_FG_WARPS * 4; /* warp-uniform: the 4 blocks are all in or all out */
            if (bw >= nblk) break;
            int m = bw / nbr, j = bw % nbr + g;
            float sq = 0.0f;
            float4 v = cu_kf_value(p, in[u], sq);
            uint32_t packed;
            int sum;
            float d = cu_quantize_block8<true>(v, packed, sum);
            int b = m * nbc + j;
            ((uint32_t *)qs)[b * (CU_KQ_BLOCK / 4) + part] = packed;
            if (part == 0) {
                ds[b] = d;
                sums[b] = d * (float)sum;
            }
            if (ss) {
                sq = cu_warp_sum(sq);
                if (lane == 0) ss[m * CU_FG_WARPS + warp] += sq;
            }
        }
    }
}

template <int MR>
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP, CU_KF_MIN_BLOCKS) k_gemv_fused_k(cu_fused_args p) {
    extern __shared__ float4 qs4[];
    __shared__ float ss[CU_FUSED_MAX_ROWS * CU_FG_WARPS];
    __shared__ float scale[CU_FUSED_MAX_ROWS]; /* the deferred RMS norm's 1 / rms per row */
    const int nsb = (int)p.K / QVL_QK_K, M = (int)p.M, csb = p.kc_sb;
    const int nbc = csb * (QVL_QK_K / CU_KQ_BLOCK), lda = csb * QVL_QK_K;
    int8_t *qs = (int8_t *)qs4;
    float *ds = (float *)(qs + M * lda), *sums = ds + M * nbc;
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int g = lane / 8, part = lane % 8; /* super-block g of a step, its lane part (cu_kquant.cuh) */
    /* column numbers as ints: fewer registers (a model's widest output, the vocabulary, is far
     * below 2^31) */
    const int total = (int)cu_pick(p.n_off, p.n_proj), step = (int)gridDim.x * CU_FG_WARPS;
    const int first = (int)blockIdx.x * CU_FG_WARPS + warp;
    const bool deferred = p.prologue == CU_FUSED_NORM; /* RMS, one chunk (the host's rule) */

    int dt;
    const unsigned char *wrow = cu_kf_row(p, first, total, 0, &dt);
    cu_kraw next[CU_KF_UNROLL];
    cu_kf_fetch(wrow, dt, 0, min(nsb, csb), g, part, next); /* in flight during the prologue */
    if (deferred && lane == 0)
        for (int m = 0; m < M; m++) ss[m * CU_FG_WARPS + warp] = 0.0f;

    for (int c0 = 0; c0 < nsb; c0 += csb) {
        const int c1 = min(nsb, c0 + csb);
        if (c0 > 0) __syncthreads(); /* every warp is done with the last chunk's rows */
        cu_kf_quantise<2>(p, c0 * QVL_QK_K, (c1 - c0) * (QVL_QK_K / CU_KQ_BLOCK), nbc, qs, ds, sums,
                          deferred ? ss : NULL);
        __syncthreads();
        if (deferred && c0 == 0) { /* block-uniform: every warp's sums of squares are in */
            if ((int)threadIdx.x < M) scale[threadIdx.x] = cu_rms_scale(p, (int)threadIdx.x, ss);
            __syncthreads();
        }
        const int len = c1 - c0; /* super-blocks of this chunk: the loop counts from its start */
        for (int o = first; o < total; o += step) { /* warp-uniform loop */
            const unsigned char *wnext = NULL;
            int dt_next = dt;
            float acc[MR];
#pragma unroll
            for (int m = 0; m < MR; m++) acc[m] = 0.0f;
            for (int s0 = 0; s0 < len; s0 += 4 * CU_KF_UNROLL) {
                cu_kraw cur[CU_KF_UNROLL];
#pragma unroll
                for (int u = 0; u < CU_KF_UNROLL; u++) cur[u] = next[u];
                if (s0 + 4 * CU_KF_UNROLL < len) {
                    cu_kf_fetch(wrow, dt, s0 + 4 * CU_KF_UNROLL, len, g, part, next);
                } else {
                    wnext = cu_kf_row(p, o + step, total, c0, &dt_next);
                    cu_kf_fetch(wnext, dt_next, 0, len, g, part, next);
                }
#pragma unroll
                for (int u = 0; u < CU_KF_UNROLL; u++) {
                    int sb = s0 + g + 4 * u;
                    if (sb >= len) continue;
                    if (dt == QVL_Q4_K)
                        cu_kq<QVL_Q4_K>::dot<MR>(cur[u], part, sb, M, qs, lda, ds, sums, nbc, acc);
                    else
                        cu_kq<QVL_Q6_K>::dot<MR>(cur[u], part, sb, M, qs, lda, ds, sums, nbc, acc);
                }
            }
            int64_t n;
            int pj = cu_fused_proj(p, o, &n);
            cu_fused_store<MR>(p, pj, n, o, acc, lane, deferred, scale, c0 > 0);
            wrow = wnext;
            dt = dt_next;
        }
        if (c1 < nsb) { /* the next chunk's first weights, in flight while it is quantised */
            wrow = cu_kf_row(p, first, total, c1, &dt);
            cu_kf_fetch(wrow, dt, 0, min(nsb, c1 + csb) - c1, g, part, next);
        }
    }
}

void cu_fused_run_kquant(const cu_fused_args &p, size_t smem, int sm_count, cu_stream s) {
    if (p.M == 1) cu_fused_run(k_gemv_fused_k<1>, p, smem, sm_count, s);
    else if (p.M <= 4) cu_fused_run(k_gemv_fused_k<4>, p, smem, sm_count, s);
    else cu_fused_run(k_gemv_fused_k<CU_FUSED_MAX_ROWS>, p, smem, sm_count, s);
}
