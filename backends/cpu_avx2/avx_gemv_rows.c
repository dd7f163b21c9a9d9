/* The f32 / f16 / bf16 GEMV of a batched decode step: 2 to AVX_GEMV_MAX_ROWS activation rows
 * against weight rows read once (avx_gemv_rows.h).
 *
 * Why this shape. With 8 rows every weight element meets 8 activation values, so the step is
 * bound by the multiply-adds rather than by reading the weights, and the multiply-adds need
 * their operands from L1:
 *  - the activations are repacked once per op into 16-element blocks of all M rows side by
 *    side ([K/16][M][16]): a step's loads are one run of M x 64 bytes. Read from the rows
 *    themselves, M rows K x 4 bytes apart (a power of two at the model's widths) fall into one
 *    L1 set with the weight rows beside them, more lines than its 8 ways, and the loop ran at
 *    about half the FMA peak however it was tiled;
 *  - a register tile of MR activation rows x 2 weight rows: each activation vector feeds two
 *    FMAs and each weight vector MR, 10 loads per 16 FMAs at MR = 4 (8 accumulators, 4 weight
 *    vectors, a zero and one activation vector: 14 of the 16 ymm registers);
 *  - bf16 widened by unpacking against zero, on the shuffle port: the shift and mask of the
 *    one-row GEMV would share the two FMA ports (the activations are packed in the order the
 *    unpacking gives);
 *  - from 5 rows, where the multiply-adds bound the step, K in chunks whose activations (all
 *    M rows) fit in 16 KB of L1; a block of RB weight rows keeps its partial sums as vectors
 *    (RB x M x 32 bytes) from chunk to chunk, and each weight element is still read from
 *    memory once. Up to 4 rows reading the weights bounds the step, and whole rows (one
 *    chunk, the activations from L2) stream faster;
 *  - M > 4 in two passes over the tile's weights (the second reads them from L1): 4+1 would
 *    leave one row to a tile whose 2 accumulator chains cannot hide the FMA latency, so the
 *    passes are M = 5: 3+2, 6: 4+2, 7: 4+3, 8: 4+4;
 *  - the next tile's weights (next rows, next chunk or next row block) are prefetched while
 *    one is multiplied, 64 bytes a turn.
 * The sum of a (row, column) is its chunks' vector partials added in order, then the 8 lanes
 * (avx_hsum), then the K % 16 tail in order: the same every run and thread count. */
#include "avx_gemv_rows.h"

#include <immintrin.h>

#include "avx_math.h"
#include "avx_wrow.h"

#define AVX_INLINE static inline __attribute__((always_inline))

#define RB 16                 /* weight rows of a row block (their partials stay in L1) */
#define NR 2                  /* weight rows of a register tile */
#define CHUNK_A_BYTES 16384   /* a K chunk's activations, all rows together */
/* Up to this many rows the weights are read whole row by row (one chunk): the step is then
 * bound by reading them, and long runs through each row stream faster than chunks of it */
#define WHOLE_ROWS_MAX_M 4

void avx_gemv_rows_pack(const float *a, int64_t M, int64_t K, bool bf16, float *out) {
    /* bf16: the order in which unpacking a 16-element load against zero (per 128-bit lane,
     * low words then high words) yields the weights */
    static const int bf16_order[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    for (int64_t b = 0; b < K / 16; b++)
        for (int64_t m = 0; m < M; m++) {
            const float *src = a + m * K + 16 * b;
            float *dst = out + (b * M + m) * 16;
            for (int i = 0; i < 16; i++) dst[i] = src[bf16 ? bf16_order[i] : i];
        }
}

/* Where a tile reads and what it adds to. */
typedef struct tile_args {
    const float *ab;                  /* the packed activations at the chunk's first block */
    int64_t M, k0, k1;                /* the chunk: k0, k1 multiples of 16 */
    const unsigned char *wr[NR];      /* the tile's weight rows */
    const unsigned char *pf[NR];      /* prefetched in step, at (k - k0) past these */
    __m256 (*pv)[AVX_GEMV_MAX_ROWS];  /* the tile's rows' partials, [NR][M] */
} tile_args;

/* The value is used from its register from here on: GCC would otherwise fold the load into
 * each FMA that reads it (a memory operand per use), and with NR uses per activation vector
 * the loads, two a cycle, would bound the loop instead of the FMAs. */
AVX_INLINE void keep_loaded(__m256 *v) { __asm__("" : "+x"(*v)); }

/* One 16-element step of the tile at k: weight rows wr[0 .. NRT) against the MR activation
 * rows whose 16 values each lie at ab + 16 m. */
AVX_INLINE void tile_step(const unsigned char *const *wr, const float *ab, qvl_dtype dt, int MR,
                          int NRT, int S, int64_t k, __m256 (*acc)[NR][2]) {
    __m256 w0[NR], w1[NR];
#pragma GCC unroll 2
    for (int r = 0; r < NRT; r++) {
        if (dt == QVL_BF16) { /* 16 bf16 into the high halves of f32 lanes, in the packed order */
            const __m256i v = _mm256_loadu_si256((const __m256i *)(wr[r] + 2 * k));
            w0[r] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v));
            w1[r] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v));
        } else {
            avx_w_load16(dt, wr[r], k, &w0[r], &w1[r]);
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        __m256 a0 = _mm256_loadu_ps(ab + 16 * m);
        keep_loaded(&a0);
#pragma GCC unroll 2
        for (int r = 0; r < NRT; r++) acc[m][r][0] = _mm256_fmadd_ps(a0, w0[r], acc[m][r][0]);
        __m256 a1 = _mm256_loadu_ps(ab + 16 * m + 8);
        keep_loaded(&a1);
#pragma GCC unroll 2
        for (int r = 0; r < NRT; r++)
            acc[m][r][S - 1] = _mm256_fmadd_ps(a1, w1[r], acc[m][r][S - 1]);
    }
}

/* Weight rows wr[0 .. NRT) against activation rows m0 .. m0 + MR - 1 over [k0, k1). S = 2
 * sums the two halves of each 16-step in separate chains (small tiles, where MR * NRT chains
 * alone would wait on the FMA latency). The loop takes 32 elements (64 bytes of a 16-bit row)
 * a turn with one prefetch per 64 bytes of each row, unconditionally: few instructions besides
 * the FMAs, as the core issues only 4 or 5 a cycle. */
AVX_INLINE void tile(const tile_args *t, qvl_dtype dt, int MR, int NRT, int S, int64_t m0) {
    const int64_t wbytes = dt == QVL_F32 ? 4 : 2, stride = 16 * t->M;
    const float *ab = t->ab + 16 * m0;
    const unsigned char *wr[NR];
    uintptr_t pf[NR]; /* (an address, not a pointer: before k0 it may lie outside the row) */
#pragma GCC unroll 2
    for (int r = 0; r < NRT; r++) {
        wr[r] = t->wr[r];
        pf[r] = (uintptr_t)t->pf[r] - (uintptr_t)(wbytes * t->k0); /* at k: byte (k - k0) */
    }
    __m256 acc[4][NR][2];
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int r = 0; r < NRT; r++) acc[m][r][0] = acc[m][r][1] = _mm256_setzero_ps();
    int64_t k = t->k0;
    for (; k + 32 <= t->k1; k += 32, ab += 2 * stride) {
#pragma GCC unroll 2
        for (int r = 0; r < NRT; r++) {
            avx_prefetch_ahead((const void *)pf[r], wbytes * k);
            if (dt == QVL_F32) avx_prefetch_ahead((const void *)pf[r], wbytes * k + 64);
        }
        tile_step(wr, ab, dt, MR, NRT, S, k, acc);
        tile_step(wr, ab + stride, dt, MR, NRT, S, k + 16, acc);
    }
    if (k < t->k1) tile_step(wr, ab, dt, MR, NRT, S, k, acc);
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 2
        for (int r = 0; r < NRT; r++) {
            const __m256 s = S == 2 ? _mm256_add_ps(acc[m][r][0], acc[m][r][1]) : acc[m][r][0];
            t->pv[r][m0 + m] = _mm256_add_ps(t->pv[r][m0 + m], s);
        }
}

/* One function per (dtype, MR, weight rows): each tile's registers are allocated alone
 * (inlined together, GCC kept small tiles' accumulators on the stack). */
#define TILE(DT, MR, NRT)                                                                     \
    static __attribute__((noinline)) void tile_##DT##_##MR##_##NRT(const tile_args *t,       \
                                                                    int64_t m0) {            \
        tile(t, DT, MR, NRT, (MR) * (NRT) <= 4 ? 2 : 1, m0);                                  \
    }
#define TILES(DT) TILE(DT, 2, 1) TILE(DT, 2, 2) TILE(DT, 3, 1) TILE(DT, 3, 2) TILE(DT, 4, 1) TILE(DT, 4, 2)
TILES(QVL_F32)
TILES(QVL_F16)
TILES(QVL_BF16)

typedef void (*tile_fn)(const tile_args *, int64_t);

#define TILE_TABLE(DT)                                                                        \
    {{tile_##DT##_2_1, tile_##DT##_2_2}, {tile_##DT##_3_1, tile_##DT##_3_2},                  \
     {tile_##DT##_4_1, tile_##DT##_4_2}}

/* [dtype: f32, f16, bf16][MR - 2][weight rows - 1] */
static const tile_fn tiles[3][3][NR] = {TILE_TABLE(QVL_F32), TILE_TABLE(QVL_F16),
                                        TILE_TABLE(QVL_BF16)};

/* The passes' row counts for M rows (2 .. 8); returns how many. */
static int passes_of(int64_t M, int *mr) {
    static const int split[9][2] = {{0, 0}, {0, 0}, {2, 0}, {3, 0}, {4, 0},
                                    {3, 2}, {4, 2}, {4, 3}, {4, 4}};
    mr[0] = split[M][0];
    mr[1] = split[M][1];
    return mr[1] ? 2 : 1;
}

void avx_gemv_rows(const float *a_blocks, const float *a, int64_t M, const avx_wmat *w,
                   const avx_cols_out *o, int64_t j_lo, int64_t j_hi) {
    const qvl_dtype dt = w->dt;
    const int d = dt == QVL_F32 ? 0 : dt == QVL_F16 ? 1 : 2;
    const int64_t K = w->cols, K16 = K / 16 * 16;
    int64_t kc = M <= WHOLE_ROWS_MAX_M ? K16 : CHUNK_A_BYTES / (4 * M) / 16 * 16;
    if (kc < 16) kc = 16;
    int mr[2];
    const int n_pass = passes_of(M, mr);
    const int64_t wbytes = dt == QVL_F32 ? 4 : 2;
    __m256 pv[RB][AVX_GEMV_MAX_ROWS];
    for (int64_t b0 = j_lo; b0 < j_hi; b0 += RB) {
        const int64_t nb = j_hi - b0 < RB ? j_hi - b0 : RB;
        for (int64_t r = 0; r < nb; r++)
            for (int64_t m = 0; m < M; m++) pv[r][m] = _mm256_setzero_ps();
        for (int64_t k0 = 0; k0 < K16; k0 += kc) {
            const int64_t k1 = k0 + kc < K16 ? k0 + kc : K16;
            for (int64_t t0 = 0; t0 < nb; t0 += NR) {
                const int nrt = nb - t0 < NR ? (int)(nb - t0) : NR;
                tile_args t = {a_blocks + k0 * M, M, k0, k1, {NULL, NULL}, {NULL, NULL}, pv + t0};
                /* the tile read next: the next rows of this chunk, else the block's first
                 * rows in the next chunk, else the next block's first rows from k = 0 */
                int64_t pj = b0 + t0 + NR, pk = k0;
                if (t0 + NR >= nb) pj = k1 < K16 ? b0 : b0 + RB, pk = k1 < K16 ? k1 : 0;
                for (int r = 0; r < nrt; r++) {
                    t.wr[r] = avx_w_row(w, b0 + t0 + r);
                    /* (past the last row: the tile's own bytes again, already cached) */
                    t.pf[r] = pj + r < j_hi ? avx_w_row(w, pj + r) + wbytes * pk
                                            : t.wr[r] + wbytes * k0;
                }
                int64_t m0 = 0;
                for (int p = 0; p < n_pass; p++) {
                    tiles[d][mr[p] - 2][nrt - 1](&t, m0);
                    m0 += mr[p];
                    /* the later passes read what the first fetched */
                    for (int r = 0; r < nrt; r++) t.pf[r] = t.wr[r] + wbytes * k0;
                }
            }
        }
        for (int64_t r = 0; r < nb; r++) {
            const int64_t j = b0 + r;
            const unsigned char *row = avx_w_row(w, j);
            for (int64_t m = 0; m < M; m++) {
                float v = avx_hsum(pv[r][m]);
                for (int64_t k = K16; k < K; k++) v += a[m * K + k] * avx_w_scalar(dt, row, k);
                if (o->bias) v += o->bias[j];
                if (o->add) v += o->add[m * o->ldo + j];
                o->out[m * o->ldo + j] = v;
            }
        }
    }
}
