/* GEMV, tiled GEMM and the int8 q8_0 kernels behind avx_linear (see avx_linear.h). */
#include "avx_linear.h"

#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "avx_gemm.h"
#include "avx_gemv_rows.h"
#include "avx_kernels.h"
#include "avx_kquant.h"
#include "avx_qgemm.h"
#include "avx_math.h"
#include "avx_wrow.h"
#include "qvl/dtype.h"

#define AVX_INLINE static inline __attribute__((always_inline))
#define COL_ALIGN 16      /* output columns per thread boundary: 64 bytes of f32 */

/* ---- weights ---- */

qvl_status avx_wmat_of(const qvl_tensor *t, int64_t batch, avx_wmat *out, float **owned) {
    const qvl_tensor_desc *d = &t->desc;
    int r = d->ndim - 2, c = d->ndim - 1;
    int64_t off = d->ndim == 3 ? batch * d->stride[0] : 0;
    int64_t rows = d->shape[r], cols = d->shape[c];
    *owned = NULL;
    const int64_t block = (int64_t)qvl_dtype_block_elems(d->dtype);
    bool in_place = (d->stride[c] == 1 || cols == 1) && off >= 0 && d->stride[r] >= 0 &&
                    (block == 1 || (cols % block == 0 && off % block == 0 &&
                                    (rows == 1 || d->stride[r] % block == 0)));
    if (in_place) {
        /* (block dtypes: off is whole blocks here, so row_bytes_of gives its byte offset) */
        *out = (avx_wmat){(const unsigned char *)t->data + avx_row_bytes_of(d->dtype, off), d->dtype,
                          rows, cols, rows == 1 ? cols : d->stride[r]};
        return QVL_OK;
    }
    /* Strided rows (v^T in unfused attention), negative strides or partial blocks: an f32
     * copy. */
    float *copy = avx_scratch(rows * cols);
    if (!copy) return QVL_E_NOMEM;
    for (int64_t j = 0; j < rows; j++)
        avx_gather(t, off + j * d->stride[r], d->stride[c], cols, copy + j * cols);
    *out = (avx_wmat){(const unsigned char *)copy, QVL_F32, rows, cols, cols};
    *owned = copy;
    return QVL_OK;
}

/* ---- the job every thread runs ---- */

/* One projection as the threads see it: output columns offset by its first column. */
typedef struct lin_part {
    const avx_wmat *w;
    const float *bias; /* [w->rows] or NULL */
    const float *add;  /* add + col or NULL */
    float *out;        /* out + col */
    int64_t start;     /* first row of this part in the job's row space */
    int32_t act;       /* qvl_act on the finished outputs */
} lin_part;

typedef struct linear_job {
    const float *a;       /* [M, K] */
    const float *a_eo;    /* bf16 GEMV: a with each 16-block as 8 even then 8 odd elements */
    const float *a_blk;   /* 2 to 8 rows, f32 / f16 weights: a packed (avx_gemv_rows_pack) */
    const float *a_blk_bf16; /* the same for bf16 weights (their order) */
    const int8_t *qa;     /* q8_0, q4_k, q6_k: quantised a [M, K] */
    const float *qd;      /* q8_0, q4_k, q6_k: a block scales [M, K/32] */
    avx_qrows qrows;      /* q4_k, q6_k: qa, qd and the block sums */
    bool gemm;            /* the GEMMs (f32 and int8) rather than the GEMVs */
    bool any_f32_gemm;    /* GEMM: a part whose weights take the f32 GEMM */
    bool any_qgemm;       /* GEMM: a part whose weights take the int8 GEMM (avx_qgemm.h) */
    int64_t M, K;
    lin_part parts[AVX_LINEAR_MAX_PARTS];
    int n_parts;
    int64_t rows;         /* weight rows of all parts together */
    int64_t row_block;    /* f32 GEMM: activation rows per work item (M: no row split) */
    int64_t ldo;
    int nth;
    atomic_int failed;    /* a thread could not get its panel scratch */
    atomic_llong next;    /* first row (of all parts together) not yet handed to a thread;
                           * with row blocks, the next work item */
} linear_job;

static void finish(const linear_job *jb, const lin_part *pt, int64_t m, int64_t j, float v) {
    if (pt->bias) v += pt->bias[j];
    if (pt->add) v += pt->add[m * jb->ldo + j];
    pt->out[m * jb->ldo + j] = v;
}

/* The part's activation on output columns [lo, hi) of rows [m_lo, m_hi), right after the
 * thread computed them (still in its cache). The row functions work lane by lane, so a range
 * gives the bits a whole row would. */
static void act_cols(const linear_job *jb, const lin_part *pt, int64_t m_lo, int64_t m_hi,
                     int64_t lo, int64_t hi) {
    for (int64_t m = m_lo; m < m_hi; m++) {
        float *row = pt->out + m * jb->ldo + lo;
        if (pt->act == QVL_ACT_GELU_TANH) avx_gelu_tanh_row(row, hi - lo);
        else if (pt->act == QVL_ACT_GELU_ERF) avx_gelu_erf_row(row, hi - lo);
    }
}

/* ---- GEMV: one activation row (2 to AVX_GEMV_MAX_ROWS: avx_gemv_rows.c) ---- */

/* Weight rows of a decode tile, each from its own stream (see gemv_one_row): the more streams
 * a core has in flight, the closer it reads to the memory's rate; 8 also beat 4 with the
 * weights read in place from the file mapping (docs/BENCHMARKS.md). */
#define GEMV_STREAMS 8
/* Bytes prefetched ahead on each of the GEMV_STREAMS streams. What is prefetched must still be
 * in L1 when it is read, so GEMV_STREAMS x PF_AHEAD (4 KB) stays well inside the target CPU's
 * 32 KB L1; 4 KB per stream would fill it and gains nothing over no prefetch at all, 256 B to
 * 1 KB read alike (docs/BENCHMARKS.md). */
#define PF_AHEAD 512
/* Decode (one activation row): weight rows j0 + r * js (r < NR, up to 8) with one
 * accumulator per row: NR rows in flight keep the FMA latency hidden. */
AVX_INLINE void gemv_row_tile(const linear_job *jb, const lin_part *pt, qvl_dtype dt, int NR,
                              int64_t j0, int64_t js) {
    const int64_t K = jb->K, K16 = K / 16 * 16;
    const int64_t step = dt == QVL_F32 ? 16 : 32; /* elements per 64 bytes */
    const int64_t wbytes = dt == QVL_F32 ? 4 : 2;
    const unsigned char *wr[8];
    __m256 acc[8];
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        wr[r] = avx_w_row(pt->w, j0 + r * js);
        acc[r] = _mm256_setzero_ps();
    }
    const float *a = dt == QVL_BF16 ? jb->a_eo : jb->a;
    for (int64_t k = 0; k < K16; k += 16) {
        __m256 a0 = _mm256_loadu_ps(a + k), a1 = _mm256_loadu_ps(a + k + 8);
#pragma GCC unroll 8
        for (int r = 0; r < NR; r++) {
            if (k % step == 0) avx_prefetch_ahead(wr[r] + wbytes * k, PF_AHEAD);
            __m256 w0, w1;
            avx_w_load16(dt, wr[r], k, &w0, &w1);
            acc[r] = _mm256_fmadd_ps(a0, w0, acc[r]);
            acc[r] = _mm256_fmadd_ps(a1, w1, acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; r++) {
        float v = avx_hsum(acc[r]);
        for (int64_t k = K16; k < K; k++) v += a[k] * avx_w_scalar(dt, wr[r], k);
        finish(jb, pt, 0, j0 + r * js, v);
    }
}

/* Rows [j_lo, j_hi) of part pt, one activation row (decode): GEMV_STREAMS sequential streams
 * read side by side, as q8_range does (see there why). Inlined once per dtype (gemv_one_row),
 * so that each copy's loads are fixed at compile time. */
AVX_INLINE void one_row_range(const linear_job *jb, const lin_part *pt, qvl_dtype dt,
                              int64_t j_lo, int64_t j_hi) {
    const int64_t len = (j_hi - j_lo) / GEMV_STREAMS;
    for (int64_t t = 0; t < len; t++) gemv_row_tile(jb, pt, dt, GEMV_STREAMS, j_lo + t, len);
    for (int64_t j = j_lo + len * GEMV_STREAMS; j < j_hi; j++) gemv_row_tile(jb, pt, dt, 1, j, 1);
}

static void gemv_one_row(const linear_job *jb, const lin_part *pt, int64_t j_lo, int64_t j_hi) {
    switch (pt->w->dt) {
    case QVL_BF16: one_row_range(jb, pt, QVL_BF16, j_lo, j_hi); break;
    case QVL_F16: one_row_range(jb, pt, QVL_F16, j_lo, j_hi); break;
    default: one_row_range(jb, pt, QVL_F32, j_lo, j_hi); break;
    }
}

/* ---- q8_0: int8 activations x int8 weights, per 32-element block ---- */

#define Q8_STREAMS 4
/* Bytes prefetched ahead on each q8_0 stream: Q8_STREAMS x Q8_PF_AHEAD keeps the same 4 KB
 * in flight per thread as the 16-bit GEMVs (see PF_AHEAD), well inside L1. 4 KB per stream is
 * slower, 512 B to 2 KB no better than 1 KB (docs/BENCHMARKS.md). */
#define Q8_PF_AHEAD 1024

AVX_INLINE __m256 q8_block_dot(__m256i wq, __m256i aq) {
    __m256i ax = _mm256_sign_epi8(wq, wq);           /* |w| as unsigned bytes */
    __m256i sy = _mm256_sign_epi8(aq, wq);           /* a with w's sign */
    __m256i p16 = _mm256_maddubs_epi16(ax, sy);      /* <= 2*128*127: no saturation */
    __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    return _mm256_cvtepi32_ps(p32);
}

/* Weight rows j0 + r * js (r < NR) against MR activation rows. */
AVX_INLINE void q8_tile(const linear_job *jb, const lin_part *pt, int MR, int NR, int64_t m0,
                        int64_t j0, int64_t js) {
    const int64_t K = jb->K, nb = K / QVL_Q8_0_BLOCK;
    const unsigned char *wr[4];
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) wr[r] = avx_w_row(pt->w, j0 + r * js);
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[m][r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq[4];
        uint16_t h[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const unsigned char *blk = wr[r] + b * (int64_t)sizeof(qvl_block_q8_0);
            avx_prefetch_ahead(blk, Q8_PF_AHEAD);
            memcpy(&h[r], blk, 2);
            wq[r] = _mm256_loadu_si256((const __m256i *)(blk + 2));
        }
        /* the NR weight scales converted together (one F16C op, not one per row); each
         * row's wd * ad is then a lane broadcast, the same f32 product as a scalar one */
        const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16((short)h[0], (short)h[1], (short)h[2],
                                                      (short)h[3], 0, 0, 0, 0));
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            __m256i aq = _mm256_loadu_si256((const __m256i *)(jb->qa + (m0 + m) * K + b * 32));
            __m256 sd = _mm256_castps128_ps256(_mm_mul_ps(wd, _mm_set1_ps(jb->qd[(m0 + m) * nb + b])));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                acc[m][r] = _mm256_fmadd_ps(q8_block_dot(wq[r], aq),
                                            _mm256_permutevar8x32_ps(sd, _mm256_set1_epi32(r)),
                                            acc[m][r]);
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) finish(jb, pt, m0 + m, j0 + r * js, avx_hsum(acc[m][r]));
}

/* Rows [j_lo, j_hi) as Q8_STREAMS sequential streams read side by side: tile t takes row t
 * of each stream (rows j_lo + t + r * len, len = (j_hi - j_lo) / Q8_STREAMS), then the rows
 * left over one by one. Why: the L2 streamer follows one forward stream per 4 KiB page, and
 * a core needs several streams in flight to read at full speed. Four consecutive rows of a
 * q8_0 matrix at K = 2048 (2176 bytes each) share pages, so a tile of them is about one
 * stream; rows a quarter of the range apart are four. Each stream is prefetched
 * Q8_PF_AHEAD bytes ahead (into its next row near a row's end) for the page crossings, where
 * the streamer starts over. Four streams rather than the 16-bit GEMVs' eight: for q8_0, whose
 * kernel is closer to its compute limit, eight are no faster (docs/BENCHMARKS.md). */
static void q8_range(const linear_job *jb, const lin_part *pt, int64_t j_lo, int64_t j_hi) {
    const int64_t len = (j_hi - j_lo) / Q8_STREAMS, rest = j_lo + len * Q8_STREAMS;
    int64_t m0 = 0;
    for (; m0 + 3 <= jb->M; m0 += 3) {
        for (int64_t t = 0; t < len; t++) q8_tile(jb, pt, 3, Q8_STREAMS, m0, j_lo + t, len);
        for (int64_t j = rest; j < j_hi; j++) q8_tile(jb, pt, 3, 1, m0, j, 1);
    }
    /* two rows in one pass over the weights (row by row would read them twice) */
    for (; m0 + 2 <= jb->M; m0 += 2) {
        for (int64_t t = 0; t < len; t++) q8_tile(jb, pt, 2, Q8_STREAMS, m0, j_lo + t, len);
        for (int64_t j = rest; j < j_hi; j++) q8_tile(jb, pt, 2, 1, m0, j, 1);
    }
    for (; m0 < jb->M; m0++) {
        for (int64_t t = 0; t < len; t++) q8_tile(jb, pt, 1, Q8_STREAMS, m0, j_lo + t, len);
        for (int64_t j = rest; j < j_hi; j++) q8_tile(jb, pt, 1, 1, m0, j, 1);
    }
}

/* Weight rows (output columns) are handed out in chunks from a shared counter rather than
 * split evenly up front: a thread the OS preempts (or that runs slower) then leaves its
 * remaining chunks to the others instead of holding up the op. GEMV chunks shrink as the op
 * nears its end (a quarter of each thread's share of what is left, down to GEMV_MIN_CHUNK), so
 * that the threads finish together; GEMM chunks are fixed (the panels want wide ranges). All
 * are multiples of COL_ALIGN (no shared cache lines). */
#define GEMV_MAX_CHUNK (8 * COL_ALIGN) /* weight rows: 512 KB of bf16 at K = 2048 */
#define GEMV_MIN_CHUNK COL_ALIGN
#define GEMM_CHUNK (8 * COL_ALIGN)     /* output columns: eight 16-column panels */
#define Q8_MAX_CHUNK (16 * COL_ALIGN)  /* q8_0 weight rows: 544 KB at K = 2048 */

/* The f32 GEMM of many rows goes through its column chunks with every row: a vision tower's
 * 3072 rows make each chunk's output block (1.5 MB) and activation rows (12-50 MB) pass
 * through the caches once per K block and per chunk. Work items of AVX_GEMM_ROW_BLOCK rows x
 * one column chunk, handed out row block by row block, keep the threads on one block at a time
 * (its outputs in L2 across the K blocks, its activation rows in the last-level cache across
 * the chunks); the weight panels are then packed once per item instead of once per chunk. 576 rows
 * did best of 144-1008 on the 2-core development machine (docs/BENCHMARKS.md). The int8 GEMM
 * packs its own way: no row blocks there. QVL_AVX2_GEMM_ROWS=N forces N rows (tests). */
#define AVX_GEMM_ROW_BLOCK (4 * GEMM_MC)

static int64_t gemm_row_block(int64_t M) {
    const char *force = getenv("QVL_AVX2_GEMM_ROWS");
    int64_t rows = AVX_GEMM_ROW_BLOCK;
    if (force && *force) { /* whole tiles: an item's rows are its own */
        rows = atoll(force) / GEMM_MR * GEMM_MR;
        if (rows < GEMM_MR) rows = GEMM_MR;
    }
    return rows < M ? rows : M;
}

/* Item `item` of the row-blocked GEMM: rows [*m_lo, *m_hi) x columns [*lo, *hi). */
static bool grab_item(linear_job *jb, int64_t *m_lo, int64_t *m_hi, int64_t *lo, int64_t *hi) {
    const int64_t chunks = (jb->rows + GEMM_CHUNK - 1) / GEMM_CHUNK;
    const int64_t blocks = (jb->M + jb->row_block - 1) / jb->row_block;
    const long long item = atomic_fetch_add_explicit(&jb->next, 1, memory_order_relaxed);
    if (item >= chunks * blocks) return false;
    *m_lo = item / chunks * jb->row_block;
    *m_hi = *m_lo + jb->row_block < jb->M ? *m_lo + jb->row_block : jb->M;
    *lo = item % chunks * GEMM_CHUNK;
    *hi = *lo + GEMM_CHUNK < jb->rows ? *lo + GEMM_CHUNK : jb->rows;
    return true;
}

static bool grab_chunk(linear_job *jb, bool gemm, int64_t *lo, int64_t *hi) {
    const int64_t N = jb->rows;
    const int64_t max = gemm ? GEMM_CHUNK : jb->qa ? Q8_MAX_CHUNK : GEMV_MAX_CHUNK;
    long long cur = atomic_load_explicit(&jb->next, memory_order_relaxed);
    for (;;) {
        if (cur >= N) return false;
        int64_t size = max;
        if (!gemm) {
            size = (N - cur) / (4 * jb->nth) / COL_ALIGN * COL_ALIGN;
            size = size < GEMV_MIN_CHUNK ? GEMV_MIN_CHUNK : size > max ? max : size;
        }
        if (size > N - cur) size = N - cur;
        if (atomic_compare_exchange_weak_explicit(&jb->next, &cur, cur + size,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *lo = cur;
            *hi = cur + size;
            return true;
        }
    }
}

/* Weights the int8 GEMM takes (avx_qgemm.h). q8_0 stays on the f32 GEMM: with signed weights
 * the int8 product needs a sign step and a widening per 4 values (maddubs pairs of two int8
 * reach 32512, so no int16 accumulation), as many vector ops per multiply-add as f32 FMAs,
 * and measured slower than dequantising to f32 panels (docs/BENCHMARKS.md). */
static bool is_block_dtype(qvl_dtype dt) { return dt == QVL_Q4_K || dt == QVL_Q6_K; }

/* Weight rows [lo, hi) of part pt (part-local), for activation rows [m_lo, m_hi) (the f32
 * GEMM; every other path takes all M). */
static void run_rows(linear_job *jb, const lin_part *pt, bool gemm, int64_t m_lo, int64_t m_hi,
                     int64_t lo, int64_t hi, float *bpack, unsigned char *qpack) {
    if (gemm && is_block_dtype(pt->w->dt)) {
        avx_qgemm_cols(&jb->qrows, jb->M, pt->w, pt->bias, pt->add, pt->out, jb->ldo, lo, hi,
                       qpack);
        return;
    }
    if (gemm) {
        avx_gemm_cols(jb->a, jb->M, m_lo, m_hi, pt->w, pt->bias, pt->add, pt->out, jb->ldo,
                      lo, hi, bpack);
        return;
    }
    switch (pt->w->dt) {
    case QVL_Q8_0: q8_range(jb, pt, lo, hi); break;
    case QVL_Q4_K:
    case QVL_Q6_K: {
        const avx_cols_out o = {pt->bias, pt->add, pt->out, jb->ldo};
        avx_kq_gemv(&jb->qrows, jb->M, pt->w, &o, lo, hi);
        break;
    }
    default:
        if (jb->M == 1) {
            gemv_one_row(jb, pt, lo, hi);
        } else {
            const avx_cols_out o = {pt->bias, pt->add, pt->out, jb->ldo};
            avx_gemv_rows(pt->w->dt == QVL_BF16 ? jb->a_blk_bf16 : jb->a_blk, jb->a, jb->M, pt->w,
                          &o, lo, hi);
        }
        break;
    }
}

static void linear_worker(void *ctx, int tid, int nth) {
    linear_job *jb = ctx;
    (void)tid;
    (void)nth;
    const bool gemm = jb->gemm;
    float *bpack = NULL;
    unsigned char *qpack = NULL;
    if (gemm && jb->any_f32_gemm &&
        !(bpack = aligned_alloc(64, (size_t)avx_gemm_bpack_len(jb->K, GEMM_CHUNK) * sizeof(float)))) {
        atomic_store(&jb->failed, 1);
        return;
    }
    if (gemm && jb->any_qgemm &&
        !(qpack = aligned_alloc(64, (size_t)avx_qgemm_scratch_bytes(jb->K)))) {
        atomic_store(&jb->failed, 1);
        free(bpack);
        return;
    }
    int64_t lo, hi, m_lo = 0, m_hi = jb->M;
    const bool blocked = jb->row_block < jb->M;
    while (blocked ? grab_item(jb, &m_lo, &m_hi, &lo, &hi) : grab_chunk(jb, gemm, &lo, &hi)) {
        /* a chunk may span the end of one part and the start of the next */
        for (int p = 0; p < jb->n_parts; p++) {
            const lin_part *pt = &jb->parts[p];
            int64_t b = lo > pt->start ? lo : pt->start;
            int64_t e = hi < pt->start + pt->w->rows ? hi : pt->start + pt->w->rows;
            if (b >= e) continue;
            run_rows(jb, pt, gemm, m_lo, m_hi, b - pt->start, e - pt->start, bpack, qpack);
            if (pt->act != QVL_ACT_NONE) act_cols(jb, pt, m_lo, m_hi, b - pt->start, e - pt->start);
        }
    }
    free(bpack);
    free(qpack);
}

/* The int8 GEMM's activation rows, split over the threads by rows. */
static void quant_a_worker(void *ctx, int tid, int nth) {
    linear_job *jb = ctx;
    const avx_qrows *q = &jb->qrows;
    const int64_t K = jb->K, nb = K / QVL_Q8_0_BLOCK;
    int64_t lo, hi;
    avx_split(jb->M, tid, nth, 1, &lo, &hi);
    for (int64_t m = lo; m < hi; m++)
        avx_quantize_row_q8(jb->a + m * K, K, (int8_t *)q->q + m * K, (float *)q->d + m * nb,
                            q->s32 ? (float *)q->s32 + m * nb : NULL,
                            q->s16 ? (int16_t *)q->s16 + m * 2 * nb : NULL);
}

/* a with each 16-block as its 8 even then 8 odd elements (the bf16 GEMV's order). */
static void permute_even_odd(const float *a, int64_t M, int64_t K, float *a_eo) {
    for (int64_t m = 0; m < M; m++) {
        const float *src = a + m * K;
        float *dst = a_eo + m * K;
        int64_t k = 0;
        for (; k + 16 <= K; k += 16)
            for (int i = 0; i < 8; i++) {
                dst[k + i] = src[k + 2 * i];
                dst[k + 8 + i] = src[k + 2 * i + 1];
            }
        for (; k < K; k++) dst[k] = src[k];
    }
}

qvl_status avx_linear_parts(qvl_backend *be, const float *a, int64_t M,
                            const avx_linear_part *parts, int n_parts, const float *add,
                            float *out, int64_t ldo) {
    if (n_parts < 1 || n_parts > AVX_LINEAR_MAX_PARTS) return QVL_E_INVALID;
    const int64_t K = parts[0].w->cols;
    linear_job jb = {.a = a, .M = M, .K = K, .n_parts = n_parts, .ldo = ldo,
                     .nth = avx_pool_size(be->pool)};
    bool any_q8 = false, any_kq = false, any_bf16 = false, any_f16_f32 = false;
    for (int p = 0; p < n_parts; p++) {
        const avx_wmat *w = parts[p].w;
        if (w->cols != K) return QVL_E_INVALID;
        jb.parts[p] = (lin_part){w, parts[p].bias, add ? add + parts[p].col : NULL,
                                 out + parts[p].col, jb.rows, parts[p].act};
        jb.rows += w->rows;
        any_q8 |= w->dt == QVL_Q8_0;
        any_kq |= w->dt == QVL_Q4_K || w->dt == QVL_Q6_K;
        any_bf16 |= w->dt == QVL_BF16;
        any_f16_f32 |= w->dt == QVL_F16 || w->dt == QVL_F32;
    }
    atomic_init(&jb.failed, 0);
    atomic_init(&jb.next, 0);
    jb.row_block = M;
    float *a_eo = NULL, *a_blk = NULL, *a_blk_bf16 = NULL, *qd = NULL, *qs32 = NULL;
    int8_t *qa = NULL;
    int16_t *qs16 = NULL;
    qvl_status s = QVL_OK;
    bool all_kq = true;
    for (int p = 0; p < n_parts; p++) all_kq &= is_block_dtype(parts[p].w->dt);
    jb.gemm = M > AVX_GEMV_MAX_ROWS || (all_kq && M >= AVX_QGEMM_MIN_ROWS);
    if (jb.gemm) {
        for (int p = 0; p < n_parts; p++) {
            if (is_block_dtype(parts[p].w->dt)) jb.any_qgemm = true;
            else jb.any_f32_gemm = true;
        }
        if (jb.any_f32_gemm && !jb.any_qgemm) jb.row_block = gemm_row_block(M);
        if (jb.any_qgemm) {
            const int64_t nb = K / QVL_Q8_0_BLOCK;
            qa = malloc((size_t)(M * K) + 32);
            qd = avx_scratch(M * nb);
            if (!qa || !qd) { s = QVL_E_NOMEM; goto done; }
            if (any_kq) {
                qs32 = avx_scratch(M * nb);
                qs16 = malloc((size_t)(M * 2 * nb) * sizeof *qs16 + 32);
                if (!qs32 || !qs16) { s = QVL_E_NOMEM; goto done; }
            }
            jb.qrows = (avx_qrows){qa, qd, qs32, qs16, K};
            avx_pool_run(be->pool, quant_a_worker, &jb);
        }
    } else {
        if (any_q8 || any_kq) {
            const int64_t nb = K / QVL_Q8_0_BLOCK;
            qa = malloc((size_t)(M * K) + 32);
            qd = avx_scratch(M * nb);
            if (!qa || !qd) { s = QVL_E_NOMEM; goto done; }
            if (any_kq) {
                qs32 = avx_scratch(M * nb);
                qs16 = malloc((size_t)(M * 2 * nb) * sizeof *qs16 + 32);
                if (!qs32 || !qs16) { s = QVL_E_NOMEM; goto done; }
            }
            for (int64_t m = 0; m < M; m++)
                avx_quantize_row_q8(a + m * K, K, qa + m * K, qd + m * nb,
                                    qs32 ? qs32 + m * nb : NULL, qs16 ? qs16 + m * 2 * nb : NULL);
            jb.qa = qa;
            jb.qd = qd;
            jb.qrows = (avx_qrows){qa, qd, qs32, qs16, K};
        }
        if (any_bf16 && M == 1) {
            if (!(a_eo = avx_scratch(M * K))) { s = QVL_E_NOMEM; goto done; }
            permute_even_odd(a, M, K, a_eo);
            jb.a_eo = a_eo;
        }
        if (M > 1 && (any_bf16 || any_f16_f32)) {
            /* (at least one float: empty K / 16 packs nothing) */
            const int64_t n = M * (K / 16) * 16 + 1;
            if (any_bf16 && !(a_blk_bf16 = avx_scratch(n))) { s = QVL_E_NOMEM; goto done; }
            if (any_f16_f32 && !(a_blk = avx_scratch(n))) { s = QVL_E_NOMEM; goto done; }
            if (a_blk_bf16) avx_gemv_rows_pack(a, M, K, true, a_blk_bf16);
            if (a_blk) avx_gemv_rows_pack(a, M, K, false, a_blk);
            jb.a_blk = a_blk;
            jb.a_blk_bf16 = a_blk_bf16;
        }
    }
    avx_pool_run(be->pool, linear_worker, &jb);
    if (atomic_load(&jb.failed)) s = QVL_E_NOMEM;
done:
    free(a_eo);
    free(a_blk);
    free(a_blk_bf16);
    free(qa);
    free(qd);
    free(qs32);
    free(qs16);
    return s;
}

qvl_status avx_linear(qvl_backend *be, const float *a, int64_t M, const avx_wmat *w,
                      const float *bias, const float *add, float *out, int64_t ldo) {
    const avx_linear_part part = {w, bias, 0, QVL_ACT_NONE};
    return avx_linear_parts(be, a, M, &part, 1, add, out, ldo);
}
