/* Data movement: GET_ROWS (table lookup), CONT (contiguous copy), STORE_ROWS (KV cache
 * write). VIEW has no kernel: the executor aliases memory. */
#include <stdlib.h>
#include <string.h>

#include "qvl/dtype.h"
#include "ref_ops.h"
#include "ref_math.h"

/* ---- GET_ROWS(table [V, D], ids [N] i32) -> [N, D] ---- */

qvl_status ref_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *table = n->src[0], *ids = n->src[1];
    int64_t V = table->desc.shape[0], D = table->desc.shape[1], N = ids->desc.shape[0];
    /* ids are data: all checked before any row is read */
    s = qvl_check_indices(REF_NAME, n, ids->data, N, ids->desc.stride[0], V, "id", err);
    if (s != QVL_OK) return s;
    float *out = n->dst->data;
    for (int64_t i = 0; i < N; i++)
        qvl_tensor_read_row(table, qvl_elem_get_i32(ids, i * ids->desc.stride[0]), out + i * D);
    return QVL_OK;
}

/* ---- CONT(x) -> contiguous copy, same dtype ---- */

/* q8_0 rows are copied block by block (the layout rule makes each row whole blocks). */
static void cont_q8_0(const qvl_tensor *x, unsigned char *out) {
    int64_t len = qvl_desc_row_len(&x->desc), blocks = len / QVL_Q8_0_BLOCK;
    size_t row_bytes = (size_t)blocks * sizeof(qvl_block_q8_0);
    for (int64_t r = 0; r < qvl_desc_n_rows(&x->desc); r++) {
        int64_t first_block = qvl_desc_row_offset(&x->desc, r) / QVL_Q8_0_BLOCK;
        memcpy(out + (size_t)r * row_bytes,
               (const unsigned char *)x->data + first_block * (int64_t)sizeof(qvl_block_q8_0),
               row_bytes);
    }
}

qvl_status ref_cont(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    unsigned char *out = n->dst->data;
    if (x->desc.dtype == QVL_Q8_0) {
        cont_q8_0(x, out);
        return QVL_OK;
    }
    /* Other dtypes: copy each element's bytes unchanged. */
    size_t size = qvl_dtype_block_bytes(x->desc.dtype);
    const unsigned char *in = x->data;
    int64_t shape[4], stride[4];
    qvl_desc_align4(&x->desc, shape, stride);
    int64_t o = 0;
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++)
                for (int64_t i3 = 0; i3 < shape[3]; i3++) {
                    int64_t off = i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
                    memcpy(out + o * (int64_t)size, in + off * (int64_t)size, size);
                    o++;
                }
    return QVL_OK;
}

/* ---- STORE_ROWS(dst [R, ...], src [N, ...]) -> dst rows [0, off + N) ---- */

/* q8_0 dst: each innermost row of src read as f32 and quantised block by block with the
 * one quantiser (dtype.h), into the contiguous dst's element first * row_size + r * len. The
 * contract makes len a whole number of blocks, so every row starts on a block. */
static qvl_status store_q8_0(const qvl_node *n, int64_t first, qvl_error *err) {
    const qvl_tensor *src = n->src[1];
    int64_t len = qvl_desc_row_len(&src->desc), rows = qvl_desc_n_rows(&src->desc);
    int64_t row_size = 1;
    for (int i = 1; i < src->desc.ndim; i++) row_size *= src->desc.shape[i];
    float *row = ref_scratch(len);
    if (!row) return ref_fail(n, err, QVL_E_NOMEM, "out of memory for a row of %lld", (long long)len);
    for (int64_t r = 0; r < rows; r++) {
        qvl_tensor_read_row(src, r, row);
        int64_t elem = first * row_size + r * len;
        qvl_block_q8_0 *dst = (qvl_block_q8_0 *)n->dst->data + elem / QVL_Q8_0_BLOCK;
        qvl_quantize_row_q8_0(row, dst, len);
    }
    free(row);
    return QVL_OK;
}

/* Copies src into dst from row `first` on (checked by the callers to fit). */
static qvl_status store_from(const qvl_node *n, int64_t first, qvl_error *err) {
    if (n->dst->desc.dtype == QVL_Q8_0) return store_q8_0(n, first, err);
    const qvl_tensor *src = n->src[1];
    int64_t shape[4], stride[4];
    qvl_desc_align4(&src->desc, shape, stride);
    /* dst is contiguous and its rows match src's: src element number o (row-major) lands at
     * element off * row_size + o of dst. */
    int64_t row_size = 1;
    for (int i = 1; i < src->desc.ndim; i++) row_size *= src->desc.shape[i];
    int64_t o = first * row_size;
    for (int64_t i0 = 0; i0 < shape[0]; i0++)
        for (int64_t i1 = 0; i1 < shape[1]; i1++)
            for (int64_t i2 = 0; i2 < shape[2]; i2++)
                for (int64_t i3 = 0; i3 < shape[3]; i3++) {
                    int64_t off = i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
                    qvl_elem_set(n->dst, o++, qvl_elem_get(src, off));
                }
    return QVL_OK;
}

qvl_status ref_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return ref_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    return store_from(n, n->params.store.offset, err);
}

/* ---- STORE_ROWS_AT(dst [R, ...], src [N, ...], at [1]) -> all of dst ---- */

qvl_status ref_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return ref_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    int64_t at = qvl_elem_get_i32(n->src[2], 0);
    s = qvl_check_at(REF_NAME, n, at, n->src[1]->desc.shape[0], n->src[0]->desc.shape[0], "rows",
                     err);
    return s != QVL_OK ? s : store_from(n, at, err);
}

/* ---- VIEW: no kernel; the reference kernels read any view the descriptor can express ---- */
