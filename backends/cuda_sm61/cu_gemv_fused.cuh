/* What the fused decode GEMV kernels share (cu_gemv_fused.cu: f32/f16/bf16 and q8_0 weights,
 * cu_gemv_fused_k.cu: q4_k and q6_k): the launch arguments, the prologue that builds the M
 * activation rows in shared memory, the epilogue, and the one-wave grid. */
#ifndef QVL_CU_GEMV_FUSED_CUH
#define QVL_CU_GEMV_FUSED_CUH

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
    int kc_sb;    /* q4_k / q6_k: super-blocks of K per chunk (cu_gemv_fused_k.cu) */
    int n_proj;
    const void *w[3];
    int32_t w_dtype[3]; /* q4_k and q6_k projections may mix (cu_gemv_fused_k.cu) */
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
            uint4 gw[CU_PRO_BATCH], bw[CU_PRO_BATCH]; /* loads first (cu_vec4_raw) */
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                gw[j] = i < n4 ? cu_vec4_raw(p.aux, i) : make_uint4(0u, 0u, 0u, 0u);
                bw[j] = has_b && i < n4 ? cu_vec4_raw(p.beta, i) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int j = 0; j < CU_PRO_BATCH; j++) {
                int i = CU_PRO_AT(i0, j);
                if (i >= n4) break;
                float4 v = ((float4 *)xr)[i];
                float4 g = cu_vec4_cvt(p.aux.dtype, gw[j]), b = cu_vec4_cvt(p.beta.dtype, bw[j]);
                ((float4 *)xr)[i] = make_float4(cu_norm_one(p, v.x, mean, inv, g.x, b.x),
                                                cu_norm_one(p, v.y, mean, inv, g.y, b.y),
                                                cu_norm_one(p, v.z, mean, inv, g.z, b.z),
                                                cu_norm_one(p, v.w, mean, inv, g.w, b.w));
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
        float4 v[CU_PRO_BATCH];
        uint4 gw[CU_PRO_BATCH]; /* loads first (cu_vec4_raw) */
#pragma unroll
        for (int j = 0; j < CU_PRO_BATCH; j++) {
            int i = CU_PRO_AT(i0, j);
            v[j] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            gw[j] = i < n4 ? cu_vec4_raw(p.aux, i) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < CU_PRO_BATCH; j++) {
            float4 w = v[j], g = cu_vec4_cvt(p.aux.dtype, gw[j]); /* zero past the end */
            sum += w.x * w.x + w.y * w.y + w.z * w.z + w.w * w.w;
            if (CU_PRO_AT(i0, j) < n4)
                ((float4 *)xr)[CU_PRO_AT(i0, j)] =
                    make_float4(w.x * g.x, w.y * g.y, w.z * g.z, w.w * g.w);
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

/* The int8 kernels' prologue. One row with an RMS norm (deferred) leaves the norm's scale
 * for the epilogue: the quantisation then rounds x * g, which that scale does not change
 * block by block. Returns the scale the epilogue applies (1 when not deferred). */
template <int MR>
__device__ __forceinline__ bool cu_fused_deferred(const cu_fused_args &p) {
    return MR == 1 && p.prologue == CU_FUSED_NORM && !p.layer && p.vec;
}
template <int MR>
__device__ __forceinline__ float cu_fused_prologue_i8(const cu_fused_args &p, float *xs,
                                                      float *red, float *ss) {
    if (cu_fused_deferred<MR>(p)) {
        cu_prologue_rms_deferred(p, 0, xs, ss);
        __syncthreads();
        return cu_rms_scale(p, 0, ss);
    }
    cu_fused_prologue(p, xs, red);
    return 1.0f;
}

/* 8 neighbouring lanes quantise one block of 32 values, 4 each (v): d = max|x| / 127 over the
 * block, q = round(x / d) clamped to +-127 (the rounding of cu_quantize.cu), the lane's 4
 * quants packed into a word; with SUM, sum = the block's sum of q in every lane. Every lane of
 * the warp must take part (shuffles). */
template <bool SUM>
__device__ __forceinline__ float cu_quantize_block8(float4 v, uint32_t &packed, int &sum) {
    float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int off = 1; off < 8; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    float d = amax / 127.0f, e[4] = {v.x, v.y, v.z, v.w};
    packed = 0;
    sum = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int q = d > 0.0f ? __float2int_rn(e[i] / d) : 0;
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        sum += q;
        packed |= (uint32_t)(q & 0xff) << (8 * i);
    }
    if (SUM) {
#pragma unroll
        for (int off = 1; off < 8; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    }
    return d;
}

/* The epilogue: warp sums, plus the projection's bias and the residual; output column o
 * (projection pj's row n) of every row. add: a later chunk of K, whose sums go onto what the
 * same lane wrote for the earlier ones (bias and residual already in). */
template <int MR>
__device__ __forceinline__ void cu_fused_store(const cu_fused_args &p, int pj, int64_t n,
                                               int64_t o, const float *acc, int lane,
                                               bool scaled = false, const float *scale = NULL,
                                               bool add = false) {
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
            if (add) {
                y += p.out[m * p.ldo + o];
            } else {
                y += b;
                if (p.res.data) y = cu_view_load(p.res, p.res_row[m] + n * rs) + y;
            }
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

template <typename Kernel>
static unsigned cu_fused_grid(Kernel k, size_t smem, int64_t total, int sm_count) {
    const int64_t blocks = (total + CU_FG_WARPS - 1) / CU_FG_WARPS;
    return cu_one_wave_blocks(k, CU_FG_WARPS * CU_WARP, smem, blocks, sm_count);
}

template <typename Kernel>
static void cu_fused_run(Kernel k, const cu_fused_args &p, size_t smem, int sm_count,
                         cu_stream s) {
    unsigned threads = CU_FG_WARPS * CU_WARP;
    k<<<cu_fused_grid(k, smem, p.n_off[p.n_proj], sm_count), threads, smem, s>>>(p);
}

/* The q4_k / q6_k kernel (cu_gemv_fused_k.cu): shared memory for M rows of a chunk of Kc; the
 * super-blocks per chunk for M rows of K within room bytes (all of K where it fits; 0: none
 * fits); the launch. */
int64_t cu_fused_kquant_smem(int64_t M, int64_t Kc);
int64_t cu_fused_kquant_chunk(int64_t M, int64_t K, int64_t room);
void cu_fused_run_kquant(const cu_fused_args &p, size_t smem, int sm_count, cu_stream s);

#endif
