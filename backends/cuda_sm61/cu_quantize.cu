/* Activation rows into the int8 blocks that the __dp4a kernels of cu_matmul_int8.cu read:
 * per 32 values of a row, int8 quants q = round(x / da) with da = max|x| / 127, and (for q4_k's
 * mins) sa = da * sum(q). Three sources of x: a view as it is (before any int8 matmul), a
 * normalised row (NORM_LINEAR) and the MLP's activation (MLP_RESIDUAL). The last two save a
 * kernel and the f32 round trip through scratch on every decode step; the values quantised are
 * bit for bit those the separate norm / activation kernels would have written. */
#include "cu_kernels.h"
#include "cu_matmul.cuh"

#define CU_Q_WARPS 8 /* warps per block of the element-wise quantisers */

/* Lane `lane` of a warp holds value v of block c of row r: quantise the block and store it. */
__device__ __forceinline__ void cu_i8_block_store(float v, int lane, int64_t r, int64_t c,
                                                  int64_t K, const cu_i8_rows &q) {
    float d = cu_warp_max(fabsf(v)) / 127.0f;
    int qi = d > 0.0f ? __float2int_rn(v / d) : 0;
    qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
    q.qa[r * K + c * CU_I8_BLOCK + lane] = (int8_t)qi;
    int sum = qi;
    for (int o = CU_WARP / 2; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
        int64_t nb = K / CU_I8_BLOCK;
        q.da[r * nb + c] = d;
        q.sa[r * nb + c] = d * (float)sum;
    }
}

/* A warp per block of 32 values. act < 0: a as it is; else act(a) (silu(a) * up when up is
 * present), the expressions of k_mlp_act. */
__global__ void k_quantize_i8(int act, cu_view a, cu_view up, int64_t rows, int64_t K,
                              cu_i8_rows q) {
    int lane = threadIdx.x % CU_WARP;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / CU_WARP;
    int64_t n_warps = (int64_t)gridDim.x * blockDim.x / CU_WARP;
    int64_t nb = K / CU_I8_BLOCK, total = rows * nb;
    for (int64_t e = warp; e < total; e += n_warps) { /* warp-uniform loop */
        int64_t r = e / nb, c = e % nb, k = c * CU_I8_BLOCK + lane;
        float v = cu_view_load(a, cu_row_offset_unrolled(a, r) + k * cu_inner_stride(a));
        if (act >= 0) {
            if (up.data) v = cu_silu(v) * cu_view_load(up, cu_row_offset_unrolled(up, r) + k * cu_inner_stride(up));
            else if (act == QVL_ACT_GELU_TANH) v = cu_gelu_tanh(v);
            else v = cu_gelu_erf(v);
        }
        cu_i8_block_store(v, lane, r, c, K, q);
    }
}

/* A block of CU_NORM_THREADS per row: the norm's statistics as k_norm takes them, then each
 * warp quantises blocks of the normalised row. */
__global__ void k_norm_quantize_i8(int layer, float eps, cu_view x, cu_view gamma, cu_view beta,
                                   int64_t K, cu_i8_rows q) {
    __shared__ float scratch[32];
    int64_t r = blockIdx.x;
    int64_t base = cu_row_offset_unrolled(x, r), step = cu_inner_stride(x);
    float mean, inv;
    cu_norm_row_stats(layer, eps, x, base, step, K, scratch, &mean, &inv);
    int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    for (int64_t c = warp; c < K / CU_I8_BLOCK; c += blockDim.x / CU_WARP) {
        int64_t k = c * CU_I8_BLOCK + lane;
        float v = cu_norm_value(layer, cu_view_load(x, base + k * step), mean, inv, gamma, beta, k);
        cu_i8_block_store(v, lane, r, c, K, q);
    }
}

static unsigned cu_q_blocks(int64_t rows, int64_t K) {
    int64_t warps = rows * (K / CU_I8_BLOCK), blocks = (warps + CU_Q_WARPS - 1) / CU_Q_WARPS;
    return (unsigned)(blocks > 65535 ? 65535 : blocks < 1 ? 1 : blocks);
}

void cu_quantize_i8_rows(cu_stream s, const cu_view &a, int64_t rows, int64_t K,
                         const cu_i8_rows &q) {
    k_quantize_i8<<<cu_q_blocks(rows, K), CU_Q_WARPS * CU_WARP, 0, s>>>(-1, a, a, rows, K, q);
}

extern "C" int cu_launch_act_quantize(cu_stream s, int act, cu_view a, cu_view up, int64_t rows,
                                      void *scratch) {
    int64_t K = a.shape[a.ndim - 1];
    cu_view none = a;
    none.data = NULL;
    k_quantize_i8<<<cu_q_blocks(rows, K), CU_Q_WARPS * CU_WARP, 0, s>>>(
        act, a, up.data ? up : none, rows, K, cu_i8_rows_of(scratch, rows, K));
    return (int)cudaGetLastError();
}

extern "C" int cu_launch_norm_quantize(cu_stream s, int layer, float eps, cu_view x, cu_view gamma,
                                       cu_view beta, int64_t rows, void *scratch) {
    int64_t K = x.shape[x.ndim - 1];
    if (rows > 0x7fffffff) return (int)cudaErrorInvalidConfiguration;
    k_norm_quantize_i8<<<(unsigned)rows, CU_NORM_THREADS, 0, s>>>(layer, eps, x, gamma, beta, K,
                                                                  cu_i8_rows_of(scratch, rows, K));
    return (int)cudaGetLastError();
}
