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
 * and the dot products run on __dp4a (k_gemv_fused_q8); q4_k and q6_k weights take
 * k_gemv_fused_k (cu_gemv_fused_k.cu), which does the same with their blocks. */
#include <stdlib.h>
#include <string.h>

#include "cu_gemv_fused.cuh"
#include "cu_matmul.cuh"

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
    const bool deferred = cu_fused_deferred<MR>(p);
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
    __shared__ float ss[CU_FG_WARPS];
    const bool deferred = cu_fused_deferred<MR>(p); /* cu_fused_prologue_i8 */
    float scale[1] = {cu_fused_prologue_i8<MR>(p, xs, red, ss)};

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
        uint32_t packed;
        int unused;
        float d = cu_quantize_block8<false>(v, packed, unused);
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

static bool cu_is_kquant(int32_t dt) { return dt == QVL_Q4_K || dt == QVL_Q6_K; }

/* Shared memory of the float and q8_0 fused kernels for M rows of K (0 when w's dtype has none
 * of them: q4_k / q6_k size theirs by chunks, cu_fused_kquant_chunk). */
static int64_t cu_fused_smem(int32_t dt, int64_t M, int64_t K) {
    if (dt == QVL_Q8_0) { /* floats, then int8 quants and f32 scales padded to whole batches */
        int64_t nbp = cu_q8_padded_blocks(K / QVL_Q8_0_BLOCK);
        return M * K * (int64_t)sizeof(float) + M * nbp * (QVL_Q8_0_BLOCK + 4);
    }
    if (dt == QVL_F32 || dt == QVL_F16 || dt == QVL_BF16) return M * K * (int64_t)sizeof(float);
    return 0;
}

/* Rows of q4_k / q6_k the fused kernel takes by default: one (a single stream's decode step).
 * Every block of that kernel recomputes the rows (norm or activation, then int8) from global
 * memory, so its redundant work grows with rows x blocks; from 4 rows on it costs more than the
 * launch it saves (docs/BENCHMARKS.md, "Tried and did not pay"), and batched steps take the norm or
 * activation into scratch, then the GEMVs. The kernel itself handles up to CU_FUSED_MAX_ROWS. */
#define CU_FUSED_KQUANT_DEFAULT_ROWS 1

/* A/B runs and tests: QVL_CUDA_FUSED_KQUANT=0 takes no q4_k / q6_k rows fused, =N at most N
 * rows (1 .. 8); unset, CU_FUSED_KQUANT_DEFAULT_ROWS. */
static int64_t cu_fused_env_kquant_rows(void) {
    const char *v = getenv("QVL_CUDA_FUSED_KQUANT");
    if (!v || !*v) return CU_FUSED_KQUANT_DEFAULT_ROWS;
    long n = strtol(v, NULL, 10);
    return n < 0 ? 0 : n > CU_FUSED_MAX_ROWS ? CU_FUSED_MAX_ROWS : n;
}

/* q4_k / q6_k: super-blocks per chunk of K for M rows (0: not fused). An RMS norm needs its
 * whole row in one chunk; a layer norm is not fused (cu_gemv_fused_k.cu). */
static int64_t cu_fused_kquant_chunk_for(int64_t M, int64_t K, int prologue, int layer) {
    if (prologue == CU_FUSED_NORM && layer) return 0;
    int64_t c = cu_fused_kquant_chunk(M, K, CU_FUSED_MAX_SMEM);
    return prologue == CU_FUSED_NORM && c != K / QVL_QK_K ? 0 : c;
}

/* Projections whose dtypes the fused kernels take together: all the same, or q4_k and q6_k
 * mixed (Q4_K_M's q6_k attention-V beside q4_k q and k). Weight rows: whole blocks (super-blocks
 * for q4_k / q6_k, so K is one too), unit stride, at the alignment of the kernel's loads. */
extern "C" int cu_gemv_fused_fits(const cu_mat *w, int n_proj, int64_t M, int prologue,
                                  int layer) {
    if (n_proj < 1 || n_proj > 3 || M < 1 || M > CU_FUSED_MAX_ROWS) return 0;
    int32_t dt = w[0].dtype;
    bool kq = cu_is_kquant(dt);
    if (kq && M > cu_fused_env_kquant_rows()) return 0;
    /* 3-8 rows of 16-bit weights go to the register-resident GEMV: the fused kernel reads
     * each activation from shared memory once per weight row */
    if ((dt == QVL_F16 || dt == QVL_BF16) && cu_gemv_rows_regs_takes(M)) return 0;
    int64_t per = dt == QVL_F32 ? 4 : dt == QVL_Q8_0 ? QVL_Q8_0_BLOCK : kq ? QVL_QK_K : 8, K = w[0].cols;
    if (K % per != 0) return 0;
    if (kq) {
        if (cu_fused_kquant_chunk_for(M, K, prologue, layer) <= 0) return 0;
    } else {
        int64_t smem = cu_fused_smem(dt, M, K);
        int64_t room = CU_FUSED_MAX_SMEM - (dt == QVL_Q8_0 ? CU_Q8_STAGE_BYTES : 0);
        if (smem <= 0 || smem > room) return 0;
    }
    for (int i = 0; i < n_proj; i++) {
        int32_t di = w[i].dtype;
        unsigned align = di == QVL_Q4_K ? 16u : di == QVL_Q8_0 || di == QVL_Q6_K ? 2u : 16u;
        if ((kq ? !cu_is_kquant(di) : di != dt) || w[i].cols != K || w[i].col_stride != 1 ||
            w[i].cols % per != 0 || w[i].row_stride % per != 0 || w[i].batch_stride != 0 ||
            ((uintptr_t)w[i].data % align) != 0)
            return 0;
    }
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
    int layer = prologue == CU_FUSED_NORM && layer_or_act;
    if (!cu_gemv_fused_fits(w, n_proj, M, prologue, layer)) return (int)cudaErrorInvalidConfiguration;
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
        p.w_dtype[i] = w[i].dtype;
        p.w_row_stride[i] = w[i].row_stride;
        p.bias[i] = bias[i];
        p.n_off[i + 1] = p.n_off[i] + w[i].rows;
    }
    for (int i = n_proj; i < 3; i++) p.n_off[i + 1] = p.n_off[i];
    p.out = out;
    p.ldo = ldo;
    if (cu_is_kquant(w[0].dtype)) {
        p.kc_sb = (int)cu_fused_kquant_chunk_for(M, p.K, prologue, layer);
        cu_fused_run_kquant(p, (size_t)cu_fused_kquant_smem(M, p.kc_sb * (int64_t)QVL_QK_K), sm_count, s);
        return (int)cudaGetLastError();
    }
    size_t smem = (size_t)cu_fused_smem(w[0].dtype, M, p.K);
    bool staged = w[0].dtype == QVL_Q8_0 && cu_q8_rows_staged(w, n_proj);
    if (M == 1) cu_fused_dispatch<1, CU_FG_UNROLL_M1>(p, w[0].dtype, staged, smem, sm_count, s);
    else if (M <= 4) cu_fused_dispatch<4, CU_FG_UNROLL>(p, w[0].dtype, staged, smem, sm_count, s);
    else cu_fused_dispatch<CU_FUSED_MAX_ROWS, CU_FG_UNROLL>(p, w[0].dtype, staged, smem, sm_count, s);
    return (int)cudaGetLastError();
}
