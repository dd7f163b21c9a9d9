/* Row scatter: SET_ROWS (replace rows of x at given indices) and ADD_ROWS (add to them). Both
 * produce a fresh copy of x; the indices are data, checked at run time. */
#include <string.h>

#include "ref_ops.h"

/* x [N, D] f32, idx [K] i32, src [K, D] f32 -> f32 [N, D]. */


static qvl_status scatter(const qvl_node *n, bool add, qvl_error *err) {
    const qvl_tensor *x = n->src[0], *idx = n->src[1], *src = n->src[2];
    const int64_t N = x->desc.shape[0], D = x->desc.shape[1], K = idx->desc.shape[0];
    float *out = n->dst->data;
    /* Check every index before writing, so a bad one leaves no half-done output behind. */
    qvl_status s = qvl_check_indices(REF_NAME, n, idx->data, K, idx->desc.stride[0], N,
                                     "row index", err);
    if (s != QVL_OK) return s;
    for (int64_t r = 0; r < N; r++) qvl_tensor_read_row(x, r, out + r * D);
    for (int64_t k = 0; k < K; k++) {
        int32_t r = qvl_elem_get_i32(idx, k * idx->desc.stride[0]);
        float *dst = out + (int64_t)r * D;
        const int64_t base = k * src->desc.stride[0];
        for (int64_t d = 0; d < D; d++) {
            float v = qvl_elem_get(src, base + d * src->desc.stride[1]);
            dst[d] = add ? dst[d] + v : v;
        }
    }
    return QVL_OK;
}

qvl_status ref_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : scatter(n, false, err);
}

qvl_status ref_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : scatter(n, true, err);
}
