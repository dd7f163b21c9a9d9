/* The batched decode ops (STORE_SLOT_ROWS, ATTENTION_SLOTS) taken apart into one
 * STORE_ROWS_AT or ATTENTION node per row, for backends that run them a row at a time: row i
 * is exactly the single-sequence node over slot slot[i] of the pool, so it gives the same
 * result as the single-sequence decode step by construction. */
#include "qvl/backend_helpers.h"
#include "qvl/tensor_access.h"

/* The pool's slot s [S, ...] -> [...]: drop dim 0, start s slots further (a slot is whole
 * blocks: the innermost dim holds whole blocks, checked by the contract). */
static void slot_view(const qvl_tensor *pool, int64_t s, qvl_tensor *out) {
    const qvl_tensor_desc *d = &pool->desc;
    out->desc.dtype = d->dtype;
    out->desc.ndim = d->ndim - 1;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        out->desc.shape[i] = i + 1 < d->ndim ? d->shape[i + 1] : 1;
        out->desc.stride[i] = i + 1 < d->ndim ? d->stride[i + 1] : 1;
    }
    out->data = (char *)pool->data + qvl_dtype_offset_bytes(d->dtype, s * d->stride[0]);
}

/* Row i of x [N, ...] as [1, ...]. */
static void row_view(const qvl_tensor *x, int64_t i, qvl_tensor *out) {
    *out = *x;
    out->desc.shape[0] = 1;
    out->data = (char *)x->data + qvl_dtype_offset_bytes(x->desc.dtype, i * x->desc.stride[0]);
}

static int32_t row_value(const qvl_tensor *t, int64_t i) {
    return qvl_elem_get_i32(t, i * t->desc.stride[0]);
}

qvl_status qvl_slot_row_node(const char *backend, const qvl_node *n, int64_t i,
                             qvl_slot_row *out, qvl_error *err) {
    const bool store = n->op == QVL_OP_STORE_SLOT_ROWS;
    const qvl_tensor *pool = n->src[store ? 0 : 1], *slots = n->src[store ? 2 : 3];
    const qvl_tensor *ats = n->src[store ? 3 : 4];
    const int64_t S = pool->desc.shape[0], R = pool->desc.shape[1];
    const int64_t s = row_value(slots, i);
    out->at_value = row_value(ats, i);
    if (s < 0 || s >= S)
        return qvl_node_fail(backend, n, err, QVL_E_INVALID,
                             "row %lld: slot = %lld is outside [0, %lld)", (long long)i,
                             (long long)s, (long long)S);
    qvl_status st = qvl_check_at(backend, n, out->at_value, 1, R, store ? "rows" : "queries", err);
    if (st != QVL_OK) return st;
    qvl_desc_init(&out->at.desc, QVL_I32, 1, (const int64_t[]){1});
    out->at.data = &out->at_value;
    out->node = *n;
    for (int k = 0; k < QVL_MAX_SRC; k++) out->node.src[k] = NULL;
    if (store) {
        slot_view(pool, s, &out->t[0]);   /* dst, and the output aliasing it */
        row_view(n->src[1], i, &out->t[1]);
        out->node.op = QVL_OP_STORE_ROWS_AT;
        out->node.n_src = 3;
        out->node.src[0] = &out->t[0];
        out->node.src[1] = &out->t[1];
        out->node.src[2] = &out->at;
        out->node.dst = &out->t[0];
        return QVL_OK;
    }
    row_view(n->src[0], i, &out->t[0]);
    slot_view(n->src[1], s, &out->t[1]);
    slot_view(n->src[2], s, &out->t[2]);
    row_view(n->dst, i, &out->t[3]);
    out->node.op = QVL_OP_ATTENTION;
    out->node.n_src = 4;
    for (int k = 0; k < 3; k++) out->node.src[k] = &out->t[k];
    out->node.src[3] = &out->at;
    out->node.dst = &out->t[3];
    return QVL_OK;
}

qvl_status qvl_run_slot_rows(const char *backend, qvl_backend *be, const qvl_node *n,
                             qvl_kernel_fn row_kernel, qvl_error *err) {
    const int64_t N = n->src[n->op == QVL_OP_STORE_SLOT_ROWS ? 1 : 0]->desc.shape[0];
    for (int64_t i = 0; i < N; i++) {
        qvl_slot_row r;
        qvl_status st = qvl_slot_row_node(backend, n, i, &r, err);
        if (st == QVL_OK) st = row_kernel(be, &r.node, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}
