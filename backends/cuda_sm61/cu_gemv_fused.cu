/* NORM_LINEAR and MLP_RESIDUAL for decode (a few rows) in one kernel each, instead of a
 * norm/activation kernel, a trip through scratch and one GEMV per projection.
 *
 * Every block first builds the M activation rows in shared memory (the prologue): the
 * normalised rows of x (RMS or layer norm, as cu_norm.cu computes them) or the MLP's
 * activation (silu(a) * up, gelu_tanh(a), gelu_erf(a), as cu_elementwise.cu does). The rows
 * are small (M * K floats, at most 47 KiB), so recomputing them per block costs little next
 * to the weights. Then a warp per output column walks the weight row with 16-byte loads
 * (CU_FG_UNROLL in flight per lane) against the shared rows, for all M rows at once; the
 * columns of up to three projections are numbered one after the other, as the output
 * concatenates them. The epilogue adds the bias and, for MLP_RESIDUAL, the residual. With
 * q8_0 weights the rows are quantised to int8 blocks in shared memory and the dot products
 * run on __dp4a (k_gemv_fused_q8). */
#include <string.h>

#include "cu_device.cuh"

#define CU_FG_WARPS 8
#ifndef CU_FG_UNROLL /* 16-byte weight loads in flight per lane */
#define CU_FG_UNROLL 4
#endif
#ifndef CU_FG_BLOCKS_PER_SM /* resident blocks asked for per SM (the prologue runs per block) */
#define CU_FG_BLOCKS_PER_SM 4
#endif
#define CU_SQRT_2_OVER_PI_F 0.79788456080286535588f
#define CU_SQRT_HALF_F 0.70710678118654752440f

struct cu_fused_args {
    int prologue; /* CU_FUSED_NORM or CU_FUSED_ACT */
    int layer, act;
    float eps;
    cu_view x, gamma, beta; /* norm */
    cu_view a, up;          /* act (up.data NULL when absent) */
    cu_view res;            /* act: the residual; data NULL for norm */
    int64_t M, K;
    int n_proj;
    const void *w[3];
    int64_t w_row_stride[3];
    cu_view bias[3];
    int64_t n_off[4]; /* projection p owns output columns [n_off[p], n_off[p + 1]) */
    float *out;
    int64_t ldo;
};

/* The prologue: rows [M, K] of activations into xs. */
__device__ void cu_fused_prologue(const cu_fused_args &p, float *xs, float *red) {
    int64_t K = p.K;
    if (p.prologue == CU_FUSED_NORM) {
        const cu_view &x = p.x;
        int64_t step = x.stride[x.ndim - 1];
        for (int64_t m = 0; m < p.M; m++) {
            int64_t base = cu_row_offset(x, m);
            float mean = 0.0f;
            if (p.layer) {
                float sum = 0.0f;
                for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
                    sum += cu_view_load(x, base + i * step);
                mean = cu_block_reduce(sum, false, red) / (float)K;
            }
            float sum_sq = 0.0f;
            for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
                float v = cu_view_load(x, base + i * step) - mean;
                xs[m * K + i] = v + mean; /* the row itself, read back by this thread only */
                sum_sq += v * v;
            }
            float inv = 1.0f / sqrtf(cu_block_reduce(sum_sq, false, red) / (float)K + p.eps);
            for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
                float v = xs[m * K + i];
                float g = cu_view_load(p.gamma, i * p.gamma.stride[0]);
                float y;
                if (p.layer) {
                    y = (v - mean) * inv * g;
                    if (p.beta.data) y += cu_view_load(p.beta, i * p.beta.stride[0]);
                } else {
                    y = (v * inv) * g;
                }
                xs[m * K + i] = y;
            }
        }
    } else {
        const cu_view &a = p.a, &up = p.up;
        for (int64_t e = threadIdx.x; e < p.M * K; e += blockDim.x) {
            int64_t m = e / K, f = e % K;
            float x = cu_view_load(a, cu_row_offset(a, m) + f * a.stride[a.ndim - 1]);
            float v;
            if (up.data) {
                float u = cu_view_load(up, cu_row_offset(up, m) + f * up.stride[up.ndim - 1]);
                v = x / (1.0f + expf(-x)) * u;
            } else if (p.act == QVL_ACT_GELU_TANH) {
                v = 0.5f * x * (1.0f + tanhf(CU_SQRT_2_OVER_PI_F * (x + 0.044715f * x * x * x)));
            } else {
                v = 0.5f * x * (1.0f + erff(x * CU_SQRT_HALF_F));
            }
            xs[e] = v;
        }
    }
    __syncthreads();
}

/* The epilogue: warp sums, plus the projection's bias and, for MLP_RESIDUAL, the residual;
 * output column o (projection pj's row n) of every row. */
__device__ __forceinline__ void cu_fused_store(const cu_fused_args &p, int pj, int64_t n,
                                               int64_t o, const float *acc, int lane) {
    const cu_view &bias = p.bias[pj];
    float b = bias.data ? cu_view_load(bias, n * bias.stride[0]) : 0.0f;
#pragma unroll
    for (int m = 0; m < CU_GEMV_MAX_ROWS; m++) {
        if (m >= p.M) break;
        float y = cu_warp_sum(acc[m]);
        if (lane == 0) {
            y += b;
            if (p.res.data)
                y = cu_view_load(p.res, cu_row_offset(p.res, m) + n * p.res.stride[p.res.ndim - 1]) +
                    y;
            p.out[m * p.ldo + o] = y;
        }
    }
}

template <int DT>
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP) k_gemv_fused(cu_fused_args p) {
    extern __shared__ float4 xs4[]; /* [M, K] floats, 16-byte aligned */
    __shared__ float red[32];
    float *xs = (float *)xs4;
    cu_fused_prologue(p, xs, red);

    const int per = DT == QVL_F32 ? 4 : 8; /* weights per 16-byte chunk */
    const int esize = DT == QVL_F32 ? 4 : 2;
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int64_t chunks = p.K / per, total = p.n_off[p.n_proj];
    for (int64_t o = (int64_t)blockIdx.x * CU_FG_WARPS + warp; o < total;
         o += (int64_t)gridDim.x * CU_FG_WARPS) { /* warp-uniform loop */
        int pj = (p.n_proj > 1 && o >= p.n_off[1]) + (p.n_proj > 2 && o >= p.n_off[2]);
        int64_t n = o - p.n_off[pj];
        const uint4 *wrow =
            (const uint4 *)((const char *)p.w[pj] + n * p.w_row_stride[pj] * esize);
        float acc[CU_GEMV_MAX_ROWS];
        const float *rows[CU_GEMV_MAX_ROWS];
#pragma unroll
        for (int m = 0; m < CU_GEMV_MAX_ROWS; m++) {
            acc[m] = 0.0f;
            rows[m] = xs + (m < p.M ? m * p.K : 0);
        }
        for (int64_t c0 = lane; c0 < chunks; c0 += CU_WARP * CU_FG_UNROLL) {
            uint4 q[CU_FG_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_FG_UNROLL; u++) {
                int64_t c = c0 + CU_WARP * u;
                q[u] = c < chunks ? __ldg(&wrow[c]) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < CU_FG_UNROLL; u++) {
                int64_t c = c0 + CU_WARP * u;
                if (c >= chunks) break;
                cu_chunk_fma<DT>(q[u], rows, p.M, c, acc);
            }
        }
        cu_fused_store(p, pj, n, o, acc, lane);
    }
}

/* q8_0 weights: after the prologue the rows are quantised in shared memory to int8 blocks
 * of 32 with one f32 scale each, exactly as k_quantize_rows (cu_matmul.cu) does, and the
 * dot products run on __dp4a as in k_gemv_q8: groups of 8 lanes per 34-byte weight block,
 * CU_FG_UNROLL blocks per group in flight. */
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP) k_gemv_fused_q8(cu_fused_args p) {
    extern __shared__ float4 xs4[]; /* [M, K] floats, then [M, K] int8, then [M, K/32] f32 */
    __shared__ float red[32];
    float *xs = (float *)xs4;
    cu_fused_prologue(p, xs, red);

    int64_t K = p.K, nb = K / QVL_Q8_0_BLOCK;
    int8_t *qs = (int8_t *)(xs + p.M * K);
    float *ds = (float *)(qs + p.M * K); /* M * K is a multiple of 32: aligned */
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    for (int64_t blk = warp; blk < p.M * nb; blk += CU_FG_WARPS) {
        float v = xs[blk * QVL_Q8_0_BLOCK + lane];
        float amax = cu_warp_max(fabsf(v));
        float d = amax / 127.0f;
        int q = d > 0.0f ? __float2int_rn(v / d) : 0;
        qs[blk * QVL_Q8_0_BLOCK + lane] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        if (lane == 0) ds[blk] = d;
    }
    __syncthreads();

    int sub = lane / 8, part = lane % 8;
    int64_t total = p.n_off[p.n_proj];
    for (int64_t o = (int64_t)blockIdx.x * CU_FG_WARPS + warp; o < total;
         o += (int64_t)gridDim.x * CU_FG_WARPS) { /* warp-uniform loop */
        int pj = (p.n_proj > 1 && o >= p.n_off[1]) + (p.n_proj > 2 && o >= p.n_off[2]);
        int64_t n = o - p.n_off[pj];
        const unsigned char *wrow = (const unsigned char *)p.w[pj] +
                                    (n * p.w_row_stride[pj] / QVL_Q8_0_BLOCK) *
                                        (int64_t)sizeof(qvl_block_q8_0);
        float acc[CU_GEMV_MAX_ROWS];
#pragma unroll
        for (int m = 0; m < CU_GEMV_MAX_ROWS; m++) acc[m] = 0.0f;
        for (int64_t c0 = sub; c0 < nb; c0 += 4 * CU_FG_UNROLL) {
            int wq[CU_FG_UNROLL];
            float dw[CU_FG_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_FG_UNROLL; u++) {
                int64_t c = c0 + 4 * u;
                wq[u] = 0;
                dw[u] = 0.0f;
                if (c < nb) {
                    const uint16_t *h =
                        (const uint16_t *)(wrow + c * (int64_t)sizeof(qvl_block_q8_0));
                    wq[u] = (int)((uint32_t)h[1 + 2 * part] | ((uint32_t)h[2 + 2 * part] << 16));
                    dw[u] = cu_f16_to_f32(h[0]);
                }
            }
#pragma unroll
            for (int m = 0; m < CU_GEMV_MAX_ROWS; m++) {
                if (m >= p.M) break;
                const int *arow = (const int *)(qs + m * K);
                const float *drow = ds + m * nb;
#pragma unroll
                for (int u = 0; u < CU_FG_UNROLL; u++) {
                    int64_t c = c0 + 4 * u;
                    if (c < nb)
                        acc[m] += (float)__dp4a(wq[u], arow[c * 8 + part], 0) * (dw[u] * drow[c]);
                }
            }
        }
        cu_fused_store(p, pj, n, o, acc, lane);
    }
}

/* Shared memory of the fused kernels for M rows of K (0 when w's dtype has no fused kernel). */
static int64_t cu_fused_smem(int32_t dt, int64_t M, int64_t K) {
    if (dt == QVL_Q8_0)
        return M * K * (int64_t)sizeof(float) + M * K + (M * K / QVL_Q8_0_BLOCK) * 4;
    if (dt == QVL_F32 || dt == QVL_F16 || dt == QVL_BF16) return M * K * (int64_t)sizeof(float);
    return 0;
}

extern "C" int cu_gemv_fused_fits(const cu_mat *w, int n_proj, int64_t M) {
    if (n_proj < 1 || n_proj > 3 || M < 1 || M > CU_GEMV_MAX_ROWS) return 0;
    int32_t dt = w[0].dtype;
    int64_t per = dt == QVL_F32 ? 4 : dt == QVL_Q8_0 ? QVL_Q8_0_BLOCK : 8, K = w[0].cols;
    int64_t smem = cu_fused_smem(dt, M, K);
    if (smem <= 0 || smem > CU_FUSED_MAX_SMEM) return 0;
    unsigned align = dt == QVL_Q8_0 ? 2u : 16u;
    for (int i = 0; i < n_proj; i++)
        if (w[i].dtype != dt || w[i].cols != K || w[i].col_stride != 1 || w[i].cols % per != 0 ||
            w[i].row_stride % per != 0 || ((uintptr_t)w[i].data % align) != 0)
            return 0;
    return 1;
}

extern "C" int cu_launch_gemv_fused(cu_stream s, int prologue, int layer_or_act, float eps,
                                    cu_view x_or_a, cu_view gamma_or_up, cu_view beta,
                                    cu_view res, int64_t M, const cu_mat *w,
                                    const cu_view *bias, int n_proj, float *out, int64_t ldo,
                                    int sm_count) {
    if (!cu_gemv_fused_fits(w, n_proj, M)) return (int)cudaErrorInvalidConfiguration;
    cu_fused_args p;
    memset(&p, 0, sizeof p);
    p.prologue = prologue;
    if (prologue == CU_FUSED_NORM) {
        p.layer = layer_or_act;
        p.x = x_or_a;
        p.gamma = gamma_or_up;
        p.beta = beta;
    } else {
        p.act = layer_or_act;
        p.a = x_or_a;
        p.up = gamma_or_up;
        p.res = res;
    }
    p.eps = eps;
    p.M = M;
    p.K = w[0].cols;
    p.n_proj = n_proj;
    p.n_off[0] = 0;
    for (int i = 0; i < n_proj; i++) {
        p.w[i] = w[i].data;
        p.w_row_stride[i] = w[i].row_stride;
        p.bias[i] = bias[i];
        p.n_off[i + 1] = p.n_off[i] + w[i].rows;
    }
    for (int i = n_proj; i < 3; i++) p.n_off[i + 1] = p.n_off[i];
    p.out = out;
    p.ldo = ldo;
    int64_t total = p.n_off[n_proj];
    int64_t blocks = (total + CU_FG_WARPS - 1) / CU_FG_WARPS;
    int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 16) * CU_FG_BLOCKS_PER_SM;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    size_t smem = (size_t)cu_fused_smem(w[0].dtype, M, p.K);
    unsigned threads = CU_FG_WARPS * CU_WARP;
    if (w[0].dtype == QVL_Q8_0)
        k_gemv_fused_q8<<<(unsigned)blocks, threads, smem, s>>>(p);
    else if (w[0].dtype == QVL_F16)
        k_gemv_fused<QVL_F16><<<(unsigned)blocks, threads, smem, s>>>(p);
    else if (w[0].dtype == QVL_BF16)
        k_gemv_fused<QVL_BF16><<<(unsigned)blocks, threads, smem, s>>>(p);
    else
        k_gemv_fused<QVL_F32><<<(unsigned)blocks, threads, smem, s>>>(p);
    return (int)cudaGetLastError();
}
