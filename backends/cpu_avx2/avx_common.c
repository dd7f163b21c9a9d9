/* Shared helpers of the cpu_avx2 kernels (see avx_common.h). */
#define _DEFAULT_SOURCE /* madvise */
#include "avx_common.h"

#include <immintrin.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "avx_kquant.h"
#include "qvl/checked.h"
#include "qvl/dtype.h"

void *avx_alloc(size_t bytes, size_t align) {
    if (bytes == 0) bytes = align;
    if (bytes > SIZE_MAX - AVX_HUGE) return NULL;
    const bool huge = bytes >= AVX_HUGE_MIN;
    if (huge) align = AVX_HUGE;
    bytes = (bytes + align - 1) / align * align; /* aligned_alloc wants a multiple */
    void *p = aligned_alloc(align, bytes);
    if (p && huge) (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
    return p;
}

float *avx_scratch(int64_t n) {
    size_t bytes;
    if (n < 8) n = 8;
    if (!qvl_mul_size((size_t)n + 8, sizeof(float), &bytes)) return NULL;
    return avx_alloc(bytes, 32);
}

static void gather_contiguous(const qvl_tensor *t, int64_t off, int64_t n, float *out) {
    const unsigned char *base = t->data;
    int64_t i = 0;
    switch (t->desc.dtype) {
    case QVL_F32:
        memcpy(out, (const float *)base + off, (size_t)n * sizeof(float));
        return;
    case QVL_BF16: {
        const uint16_t *p = (const uint16_t *)base + off;
        for (; i + 8 <= n; i += 8) {
            __m128i h = _mm_loadu_si128((const __m128i *)(p + i));
            __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
            _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
        }
        for (; i < n; i++) out[i] = qvl_bf16_to_f32(p[i]);
        return;
    }
    case QVL_F16: {
        const uint16_t *p = (const uint16_t *)base + off;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + i))));
        for (; i < n; i++) out[i] = qvl_f16_to_f32(p[i]);
        return;
    }
    case QVL_Q8_0:
        if (off % QVL_Q8_0_BLOCK == 0) {
            const unsigned char *blk = base + off / QVL_Q8_0_BLOCK * (int64_t)sizeof(qvl_block_q8_0);
            for (; i + QVL_Q8_0_BLOCK <= n; i += QVL_Q8_0_BLOCK, blk += sizeof(qvl_block_q8_0)) {
                uint16_t d16;
                memcpy(&d16, blk, sizeof d16);
                __m256 d = _mm256_set1_ps(_cvtsh_ss(d16));
                for (int k = 0; k < QVL_Q8_0_BLOCK; k += 8) {
                    __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 2 + k));
                    __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
                    _mm256_storeu_ps(out + i + k, _mm256_mul_ps(d, v));
                }
            }
        }
        qvl_elem_gather(t, off + i, 1, n - i, out + i);
        return;
    case QVL_Q4_K:
    case QVL_Q6_K:
        if (off % QVL_QK_K == 0) { /* whole super-blocks (rows of a weight: always) */
            i = n / QVL_QK_K * QVL_QK_K;
            const unsigned char *blk = base + qvl_dtype_offset_bytes(t->desc.dtype, off);
            avx_dequant_kq(t->desc.dtype, blk, out, i);
        }
        qvl_elem_gather(t, off + i, 1, n - i, out + i);
        return;
    default:
        return;
    }
}

void avx_gather(const qvl_tensor *t, int64_t off, int64_t step, int64_t n, float *out) {
    if (step == 1 || n == 1) gather_contiguous(t, off, n, out);
    else qvl_elem_gather(t, off, step, n, out);
}

int64_t avx_row_offset(const qvl_tensor_desc *d, int64_t r) {
    return qvl_desc_row_offset(d, r);
}
int64_t avx_n_rows(const qvl_tensor_desc *d) {
    return qvl_desc_n_rows(d);
}
int64_t avx_row_len(const qvl_tensor_desc *d) {
    return qvl_desc_row_len(d);
}

const float *avx_row(const qvl_tensor *t, int64_t r, float *scratch) {
    const qvl_tensor_desc *d = &t->desc;
    int64_t off = qvl_desc_row_offset(d, r), len = qvl_desc_row_len(d), step = d->stride[d->ndim - 1];
    if (d->dtype == QVL_F32 && (step == 1 || len == 1)) return (const float *)t->data + off;
    avx_gather(t, off, step, len, scratch);
    return scratch;
}

void avx_store_f32(qvl_dtype dt, const float *src, void *dst, int64_t n) {
    if (dt == QVL_F32) memmove(dst, src, (size_t)n * sizeof(float)); /* src may be dst */
    else qvl_from_f32(dt, src, dst, n); /* exact rounding rules of dtype.h */
}

const float *avx_rows_f32(const qvl_tensor *t, float **owned) {
    *owned = NULL;
    if (t->desc.dtype == QVL_F32 && qvl_desc_is_contiguous(&t->desc)) return t->data;
    int64_t rows = qvl_desc_n_rows(&t->desc), len = qvl_desc_row_len(&t->desc);
    float *copy = avx_scratch(rows * len);
    if (!copy) return NULL;
    for (int64_t r = 0; r < rows; r++)
        avx_gather(t, qvl_desc_row_offset(&t->desc, r), t->desc.stride[t->desc.ndim - 1], len,
                   copy + r * len);
    *owned = copy;
    return copy;
}

typedef struct rows_job {
    int64_t rows, scratch_len;
    avx_row_fn fn;
    void *ctx;
    float **scratch;
} rows_job;

static void rows_worker(void *ctx, int tid, int nth) {
    rows_job *j = ctx;
    int64_t lo, hi;
    avx_split(j->rows, tid, nth, 1, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) j->fn(j->ctx, r, j->scratch[tid]);
}

qvl_status avx_for_rows(qvl_backend *be, int64_t rows, int64_t scratch_len, avx_row_fn fn,
                        void *ctx) {
    int nth = avx_pool_size(be->pool);
    float *bufs[64] = {0};
    if (nth > 64) nth = 64;
    if (rows <= 1) nth = 1; /* one row (decode's norms): no hand-off to the other threads */
    qvl_status s = QVL_OK;
    for (int t = 0; t < nth; t++)
        if (!(bufs[t] = avx_scratch(scratch_len))) s = QVL_E_NOMEM;
    if (s == QVL_OK) {
        rows_job j = {rows, scratch_len, fn, ctx, bufs};
        if (nth == 1) rows_worker(&j, 0, 1);
        else avx_pool_run(be->pool, rows_worker, &j);
    }
    for (int t = 0; t < nth; t++) free(bufs[t]);
    return s;
}
