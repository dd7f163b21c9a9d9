/* Data movement: GET_ROWS (embedding lookup), CONT (contiguous copy), STORE_ROWS (KV cache
 * write) and the row scatters SET_ROWS / ADD_ROWS (image features into the token rows). Rows are converted with vector code where the innermost stride is 1. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "avx_kernels.h"
#include "qvl/dtype.h"

/* ---- GET_ROWS(table [V, D], ids [N]) -> [N, D] ---- */

qvl_status avx_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be; /* a handful of rows per token: not worth waking threads */
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *table = n->src[0], *ids = n->src[1];
    int64_t V = table->desc.shape[0], D = table->desc.shape[1], N = ids->desc.shape[0];
    /* ids are data: all checked before any row is read */
    s = qvl_check_indices(AVX_NAME, n, ids->data, N, ids->desc.stride[0], V, "id", err);
    if (s != QVL_OK) return s;
    float *out = n->dst->data;
    for (int64_t i = 0; i < N; i++) {
        int64_t id = qvl_elem_get_i32(ids, i * ids->desc.stride[0]);
        avx_gather(table, id * table->desc.stride[0], table->desc.stride[1], D, out + i * D);
    }
    return QVL_OK;
}

/* ---- CONT(x) -> contiguous copy, same dtype ---- */

qvl_status avx_cont(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    const qvl_tensor_desc *d = &x->desc;
    int64_t rows = avx_n_rows(d), len = avx_row_len(d), step = d->stride[d->ndim - 1];
    unsigned char *out = n->dst->data;
    const unsigned char *in = x->data;
    if (d->dtype == QVL_Q8_0) { /* whole blocks per row (checked): copy them */
        size_t row_bytes = (size_t)(len / QVL_Q8_0_BLOCK) * sizeof(qvl_block_q8_0);
        for (int64_t r = 0; r < rows; r++)
            memcpy(out + (size_t)r * row_bytes,
                   in + avx_row_offset(d, r) / QVL_Q8_0_BLOCK * (int64_t)sizeof(qvl_block_q8_0),
                   row_bytes);
        return QVL_OK;
    }
    size_t size = qvl_dtype_block_bytes(d->dtype);
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *src = in + avx_row_offset(d, r) * (int64_t)size;
        unsigned char *dst = out + (size_t)(r * len) * size;
        if (step == 1 || len == 1) {
            memcpy(dst, src, (size_t)len * size);
        } else {
            for (int64_t i = 0; i < len; i++) memcpy(dst + (size_t)i * size, src + i * step * (int64_t)size, size);
        }
    }
    return QVL_OK;
}

/* ---- STORE_ROWS(dst [R, ...], src [N, ...]) -> dst rows [0, off + N) ---- */

/* Writes src into the contiguous dst from row `first` on (checked by the callers to fit). */
static qvl_status store_from(const qvl_node *n, int64_t first, qvl_error *err) {
    if (n->dst->data != n->src[0]->data)
        return avx_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    const qvl_tensor *src = n->src[1];
    qvl_dtype dt = n->src[0]->desc.dtype;
    int64_t rows = avx_n_rows(&src->desc), len = avx_row_len(&src->desc);
    /* dst is contiguous with src's row shape: src row r lands at element (off * row_size) +
     * r * len of dst, where a dst "row" (dim 0) holds row_size elements. For a q8_0 dst, len
     * is whole blocks (the contract), so each row starts on a block and is quantised by the
     * one q8_0 quantiser of dtype.h: the same bytes as every other backend. */
    int64_t row_size = 1;
    for (int i = 1; i < src->desc.ndim; i++) row_size *= src->desc.shape[i];
    unsigned char *base = n->dst->data;
    float *tmp = avx_scratch(len);
    if (!tmp) return avx_fail(n, err, QVL_E_NOMEM, "out of memory for a row of %lld", (long long)len);
    for (int64_t r = 0; r < rows; r++) {
        const float *row = avx_row(src, r, tmp);
        avx_store_f32(dt, row, base + qvl_dtype_offset_bytes(dt, first * row_size + r * len), len);
    }
    free(tmp);
    return QVL_OK;
}

qvl_status avx_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : store_from(n, n->params.store.offset, err);
}

/* ---- STORE_ROWS_AT(dst [R, ...], src [N, ...], at [1]) -> all of dst ---- */

qvl_status avx_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    int64_t at = qvl_elem_get_i32(n->src[2], 0);
    s = qvl_check_at(AVX_NAME, n, at, n->src[1]->desc.shape[0], n->src[0]->desc.shape[0], "rows",
                     err);
    return s != QVL_OK ? s : store_from(n, at, err);
}

/* ---- SET_ROWS / ADD_ROWS(x [N, D], idx [K], src [K, D]) -> a copy of x, rows scattered ---- */

static qvl_status scatter_rows(const qvl_node *n, bool add, qvl_error *err) {
    const qvl_tensor *x = n->src[0], *idx = n->src[1], *src = n->src[2];
    const int64_t N = x->desc.shape[0], D = x->desc.shape[1], K = idx->desc.shape[0];
    float *out = n->dst->data;
    /* every index is checked before anything is written: no half-done output on error */
    qvl_status s = qvl_check_indices(AVX_NAME, n, idx->data, K, idx->desc.stride[0], N,
                                     "row index", err);
    if (s != QVL_OK) return s;
    if (out != x->data || !qvl_desc_is_contiguous(&x->desc)) /* (in place: nothing to copy) */
        for (int64_t r = 0; r < N; r++)
            avx_gather(x, r * x->desc.stride[0], x->desc.stride[1], D, out + r * D);
    float *row = avx_scratch(D);
    if (!row) return avx_fail(n, err, QVL_E_NOMEM, "out of memory for a row of %lld", (long long)D);
    for (int64_t k = 0; k < K; k++) { /* in k order: the last of repeated indices wins / all add */
        float *dst = out + (int64_t)qvl_elem_get_i32(idx, k * idx->desc.stride[0]) * D;
        avx_gather(src, k * src->desc.stride[0], src->desc.stride[1], D, row);
        if (!add) {
            memcpy(dst, row, (size_t)D * sizeof *dst);
            continue;
        }
        int64_t d = 0;
        for (; d + 8 <= D; d += 8)
            _mm256_storeu_ps(dst + d, _mm256_add_ps(_mm256_loadu_ps(dst + d), _mm256_loadu_ps(row + d)));
        for (; d < D; d++) dst[d] += row[d];
    }
    free(row);
    return QVL_OK;
}

qvl_status avx_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : scatter_rows(n, false, err);
}

qvl_status avx_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : scatter_rows(n, true, err);
}
