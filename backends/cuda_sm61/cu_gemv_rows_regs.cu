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
 * multiplied, the next group's weights are already loading. */
#include "cu_matmul.cuh"

#include <stdlib.h>
#include <string.h>

#define CU_RR_WARPS 8
#define CU_RR_THREADS (CU_RR_WARPS * CU_WARP)
#define CU_RR_TILE (CU_RR_THREADS * 8) /* K values a tile: one 16-byte chunk a thread */
#define CU_RR_MAX_COLS 16              /* columns a block step at most (ng * G) */

/* c ? a : b as a value select: written plainly, clang folds the choice between two array
 * elements into a choice of address and moves the array to local memory. */
__device__ __forceinline__ float cu_select(int c, float a, float b) {
    float r;
    asm("{ .reg .pred p; setp.ne.s32 p, %3, 0; selp.f32 %0, %1, %2, p; }"
        : "=f"(r) : "f"(a), "f"(b), "r"(c));
    return r;
}

/* One level of the reduce-scatter below: a lane keeps the half of v[0, 2 OFF) that its partner
 * (lane ^ OFF) sends away, adds the partner's copy of it, and holds the result in v[0, OFF). */
template <int OFF>
__device__ __forceinline__ void cu_reduce_scatter_level(float (&v)[32], int lane) {
    const int upper = lane & OFF;
#pragma unroll
    for (int i = 0; i < OFF; i++) {
        float lo = v[i], hi = v[i + OFF];
        float send = cu_select(upper, lo, hi), keep = cu_select(upper, hi, lo);
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
    }
}

/* v[0] becomes the warp's sum of value `lane` of the 32 (each lane's v[i] for that i): 31
 * shuffles, where 32 warp sums would take 160. */
__device__ __forceinline__ void cu_reduce_scatter32(float (&v)[32], int lane) {
    cu_reduce_scatter_level<16>(v, lane);
    cu_reduce_scatter_level<8>(v, lane);
    cu_reduce_scatter_level<4>(v, lane);
    cu_reduce_scatter_level<2>(v, lane);
    cu_reduce_scatter_level<1>(v, lane);
}

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

template <int DT, int MR>
__global__ void __launch_bounds__(CU_RR_THREADS) k_gemv_rows_regs(cu_mm_args p, int ng) {
    const int G = 32 / MR; /* columns a group */
    __shared__ float slot[CU_RR_WARPS][CU_RR_MAX_COLS * MR];
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const int64_t chunks = p.K / 8, tiles = (chunks + CU_RR_THREADS - 1) / CU_RR_THREADS;
    const int cols = ng * G; /* a block step */
    const int64_t steps = (p.N + cols - 1) / cols, units = tiles * ng;
    const char *w = (const char *)p.w.data;
    const int64_t row_bytes = p.w.row_stride * 2;
    const float *arow[MR];
#pragma unroll
    for (int m = 0; m < MR; m++)
        arow[m] = (const float *)p.a.data + (m < p.M ? cu_row_offset_unrolled(p.a, m) : 0);
    float x[MR][8];
    int64_t x_tile = -1; /* the tile x holds (block-uniform) */
    for (int64_t st = blockIdx.x; st < steps; st += gridDim.x) { /* block-uniform loop */
        const int64_t n0 = st * cols;
        for (int g = 0; g < ng; g++) slot[warp][g * 32 + lane] = 0.0f;
        uint4 next[G];
        cu_rr_load<G>(next, w, row_bytes, n0, p.N, threadIdx.x, chunks);
        int64_t t = 0;
        int g = 0;
        for (int64_t u = 0; u < units; u++) { /* unit u: tile t, group g */
            uint4 q[G];
#pragma unroll
            for (int j = 0; j < G; j++) q[j] = next[j];
            const int64_t c = t * CU_RR_THREADS + threadIdx.x;
            if (u + 1 < units) { /* the next unit's weights load while this one is multiplied */
                int gn = g + 1 < ng ? g + 1 : 0;
                int64_t tn = g + 1 < ng ? t : t + 1;
                cu_rr_load<G>(next, w, row_bytes, n0 + gn * G, p.N, tn * CU_RR_THREADS + threadIdx.x,
                              chunks);
            }
            if (t != x_tile) {
#pragma unroll
                for (int m = 0; m < MR; m++) {
                    float4 a0 = make_float4(0, 0, 0, 0), a1 = a0;
                    if (m < p.M && c < chunks) {
                        a0 = ((const float4 *)arow[m])[2 * c];
                        a1 = ((const float4 *)arow[m])[2 * c + 1];
                    }
                    x[m][0] = a0.x, x[m][1] = a0.y, x[m][2] = a0.z, x[m][3] = a0.w;
                    x[m][4] = a1.x, x[m][5] = a1.y, x[m][6] = a1.z, x[m][7] = a1.w;
                }
                x_tile = t;
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
            slot[warp][g * 32 + lane] += acc[0];
            if (++g == ng) g = 0, t++;
        }
        __syncthreads();
        if ((int)threadIdx.x < cols * MR) { /* output i: column n0 + i / MR, row i % MR */
            const int i = threadIdx.x, m = i % MR;
            const int64_t n = n0 + i / MR;
            float y = slot[0][i];
#pragma unroll
            for (int v = 1; v < CU_RR_WARPS; v++) y += slot[v][i];
            if (m < p.M && n < p.N) cu_mm_store(p, 0, m, n, y);
        }
        __syncthreads();
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

template <int DT, int MR>
static void cu_rr_launch(cu_stream s, const cu_mm_args &p, int sm_count) {
    int ng = cu_rr_groups<MR>(p.N, sm_count);
    int64_t steps = (p.N + ng * (32 / MR) - 1) / (ng * (32 / MR));
    unsigned blocks =
        cu_one_wave_blocks(k_gemv_rows_regs<DT, MR>, CU_RR_THREADS, 0, steps, sm_count);
    k_gemv_rows_regs<DT, MR><<<blocks, CU_RR_THREADS, 0, s>>>(p, ng);
}

bool cu_gemv_rows_regs(cu_stream s, const cu_mm_args &p) {
    if (!cu_gemv_rows_regs_takes(p.M) || p.batches != 1 || p.K % 8 != 0 ||
        (p.w.dtype != QVL_F16 && p.w.dtype != QVL_BF16))
        return false;
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
        sms = 16;
    if (p.w.dtype == QVL_F16) {
        if (p.M <= 4) cu_rr_launch<QVL_F16, 4>(s, p, sms);
        else cu_rr_launch<QVL_F16, 8>(s, p, sms);
    } else {
        if (p.M <= 4) cu_rr_launch<QVL_BF16, 4>(s, p, sms);
        else cu_rr_launch<QVL_BF16, 8>(s, p, sms);
    }
    return true;
}
