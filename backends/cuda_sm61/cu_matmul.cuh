/* What the matmul kernels of cu_matmul.cu and cu_gemm.cu share: the launch arguments and the
 * epilogue (bias, residual, store). */
#ifndef QVL_CU_MATMUL_CUH
#define QVL_CU_MATMUL_CUH

#include "cu_device.cuh"

/* out[b*M + m][col0 + n] (row length ldo) = act(a_b[m] . w_{b / per_w}[n] (+ bias)) (+ res). */
struct cu_mm_args {
    cu_view a;
    int64_t batches, M, K, N;
    cu_mat w;
    int64_t per_w;
    cu_view bias, res;
    float *out;
    int64_t ldo, col0;
    int act; /* qvl_act (NORM_LINEAR's output activation); QVL_ACT_NONE: none */
};

/* The output activation of a matmul (NONE, GELU_TANH or GELU_ERF: what NORM_LINEAR takes). */
__device__ __forceinline__ float cu_mm_act(int act, float y) {
    if (act == QVL_ACT_GELU_TANH) return cu_gelu_tanh(y);
    if (act == QVL_ACT_GELU_ERF) return cu_gelu_erf(y);
    return y;
}

/* The epilogue of output (b, m, n). ACT false leaves out the activation, for a kernel that
 * applies it in a pass of its own (k_gemm_reg: 64 activations inlined into its unrolled
 * epilogue made nvcc spill in the main loop); p.res is then absent. RES false: p has no
 * residual and p.res is not read at all, so a p built inside a kernel needs no local-memory
 * copy for the residual's run-time indexed shape and strides. */
template <bool ACT = true, bool RES = true>
__device__ __forceinline__ void cu_mm_store(const cu_mm_args &p, int64_t b, int64_t m, int64_t n,
                                            float acc) {
    int64_t row = b * p.M + m;
    float y = acc;
    if (p.bias.data) y += cu_view_load(p.bias, n * p.bias.stride[0]);
    if (ACT && p.act != QVL_ACT_NONE) y = cu_mm_act(p.act, y);
    if (RES && p.res.data)
        y = cu_view_load(p.res, cu_row_offset(p.res, row) + n * p.res.stride[p.res.ndim - 1]) + y;
    p.out[row * p.ldo + p.col0 + n] = y;
}

/* The epilogue of the GEMVs whose columns' K splits between KS warps of a block: warp w takes
 * part w % KS of the CPW columns n0 + (w / KS) * CPW + j (j < CPW), with its sums in acc
 * [CPW][MR]. Each warp's sums go into red[w * CPW + j] (red: warps * CPW rows of MR), then per
 * output the KS parts are added in part order (the same result every run) and stored. Every
 * thread of the block calls it (two barriers); red is free again after. */
template <int MR, int KS, int CPW = 1, bool RES = true>
__device__ __forceinline__ void cu_split_sum_store(float (*red)[MR], const float *acc,
                                                   const cu_mm_args &p, int64_t b, int64_t n0) {
    const int lane = threadIdx.x % CU_WARP, warp = threadIdx.x / CU_WARP;
    const int cols = (int)(blockDim.x / CU_WARP) / KS * CPW; /* columns per block */
#pragma unroll
    for (int j = 0; j < CPW; j++) {
#pragma unroll
        for (int m = 0; m < MR; m++) {
            float y = cu_warp_sum(acc[j * MR + m]);
            if (lane == 0) red[warp * CPW + j][m] = y;
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < cols * MR) {
        int c = (int)threadIdx.x / MR, m = (int)threadIdx.x % MR;
        int first = c / CPW * KS * CPW + c % CPW; /* part 0 of column c: warp (c / CPW) * KS */
        if (m < p.M && n0 + c < p.N) {
            float y = red[first][m];
#pragma unroll
            for (int k = 1; k < KS; k++) y += red[first + k * CPW][m];
            cu_mm_store<true, RES>(p, b, m, n0 + c, y);
        }
    }
    __syncthreads();
}

/* Up to CU_MM_GROUP_MAX matmuls in one launch (k_gemv_k_split_parts): part i's column groups
 * are [first[i], first[i + 1]) of the launch's, n parts. */
#define CU_MM_GROUP_MAX 3
struct cu_mm_group {
    cu_mm_args p[CU_MM_GROUP_MAX];
    int64_t first[CU_MM_GROUP_MAX + 1];
    int n;
};

/* The part of g that column group cg falls in (g.first counts the launch's column groups or
 * block steps), as a cu_mm_args with what the grouped GEMVs read (weights, sizes, bias,
 * output; no residual: NORM_LINEAR has none; not the activations) and cg made the part's own. Every field is read from the parameters at a constant offset: one read at a
 * run-time offset (g.p[i]) would copy the whole group into each thread's local memory. */
__device__ __forceinline__ cu_mm_args cu_group_part(const cu_mm_group &g, int64_t *cg) {
    const int i = *cg < g.first[1] ? 0 : (g.n == 2 || *cg < g.first[2]) ? 1 : 2;
#define CU_PART(f) (i == 0 ? g.p[0].f : i == 1 ? g.p[1].f : g.p[2].f)
    cu_mm_args p; /* the fields below only: nothing else is read */
    p.batches = 1;
    p.per_w = 1;
    p.M = g.p[0].M;
    p.K = g.p[0].K;
    p.N = CU_PART(N);
    p.w.data = CU_PART(w.data);
    p.w.dtype = CU_PART(w.dtype);
    p.w.row_stride = CU_PART(w.row_stride);
    p.bias.data = CU_PART(bias.data);
    p.bias.dtype = CU_PART(bias.dtype);
    p.bias.stride[0] = CU_PART(bias.stride[0]);
    p.res.data = nullptr;
    p.out = g.p[0].out;
    p.ldo = g.p[0].ldo;
    p.col0 = CU_PART(col0);
    p.act = g.p[0].act;
    *cg -= i == 0 ? 0 : i == 1 ? g.first[1] : g.first[2];
#undef CU_PART
    return p;
}

/* Rows of the int8 GEMVs (k_gemv_q8, k_gemv_k): 16 accumulators spill on sm_61 (clang), so
 * block-quantised matmuls of 9 to 16 rows run on the int8 GEMM instead (cu_matmul_int8.cu). */
#define CU_GEMV_I8_MAX_ROWS 8

/* Calls f with a tag whose ::value is the row count the GEMV kernels
 * are instantiated for that covers M rows (1, 4, 8 or CU_GEMV_MAX_ROWS; M <= the last). */
template <int V>
struct cu_rows_tag {
    static const int value = V;
};
template <typename F>
static inline void cu_by_rows(int64_t M, F f) {
    if (M <= 1) f(cu_rows_tag<1>());
    else if (M <= 4) f(cu_rows_tag<4>());
    else if (M <= 8) f(cu_rows_tag<8>());
    else f(cu_rows_tag<CU_GEMV_MAX_ROWS>());
}

/* Warps per output column for the GEMVs of 2..CU_GEMV_MAX_ROWS rows whose columns' K splits
 * between the warps of a block (k_gemv_rows_split, k_gemv_k_split), given the column's warp
 * steps (what one warp's lanes load at once: 4 super-blocks of q4_k / q6_k, CU_GEMV_UNROLL
 * 16-byte chunks per lane of f16 / bf16), or 0: one warp per column, the kernels without the
 * split. By default (unset or auto) each warp gets at least one step, up to 4
 * warps: a column of one warp leaves SMs idle where a layer has few columns, and each warp's
 * loads then wait on L1; QVL_CUDA_GEMV_KSPLIT=1|2|4 forces that many, =0 turns the split off
 * (A/B runs: cu_matmul.cu). */
int cu_gemv_split_parts(int64_t steps);
/* Output columns per warp of the split 16-bit GEMVs of 2-8 rows (k_gemv_rows_split): 1, or 2
 * with QVL_CUDA_GEMV_COLS=2, where each activation load serves two weight rows (half the
 * activation reads per weight byte, at more registers per lane; A/B runs until measured). */
int cu_gemv_split_cols(void);

/* The f16 / bf16 GEMV of 3-8 rows with the activations in registers (cu_gemv_rows_regs.cu):
 * queues it and returns true, or returns false (nothing queued) where it does not apply.
 * cu_gemv_rows_regs_takes(M): does it take M rows (QVL_CUDA_GEMV_REGS=0: never, for A/B
 * runs)? Where it does, the fused 16-bit GEMVs leave the rows to it (cu_gemv_fused_fits); with
 * 2 rows the fused kernel is faster (its activations in shared memory cost little there).
 * Needs w as cu_gemv_vec_ok and a as cu_rows_f32_aligned (the caller checks). */
bool cu_gemv_rows_regs(cu_stream s, const cu_mm_args &p);
int cu_gemv_rows_regs_takes(int64_t M);
/* NORM_LINEAR's projections ps[0..n) (2..CU_MM_GROUP_MAX; the same rows, 16-bit dtype and K,
 * no residual) as one launch of it; false (nothing queued) where that does not apply. The
 * caller checks each w and a as for cu_gemv_rows_regs. */
bool cu_gemv_rows_regs_group(cu_stream s, const cu_mm_args *ps, int n);

/* Are the activation rows of a f32, contiguous and 16-byte aligned (float4 reads)? */
static inline bool cu_rows_f32_aligned(const cu_view &a) {
    if (a.dtype != QVL_F32 || a.stride[a.ndim - 1] != 1 || ((uintptr_t)a.data % 16) != 0)
        return false;
    for (int d = 0; d < a.ndim - 1; d++)
        if (a.shape[d] > 1 && a.stride[d] % 4 != 0) return false;
    return true;
}

/* The register-tiled GEMM of cu_gemm.cu for contiguous, 16-byte aligned operands: queues it
 * and returns true, or returns false (nothing queued) when the layouts do not allow it.
 * scratch (NULL: none) holds cu_gemm_scratch_bytes(p.batches, p.M, p.w) bytes, for the
 * partial sums when K is split across blocks. */
bool cu_gemm_fast(cu_stream s, const cu_mm_args &p, void *scratch);
int64_t cu_gemm_scratch_bytes(int64_t batches, int64_t M, const cu_mat &w);
/* The epilogue of a GEMM whose K was split: part[split][batch * M + m][n] (p.N columns), added
 * in split order (the same result every run), then bias, activation and residual as
 * cu_mm_store, written to p.out. */
void cu_gemm_split_sum(cu_stream s, const cu_mm_args &p, int splits, const float *part);

#define CU_I8_BLOCK 32 /* activation block of the int8 kernels: one scale per 32 values */

/* The int8 activations in a matmul's scratch, for `rows` rows of K (a multiple of
 * CU_I8_BLOCK): qa [rows, K] int8, then da and sa [rows, K / 32] f32 (cu_quantize.cu). */
struct cu_i8_rows {
    int8_t *qa;
    float *da, *sa;
};
static inline cu_i8_rows cu_i8_rows_of(void *scratch, int64_t rows, int64_t K) {
    cu_i8_rows q;
    q.qa = (int8_t *)scratch;
    q.da = (float *)((char *)scratch + rows * K); /* rows * K is a multiple of 32 */
    q.sa = q.da + rows * (K / CU_I8_BLOCK);
    return q;
}
/* The q4_k / q6_k GEMV of the rows cu_gemv_rows_regs_takes with the activations in registers
 * (cu_gemv_rows_regs_k.cu), on rows q (M rows of K, quantised): queues it and returns true, or
 * returns false (nothing queued) where it does not apply. The caller checks cu_int8_path's
 * GEMV conditions. _group: NORM_LINEAR's projections ps[0..n) (the same rows and K, q4_k or
 * q6_k each, no residual) as one launch. QVL_CUDA_GEMV_REGS=0 turns both off (A/B runs). */
bool cu_gemv_rows_regs_k(cu_stream s, const cu_mm_args &p, const cu_i8_rows &q);
bool cu_gemv_rows_regs_k_group(cu_stream s, const cu_mm_args *ps, int n, const cu_i8_rows &q);
/* NORM_LINEAR's projections ps[0..n) (same int8 rows, already quantised into scratch; the same
 * q4_k or q6_k weights dtype and K; 2..CU_GEMV_I8_MAX_ROWS rows) as one launch of the split
 * GEMV: queues it and returns true, or returns false (nothing queued) where it does not apply
 * or QVL_CUDA_GEMV_GROUP=0 turns it off (cu_matmul_int8.cu). */
bool cu_matmul_int8_group(cu_stream s, const cu_mm_args *ps, int n, void *scratch);
/* Grouped launches (cu_matmul_int8_group, cu_gemv_rows_regs_group) are the default;
 * QVL_CUDA_GEMV_GROUP=0 gives one launch per projection (A/B runs: docs/BENCHMARKS.md). */
bool cu_gemv_group_on(void);

/* Quantises rows of a (f32 view, rows of K) into q (cu_quantize.cu). */
void cu_quantize_i8_rows(cu_stream s, const cu_view &a, int64_t rows, int64_t K,
                         const cu_i8_rows &q);

/* The int8 (__dp4a) kernels of cu_matmul_int8.cu: the q4_k / q6_k decode GEMVs and the GEMM
 * for q8_0, q4_k and q6_k weights. cu_matmul_int8 queues the matmul and returns true, or
 * returns false (nothing queued) when they do not take these shapes, layouts or dtypes;
 * scratch holds cu_matmul_int8_scratch_bytes(w, p.batches, p.M) bytes (the int8 activations),
 * which is 0 exactly when they do not; ready: the scratch already holds p.a quantised (by
 * the previous such matmul of the same rows). */
bool cu_matmul_int8(cu_stream s, const cu_mm_args &p, void *scratch, bool ready);
int64_t cu_matmul_int8_scratch_bytes(const cu_mat &w, int64_t batches, int64_t M);

#endif
