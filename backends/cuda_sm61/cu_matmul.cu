/* MATMUL (and the matmul steps of the fused ops): out = a . w^T + bias (+ residual), f32
 * accumulation, weights of any dtype converted to f32 as they are loaded.
 *
 * Two kernels, chosen by the number of rows per batch:
 *  - few rows (decode): one warp per output element, the lanes split K, shuffle reduction
 *    (16-byte weight loads when the weight layout allows, k_gemv_vec);
 *  - more rows (prefill, vision): 64 x 64 output tiles, 4 x 4 outputs per thread, K walked
 *    in steps of 16 through shared memory (k_gemm_tiled). */
#include "cu_device.cuh"

#define CU_GEMV_MAX_ROWS 8
#define CU_GEMV_WARPS 8

struct cu_mm_args {
    cu_view a;
    int64_t batches, M, K, N;
    cu_mat w;
    int64_t per_w;
    cu_view bias, res;
    float *out;
    int64_t ldo, col0;
};

__device__ __forceinline__ float cu_mm_load_a(const cu_mm_args &p, int64_t row, int64_t k) {
    return cu_view_load(p.a, cu_row_offset(p.a, row) + k * p.a.stride[p.a.ndim - 1]);
}

__device__ __forceinline__ float cu_mm_load_w(const cu_mm_args &p, int64_t b, int64_t n,
                                              int64_t k) {
    int64_t off = (b / p.per_w) * p.w.batch_stride + n * p.w.row_stride + k * p.w.col_stride;
    return cu_load(p.w.data, p.w.dtype, off);
}

/* The epilogue shared by both kernels: bias, residual, store. */
__device__ __forceinline__ void cu_mm_store(const cu_mm_args &p, int64_t b, int64_t m, int64_t n,
                                            float acc) {
    int64_t row = b * p.M + m;
    float y = acc;
    if (p.bias.data) y += cu_view_load(p.bias, n * p.bias.stride[0]);
    if (p.res.data)
        y = cu_view_load(p.res, cu_row_offset(p.res, row) + n * p.res.stride[p.res.ndim - 1]) + y;
    p.out[row * p.ldo + p.col0 + n] = y;
}

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
                   cu_load(p.w.data, p.w.dtype, w_base + k * p.w.col_stride);
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
            uint4 q = wrow[c];
            uint32_t words[4] = {q.x, q.y, q.z, q.w};
            float wv[8];
            if (DT == QVL_F32) {
                for (int t = 0; t < 4; t++) wv[t] = __uint_as_float(words[t]);
            } else {
                for (int t = 0; t < 4; t++) {
                    uint16_t lo = (uint16_t)(words[t] & 0xffffu), hi = (uint16_t)(words[t] >> 16);
                    wv[2 * t] = DT == QVL_F16 ? cu_f16_to_f32(lo) : cu_bf16_to_f32(lo);
                    wv[2 * t + 1] = DT == QVL_F16 ? cu_f16_to_f32(hi) : cu_bf16_to_f32(hi);
                }
            }
            int64_t k0 = c * per;
            for (int t = 0; t < per; t++)
                acc += cu_view_load(p.a, a_base + (k0 + t) * a_step) * wv[t];
        }
        acc = cu_warp_sum(acc);
        if (lane == 0) cu_mm_store(p, b, m, n, acc);
    }
}

/* Can k_gemv_vec read w: f32/f16/bf16, rows contiguous, every row (and batch) starting on a
 * 16-byte boundary, K a whole number of 16-byte chunks? */
static bool cu_gemv_vec_ok(const cu_mat &w) {
    if (w.dtype != QVL_F32 && w.dtype != QVL_F16 && w.dtype != QVL_BF16) return false;
    int64_t per = w.dtype == QVL_F32 ? 4 : 8;
    return w.col_stride == 1 && w.cols % per == 0 && w.row_stride % per == 0 &&
           w.batch_stride % per == 0 && ((uintptr_t)w.data % 16) == 0;
}

/* Prefill / vision GEMM: a block computes a CU_BM x CU_BN output tile with 16 x 16 threads,
 * each thread 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j), walking K in steps of
 * CU_BK through shared memory. Tiles are stored k-major (a_s[k][m], w_s[k][n]) so the inner
 * loop reads a row of each; out-of-range elements load as 0 and are never stored. */
#define CU_BM 64
#define CU_BN 64
#define CU_BK 16
#define CU_GEMM_THREADS 256
#define CU_RB 4 /* outputs per thread along each dim: CU_BM = 16 * CU_RB */

__global__ void __launch_bounds__(CU_GEMM_THREADS) k_gemm_tiled(cu_mm_args p) {
    __shared__ float a_s[CU_BK][CU_BM + 4];
    __shared__ float w_s[CU_BK][CU_BN + 4];
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    int64_t b = blockIdx.z;
    int64_t m0 = (int64_t)blockIdx.y * CU_BM, n0 = (int64_t)blockIdx.x * CU_BN;
    float acc[CU_RB][CU_RB];
    for (int i = 0; i < CU_RB; i++)
        for (int j = 0; j < CU_RB; j++) acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < p.K; k0 += CU_BK) {
        /* each thread loads CU_BM * CU_BK / 256 = 4 elements of each tile, k fastest */
        for (int r = 0; r < CU_BM * CU_BK / CU_GEMM_THREADS; r++) {
            int idx = threadIdx.x + r * CU_GEMM_THREADS;
            int row = idx / CU_BK, kk = idx % CU_BK;
            int64_t k = k0 + kk;
            a_s[kk][row] = (m0 + row < p.M && k < p.K) ? cu_mm_load_a(p, b * p.M + m0 + row, k)
                                                       : 0.0f;
            w_s[kk][row] = (n0 + row < p.N && k < p.K) ? cu_mm_load_w(p, b, n0 + row, k) : 0.0f;
        }
        __syncthreads();
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

extern "C" int cu_launch_matmul(cu_stream s, cu_view a, int64_t batches, int64_t M, cu_mat w,
                                int64_t per_w, cu_view bias, cu_view res, float *out,
                                int64_t ldo, int64_t col0) {
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
    if (M <= CU_GEMV_MAX_ROWS) {
        int64_t warps = batches * M * p.N;
        int64_t blocks = (warps + CU_GEMV_WARPS - 1) / CU_GEMV_WARPS;
        if (blocks > 65535) blocks = 65535;
        if (blocks < 1) blocks = 1;
        unsigned threads = CU_GEMV_WARPS * CU_WARP;
        if (!cu_gemv_vec_ok(w)) k_gemv<<<(unsigned)blocks, threads, 0, s>>>(p);
        else if (w.dtype == QVL_F16) k_gemv_vec<QVL_F16><<<(unsigned)blocks, threads, 0, s>>>(p);
        else if (w.dtype == QVL_BF16) k_gemv_vec<QVL_BF16><<<(unsigned)blocks, threads, 0, s>>>(p);
        else k_gemv_vec<QVL_F32><<<(unsigned)blocks, threads, 0, s>>>(p);
    } else {
        int64_t gx = (p.N + CU_BN - 1) / CU_BN, gy = (M + CU_BM - 1) / CU_BM;
        if (gx > 0x7fffffff || gy > 65535 || batches > 65535)
            return (int)cudaErrorInvalidConfiguration;
        dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)batches);
        k_gemm_tiled<<<grid, CU_GEMM_THREADS, 0, s>>>(p);
    }
    return (int)cudaGetLastError();
}
