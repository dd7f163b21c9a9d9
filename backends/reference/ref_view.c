/* Data movement: GET_ROWS (table lookup), CONT (contiguous copy), STORE_ROWS (KV cache
 * write), and the check for VIEW (which has no kernel). */
#include <string.h>

#include "qvl/dtype.h"
#include "ref_access.h"
#include "ref_check.h"
#include "ref_math.h"
#include "ref_ops.h"

/* ---- GET_ROWS(table [V, D], ids [N] i32) -> [N, D] ---- */

qvl_status ref_check_get_rows(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = ref_need(n, 0, "table", REF_READABLE, 2, 2, err)) ||
        (s = ref_need(n, 1, "ids", REF_INDEX, 1, 1, err)))
        return s;
    int64_t shape[2] = {n->src[1]->desc.shape[0], n->src[0]->desc.shape[1]};
    return ref_output(n, REF_DT(QVL_F32), 2, shape, err);
}

qvl_status ref_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_get_rows, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *table = n->src[0], *ids = n->src[1];
    int64_t V = table->desc.shape[0], D = table->desc.shape[1], N = ids->desc.shape[0];
    float *out = n->dst->data;
    for (int64_t i = 0; i < N; i++) {
        int32_t id = ref_get_i32(ids, i * ids->desc.stride[0]);
        if (id < 0 || id >= V) /* ids are data: checked here, not trusted */
            return ref_fail(n, err, QVL_E_INVALID, "id %d at position %lld is outside [0, %lld)",
                            (int)id, (long long)i, (long long)V);
        ref_read_row(table, id, out + i * D);
    }
    return QVL_OK;
}

/* ---- CONT(x) -> contiguous copy, same dtype ---- */

qvl_status ref_check_cont(const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_need(n, 0, "x", REF_ANY, 1, 4, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    if (x->dtype == QVL_Q8_0 && ref_row_len(x) % QVL_Q8_0_BLOCK != 0)
        return ref_fail(n, err, QVL_E_UNSUPPORTED, "q8_0 rows of %lld are not whole blocks",
                        (long long)ref_row_len(x));
    return ref_output(n, REF_DT(x->dtype), x->ndim, x->shape, err);
}

/* q8_0 rows are copied block by block (the layout rule makes each row whole blocks). */
static void cont_q8_0(const qvl_tensor *x, unsigned char *out) {
    int64_t len = ref_row_len(&x->desc), blocks = len / QVL_Q8_0_BLOCK;
    size_t row_bytes = (size_t)blocks * sizeof(qvl_block_q8_0);
    for (int64_t r = 0; r < ref_n_rows(&x->desc); r++) {
        int64_t first_block = ref_row_offset(&x->desc, r) / QVL_Q8_0_BLOCK;
        memcpy(out + (size_t)r * row_bytes,
               (const unsigned char *)x->data + first_block * (int64_t)sizeof(qvl_block_q8_0),
               row_bytes);
    }
}

qvl_status ref_cont(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_cont, err);
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
    ref_align4(&x->desc, shape, stride);
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

/* What STORE_ROWS and STORE_ROWS_AT check alike: a contiguous dst whose rows match src's. */
static qvl_status check_store(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = ref_need(n, 0, "dst", REF_WRITABLE, 1, 4, err)) ||
        (s = ref_need(n, 1, "src", REF_READABLE, 1, 4, err)))
        return s;
    const qvl_tensor_desc *dst = &n->src[0]->desc, *src = &n->src[1]->desc;
    if (!ref_is_contiguous(dst))
        return ref_fail(n, err, QVL_E_UNSUPPORTED, "dst must be contiguous");
    bool same_rows = dst->ndim == src->ndim;
    for (int i = 1; same_rows && i < dst->ndim; i++) same_rows = dst->shape[i] == src->shape[i];
    if (!same_rows)
        return ref_fail(n, err, QVL_E_SHAPE, "src rows do not match dst rows");
    if (src->shape[0] > dst->shape[0])
        return ref_fail(n, err, QVL_E_SHAPE, "%lld src rows do not fit in %lld",
                        (long long)src->shape[0], (long long)dst->shape[0]);
    return QVL_OK;
}

qvl_status ref_check_store_rows(const qvl_node *n, qvl_error *err) {
    qvl_status s = check_store(n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *dst = &n->src[0]->desc, *src = &n->src[1]->desc;
    int64_t off = n->params.store.offset;
    if (off < 0 || off > dst->shape[0] - src->shape[0])
        return ref_fail(n, err, QVL_E_SHAPE, "rows [%lld, %lld + %lld) do not fit in %lld",
                        (long long)off, (long long)off, (long long)src->shape[0],
                        (long long)dst->shape[0]);
    int64_t shape[QVL_MAX_DIMS];
    for (int i = 0; i < dst->ndim; i++) shape[i] = dst->shape[i];
    shape[0] = off + src->shape[0];
    return ref_output(n, REF_DT(dst->dtype), dst->ndim, shape, err);
}

/* Copies src into dst from row `first` on (checked by the callers to fit). */
static void store_from(const qvl_node *n, int64_t first) {
    const qvl_tensor *src = n->src[1];
    int64_t shape[4], stride[4];
    ref_align4(&src->desc, shape, stride);
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
                    ref_set(n->dst, o++, ref_get(src, off));
                }
}

qvl_status ref_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_store_rows, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return ref_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    store_from(n, n->params.store.offset);
    return QVL_OK;
}

/* ---- STORE_ROWS_AT(dst [R, ...], src [N, ...], at [1]) -> all of dst ---- */

qvl_status ref_check_store_rows_at(const qvl_node *n, qvl_error *err) {
    qvl_status s = check_store(n, err);
    if (s == QVL_OK) s = ref_check_at(n, 2, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *dst = &n->src[0]->desc;
    return ref_output(n, REF_DT(dst->dtype), dst->ndim, dst->shape, err);
}

qvl_status ref_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_store_rows_at, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return ref_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    int64_t at = ref_get_i32(n->src[2], 0);
    int64_t rows = n->src[0]->desc.shape[0], count = n->src[1]->desc.shape[0];
    if (at < 0 || at > rows - count)
        return ref_fail(n, err, QVL_E_INVALID, "at = %lld: rows [%lld, %lld) do not fit in %lld",
                        (long long)at, (long long)at, (long long)(at + count), (long long)rows);
    store_from(n, at);
    return QVL_OK;
}

/* ---- VIEW: no kernel; the reference kernels read any view the descriptor can express ---- */

qvl_status ref_check_view(const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_need(n, 0, "x", REF_ANY, 1, 4, err);
    if (s != QVL_OK) return s;
    if (!n->dst) return ref_fail(n, err, QVL_E_INVALID, "no output tensor");
    return ref_check_tensor(n, n->dst, "output", REF_DT(n->src[0]->desc.dtype), 1, 4, err);
}
