/* Tensor descriptors: contiguous layout, element counts, storage spans, printing. */
#include "qvl/tensor.h"

#include <stdio.h>

#include "qvl/checked.h"

bool qvl_desc_init(qvl_tensor_desc *d, qvl_dtype dtype, int ndim, const int64_t *shape) {
    if (!d || !shape || ndim < 1 || ndim > QVL_MAX_DIMS) return false;
    if (!qvl_dtype_valid((int)dtype)) return false;
    qvl_tensor_desc t;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        t.shape[i] = 1;
        t.stride[i] = 1;
    }
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] < 1) return false;
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        if (!qvl_mul_i64(stride, shape[i], &stride)) return false; /* element count overflows */
    }
    *d = t;
    return true;
}

int64_t qvl_desc_nelem(const qvl_tensor_desc *d) {
    if (!d || d->ndim < 1 || d->ndim > QVL_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 1 || !qvl_mul_i64(n, d->shape[i], &n)) return -1;
    }
    return n;
}

/* Contiguous means element i sits at offset i. Dims of size 1 never move, so their stride
 * does not matter (a [1, K] slice of a larger matrix is still contiguous). */
bool qvl_desc_is_contiguous(const qvl_tensor_desc *d) {
    if (!d || d->ndim < 1 || d->ndim > QVL_MAX_DIMS) return false;
    int64_t expect = 1;
    for (int i = d->ndim - 1; i >= 0; i--) {
        if (d->shape[i] < 1) return false;
        if (d->shape[i] > 1 && d->stride[i] != expect) return false;
        if (!qvl_mul_i64(expect, d->shape[i], &expect)) return false;
    }
    return true;
}

bool qvl_desc_span_bytes(const qvl_tensor_desc *d, size_t *out) {
    if (!d || d->ndim < 1 || d->ndim > QVL_MAX_DIMS || !qvl_dtype_valid((int)d->dtype)) return false;
    int64_t max_off = 0;
    const int64_t block = (int64_t)qvl_dtype_block_elems(d->dtype);
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] < 1) return false;
        if (d->shape[i] == 1) continue; /* stride unused */
        if (d->stride[i] < 0) return false;
        if (block > 1) {
            /* Blocks are indivisible: rows run along the innermost dim, every other step
             * moves by whole blocks. */
            bool inner = i == d->ndim - 1;
            if (inner ? d->stride[i] != 1 : d->stride[i] % block != 0) return false;
        }
        int64_t step;
        if (!qvl_mul_i64(d->shape[i] - 1, d->stride[i], &step)) return false;
        if (!qvl_add_i64(max_off, step, &max_off)) return false;
    }
    size_t bytes;
    if (block > 1) {
        /* Through the end of the block holding the last element. */
        size_t blocks = (size_t)(max_off / block) + 1;
        if (!qvl_mul_size(blocks, qvl_dtype_block_bytes(d->dtype), &bytes)) return false;
    } else {
        if (!qvl_mul_size((size_t)max_off, qvl_dtype_block_bytes(d->dtype), &bytes)) return false;
        if (!qvl_add_size(bytes, qvl_dtype_block_bytes(d->dtype), &bytes)) return false;
    }
    if (out) *out = bytes;
    return true;
}

/* Negative offsets have no byte position: they map to 0 (callers validate offsets first). */
size_t qvl_dtype_offset_bytes(qvl_dtype t, int64_t elem_offset) {
    if (elem_offset <= 0) return 0;
    uint64_t off = (uint64_t)elem_offset, block = qvl_dtype_block_elems(t);
    if (block > 1) return (size_t)(off / block * qvl_dtype_block_bytes(t) + off % block);
    return (size_t)(off * qvl_dtype_block_bytes(t));
}

bool qvl_desc_same_shape(const qvl_tensor_desc *a, const qvl_tensor_desc *b) {
    if (!a || !b || a->ndim != b->ndim || a->ndim < 1 || a->ndim > QVL_MAX_DIMS) return false;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != b->shape[i]) return false;
    }
    return true;
}

char *qvl_desc_str(const qvl_tensor_desc *d, char *buf, size_t size) {
    if (!buf || size == 0) return buf;
    if (!d) {
        snprintf(buf, size, "(none)");
        return buf;
    }
    int nd = d->ndim;
    if (nd < 1 || nd > QVL_MAX_DIMS) {
        snprintf(buf, size, "[ndim %d] %s", (int)d->ndim, qvl_dtype_name(d->dtype));
        return buf;
    }
    size_t pos = 0;
    buf[0] = '\0';
    for (int i = 0; i < nd && pos < size; i++) {
        int w = snprintf(buf + pos, size - pos, "%s%lld", i == 0 ? "[" : ", ",
                         (long long)d->shape[i]);
        if (w < 0) return buf;
        pos += (size_t)w;
    }
    if (pos < size) snprintf(buf + pos, size - pos, "] %s", qvl_dtype_name(d->dtype));
    return buf;
}
