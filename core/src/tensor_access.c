/* Element access through strides for every dtype (see tensor_access.h). */
#include "qvl/tensor_access.h"

#include <string.h>

#include "qvl/dtype.h"

/* q4_k / q6_k: element off is element off % 256 of super-block off / 256 (quant_k.c).
 * q8_0 storage: blocks of 32 elements, each an f16 scale followed by 32 int8 quants (34 bytes).
 * The layout rule in tensor.h (innermost stride 1, other strides multiples of 32) makes the
 * element offset of any element split cleanly into (block, position in block). */
static float get_q8_0(const void *data, int64_t off) {
    const unsigned char *block =
        (const unsigned char *)data + (off / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
    uint16_t d;
    memcpy(&d, block, sizeof d); /* blocks are not 2-byte aligned in general */
    int8_t q;
    memcpy(&q, block + sizeof d + off % QVL_Q8_0_BLOCK, 1);
    return qvl_f16_to_f32(d) * (float)q;
}

float qvl_elem_get(const qvl_tensor *t, int64_t off) {
    switch (t->desc.dtype) {
    case QVL_F32: return ((const float *)t->data)[off];
    case QVL_F16: return qvl_f16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_BF16: return qvl_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_Q8_0: return get_q8_0(t->data, off);
    case QVL_Q4_K:
        return qvl_q4_k_elem((const qvl_block_q4_k *)t->data + off / QVL_QK_K, (int)(off % QVL_QK_K));
    case QVL_Q6_K:
        return qvl_q6_k_elem((const qvl_block_q6_k *)t->data + off / QVL_QK_K, (int)(off % QVL_QK_K));
    default: return 0.0f; /* i32 holds no floats; the op contract never asks */
    }
}

void qvl_elem_set(qvl_tensor *t, int64_t off, float v) {
    switch (t->desc.dtype) {
    case QVL_F32: ((float *)t->data)[off] = v; break;
    case QVL_F16: ((uint16_t *)t->data)[off] = qvl_f32_to_f16(v); break;
    case QVL_BF16: ((uint16_t *)t->data)[off] = qvl_f32_to_bf16(v); break;
    default: break; /* outputs are float (the op contract) */
    }
}

int32_t qvl_elem_get_i32(const qvl_tensor *t, int64_t off) {
    return ((const int32_t *)t->data)[off];
}

void qvl_elem_gather(const qvl_tensor *t, int64_t off, int64_t step, int64_t n, float *out) {
    /* Whole super-blocks in a row (a q4_k/q6_k weight row): decode each block once instead of
     * its scales per element. Same values: both paths use the same arithmetic. */
    qvl_dtype dt = t->desc.dtype;
    if ((dt == QVL_Q4_K || dt == QVL_Q6_K) && step == 1 && off % QVL_QK_K == 0 &&
        n % QVL_QK_K == 0) {
        const char *base =
            (const char *)t->data + off / QVL_QK_K * (int64_t)qvl_dtype_block_bytes(dt);
        qvl_to_f32(dt, base, out, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = qvl_elem_get(t, off + i * step);
}

int64_t qvl_desc_row_len(const qvl_tensor_desc *d) {
    return d->shape[d->ndim - 1];
}

int64_t qvl_desc_n_rows(const qvl_tensor_desc *d) {
    int64_t rows = 1;
    for (int i = 0; i < d->ndim - 1; i++) rows *= d->shape[i];
    return rows;
}

int64_t qvl_desc_row_offset(const qvl_tensor_desc *d, int64_t r) {
    /* Peel the row number into leading-dimension indices, innermost leading dim first. */
    int64_t off = 0;
    for (int i = d->ndim - 2; i >= 0; i--) {
        off += (r % d->shape[i]) * d->stride[i];
        r /= d->shape[i];
    }
    return off;
}

bool qvl_desc_same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim - 1; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

void qvl_tensor_read_row(const qvl_tensor *t, int64_t r, float *out) {
    const qvl_tensor_desc *d = &t->desc;
    qvl_elem_gather(t, qvl_desc_row_offset(d, r), d->stride[d->ndim - 1], qvl_desc_row_len(d), out);
}

void qvl_tensor_read_rows(const qvl_tensor *t, float *out) {
    int64_t rows = qvl_desc_n_rows(&t->desc), len = qvl_desc_row_len(&t->desc);
    for (int64_t r = 0; r < rows; r++) qvl_tensor_read_row(t, r, out + r * len);
}

void qvl_desc_align4(const qvl_tensor_desc *d, int64_t shape[4], int64_t stride[4]) {
    int pad = 4 - d->ndim;
    for (int i = 0; i < 4; i++) {
        if (i < pad) {
            shape[i] = 1;
            stride[i] = 0;
        } else {
            shape[i] = d->shape[i - pad];
            stride[i] = shape[i] == 1 ? 0 : d->stride[i - pad];
        }
    }
}
