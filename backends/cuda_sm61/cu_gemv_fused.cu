/* Decode GEMVs (a few rows) in one kernel each: NORM_LINEAR, MLP_RESIDUAL and plain MATMUL,
 * instead of a norm/activation kernel, a trip through scratch and one GEMV per projection.
 *
 * Every block first builds the M activation rows in shared memory (the prologue): the
 * normalised rows of x (RMS or layer norm, as cu_norm.cu computes them), the MLP's activation
 * (silu(a) * up, gelu_tanh(a), gelu_erf(a), as cu_elementwise.cu does) or x as it is. The
 * rows are small (M * K floats, at most 47 KiB), so building them per block costs little next
 * to the weights, provided it is cheap: row offsets come from the host, and f32 rows with
 * unit stride are read as float4. Then a warp per output column walks the weight row with
 * 16-byte loads against the shared rows, for all M rows at once; the columns of up to three
 * projections are numbered one after the other, as the output concatenates them. The
 * epilogue adds the bias and the residual (when given).
 *
 * Latency is what these kernels fight: each warp loads the first weights of its first row
 * before the prologue, and always has the next batch of loads in flight while it multiplies
 * the current one (the last batch of a row prefetches the next row's first). The grid is one
 * wave of resident blocks (occupancy asked of the runtime), so no block waits to start and
 * redo the prologue. With q8_0 weights the rows are quantised to int8 blocks in shared memory
 * and the dot products run on __dp4a (k_gemv_fused_q8). */
#include <string.h>

#include "cu_device.cuh"

/* Warps per block. With CU_FG_MIN_BLOCKS an SM holds 24 warps of these kernels where the
 * registers allow. Larger blocks need more shared memory (a stage per warp), so q8_0 rows of
 * K = 6144 would no longer fit the fused kernel; smaller ones repeat the prologue in more
 * blocks. Build-time knob for A/B runs; docs/BENCHMARKS.md lists the shapes tried. */
#ifndef CU_FG_WARPS
#define CU_FG_WARPS 8
#endif
#define CU_FG_UNROLL 4 /* 16-byte weight loads per lane per batch (two batches in flight) */
/* The same for one row (decode): 4 keeps the registers low enough for CU_FG_MIN_BLOCKS
 * resident blocks; more bytes in flight per warp do not pay for the occupancy they cost
 * (docs/BENCHMARKS.md, "Tried and did not pay"). */
#ifndef CU_FG_UNROLL_M1
#define CU_FG_UNROLL_M1 4
#endif
#ifndef CU_FG_MIN_BLOCKS /* resident blocks per SM the register budget must allow */
#define CU_FG_MIN_BLOCKS 3
#endif
#define CU_SQRT_2_OVER_PI_F 0.79788456080286535588f
#define CU_SQRT_HALF_F 0.70710678118654752440f

struct cu_fused_args {
    int prologue; /* CU_FUSED_NORM, CU_FUSED_ACT or CU_FUSED_COPY */
    int layer, act;
    int vec; /* float4 loads: x and up f32 with aligned unit-stride rows, gamma/beta aligned, K % 4 == 0 */
    float eps;
    cu_view x;           /* the rows: norm input, activation input a, or the matmul's input */
    cu_view aux, beta;   /* norm: gamma, beta; act: up (data NULL when absent) */
    cu_view res;         /* data NULL when there is no residual */
    int64_t x_row[CU_FUSED_MAX_ROWS], aux_row[CU_FUSED_MAX_ROWS], res_row[CU_FUSED_MAX_ROWS];
    int64_t M, K; /* K <= 12032 (M rows of K floats fit in 47 KiB): in-row indices are ints */
    int n_proj;
    const void *w[3];
    int64_t w_row_stride[3];
    cu_view bias[3];
    int64_t n_off[4]; /* projection p owns output columns [n_off[p], n_off[p + 1]) */
    float *out;
    int64_t ldo;
};

__device__ __forceinline__ float cu_fused_act(int act, bool gated, float x, float u) {
    if (gated) return x / (1.0f + expf(-x)) * u;
    if (act == QVL_ACT_GELU_TANH)
        return 0.5f * x * (1.0f + tanhf(CU_SQRT_2_OVER_PI_F * (x + 0.044715f * x * x * x)));
    return 0.5f * x * (1.0f + erff(x * CU_SQRT_HALF_F));
}

/* The prologue's float4 loops issue CU_PRO_BATCH loads per thread before using any: these
 * loads are latency, not bandwidth, and the kernel's weights wait for them. Thread t owns
 * float4s t, t + blockDim.x, ... in every loop, so the passes need no barrier between them. */
#ifndef CU_PRO_BATCH /* 4 and 8 are slower (docs/BENCHMARKS.md, "Tried and did not pay") */
#define CU_PRO_BATCH 2
#endif
#define CU_PRO_FOR(i0, n4) \
    for (int i0 = threadIdx.x; i0 < (n4); i0 += CU_PRO_BATCH * (int)blockDim.x)
#define CU_PRO_AT(i0, u) ((i0) + (u) * (int)blockDim.x)

__device__ __forceinline__ float4 cu_act4(int act, bool gated, float4 a, float4 u) {
    return make_float4(cu_fused_act(act, gated, a.x, u.x), cu_fused_act(act, gated, a.y, u.y),
                       cu_fused_act(act, gated, a.z, u.z), cu_fused_act(act, gated, a.w, u.w));
}

/* Row m of the MLP activation into xr. */
__device__ __forceinline__ void cu_prologue_act(const cu_fused_args &p, int m, float *xr) {
    bool gated = p.aux.data != NULL;
    int64_t x_row = cu_pick(p.x_row, m), aux_row = cu_pick(p.aux_row, m);
    if (p.vec) {
        const float4 *a4 = (const float4 *)((const float *)p.x.data + x_row);
        const float4 *u4 = (const float4 *)((const float *)p.aux.data + aux_row);
        int n4 = (int)p.K / 4;
        CU_PRO_FOR(i0, n4) {
            float4 a[CU_PRO_BATCH], u[CU_PRO_BATCH];
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                a[j] = i < n4 ? a4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                u[j] = gated && i < n4 ? u4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++)
                if (CU_PRO_AT(i0, j) < n4)
                    ((float4 *)xr)[CU_PRO_AT(i0, j)] = cu_act4(p.act, gated, a[j], u[j]);
        }
        return;
    }
    int64_t sa = cu_inner_stride(p.x), su = gated ? cu_inner_stride(p.aux) : 0;
    for (int i = threadIdx.x; i < (int)p.K; i += blockDim.x) {
        float u = gated ? cu_view_load(p.aux, aux_row + i * su) : 0.0f;
        xr[i] = cu_fused_act(p.act, gated, cu_view_load(p.x, x_row + i * sa), u);
    }
}

/* Row m of x into xr as it is; returns this thread's sum of its elements (sq: of squares). */
__device__ __forceinline__ float cu_prologue_load(const cu_fused_args &p, int m, float *xr,
                                                  bool sq) {
    float sum = 0.0f;
    int64_t x_row = cu_pick(p.x_row, m);
    if (p.vec) {
        const float4 *x4 = (const float4 *)((const float *)p.x.data + x_row);
        int n4 = (int)p.K / 4;
        CU_PRO_FOR(i0, n4) {
            float4 v[CU_PRO_BATCH];
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                v[j] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                if (CU_PRO_AT(i0, j) < n4) ((float4 *)xr)[CU_PRO_AT(i0, j)] = v[j];
                float4 w = v[j]; /* zero past the end */
                sum += sq ? w.x * w.x + w.y * w.y + w.z * w.z + w.w * w.w : w.x + w.y + w.z + w.w;
            }
        }
        return sum;
    }
    int64_t step = cu_inner_stride(p.x);
    for (int i = threadIdx.x; i < (int)p.K; i += blockDim.x) {
        float v = cu_view_load(p.x, x_row + i * step);
        xr[i] = v;
        sum += sq ? v * v : v;
    }
    return sum;
}

__device__ __forceinline__ float cu_norm_one(const cu_fused_args &p, float v, float mean,
                                             float inv, float g, float b) {
    return p.layer ? (v - mean) * inv * g + b : (v * inv) * g;
}

/* Row m of x normalised into xr (RMS: x * inv * g; layer: (x - mean) * inv * g + b). Each
 * thread only ever touches the elements it loaded, so only the reductions synchronise. */
__device__ __forceinline__ void cu_prologue_norm(const cu_fused_args &p, int m, float *xr,
                                                 float *red) {
    int K = (int)p.K;
    float mean = 0.0f, inv;
    if (p.layer) {
        mean = cu_block_reduce(cu_prologue_load(p, m, xr, false), false, red) / (float)K;
        float ss = 0.0f;
        int per = p.vec ? 4 : 1; /* the elements cu_prologue_load gave this thread */
        for (int i = threadIdx.x; i < K / per; i += blockDim.x)
            for (int j = 0; j < per; j++) {
                float d = xr[i * per + j] - mean;
                ss += d * d;
            }
        inv = 1.0f / sqrtf(cu_block_reduce(ss, false, red) / (float)K + p.eps);
    } else {
        inv = 1.0f / sqrtf(cu_block_reduce(cu_prologue_load(p, m, xr, true), false, red) /
                               (float)K +
                           p.eps);
    }
    if (p.vec) { /* gamma and beta are unit-stride f32, f16 or bf16 vectors here */
        bool has_b = p.beta.data != NULL;
        int n4 = K / 4;
        CU_PRO_FOR(i0, n4) {
            float4 g[CU_PRO_BATCH], b[CU_PRO_BATCH];
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                g[j] = i < n4 ? cu_vec4_load(p.aux, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                b[j] = has_b && i < n4 ? cu_vec4_load(p.beta, i)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                if (i >= n4) break;
                float4 v = ((float4 *)xr)[i];
                ((float4 *)xr)[i] = make_float4(cu_norm_one(p, v.x, mean, inv, g[j].x, b[j].x),
                                                cu_norm_one(p, v.y, mean, inv, g[j].y, b[j].y),
                                                cu_norm_one(p, v.z, mean, inv, g[j].z, b[j].z),
                                                cu_norm_one(p, v.w, mean, inv, g[j].w, b[j].w));
            }
        }
        return;
    }
    int64_t sg = p.aux.stride[0], sb = p.beta.data ? p.beta.stride[0] : 0;
    for (int k = threadIdx.x; k < K; k += blockDim.x) {
        float b = p.beta.data ? cu_view_load(p.beta, k * sb) : 0.0f;
        xr[k] = cu_norm_one(p, xr[k], mean, inv, cu_view_load(p.aux, k * sg), b);
    }
}

/* RMS norm with the scale left for the epilogue: W (x * inv * g) = inv * W (x * g), so row m
 * of xs gets x * g at once (x and gamma loaded together) and no block-wide reduction waits
 * between the loads and the dot products; each warp leaves its part of the sum of squares in
 * ss[m * CU_FG_WARPS + warp] for cu_rms_scale after the prologue's barrier. Unit-stride f32
 * rows only (p.vec). */
__device__ __forceinline__ void cu_prologue_rms_deferred(const cu_fused_args &p, int m, float *xr,
                                                         float *ss) {
    const float4 *x4 = (const float4 *)((const float *)p.x.data + cu_pick(p.x_row, m));
    int n4 = (int)p.K / 4;
    float sum = 0.0f;
    CU_PRO_FOR(i0, n4) {
        float4 v[CU_PRO_BATCH], g[CU_PRO_BATCH];
#pragma unroll
        for (int j = 0; j < CU_PRO_BATCH; j++) {
            int i = CU_PRO_AT(i0, j);
            v[j] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            g[j] = i < n4 ? cu_vec4_load(p.aux, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < CU_PRO_BATCH; j++) {
            float4 w = v[j]; /* zero past the end */
            sum += w.x * w.x + w.y * w.y + w.z * w.z + w.w * w.w;
            if (CU_PRO_AT(i0, j) < n4)
                ((float4 *)xr)[CU_PRO_AT(i0, j)] =
                    make_float4(w.x * g[j].x, w.y * g[j].y, w.z * g[j].z, w.w * g[j].w);
        }
    }
    sum = cu_warp_sum(sum);
    if (threadIdx.x % CU_WARP == 0) ss[m * CU_FG_WARPS + threadIdx.x / CU_WARP] = sum;
}

/* Row m's 1 / rms from the warps' sums of squares (after the barrier). */
__device__ __forceinline__ float cu_rms_scale(const cu_fused_args &p, int m, const float *ss) {
    float sum = 0.0f;
    for (int w = 0; w < CU_FG_WARPS; w++) sum += ss[m * CU_FG_WARPS + w];
    return 1.0f / sqrtf(sum / (float)p.K + p.eps);
}

/* The prologue: rows [M, K] of activations into xs. */
__device__ __forceinline__ void cu_fused_prologue(const cu_fused_args &p, float *xs, float *red) {
    for (int m = 0; m < p.M; m++) {
        float *xr = xs + m * p.K;
        if (p.prologue == CU_FUSED_ACT) cu_prologue_act(p, m, xr);
        else if (p.prologue == CU_FUSED_COPY) cu_prologue_load(p, m, xr, false);
        else cu_prologue_norm(p, m, xr, red);
    }
    __syncthreads();
}

/* The epilogue: warp sums, plus the projection's bias and the residual; output column o
 * (projection pj's row n) of every row. */
template <int MR>
__device__ __forceinline__ void cu_fused_store(const cu_fused_args &p, int pj, int64_t n,
                                               int64_t o, const float *acc, int lane,
                                               bool scaled = false, const float *scale = NULL) {
    const void *bd = p.bias[0].data; /* p.bias[pj], with constant indices (cu_pick) */
    int32_t bdt = p.bias[0].dtype;
    int64_t bs = p.bias[0].stride[0];
#pragma unroll
    for (int j = 1; j < 3; j++)
        if (pj == j) {
            bd = p.bias[j].data;
            bdt = p.bias[j].dtype;
            bs = p.bias[j].stride[0];
        }
    float b = bd ? cu_load(bd, bdt, n * bs) : 0.0f;
    int64_t rs = p.res.data ? cu_inner_stride(p.res) : 0;
#pragma unroll
    for (int m = 0; m < MR; m++) {
        if (m >= p.M) break;
        float y = cu_warp_sum(acc[m]);
        if (scaled) y *= scale[m]; /* a deferred RMS norm */
        if (lane == 0) {
            y += b;
            if (p.res.data)
                y = cu_view_load(p.res, p.res_row[m] + n * rs) + y;
            p.out[m * p.ldo + o] = y;
        }
    }
}

/* Which projection output column o belongs to, and its row n there. */
__device__ __forceinline__ int cu_fused_proj(const cu_fused_args &p, int64_t o, int64_t *n) {
    int pj = (p.n_proj > 1 && o >= p.n_off[1]) + (p.n_proj > 2 && o >= p.n_off[2]);
    *n = o - cu_pick(p.n_off, pj);
    return pj;
}

/* Batch b of output column o's weight row: U 16-byte chunks per lane, zero past the row's end
 * or past the last column. */
template <int DT, int U>
__device__ __forceinline__ void cu_fused_load(const cu_fused_args &p, int64_t o, int64_t total,
                                              int b, int chunks, int lane, uint4 *q) {
    const int esize = DT == QVL_F32 ? 4 : 2;
    const uint4 *wrow = NULL;
    if (o < total) {
        int64_t n;
        int pj = cu_fused_proj(p, o, &n);
        wrow = (const uint4 *)((const char *)cu_pick(p.w, pj) +
                               n * cu_pick(p.w_row_stride, pj) * esize);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        int c = (b * U + u) * CU_WARP + lane;
        q[u] = wrow && c < chunks ? __ldg(&wrow[c]) : make_uint4(0, 0, 0, 0);
    }
}

/* U: loads per lane per batch; more in flight per warp pays when there are few warps per row
 * of bytes (one row, long rows), and costs registers (so fewer resident blocks). */
template <int DT, int MR, int U>
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP, U > 4 ? 2 : CU_FG_MIN_BLOCKS)
    k_gemv_fused(cu_fused_args p) {
    extern __shared__ float4 xs4[]; /* [M, K] floats, 16-byte aligned */
    __shared__ float red[32];
    float *xs = (float *)xs4;
    const int per = DT == QVL_F32 ? 4 : 8; /* weights per 16-byte chunk */
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int chunks = (int)p.K / per, n_batch = (chunks + U * CU_WARP - 1) / (U * CU_WARP);
    int64_t total = cu_pick(p.n_off, p.n_proj);
    int64_t step = (int64_t)gridDim.x * CU_FG_WARPS;
    int64_t o = (int64_t)blockIdx.x * CU_FG_WARPS + warp;

    uint4 next[U];
    cu_fused_load<DT, U>(p, o, total, 0, chunks, lane, next); /* in flight during the prologue */
    __shared__ float ss[CU_FUSED_MAX_ROWS * CU_FG_WARPS];
    /* one row (decode) only: with MR rows the scales cost registers that spill */
    const bool deferred = MR == 1 && p.prologue == CU_FUSED_NORM && !p.layer && p.vec;
    float scale[MR];
    if (deferred) {
        for (int m = 0; m < p.M; m++) cu_prologue_rms_deferred(p, m, xs + m * p.K, ss);
        __syncthreads();
#pragma unroll
        for (int m = 0; m < MR; m++) scale[m] = m < p.M ? cu_rms_scale(p, m, ss) : 1.0f;
    } else {
        cu_fused_prologue(p, xs, red);
    }

    const float *rows[MR];
#pragma unroll
    for (int m = 0; m < MR; m++) rows[m] = xs + (m < p.M ? m * p.K : 0);
    for (; o < total; o += step) { /* warp-uniform loop */
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int b = 0; b < n_batch; b++) {
            uint4 cur[U];
#pragma unroll
            for (int u = 0; u < U; u++) cur[u] = next[u];
            if (b + 1 < n_batch) cu_fused_load<DT, U>(p, o, total, b + 1, chunks, lane, next);
            else cu_fused_load<DT, U>(p, o + step, total, 0, chunks, lane, next);
#pragma unroll
            for (int u = 0; u < U; u++) {
                int c = (b * U + u) * CU_WARP + lane;
                if (c < chunks) cu_chunk_fma<DT, MR>(cur[u], rows, p.M, c, acc);
            }
        }
        int64_t n;
        int pj = cu_fused_proj(p, o, &n);
        cu_fused_store<MR>(p, pj, n, o, acc, lane, deferred, scale);
    }
}

/* q8_0: a batch is 32 weight blocks of a row, 2 per lane: lane l takes half l % 2 (16
 * quants) of blocks l / 2 and l / 2 + 16, so that its 4 __dp4a per block add up in an int
 * and the block costs one conversion and one scale product. Blocks past the end of a row
 * load as zeros (quants and scale), and the activation quants and scales in shared memory are
 * padded with zeros to whole batches, so the dot products need no bounds checks: a block past
 * the end adds exactly 0. */
#define CU_Q8_BATCH_BLOCKS 32
#define CU_Q8_LANE_BLOCKS 2 /* blocks per lane per batch */
struct cu_q8_batch {
    int wq[CU_Q8_LANE_BLOCKS][4];
    float dw[CU_Q8_LANE_BLOCKS];
};

/* The first byte of output column o's weight row (NULL past the last column). Looked up once
 * per row: the loads of a batch then only add the batch's offset. */
__device__ __forceinline__ const unsigned char *cu_q8_row(const cu_fused_args &p, int64_t o,
                                                          int64_t total) {
    if (o >= total) return NULL;
    int64_t n;
    int pj = cu_fused_proj(p, o, &n);
    return (const unsigned char *)cu_pick(p.w, pj) +
           (n * cu_pick(p.w_row_stride, pj) / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
}

/* The unstaged loads: 2-byte words straight from global memory (rows only 2-byte aligned). */
__device__ __forceinline__ void cu_fused_load_q8(const unsigned char *wrow, int b, int nb,
                                                 int lane, cu_q8_batch *q) {
#pragma unroll
    for (int u = 0; u < CU_Q8_LANE_BLOCKS; u++) {
        int c = b * CU_Q8_BATCH_BLOCKS + u * 16 + lane / 2;
        bool in = wrow && c < nb;
        const uint16_t *h =
            in ? (const uint16_t *)(wrow + c * (int64_t)sizeof(qvl_block_q8_0)) : NULL;
#pragma unroll
        for (int j = 0; j < 4; j++)
            q->wq[u][j] = in ? (int)((uint32_t)__ldg(&h[1 + 8 * (lane % 2) + 2 * j]) |
                                     ((uint32_t)__ldg(&h[2 + 8 * (lane % 2) + 2 * j]) << 16))
                             : 0;
        q->dw[u] = in ? cu_f16_to_f32(__ldg(&h[0])) : 0.0f;
    }
}

/* The staged q8_0 path, for weight rows that start on 16-byte boundaries and are a whole
 * number of 16-byte pieces long (K a multiple of 256): a batch (32 blocks, 1088 bytes) is
 * loaded by the whole warp as 68 pieces of 16 bytes, three per lane, instead of 2-byte loads
 * per lane and block; the pieces go through a per-warp stage in shared memory, from which
 * each lane takes its quants and scales as the unstaged path loads them. */
#define CU_Q8_BATCH_BYTES (CU_Q8_BATCH_BLOCKS * (int)sizeof(qvl_block_q8_0)) /* 1088 */
#define CU_Q8_PIECES (CU_Q8_BATCH_BYTES / 16)                               /* 68 */
#define CU_Q8_STAGE_BYTES (CU_FG_WARPS * CU_Q8_BATCH_BYTES)
struct cu_q8_raw {
    uint4 v[(CU_Q8_PIECES + CU_WARP - 1) / CU_WARP];
};

/* row_pieces: the 16-byte pieces of a whole row. */
__device__ __forceinline__ void cu_fused_load_q8_raw(const unsigned char *wrow, int b,
                                                     int row_pieces, int lane, cu_q8_raw *q) {
    const uint4 *base = (const uint4 *)(wrow + b * CU_Q8_BATCH_BYTES);
    int pieces = row_pieces - b * CU_Q8_PIECES;
#pragma unroll
    for (int j = 0; j < (CU_Q8_PIECES + CU_WARP - 1) / CU_WARP; j++) {
        int idx = lane + CU_WARP * j;
        q->v[j] = wrow && idx < CU_Q8_PIECES && idx < pieces ? __ldg(&base[idx])
                                                              : make_uint4(0, 0, 0, 0);
    }
}

/* The warp's raw batch through its stage into each lane's quants and scales. A lane's 16
 * quants start 2 bytes into a 4-byte word in every other block (blocks are 34 bytes): they
 * are read as aligned words and shifted into place. */
__device__ __forceinline__ void cu_q8_unstage(const cu_q8_raw &raw, uint4 *stage, int lane,
                                              cu_q8_batch *q) {
    __syncwarp(); /* every lane has read the previous batch */
#pragma unroll
    for (int j = 0; j < (CU_Q8_PIECES + CU_WARP - 1) / CU_WARP; j++)
        if (lane + CU_WARP * j < CU_Q8_PIECES) stage[lane + CU_WARP * j] = raw.v[j];
    __syncwarp();
    const unsigned char *sb = (const unsigned char *)stage;
#pragma unroll
    for (int u = 0; u < CU_Q8_LANE_BLOCKS; u++) {
        int blk = u * 16 + lane / 2, off = blk * (int)sizeof(qvl_block_q8_0) + 2 + 16 * (lane % 2);
        const uint32_t *w = (const uint32_t *)(sb + (off & ~3));
        int shift = (off & 2) * 8;
        uint32_t r[5];
#pragma unroll
        for (int j = 0; j < 4; j++) r[j] = w[j];
        r[4] = shift ? w[4] : 0u; /* aligned quants end at the batch's last byte */
#pragma unroll
        for (int j = 0; j < 4; j++) q->wq[u][j] = (int)__funnelshift_r(r[j], r[j + 1], shift);
        q->dw[u] = cu_f16_to_f32(*(const uint16_t *)(sb + blk * (int)sizeof(qvl_block_q8_0)));
    }
}

/* Blocks of 32 per activation row in shared memory: nb rounded up to whole batches. */
__host__ __device__ __forceinline__ int64_t cu_q8_padded_blocks(int64_t nb) {
    return (nb + CU_Q8_BATCH_BLOCKS - 1) / CU_Q8_BATCH_BLOCKS * CU_Q8_BATCH_BLOCKS;
}

/* After the prologue the rows are quantised in shared memory to int8 blocks of 32 with one
 * f32 scale each, exactly as k_quantize_rows (cu_matmul.cu) does, and padded with zero blocks
 * to whole batches; the dot products then run on __dp4a as in k_gemv_q8. STAGED: weights
 * loaded as 16-byte pieces (above). Indices within a row are ints (K fits an int), and each
 * row's address is worked out once. */
template <int MR, bool STAGED>
__global__ void __launch_bounds__(CU_FG_WARPS *CU_WARP, CU_FG_MIN_BLOCKS) k_gemv_fused_q8(cu_fused_args p) {
    extern __shared__ float4 xs4[]; /* [M, K] floats, [M, nbp * 32] int8, [M, nbp] f32 */
    __shared__ float red[32];
    __shared__ uint4 stages[STAGED ? CU_FG_WARPS * CU_Q8_PIECES : 1];
    float *xs = (float *)xs4;
    const int K = (int)p.K, nb = K / QVL_Q8_0_BLOCK, nbp = (int)cu_q8_padded_blocks(nb);
    const int n_batch = nbp / CU_Q8_BATCH_BLOCKS;
    const int row_pieces = nb * (int)sizeof(qvl_block_q8_0) / 16;
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int sub = lane / 8, part = lane % 8; /* the quantisation's 8 lanes per block */
    int64_t total = cu_pick(p.n_off, p.n_proj);
    int64_t step = (int64_t)gridDim.x * CU_FG_WARPS;
    int64_t o = (int64_t)blockIdx.x * CU_FG_WARPS + warp;
    uint4 *stage = stages + (STAGED ? warp * CU_Q8_PIECES : 0);

    const unsigned char *wrow = cu_q8_row(p, o, total);
    cu_q8_batch next;
    cu_q8_raw next_raw;
    if (STAGED) cu_fused_load_q8_raw(wrow, 0, row_pieces, lane, &next_raw);
    else cu_fused_load_q8(wrow, 0, nb, lane, &next);
    /* one row: the RMS scale waits for the epilogue (see k_gemv_fused); the quantisation
     * below then rounds x * g, which the scale does not change block by block */
    __shared__ float ss[CU_FG_WARPS];
    const bool deferred = MR == 1 && p.prologue == CU_FUSED_NORM && !p.layer && p.vec;
    float scale[1] = {1.0f};
    if (deferred) {
        cu_prologue_rms_deferred(p, 0, xs, ss);
        __syncthreads();
        scale[0] = cu_rms_scale(p, 0, ss);
    } else {
        cu_fused_prologue(p, xs, red);
    }

    /* Quantise the rows, 8 lanes to a block of 32 (4 values each); the same rounding as
     * k_quantize_rows. The padding blocks get zero quants and scales. Warp-uniform trip
     * count: every lane takes part in the shuffles. */
    int8_t *qs = (int8_t *)(xs + p.M * K);
    float *ds = (float *)(qs + p.M * nbp * QVL_Q8_0_BLOCK); /* 32-byte blocks: aligned */
    for (int b0 = warp * 4; b0 < p.M * nbp; b0 += CU_FG_WARPS * 4) {
        int blk = b0 + sub, m = blk / nbp, c = blk % nbp;
        bool in = blk < p.M * nbp, real = in && c < nb;
        float4 v = real ? xs4[(m * K + c * QVL_Q8_0_BLOCK) / 4 + part]
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
        for (int off = 1; off < 8; off *= 2)
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        float d = amax / 127.0f, e[4] = {v.x, v.y, v.z, v.w};
        uint32_t packed = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int q = d > 0.0f ? __float2int_rn(e[i] / d) : 0;
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            packed |= (uint32_t)(q & 0xff) << (8 * i);
        }
        if (in) {
            ((uint32_t *)qs)[blk * 8 + part] = packed;
            if (part == 0) ds[blk] = d;
        }
    }
    __syncthreads();

    for (; o < total; o += step) { /* warp-uniform loop */
        /* the next column's row, looked up for the last batch's loads (n_batch >= 1): not
         * kept in registers through the whole row */
        const unsigned char *wnext = NULL;
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int b = 0; b < n_batch; b++) {
            cu_q8_batch cur;
            if (STAGED) {
                cu_q8_raw raw = next_raw;
                if (b + 1 < n_batch) cu_fused_load_q8_raw(wrow, b + 1, row_pieces, lane, &next_raw);
                else {
                    wnext = cu_q8_row(p, o + step, total);
                    cu_fused_load_q8_raw(wnext, 0, row_pieces, lane, &next_raw);
                }
                cu_q8_unstage(raw, stage, lane, &cur);
            } else {
                cur = next;
                if (b + 1 < n_batch) cu_fused_load_q8(wrow, b + 1, nb, lane, &next);
                else {
                    wnext = cu_q8_row(p, o + step, total);
                    cu_fused_load_q8(wnext, 0, nb, lane, &next);
                }
            }
            int c0 = b * CU_Q8_BATCH_BLOCKS + lane / 2; /* this lane's block for u = 0 */
#pragma unroll
            for (int m = 0; m < MR; m++) {
                if (m >= p.M) break;
                /* the lane's 16 activation quants of block c: int4 2c + lane % 2 of the row */
                const int4 *arow = (const int4 *)(qs + m * nbp * QVL_Q8_0_BLOCK) + c0 * 2 + lane % 2;
                const float *drow = ds + m * nbp + c0;
#pragma unroll
                for (int u = 0; u < CU_Q8_LANE_BLOCKS; u++) {
                    int4 a = arow[u * 32];
                    int dot = __dp4a(cur.wq[u][0], a.x, 0);
                    dot = __dp4a(cur.wq[u][1], a.y, dot);
                    dot = __dp4a(cur.wq[u][2], a.z, dot);
                    dot = __dp4a(cur.wq[u][3], a.w, dot);
                    acc[m] += (float)dot * (cur.dw[u] * drow[u * 16]);
                }
            }
        }
        int64_t n;
        int pj = cu_fused_proj(p, o, &n);
        cu_fused_store<MR>(p, pj, n, o, acc, lane, deferred, scale);
        wrow = wnext;
    }
}

/* Shared memory of the fused kernels for M rows of K (0 when w's dtype has no fused kernel). */
static int64_t cu_fused_smem(int32_t dt, int64_t M, int64_t K) {
    if (dt == QVL_Q8_0) { /* floats, then int8 quants and f32 scales padded to whole batches */
        int64_t nbp = cu_q8_padded_blocks(K / QVL_Q8_0_BLOCK);
        return M * K * (int64_t)sizeof(float) + M * nbp * (QVL_Q8_0_BLOCK + 4);
    }
    if (dt == QVL_F32 || dt == QVL_F16 || dt == QVL_BF16) return M * K * (int64_t)sizeof(float);
    return 0;
}

extern "C" int cu_gemv_fused_fits(const cu_mat *w, int n_proj, int64_t M) {
    if (n_proj < 1 || n_proj > 3 || M < 1 || M > CU_FUSED_MAX_ROWS) return 0;
    int32_t dt = w[0].dtype;
    int64_t per = dt == QVL_F32 ? 4 : dt == QVL_Q8_0 ? QVL_Q8_0_BLOCK : 8, K = w[0].cols;
    int64_t smem = cu_fused_smem(dt, M, K);
    int64_t room = CU_FUSED_MAX_SMEM - (dt == QVL_Q8_0 ? CU_Q8_STAGE_BYTES : 0);
    if (smem <= 0 || smem > room) return 0;
    unsigned align = dt == QVL_Q8_0 ? 2u : 16u;
    for (int i = 0; i < n_proj; i++)
        if (w[i].dtype != dt || w[i].cols != K || w[i].col_stride != 1 || w[i].cols % per != 0 ||
            w[i].row_stride % per != 0 || w[i].batch_stride != 0 ||
            ((uintptr_t)w[i].data % align) != 0)
            return 0;
    return 1;
}

/* Element offset of row r of v (rows run along the innermost dim), on the host. */
static int64_t cu_host_row_offset(const cu_view &v, int64_t r) {
    int64_t off = 0;
    for (int d = v.ndim - 2; d >= 0; d--) {
        off += (r % v.shape[d]) * v.stride[d];
        r /= v.shape[d];
    }
    return off;
}

/* Can the prologue read v's rows as float4 (f32, unit stride, 16-byte aligned rows)? */
static bool cu_fused_vec_ok(const cu_view &v, const int64_t *row, int64_t rows) {
    if (!v.data) return true;
    if (v.dtype != QVL_F32 || v.stride[v.ndim - 1] != 1 || ((uintptr_t)v.data % 16) != 0)
        return false;
    for (int64_t m = 0; m < rows; m++)
        if (row[m] % 4 != 0) return false;
    return true;
}

/* Can cu_vec4_load read the norm's gamma or beta (f32, f16, bf16; the stored dtype)? */
static bool cu_fused_vec4_ok(const cu_view &v) {
    if (!v.data) return true;
    int64_t esize = v.dtype == QVL_F32 ? 4 : v.dtype == QVL_F16 || v.dtype == QVL_BF16 ? 2 : 0;
    return esize && v.stride[0] == 1 && ((uintptr_t)v.data % (4 * esize)) == 0;
}

template <typename Kernel>
static unsigned cu_fused_grid(Kernel k, size_t smem, int64_t total, int sm_count) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, CU_FG_WARPS * CU_WARP, smem) !=
            cudaSuccess ||
        per_sm < 1)
        per_sm = 1;
    int64_t blocks = (total + CU_FG_WARPS - 1) / CU_FG_WARPS;
    int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 16) * per_sm;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

template <typename Kernel>
static void cu_fused_run(Kernel k, const cu_fused_args &p, size_t smem, int sm_count,
                         cu_stream s) {
    unsigned threads = CU_FG_WARPS * CU_WARP;
    k<<<cu_fused_grid(k, smem, p.n_off[p.n_proj], sm_count), threads, smem, s>>>(p);
}

/* Do every projection's q8_0 rows start on 16-byte boundaries, whole 16-byte pieces long? */
static bool cu_q8_rows_staged(const cu_mat *w, int n_proj) {
    for (int i = 0; i < n_proj; i++) {
        int64_t row_bytes = (w[i].row_stride / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        int64_t len = (w[i].cols / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        if ((uintptr_t)w[i].data % 16 != 0 || row_bytes % 16 != 0 || len % 16 != 0) return false;
    }
    return true;
}

template <int MR, int U>
static void cu_fused_dispatch(const cu_fused_args &p, int32_t dt, bool staged, size_t smem,
                              int sm_count, cu_stream s) {
    if (dt == QVL_Q8_0 && staged) cu_fused_run(k_gemv_fused_q8<MR, true>, p, smem, sm_count, s);
    else if (dt == QVL_Q8_0) cu_fused_run(k_gemv_fused_q8<MR, false>, p, smem, sm_count, s);
    else if (dt == QVL_F16) cu_fused_run(k_gemv_fused<QVL_F16, MR, U>, p, smem, sm_count, s);
    else if (dt == QVL_BF16) cu_fused_run(k_gemv_fused<QVL_BF16, MR, U>, p, smem, sm_count, s);
    else cu_fused_run(k_gemv_fused<QVL_F32, MR, U>, p, smem, sm_count, s);
}

extern "C" int cu_launch_gemv_fused(cu_stream s, int prologue, int layer_or_act, float eps,
                                    cu_view x, cu_view aux, cu_view beta, cu_view res,
                                    int64_t M, const cu_mat *w, const cu_view *bias, int n_proj,
                                    float *out, int64_t ldo, int sm_count) {
    if (!cu_gemv_fused_fits(w, n_proj, M)) return (int)cudaErrorInvalidConfiguration;
    cu_fused_args p;
    memset(&p, 0, sizeof p);
    p.prologue = prologue;
    if (prologue == CU_FUSED_NORM) p.layer = layer_or_act;
    else if (prologue == CU_FUSED_ACT) p.act = layer_or_act;
    p.eps = eps;
    p.x = x;
    p.aux = aux;
    p.beta = beta;
    p.res = res;
    p.M = M;
    p.K = w[0].cols;
    for (int64_t m = 0; m < M; m++) {
        p.x_row[m] = cu_host_row_offset(x, m);
        if (prologue == CU_FUSED_ACT && aux.data) p.aux_row[m] = cu_host_row_offset(aux, m);
        if (res.data) p.res_row[m] = cu_host_row_offset(res, m);
    }
    /* float4 rows: x always, up like x; gamma and beta as stored (bf16 in the published model). */
    p.vec = p.K % 4 == 0 && cu_fused_vec_ok(x, p.x_row, M);
    if (prologue == CU_FUSED_NORM)
        p.vec = p.vec && cu_fused_vec4_ok(aux) && cu_fused_vec4_ok(beta);
    else if (prologue == CU_FUSED_ACT)
        p.vec = p.vec && cu_fused_vec_ok(aux, p.aux_row, M);
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
    size_t smem = (size_t)cu_fused_smem(w[0].dtype, M, p.K);
    bool staged = w[0].dtype == QVL_Q8_0 && cu_q8_rows_staged(w, n_proj);
    if (M == 1) cu_fused_dispatch<1, CU_FG_UNROLL_M1>(p, w[0].dtype, staged, smem, sm_count, s);
    else if (M <= 4) cu_fused_dispatch<4, CU_FG_UNROLL>(p, w[0].dtype, staged, smem, sm_count, s);
    else cu_fused_dispatch<CU_FUSED_MAX_ROWS, CU_FG_UNROLL>(p, w[0].dtype, staged, smem, sm_count, s);
    return (int)cudaGetLastError();
}
