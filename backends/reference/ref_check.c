/* Shared node checks (see ref_check.h). */
#include "ref_check.h"

#include <stdarg.h>
#include <stdio.h>

#include "qvl/checked.h"
#include "qvl/dtype.h"

qvl_status ref_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *fmt, ...) {
    if (!err) return s;
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (n->name)
        return qvl_fail(err, s, "reference: %s '%s': %s", qvl_op_name(n->op), n->name, what);
    return qvl_fail(err, s, "reference: %s: %s", qvl_op_name(n->op), what);
}

const qvl_tensor *ref_src(const qvl_node *n, uint32_t slot) {
    if (slot >= n->n_src || slot >= QVL_MAX_SRC) return NULL;
    return n->src[slot];
}

/* Shapes and strides the kernels can walk without overflowing int64 offsets; q8_0 also
 * needs the block layout of tensor.h. */
static qvl_status check_layout(const qvl_node *n, const char *what, const qvl_tensor_desc *d,
                               qvl_error *err) {
    if (d->ndim < 1 || d->ndim > QVL_MAX_DIMS)
        return ref_fail(n, err, QVL_E_SHAPE, "%s has %d dims (1..%d allowed)", what, d->ndim,
                        QVL_MAX_DIMS);
    int64_t nelem = 1, span = 0;
    for (int i = 0; i < d->ndim; i++) {
        int64_t extent;
        if (d->shape[i] < 1 || !qvl_mul_i64(nelem, d->shape[i], &nelem))
            return ref_fail(n, err, QVL_E_SHAPE, "%s has a bad size %lld in dim %d", what,
                            (long long)d->shape[i], i);
        int64_t stride = d->stride[i] < 0 ? -d->stride[i] : d->stride[i];
        if (!qvl_mul_i64(stride, d->shape[i] - 1, &extent) || !qvl_add_i64(span, extent, &span))
            return ref_fail(n, err, QVL_E_SHAPE, "%s has strides that overflow", what);
    }
    if (d->dtype == QVL_Q8_0) {
        if (d->stride[d->ndim - 1] != 1 && d->shape[d->ndim - 1] != 1)
            return ref_fail(n, err, QVL_E_UNSUPPORTED, "%s is q8_0 with innermost stride %lld",
                            what, (long long)d->stride[d->ndim - 1]);
        for (int i = 0; i < d->ndim - 1; i++)
            if (d->stride[i] < 0 || d->stride[i] % QVL_Q8_0_BLOCK != 0)
                return ref_fail(n, err, QVL_E_UNSUPPORTED,
                                "%s is q8_0 with stride %lld in dim %d (not a multiple of 32)",
                                what, (long long)d->stride[i], i);
    }
    return QVL_OK;
}

qvl_status ref_check_tensor(const qvl_node *n, const qvl_tensor *t, const char *what,
                            unsigned dtypes, int min_ndim, int max_ndim, qvl_error *err) {
    const qvl_tensor_desc *d = &t->desc;
    if (!qvl_dtype_valid((int)d->dtype) || !(dtypes & REF_DT(d->dtype)))
        return ref_fail(n, err, QVL_E_UNSUPPORTED, "%s has dtype %s, which is not supported here",
                        what, qvl_dtype_name(d->dtype));
    if (d->ndim < min_ndim || d->ndim > max_ndim)
        return ref_fail(n, err, QVL_E_SHAPE, "%s must have %d..%d dims, not %d", what, min_ndim,
                        max_ndim, d->ndim);
    return check_layout(n, what, d, err);
}

qvl_status ref_need(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                    int min_ndim, int max_ndim, qvl_error *err) {
    const qvl_tensor *t = ref_src(n, slot);
    if (!t) return ref_fail(n, err, QVL_E_INVALID, "input %s (slot %u) is missing", what, slot);
    return ref_check_tensor(n, t, what, dtypes, min_ndim, max_ndim, err);
}

qvl_status ref_maybe(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                     int min_ndim, int max_ndim, qvl_error *err) {
    const qvl_tensor *t = ref_src(n, slot);
    return t ? ref_check_tensor(n, t, what, dtypes, min_ndim, max_ndim, err) : QVL_OK;
}

qvl_status ref_check_at(const qvl_node *n, uint32_t slot, qvl_error *err) {
    qvl_status s = ref_need(n, slot, "at", REF_INDEX, 1, 1, err);
    if (s == QVL_OK && n->src[slot]->desc.shape[0] != 1)
        return ref_fail(n, err, QVL_E_SHAPE, "at must hold one row count, has %lld values",
                        (long long)n->src[slot]->desc.shape[0]);
    return s;
}

qvl_status ref_absent(const qvl_node *n, uint32_t slot, const char *what, qvl_error *err) {
    if (ref_src(n, slot))
        return ref_fail(n, err, QVL_E_INVALID, "input %s (slot %u) must be empty here", what,
                        slot);
    return QVL_OK;
}

qvl_status ref_vector_len(const qvl_node *n, uint32_t slot, const char *what, int64_t len,
                          qvl_error *err) {
    const qvl_tensor *t = ref_src(n, slot);
    if (t && t->desc.shape[0] != len)
        return ref_fail(n, err, QVL_E_SHAPE, "%s has length %lld, expected %lld", what,
                        (long long)t->desc.shape[0], (long long)len);
    return QVL_OK;
}

qvl_status ref_output(const qvl_node *n, unsigned dtypes, int ndim, const int64_t *shape,
                      qvl_error *err) {
    if (!n->dst) return ref_fail(n, err, QVL_E_INVALID, "no output tensor");
    qvl_status s = ref_check_tensor(n, n->dst, "output", dtypes, 1, QVL_MAX_DIMS, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *d = &n->dst->desc;
    bool same = d->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = d->shape[i] == shape[i];
    if (!same) {
        char want[96], got[96];
        qvl_tensor_desc expect = *d;
        expect.ndim = ndim;
        for (int i = 0; i < ndim && i < QVL_MAX_DIMS; i++) expect.shape[i] = shape[i];
        return ref_fail(n, err, QVL_E_SHAPE, "output shape %s, expected %s",
                        qvl_desc_str(d, got, sizeof got), qvl_desc_str(&expect, want, sizeof want));
    }
    if (!ref_is_contiguous(d))
        return ref_fail(n, err, QVL_E_UNSUPPORTED, "output must be contiguous");
    return QVL_OK;
}

bool ref_is_contiguous(const qvl_tensor_desc *d) {
    int64_t expect = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] != 1 && d->stride[i] != expect) return false;
        expect *= d->shape[i];
    }
    return true;
}

bool ref_same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim - 1; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

qvl_status ref_begin(const qvl_node *n, ref_check_fn check, qvl_error *err) {
    qvl_status s = check(n, err);
    if (s != QVL_OK) return s;
    for (uint32_t i = 0; i < n->n_src && i < QVL_MAX_SRC; i++)
        if (n->src[i] && !n->src[i]->data)
            return ref_fail(n, err, QVL_E_INVALID, "input %u has no memory", i);
    if (!n->dst || !n->dst->data) return ref_fail(n, err, QVL_E_INVALID, "output has no memory");
    return QVL_OK;
}
