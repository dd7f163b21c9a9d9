/* MATMUL (and the matmul steps of the fused ops): out = a . w^T + bias (+ residual), f32
 * accumulation, weights of any dtype converted to f32 as they are loaded.
 *
 * Two kernels, chosen by the number of rows per batch:
 *  - few rows (decode): one warp per output element, the lanes split K, shuffle reduction
 *    (16-byte weight loads when the weight layout allows, k_gemv_vec; for q8_0 weights the
 *    activations are quantised to int8 blocks of 32 first and the dot products run on
 *    __dp4a, k_gemv_q8 — the one kernel whose result is not the f32 dot product: each
 *    activation is rounded to 1/254 of its block's largest magnitude);
 *  - more rows (prefill, vision): with plainly laid out operands (f32 rows contiguous and
 *    16-byte aligned, weight rows in 16-byte chunks or whole q8_0 blocks) the register-tiled
 *    k_gemm_reg of cu_gemm.cu; any other views 64 x 64 output tiles, 4 x 4 outputs per
 *    thread, K walked in steps of 16 through shared memory (k_gemm_tiled). */
#include "cu_matmul.cuh"

#define CU_GEMV_WARPS 8

__global__ void k_gemv(cu_mm_args p) {
    int lane = threadIdx.x % CU_WARP;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t total = p.batches * p.M * p.N;
    for (int64_t e = warp; e < total; e += n_warps) { /* warp-uniform loop */
        int64_t n = e % p.N, m = (e / p.N) % p.M, b = e / (p.N * p.M);
        int64_t row = b * p.M + m;
        int64_t a_base = cu_row_offset(p.a, row), a_step = p.a.stride[p.a.ndim - 1];
        int64_t w_base = (b / p.per_w) * p.w.batch_stride + n * p.w.row_stride;
        float acc = 0.0f;
        for (int64_t k = lane; k < p.K; k += CU_WARP)
            acc += cu_view_load(p.a, a_base + k * a_step) *
                   cu_load_w(p.w.data, p.w.dtype, w_base + k * p.w.col_stride);
        acc = cu_warp_sum(acc);
        if (lane == 0) cu_mm_store(p, b, m, n, acc);
    }
}

/* Decode GEMV for f32/f16/bf16 weights whose rows are contiguous, 16-byte aligned and a whole
 * number of 16-byte chunks: each lane reads 16 bytes of the weight row at a time (8 f16/bf16
 * or 4 f32 values) instead of one element. Otherwise the same as k_gemv. */
template <int DT>
__global__ void k_gemv_vec(cu_mm_args p) {
    const int per = DT == QVL_F32 ? 4 : 8; /* weights per 16-byte chunk */
    int lane = threadIdx.x % CU_WARP;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t total = p.batches * p.M * p.N, chunks = p.K / per;
    for (int64_t e = warp; e < total; e += n_warps) { /* warp-uniform loop */
        int64_t n = e % p.N, m = (e / p.N) % p.M, b = e / (p.N * p.M);
        int64_t row = b * p.M + m;
        int64_t a_base = cu_row_offset(p.a, row), a_step = p.a.stride[p.a.ndim - 1];
        int64_t w_base = (b / p.per_w) * p.w.batch_stride + n * p.w.row_stride;
        const uint4 *wrow = (const uint4 *)((const char *)p.w.data +
                                            w_base * (DT == QVL_F32 ? 4 : 2));
        float acc = 0.0f;
        for (int64_t c = lane; c < chunks; c += CU_WARP) {
            float wv[8];
            cu_chunk_unpack<DT>(wrow[c], wv);
            int64_t k0 = c * per;
            for (int t = 0; t < per; t++)
                acc += cu_view_load(p.a, a_base + (k0 + t) * a_step) * wv[t];
        }
        acc = cu_warp_sum(acc);
        if (lane == 0) cu_mm_store(p, b, m, n, acc);
    }
}

/* Decode GEMV, the fast path: weights as for k_gemv_vec, activations f32 rows that are
 * contiguous and 16-byte aligned (read as float4, from L1/L2: every warp reads the same
 * rows). A warp per output column n computes all M rows at once, so each weight row is read
 * once per call; each lane issues CU_GEMV_UNROLL 16-byte weight loads before using any, so
 * that enough bytes are in flight to approach the memory bandwidth. */
#define CU_GEMV_UNROLL 4

/* A lane's chunks c0, c0 + step, ... of a weight row against the M activation rows:
 * CU_GEMV_UNROLL 16-byte loads (CU_WARP chunks apart) issued before any is used. */
template <int DT, int MR>
__device__ __forceinline__ void cu_rows_pass(const uint4 *wrow, const float *const *arow,
                                             int64_t M, int64_t chunks, int64_t c0,
                                             int64_t step, float (&acc)[MR]) {
    for (; c0 < chunks; c0 += step) {
        uint4 q[CU_GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < CU_GEMV_UNROLL; u++) {
            int64_t c = c0 + CU_WARP * u;
            q[u] = c < chunks ? __ldg(&wrow[c]) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < CU_GEMV_UNROLL; u++) {
            int64_t c = c0 + CU_WARP * u;
            if (c >= chunks) break;
            cu_chunk_fma<DT, MR>(q[u], arow, M, c, acc);
        }
    }
}

template <int DT, int MR>
__global__ void __launch_bounds__(CU_GEMV_WARPS *CU_WARP) k_gemv_rows(cu_mm_args p) {
    const int per = DT == QVL_F32 ? 4 : 8; /* weights per 16-byte chunk */
    int lane = threadIdx.x % CU_WARP;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t chunks = p.K / per;
    const float *a = (const float *)p.a.data;
    for (int64_t e = warp; e < p.batches * p.N; e += n_warps) { /* warp-uniform loop */
        int64_t n = e % p.N, b = e / p.N;
        int64_t w_base = (b / p.per_w) * p.w.batch_stride + n * p.w.row_stride;
        const uint4 *wrow = (const uint4 *)((const char *)p.w.data +
                                            w_base * (DT == QVL_F32 ? 4 : 2));
        float acc[MR];
        const float *arow[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) {
            acc[m] = 0.0f;
            int64_t r = b * p.M + m;
            arow[m] = a + (m >= p.M ? 0
                           : CU_CLANG_DEVICE ? cu_row_offset_unrolled(p.a, r) : cu_row_offset(p.a, r));
        }
        cu_rows_pass<DT, MR>(wrow, arow, p.M, chunks, lane, CU_WARP * CU_GEMV_UNROLL, acc);
#pragma unroll
        for (int m = 0; m < MR; m++) {
            if (m >= p.M) break;
            float y = cu_warp_sum(acc[m]);
            if (lane == 0) cu_mm_store(p, b, m, n, y);
        }
    }
}

/* cu_rows_pass for CPW weight rows (columns) at once: each activation float4 is loaded once
 * for all of them; U 16-byte loads per column issued before any is used. A column past the
 * matrix (wrow[j] NULL; never the first, which the caller checks) reads zeros and its sums
 * stay unused. */
template <int DT, int MR, int CPW, int U>
__device__ __forceinline__ void cu_rows_pass_cols(const uint4 *const (&wrow)[CPW],
                                                  const float *const *arow, int64_t M,
                                                  int64_t chunks, int64_t c0, int64_t step,
                                                  float (&acc)[CPW][MR]) {
    const int per = DT == QVL_F32 ? 4 : 8;
    for (; c0 < chunks; c0 += step) {
        uint4 q[U][CPW];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t c = c0 + CU_WARP * u;
#pragma unroll
            for (int j = 0; j < CPW; j++)
                q[u][j] = c < chunks && (j == 0 || wrow[j]) ? __ldg(&wrow[j][c])
                                                             : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t c = c0 + CU_WARP * u;
            if (c >= chunks) break;
            float wv[CPW][8];
#pragma unroll
            for (int j = 0; j < CPW; j++) cu_chunk_unpack<DT>(q[u][j], wv[j]);
#pragma unroll
            for (int m = 0; m < MR; m++) {
                if (m >= M) break;
                const float4 *xr = (const float4 *)(arow[m] + c * per);
                float4 x0 = xr[0], x1 = DT != QVL_F32 ? xr[1] : make_float4(0, 0, 0, 0);
#pragma unroll
                for (int j = 0; j < CPW; j++) {
                    float y = acc[j][m];
                    y += x0.x * wv[j][0] + x0.y * wv[j][1] + x0.z * wv[j][2] + x0.w * wv[j][3];
                    if (DT != QVL_F32)
                        y += x1.x * wv[j][4] + x1.y * wv[j][5] + x1.z * wv[j][6] + x1.w * wv[j][7];
                    acc[j][m] = y;
                }
            }
        }
    }
}

/* k_gemv_rows with each column's K split between KS warps of a block, each warp taking CPW
 * columns (CU_GEMV_WARPS / KS * CPW columns per block): one warp per column gives a
 * 2048-column matrix half a wave of warps, each waiting out its rows' activation loads chunk
 * after chunk; CPW columns per warp halve (CPW 2) the activation reads per weight byte. The
 * warps' sums meet in shared memory and are added in part order (the same result every run;
 * with KS 1 the same sums as CPW 1, with more parts a K part covers other chunks). */
template <int DT, int MR, int KS, int CPW>
__global__ void __launch_bounds__(CU_GEMV_WARPS *CU_WARP) k_gemv_rows_split(cu_mm_args p) {
    const int per = DT == QVL_F32 ? 4 : 8; /* weights per 16-byte chunk */
    const int CPB = CU_GEMV_WARPS / KS * CPW;
    __shared__ float red[CU_GEMV_WARPS * CPW][MR];
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    int col = warp / KS * CPW, kp = warp % KS;
    int64_t chunks = p.K / per;
    const float *a = (const float *)p.a.data;
    const int64_t per_b = (p.N + CPB - 1) / CPB, groups = p.batches * per_b;
    for (int64_t gi = blockIdx.x; gi < groups; gi += gridDim.x) { /* block-uniform loop */
        int64_t b = gi / per_b, n0 = gi % per_b * CPB, n = n0 + col;
        float acc[CPW][MR];
#pragma unroll
        for (int j = 0; j < CPW; j++)
#pragma unroll
            for (int m = 0; m < MR; m++) acc[j][m] = 0.0f;
        if (n < p.N) { /* warp-uniform */
            const uint4 *wrow[CPW];
#pragma unroll
            for (int j = 0; j < CPW; j++) {
                int64_t w_base = (b / p.per_w) * p.w.batch_stride + (n + j) * p.w.row_stride;
                wrow[j] = n + j < p.N ? (const uint4 *)((const char *)p.w.data +
                                                        w_base * (DT == QVL_F32 ? 4 : 2))
                                      : NULL;
            }
            const float *arow[MR];
#pragma unroll
            for (int m = 0; m < MR; m++) {
                int64_t r = b * p.M + m;
                arow[m] = a + (m >= p.M ? 0
                               : CU_CLANG_DEVICE ? cu_row_offset_unrolled(p.a, r)
                                                 : cu_row_offset(p.a, r));
            }
            /* CU_GEMV_UNROLL 16-byte loads in flight per lane whatever CPW */
            const int U = CU_GEMV_UNROLL / CPW > 0 ? CU_GEMV_UNROLL / CPW : 1;
            const int64_t step = (int64_t)CU_WARP * U;
            cu_rows_pass_cols<DT, MR, CPW, U>(wrow, arow, p.M, chunks, lane + step * kp,
                                              step * KS, acc);
        }
        cu_split_sum_store<MR, KS, CPW>(red, &acc[0][0], p, b, n0);
    }
}

int cu_gemv_split_parts(int64_t steps) {
    const char *env = getenv("QVL_CUDA_GEMV_KSPLIT");
    if (env && (strcmp(env, "1") == 0 || strcmp(env, "2") == 0 || strcmp(env, "4") == 0))
        return atoi(env);
    if (env && strcmp(env, "0") == 0) return 0;
    return steps >= 4 ? 4 : steps >= 2 ? 2 : 1; /* unset, auto (or anything else) */
}

int cu_gemv_split_cols(void) {
    const char *env = getenv("QVL_CUDA_GEMV_COLS");
    return env && strcmp(env, "2") == 0 ? 2 : 1;
}

template <int DT, int MR, int CPW>
static void cu_gemv_rows_split_launch(cu_stream s, const cu_mm_args &p, int ks) {
    const int64_t cpb = CU_GEMV_WARPS / ks * CPW;
    int64_t groups = p.batches * ((p.N + cpb - 1) / cpb);
    unsigned g = (unsigned)(groups > 65535 ? 65535 : groups), t = CU_GEMV_WARPS * CU_WARP;
    if (ks == 4) k_gemv_rows_split<DT, MR, 4, CPW><<<g, t, 0, s>>>(p);
    else if (ks == 2) k_gemv_rows_split<DT, MR, 2, CPW><<<g, t, 0, s>>>(p);
    else k_gemv_rows_split<DT, MR, 1, CPW><<<g, t, 0, s>>>(p);
}

/* k_gemv_rows_split for these rows, or false (k_gemv_rows then): see cu_gemv_split_parts and
 * cu_gemv_split_cols. */
template <int DT, int MR>
static bool cu_gemv_rows_split(cu_stream s, const cu_mm_args &p) {
    const int64_t chunks = p.K / (DT == QVL_F32 ? 4 : 8), step = CU_WARP * CU_GEMV_UNROLL;
    const int ks = cu_gemv_split_parts((chunks + step - 1) / step); /* a warp step: its loads */
    if (ks == 0) return false;
    if (cu_gemv_split_cols() == 2) cu_gemv_rows_split_launch<DT, MR, 2>(s, p, ks);
    else cu_gemv_rows_split_launch<DT, MR, 1>(s, p, ks);
    return true;
}

/* Can k_gemv_vec read w: f32/f16/bf16, rows contiguous, every row (and batch) starting on a
 * 16-byte boundary, K a whole number of 16-byte chunks? */
static bool cu_gemv_vec_ok(const cu_mat &w) {
    if (w.dtype != QVL_F32 && w.dtype != QVL_F16 && w.dtype != QVL_BF16) return false;
    int64_t per = w.dtype == QVL_F32 ? 4 : 8;
    return w.col_stride == 1 && w.cols % per == 0 && w.row_stride % per == 0 &&
           w.batch_stride % per == 0 && ((uintptr_t)w.data % 16) == 0;
}

/* Activation rows for k_gemv_q8: row r of a (rows of K, K % 32 == 0) as int8 blocks of 32,
 * qa [rows, K], with one f32 scale per block, da [rows, K / 32]: value ~ da * qa, the scale
 * being the block's largest magnitude / 127. One warp per block, a lane per element. */
__global__ void k_quantize_rows(cu_view a, int64_t rows, int64_t K, int8_t *qa, float *da) {
    int lane = threadIdx.x % CU_WARP;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t nb = K / QVL_Q8_0_BLOCK, total = rows * nb;
    for (int64_t e = warp; e < total; e += n_warps) { /* warp-uniform loop */
        int64_t r = e / nb, c = e % nb, k = c * QVL_Q8_0_BLOCK + lane;
        float v = cu_view_load(a, cu_row_offset_unrolled(a, r) + k * cu_inner_stride(a));
        float amax = cu_warp_max(fabsf(v));
        float d = amax / 127.0f;
        int q = d > 0.0f ? __float2int_rn(v / d) : 0;
        qa[r * K + k] = (int8_t)(q > 127 ? 127 : q < -127 ? -127 : q);
        if (lane == 0) da[r * nb + c] = d;
    }
}

/* Decode GEMV for q8_0 weights (2-D, rows of whole blocks) against activations quantised by
 * k_quantize_rows: a warp per output column n, for all M rows at once (each weight block is
 * read once). Each group of 8 lanes takes one 34-byte weight block (a warp reads 4
 * neighbouring blocks, 136 contiguous bytes, per step, CU_Q8_UNROLL steps issued together
 * so that many loads are in flight), each lane 4 of its int8 against 4 of the activation's
 * with one __dp4a. Block scales multiply the integer sums in f32. Weight blocks are only
 * 2-byte aligned: the quants are read as 16-bit pairs. */
#define CU_Q8_UNROLL 4
template <int MR>
__global__ void __launch_bounds__(CU_GEMV_WARPS *CU_WARP)
    k_gemv_q8(cu_mm_args p, const int8_t *qa, const float *da) {
    int lane = threadIdx.x % CU_WARP, sub = lane / 8, part = lane % 8;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t nb = p.K / QVL_Q8_0_BLOCK;
    const unsigned char *wbase = (const unsigned char *)p.w.data;
    for (int64_t n = warp; n < p.N; n += n_warps) { /* warp-uniform loop */
        const unsigned char *wrow = wbase + (n * p.w.row_stride / QVL_Q8_0_BLOCK) *
                                                (int64_t)sizeof(qvl_block_q8_0);
        float acc[MR];
#pragma unroll
        for (int m = 0; m < MR; m++) acc[m] = 0.0f;
        for (int64_t c0 = sub; c0 < nb; c0 += 4 * CU_Q8_UNROLL) {
            int wq[CU_Q8_UNROLL];
            float dw[CU_Q8_UNROLL];
#pragma unroll
            for (int u = 0; u < CU_Q8_UNROLL; u++) {
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
            for (int m = 0; m < MR; m++) {
                if (m >= p.M) break;
                const int *arow = (const int *)(qa + m * p.K);
                const float *drow = da + m * nb;
#pragma unroll
                for (int u = 0; u < CU_Q8_UNROLL; u++) {
                    int64_t c = c0 + 4 * u;
                    if (c < nb)
                        acc[m] += (float)__dp4a(wq[u], arow[c * 8 + part], 0) * (dw[u] * drow[c]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < MR; m++) {
            if (m >= p.M) break;
            float y = cu_warp_sum(acc[m]);
            if (lane == 0) cu_mm_store(p, 0, m, n, y);
        }
    }
}

/* Can k_gemv_q8 run this matmul: q8_0 2-D weights read row by row, few rows (more go to the
 * int8 GEMM of cu_matmul_int8.cu, one row tile: the weights are still read once)? */
static bool cu_gemv_q8_ok(const cu_mat &w, int64_t batches, int64_t M) {
    return w.dtype == QVL_Q8_0 && batches == 1 && M <= CU_GEMV_I8_MAX_ROWS && w.col_stride == 1 &&
           w.cols % QVL_Q8_0_BLOCK == 0 && w.row_stride % QVL_Q8_0_BLOCK == 0 &&
           ((uintptr_t)w.data % 2) == 0;
}

/* The scratch of a matmul: int8 activations for k_gemv_q8 (few rows) or the kernels of
 * cu_matmul_int8.cu, or the partial sums of a GEMM whose K is split across blocks
 * (cu_gemm.cu). */
extern "C" int64_t cu_matmul_q8_scratch_bytes(cu_mat w, int64_t batches, int64_t M) {
    int64_t i8 = cu_matmul_int8_scratch_bytes(w, batches, M);
    if (i8 > 0) return i8;
    if (M > CU_GEMV_MAX_ROWS) return cu_gemm_scratch_bytes(batches, M, w);
    if (!cu_gemv_q8_ok(w, batches, M)) return 0;
    return M * w.cols + M * (w.cols / QVL_Q8_0_BLOCK) * (int64_t)sizeof(float);
}

/* Prefill / vision GEMM: a block computes a CU_BM x CU_BN output tile with 16 x 16 threads,
 * each thread 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j), walking K in steps of
 * CU_BK through shared memory. Tiles are stored k-major (a_s[k][m], w_s[k][n]) so the inner
 * loop reads a row of each; out-of-range elements load as 0 and are never stored. */
#ifndef CU_RB
#define CU_RB 4 /* outputs per thread along each dim: CU_BM = 16 * CU_RB */
#endif
#ifndef CU_BK
#define CU_BK 16
#endif
#define CU_BM (16 * CU_RB)
#define CU_BN (16 * CU_RB)
#define CU_GEMM_THREADS 256

__global__ void __launch_bounds__(CU_GEMM_THREADS) k_gemm_tiled(cu_mm_args p) {
    __shared__ float a_s[CU_BK][CU_BM + 4];
    __shared__ float w_s[CU_BK][CU_BN + 4];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int64_t b = blockIdx.z;
    int64_t m0 = (int64_t)blockIdx.y * CU_BM, n0 = (int64_t)blockIdx.x * CU_BN;
    float acc[CU_RB][CU_RB];
    for (int i = 0; i < CU_RB; i++)
        for (int j = 0; j < CU_RB; j++) acc[i][j] = 0.0f;

    /* Each thread loads CU_BM * CU_BK / 256 = 4 elements of each tile per step, k fastest:
     * always the same rows (row = tid / 16 + 16 r) at column kk = tid % 16, so the row
     * offsets (divisions through the view's shape) are worked out once, here. */
    const int n_ld = CU_BM * CU_BK / CU_GEMM_THREADS;
    int kk_ld = threadIdx.x % CU_BK;
    int64_t a_off[n_ld], w_off[n_ld];
    bool a_in[n_ld], w_in[n_ld];
    int64_t a_step = p.a.stride[p.a.ndim - 1];
    for (int r = 0; r < n_ld; r++) {
        int row = (threadIdx.x + r * CU_GEMM_THREADS) / CU_BK;
        a_in[r] = m0 + row < p.M;
        w_in[r] = n0 + row < p.N;
        a_off[r] = a_in[r] ? cu_row_offset(p.a, b * p.M + m0 + row) : 0;
        w_off[r] = (b / p.per_w) * p.w.batch_stride + (w_in[r] ? n0 + row : 0) * p.w.row_stride;
    }

    /* The next step's elements are loaded into registers while this step's tile is being
     * multiplied, so the global-memory latency hides behind the FMAs (no second shared
     * buffer needed: registers hold the next tile until the barrier). */
    float a_nx[n_ld], w_nx[n_ld];
    for (int r = 0; r < n_ld; r++) {
        int64_t k = kk_ld;
        a_nx[r] = a_in[r] && k < p.K ? cu_view_load(p.a, a_off[r] + k * a_step) : 0.0f;
        w_nx[r] = w_in[r] && k < p.K ? cu_load_w(p.w.data, p.w.dtype, w_off[r] + k * p.w.col_stride)
                                     : 0.0f;
    }
    for (int64_t k0 = 0; k0 < p.K; k0 += CU_BK) {
        for (int r = 0; r < n_ld; r++) {
            int row = (threadIdx.x + r * CU_GEMM_THREADS) / CU_BK;
            a_s[kk_ld][row] = a_nx[r];
            w_s[kk_ld][row] = w_nx[r];
        }
        __syncthreads();
        if (k0 + CU_BK < p.K) {
            int64_t k = k0 + CU_BK + kk_ld;
            for (int r = 0; r < n_ld; r++) {
                a_nx[r] = a_in[r] && k < p.K ? cu_view_load(p.a, a_off[r] + k * a_step) : 0.0f;
                w_nx[r] = w_in[r] && k < p.K
                              ? cu_load_w(p.w.data, p.w.dtype, w_off[r] + k * p.w.col_stride)
                              : 0.0f;
            }
        }
#pragma unroll
        for (int kk = 0; kk < CU_BK; kk++) {
            float av[CU_RB], wv[CU_RB];
            for (int i = 0; i < CU_RB; i++) av[i] = a_s[kk][ty + 16 * i];
            for (int j = 0; j < CU_RB; j++) wv[j] = w_s[kk][tx + 16 * j];
            for (int i = 0; i < CU_RB; i++)
                for (int j = 0; j < CU_RB; j++) acc[i][j] += av[i] * wv[j];
        }
        __syncthreads();
    }
    for (int i = 0; i < CU_RB; i++)
        for (int j = 0; j < CU_RB; j++) {
            int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < p.M && n < p.N) cu_mm_store(p, b, m, n, acc[i][j]);
        }
}

static cu_mm_args mm_args(cu_view a, int64_t batches, int64_t M, cu_mat w, int64_t per_w,
                          cu_view bias, cu_view res, float *out, int64_t ldo, int64_t col0,
                          int act) {
    cu_mm_args p;
    p.a = a;
    p.batches = batches;
    p.M = M;
    p.K = w.cols;
    p.N = w.rows;
    p.w = w;
    p.per_w = per_w;
    p.bias = bias;
    p.res = res;
    p.out = out;
    p.ldo = ldo;
    p.col0 = col0;
    p.act = act;
    return p;
}

extern "C" int cu_launch_matmul_group(cu_stream s, cu_view a, int64_t M, const cu_mat *ws,
                                      const cu_view *biases, int n, float *out, int64_t ldo,
                                      int64_t col0, void *q8_scratch, int act) {
    if (n < 1 || n > CU_MM_GROUP_MAX || !cu_gemv_group_on()) return -1;
    cu_mm_args ps[CU_MM_GROUP_MAX];
    cu_view none;
    memset(&none, 0, sizeof none);
    for (int i = 0; i < n; i++) {
        ps[i] = mm_args(a, 1, M, ws[i], 1, biases[i], none, out, ldo, col0, act);
        col0 += ws[i].rows;
    }
    if (cu_matmul_int8_group(s, ps, n, q8_scratch)) return (int)cudaGetLastError();
    bool plain = cu_rows_f32_aligned(a);
    for (int i = 0; i < n; i++) plain = plain && cu_gemv_vec_ok(ws[i]);
    if (plain && cu_gemv_rows_regs_group(s, ps, n)) return (int)cudaGetLastError();
    return -1;
}

extern "C" int cu_launch_matmul(cu_stream s, cu_view a, int64_t batches, int64_t M, cu_mat w,
                                int64_t per_w, cu_view bias, cu_view res, float *out,
                                int64_t ldo, int64_t col0, void *q8_scratch, int q8_ready,
                                int act) {
    cu_mm_args p = mm_args(a, batches, M, w, per_w, bias, res, out, ldo, col0, act);
    if (q8_scratch && cu_matmul_int8(s, p, q8_scratch, q8_ready != 0)) return (int)cudaGetLastError();
    if (M <= CU_GEMV_MAX_ROWS) {
        int64_t warps = batches * M * p.N;
        int64_t blocks = (warps + CU_GEMV_WARPS - 1) / CU_GEMV_WARPS;
        if (blocks > 65535) blocks = 65535;
        if (blocks < 1) blocks = 1;
        unsigned threads = CU_GEMV_WARPS * CU_WARP;
        if (q8_scratch && cu_gemv_q8_ok(w, batches, M)) {
            int8_t *qa = (int8_t *)q8_scratch;
            float *da = (float *)((char *)q8_scratch + M * p.K); /* M * K is a multiple of 32 */
            int64_t qwarps = M * (p.K / QVL_Q8_0_BLOCK);
            int64_t qblocks = (qwarps + CU_GEMV_WARPS - 1) / CU_GEMV_WARPS;
            if (qblocks > 65535) qblocks = 65535;
            if (qblocks < 1) qblocks = 1;
            int64_t nblocks = (p.N + CU_GEMV_WARPS - 1) / CU_GEMV_WARPS;
            if (nblocks > 65535) nblocks = 65535;
            k_quantize_rows<<<(unsigned)qblocks, threads, 0, s>>>(a, M, p.K, qa, da);
            k_gemv_q8<CU_GEMV_I8_MAX_ROWS><<<(unsigned)nblocks, threads, 0, s>>>(p, qa, da);
        } else if (cu_gemv_vec_ok(w) && cu_rows_f32_aligned(a)) {
            int64_t rblocks = (batches * p.N + CU_GEMV_WARPS - 1) / CU_GEMV_WARPS;
            if (rblocks > 65535) rblocks = 65535;
            if (rblocks < 1) rblocks = 1;
            /* 8 or 16 accumulators: fewer spill under clang's sm_61 register choices */
            unsigned g = (unsigned)rblocks;
            /* 2-8 rows of 16-bit weights: the register-resident GEMV (3-8), or the K split */
            if (cu_gemv_rows_regs(s, p)) return (int)cudaGetLastError();
            bool split = M > 1 && M <= 8 &&
                         (w.dtype == QVL_F16    ? cu_gemv_rows_split<QVL_F16, 8>(s, p)
                          : w.dtype == QVL_BF16 ? cu_gemv_rows_split<QVL_BF16, 8>(s, p)
                                                : false);
            if (split) return (int)cudaGetLastError();
            if (M <= 8 && w.dtype == QVL_F16) k_gemv_rows<QVL_F16, 8><<<g, threads, 0, s>>>(p);
            else if (M <= 8 && w.dtype == QVL_BF16) k_gemv_rows<QVL_BF16, 8><<<g, threads, 0, s>>>(p);
            else if (M <= 8) k_gemv_rows<QVL_F32, 8><<<g, threads, 0, s>>>(p);
            else if (w.dtype == QVL_F16) k_gemv_rows<QVL_F16, 16><<<g, threads, 0, s>>>(p);
            else if (w.dtype == QVL_BF16) k_gemv_rows<QVL_BF16, 16><<<g, threads, 0, s>>>(p);
            else k_gemv_rows<QVL_F32, 16><<<g, threads, 0, s>>>(p);
        } else if (!cu_gemv_vec_ok(w)) k_gemv<<<(unsigned)blocks, threads, 0, s>>>(p);
        else if (w.dtype == QVL_F16) k_gemv_vec<QVL_F16><<<(unsigned)blocks, threads, 0, s>>>(p);
        else if (w.dtype == QVL_BF16) k_gemv_vec<QVL_BF16><<<(unsigned)blocks, threads, 0, s>>>(p);
        else k_gemv_vec<QVL_F32><<<(unsigned)blocks, threads, 0, s>>>(p);
    } else {
        int64_t gx = (p.N + CU_BN - 1) / CU_BN, gy = (M + CU_BM - 1) / CU_BM;
        if (gx > 0x7fffffff || gy > 65535 || batches > 65535)
            return (int)cudaErrorInvalidConfiguration;
        dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)batches);
        if (!cu_gemm_fast(s, p, q8_scratch)) k_gemm_tiled<<<grid, CU_GEMM_THREADS, 0, s>>>(p);
    }
    return (int)cudaGetLastError();
}
