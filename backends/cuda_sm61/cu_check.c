/* The limits of the cuda_sm61 kernels beyond the op contract (see cu_check.h). */
#include "cu_check.h"

#include "cu_device.h"
#include "cu_kernels.h"

/* MATMUL: batches and tile rows go into grid y/z dimensions. */
static qvl_status accepts_matmul(const qvl_node *n, qvl_error *err) {
    const qvl_tensor_desc *a = &n->src[0]->desc, *w = &n->src[1]->desc;
    if (w->ndim == 3 && a->shape[0] > CU_MAX_GRID_YZ)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "batch %lld is above this kernel's %d",
                       (long long)a->shape[0], CU_MAX_GRID_YZ);
    int64_t per_batch = qvl_desc_n_rows(a) / (w->ndim == 3 ? a->shape[0] : 1);
    if (per_batch > (int64_t)CU_MAX_GRID_YZ * 16)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "%lld rows are above this kernel's limit",
                       (long long)per_batch);
    return QVL_OK;
}

/* ATTENTION and NORM_ROPE keep a head in registers / shared memory, ROPE a table of its
 * pairs' frequencies in the kernel's parameters: a largest head size. */
static qvl_status accepts_head(const qvl_node *n, int64_t max_d, qvl_error *err) {
    int64_t D = n->src[0]->desc.shape[2];
    if (D > max_d)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "head size %lld is above this kernel's %lld",
                       (long long)D, (long long)max_d);
    return QVL_OK;
}

/* ROPE: the head size as NORM_ROPE's, and an index of x [N, H, D] that fits 31 bits. */
static qvl_status accepts_rope(const qvl_node *n, qvl_error *err) {
    qvl_status s = accepts_head(n, CU_NORM_ROPE_MAX_D, err);
    const qvl_tensor_desc *x = &n->src[0]->desc;
    int64_t elems = x->shape[0] * x->shape[1] * x->shape[2];
    if (s == QVL_OK && elems > 0x7fffffff)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "%lld elements are above this kernel's 2^31",
                       (long long)elems);
    return s;
}

/* The batched decode ops read each row's slot and at as [N] device vectors of unit stride. */
static qvl_status accepts_slot_rows(const qvl_node *n, uint32_t first, qvl_error *err) {
    for (uint32_t i = first; i < first + 2; i++)
        if (n->src[i]->desc.stride[0] != 1)
            return cu_fail(n, err, QVL_E_UNSUPPORTED, "input %u must have unit stride", i);
    return n->op == QVL_OP_ATTENTION_SLOTS ? accepts_head(n, CU_ATTN_MAX_D, err) : QVL_OK;
}

qvl_status cu_accepts(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    switch (n->op) {
    case QVL_OP_MATMUL: return accepts_matmul(n, err);
    case QVL_OP_ATTENTION: return accepts_head(n, CU_ATTN_MAX_D, err);
    case QVL_OP_NORM_ROPE: return accepts_head(n, CU_NORM_ROPE_MAX_D, err);
    case QVL_OP_ROPE: return accepts_rope(n, err);
    case QVL_OP_STORE_SLOT_ROWS: return accepts_slot_rows(n, 2, err);
    case QVL_OP_ATTENTION_SLOTS: return accepts_slot_rows(n, 3, err);
    default: return QVL_OK;
    }
}

qvl_status cu_begin(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return qvl_kernel_begin(be->iface, be, n, err);
}
