/* What the register GEMVs share (k_gemv_rows_regs for f16 / bf16 weights, k_gemv_rows_regs_k
 * for q4_k / q6_k on int8 rows): the warp reduce-scatter of 32 partial sums and the walk over
 * a block's places (block step, tile of K, column group). */
#ifndef QVL_CU_GEMV_REGS_CUH
#define QVL_CU_GEMV_REGS_CUH

#include "cu_matmul.cuh"

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

/* A place in a block's work: block step st (of all the parts' steps), tile t of K, group g. */
struct cu_rr_pos {
    int64_t st, t;
    int g;
};

/* The place after p: groups within a tile, tiles within a step, then the block's next step. */
__device__ __forceinline__ void cu_rr_advance(cu_rr_pos &p, int ng, int64_t tiles) {
    if (++p.g < ng) return;
    p.g = 0;
    if (++p.t < tiles) return;
    p.t = 0;
    p.st += gridDim.x;
}

/* Stores value y of row m, column c of block step st (cols columns a step): through the step's
 * own part when GROUP (a group's part has no residual), else through g.p[0]. */
template <bool GROUP>
__device__ __forceinline__ void cu_rr_store_value(const cu_mm_group &g, int64_t st, int cols, int c,
                                                  int m, float y) {
    if (GROUP) {
        int64_t own = st;
        const cu_mm_args p = cu_group_part(g, &own);
        const int64_t n = own * cols + c;
        if (m < p.M && n < p.N) cu_mm_store<true, false>(p, 0, m, n, y);
    } else {
        const int64_t n = st * cols + c;
        if (m < g.p[0].M && n < g.p[0].N) cu_mm_store(g.p[0], 0, m, n, y);
    }
}

#endif
