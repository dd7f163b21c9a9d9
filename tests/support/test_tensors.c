/* Host tensors for the backend tests: see test_tensors.h. */
#include "test_tensors.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/dtype.h"

/* ---- allocations ---- */

/* Enough for the largest test (cpu_avx2's thread cases); a test that needs more fails. */
#define MAX_ALLOCS 4096
static void *allocs[MAX_ALLOCS];
static int n_allocs;

void *tt_keep(void *p) {
    assert_non_null(p);
    assert_true(n_allocs < MAX_ALLOCS);
    allocs[n_allocs++] = p;
    return p;
}

int tt_free_all(void **state) {
    (void)state;
    for (int i = 0; i < n_allocs; i++) free(allocs[i]);
    n_allocs = 0;
    return 0;
}

/* ---- sizes and descriptors ---- */

size_t tt_elem_bytes(qvl_dtype dt) {
    return dt == QVL_F32 || dt == QVL_I32 ? 4 : 2;
}

size_t tt_storage_bytes(qvl_dtype dt, int64_t n) {
    if (qvl_dtype_is_quant(dt)) {
        int64_t be = (int64_t)qvl_dtype_block_elems(dt);
        return (size_t)((n + be - 1) / be) * qvl_dtype_block_bytes(dt);
    }
    return (size_t)n * tt_elem_bytes(dt);
}

/* Block-dtype (q8_0, q4_k, q6_k) offsets are taken in whole blocks: views start on a block
 * boundary. */
size_t tt_offset_bytes(qvl_dtype dt, int64_t off) {
    if (qvl_dtype_is_quant(dt))
        return (size_t)(off / (int64_t)qvl_dtype_block_elems(dt)) * qvl_dtype_block_bytes(dt);
    return (size_t)off * tt_elem_bytes(dt);
}

int64_t tt_nelem(const qvl_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
    return n;
}

void tt_set_desc(qvl_tensor *t, qvl_dtype dt, int ndim, const int64_t *shape,
                 const int64_t *stride) {
    t->desc.dtype = dt;
    t->desc.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        t->desc.shape[i] = i < ndim ? shape[i] : 1;
        t->desc.stride[i] = i < ndim ? stride[i] : 1;
    }
}

/* ---- tensors ---- */

static bool misaligned;

void tt_set_misaligned(bool on) {
    misaligned = on;
}

qvl_tensor *tt_mk(qvl_dtype dt, int ndim, const int64_t *shape) {
    qvl_tensor *t = tt_keep(calloc(1, sizeof *t));
    int64_t stride[QVL_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = n;
        n *= shape[i];
    }
    tt_set_desc(t, dt, ndim, shape, stride);
    if (misaligned) { /* 8 spare bytes; start one element (q8_0: 2 bytes) in */
        char *mem = tt_keep(calloc(1, tt_storage_bytes(dt, n) + 8));
        t->data = mem + tt_elem_bytes(dt);
    } else {
        t->data = tt_keep(calloc(1, tt_storage_bytes(dt, n)));
    }
    return t;
}

qvl_tensor *tt_view(const qvl_tensor *base, int ndim, const int64_t *shape,
                    const int64_t *stride, int64_t offset) {
    qvl_tensor *t = tt_keep(calloc(1, sizeof *t));
    tt_set_desc(t, base->desc.dtype, ndim, shape, stride);
    t->data = (char *)base->data + tt_offset_bytes(base->desc.dtype, offset);
    return t;
}

qvl_tensor *tt_f32_of(int ndim, const int64_t *shape, const float *values) {
    qvl_tensor *t = tt_mk(QVL_F32, ndim, shape);
    memcpy(t->data, values, (size_t)tt_nelem(&t->desc) * sizeof(float));
    return t;
}

qvl_tensor *tt_i32_of(int ndim, const int64_t *shape, const int32_t *values) {
    qvl_tensor *t = tt_mk(QVL_I32, ndim, shape);
    memcpy(t->data, values, (size_t)tt_nelem(&t->desc) * sizeof(int32_t));
    return t;
}

/* ---- element values ---- */

double tt_value(const qvl_tensor *t, int64_t off) {
    switch (t->desc.dtype) {
    case QVL_F32: return ((const float *)t->data)[off];
    case QVL_F16: return qvl_f16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_BF16: return qvl_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_I32: return ((const int32_t *)t->data)[off];
    case QVL_Q8_0: {
        const qvl_block_q8_0 *b = (const qvl_block_q8_0 *)t->data + off / 32;
        return (double)qvl_f16_to_f32(b->d) * b->qs[off % 32];
    }
    case QVL_Q4_K:
        return qvl_q4_k_elem((const qvl_block_q4_k *)t->data + off / QVL_QK_K, (int)(off % QVL_QK_K));
    case QVL_Q6_K:
        return qvl_q6_k_elem((const qvl_block_q6_k *)t->data + off / QVL_QK_K, (int)(off % QVL_QK_K));
    default: fail_msg("bad dtype %d", (int)t->desc.dtype); return 0;
    }
}

double tt_at(const qvl_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->desc.ndim; i++) off += idx[i] * t->desc.stride[i];
    return tt_value(t, off);
}

double tt_at_flat(const qvl_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->desc.ndim - 1; d >= 0; d--) {
        off += (i % t->desc.shape[d]) * t->desc.stride[d];
        i /= t->desc.shape[d];
    }
    return tt_value(t, off);
}

/* ---- random data ---- */

static uint32_t rng = 12345u;

void tt_seed(uint32_t seed) {
    rng = seed;
}

float tt_frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}

void tt_fill_random(qvl_dtype dt, void *data, int64_t n, float lo, float hi) {
    if (dt == QVL_Q8_0) {
        qvl_block_q8_0 *b = data;
        for (int64_t i = 0; i < (n + 31) / 32; i++) {
            b[i].d = qvl_f32_to_f16(tt_frand(0.002f, 0.01f));
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(int)tt_frand(-127.0f, 127.99f);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = tt_frand(lo, hi);
        switch (dt) {
        case QVL_F32: ((float *)data)[i] = v; break;
        case QVL_F16: ((uint16_t *)data)[i] = qvl_f32_to_f16(v); break;
        case QVL_BF16: ((uint16_t *)data)[i] = qvl_f32_to_bf16(v); break;
        case QVL_I32: ((int32_t *)data)[i] = (int32_t)v; break;
        default: fail_msg("tt_fill_random: bad dtype %d", (int)dt);
        }
    }
}

qvl_tensor *tt_rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    qvl_tensor *t = tt_mk(dt, ndim, shape);
    tt_fill_random(dt, t->data, tt_nelem(&t->desc), lo, hi);
    return t;
}

/* ---- nodes ---- */

qvl_node tt_node(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src) {
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    if (p) n.params = *p;
    n.n_src = qvl_op_max_inputs(op);
    for (uint32_t i = 0; i < QVL_MAX_SRC; i++) n.src[i] = src[i];
    n.dst = dst;
    n.name = "t";
    return n;
}
