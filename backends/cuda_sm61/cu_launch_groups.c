/* Launch groups of the run_graph hook (see cu_launch_groups.h): several small nodes of the
 * fused graph as one launch, when running them at once gives what running them in order
 * gives. */
#include "cu_launch_groups.h"

#include <stdint.h>

#include "cu_ops.h"

/* Bytes [lo, hi) that tensor t's elements may occupy (non-negative strides; false if not). */
static bool byte_span(const qvl_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    const qvl_tensor_desc *d = &t->desc;
    size_t esize = qvl_dtype_block_bytes(d->dtype);
    if (!t->data || esize == 0 || qvl_dtype_block_elems(d->dtype) != 1) return false;
    int64_t last = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] <= 0) return false;
        if (d->stride[i] < 0) return false;
        last += (d->shape[i] - 1) * d->stride[i];
    }
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)(last + 1) * esize;
    return true;
}

/* Does b neither read nor write what a writes, nor write what a reads? Then running them at
 * once gives what running a, then b gives. */
static bool independent(const qvl_node *a, const qvl_node *b) {
    uintptr_t alo, ahi, lo, hi;
    if (!byte_span(a->dst, &alo, &ahi)) return false;
    for (uint32_t i = 0; i < b->n_src; i++) {
        if (!b->src[i]) continue;
        if (!byte_span(b->src[i], &lo, &hi)) return false;
        if (lo < ahi && alo < hi) return false;
    }
    uintptr_t blo, bhi;
    if (!byte_span(b->dst, &blo, &bhi) || (blo < ahi && alo < bhi)) return false;
    for (uint32_t i = 0; i < a->n_src; i++) {
        if (!a->src[i]) continue;
        if (!byte_span(a->src[i], &lo, &hi)) return false;
        if (lo < bhi && blo < hi) return false;
    }
    return true;
}

static bool is_store(const qvl_node *n) {
    return n->op == QVL_OP_STORE_ROWS_AT || n->op == QVL_OP_STORE_SLOT_ROWS;
}

bool cu_pairable(const qvl_node *a, const qvl_node *b) {
    if (a->op != QVL_OP_NORM_ROPE && !is_store(a)) return false;
    if (a->op == QVL_OP_NORM_ROPE ? b->op != QVL_OP_NORM_ROPE : !is_store(b)) return false;
    return independent(a, b);
}

qvl_status cu_run_pair(qvl_backend *be, const qvl_node *a, const qvl_node *b, qvl_error *err) {
    qvl_status s;
    if (a->op == QVL_OP_NORM_ROPE) {
        cu_norm_rope_job j[2];
        if ((s = cu_norm_rope_job_of(be, a, &j[0], err)) != QVL_OK || (s = cu_norm_rope_job_of(be, b, &j[1], err)))
            return s;
        return cu_launched(a, cu_launch_norm_rope(be->stream, j, 2, NULL), err);
    }
    cu_store_at_job j[2];
    if ((s = cu_store_at_job_of(be, a, &j[0], err)) != QVL_OK || (s = cu_store_at_job_of(be, b, &j[1], err)))
        return s;
    return cu_launched(a, cu_launch_store_rows_at(be->stream, j, 2), err);
}

/* Is t exactly out, the contiguous output of a NORM_ROPE (same place, dtype and shape)? */
static bool same_tensor(const qvl_tensor *t, const qvl_tensor *out) {
    const qvl_tensor_desc *a = &t->desc, *b = &out->desc;
    if (t->data != out->data || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || a->stride[i] != b->stride[i]) return false;
    return true;
}

/* Does store c write nothing that node r reads or writes? */
static bool writes_clear_of(const qvl_node *c, const qvl_node *r) {
    uintptr_t clo, chi, lo, hi;
    if (!byte_span(c->dst, &clo, &chi) || !byte_span(r->dst, &lo, &hi)) return false;
    if (lo < chi && clo < hi) return false;
    for (uint32_t i = 0; i < r->n_src; i++) {
        if (!r->src[i]) continue;
        if (!byte_span(r->src[i], &lo, &hi)) return false;
        if (lo < chi && clo < hi) return false;
    }
    return true;
}

/* Does node r write nothing that store c reads other than its rows (src[1]): neither the
 * cache (src[0]) nor the places (at; slot and at)? */
static bool writes_clear_of_store_inputs(const qvl_node *r, const qvl_node *c) {
    uintptr_t rlo, rhi, lo, hi;
    if (!byte_span(r->dst, &rlo, &rhi)) return false;
    for (uint32_t i = 0; i < c->n_src; i++) {
        if (i == 1) continue;
        if (!c->src[i] || !byte_span(c->src[i], &lo, &hi)) return false;
        if (lo < rhi && rlo < hi) return false;
    }
    return true;
}

/* Which of the two NORM_ROPE nodes n[0], n[1] store c copies, whole, from (-1: neither);
 * the other must be independent of c. Never into a q8_0 cache: k_norm_rope's threads do not
 * hold a block's 32 values in one warp (the pair of launches quantises it). */
static int stored_rope(const qvl_node *const *n, const qvl_node *c) {
    if (c->dst->desc.dtype == QVL_Q8_0) return -1;
    for (int w = 0; w < 2; w++)
        if (same_tensor(c->src[1], n[w]->dst) && qvl_desc_is_contiguous(&n[w]->dst->desc) &&
            writes_clear_of(c, n[w]) && writes_clear_of_store_inputs(n[w], c) &&
            independent(n[1 - w], c))
            return w;
    return -1;
}

bool cu_rope_store_group(const qvl_node *const *n) {
    if (n[0]->op != QVL_OP_NORM_ROPE || n[1]->op != QVL_OP_NORM_ROPE || !is_store(n[2]) ||
        !is_store(n[3]))
        return false;
    return independent(n[0], n[1]) && stored_rope(n, n[2]) >= 0 && independent(n[0], n[3]) &&
           independent(n[1], n[3]) && independent(n[2], n[3]);
}

qvl_status cu_run_rope_store_group(qvl_backend *be, const qvl_node *const *n, qvl_error *err) {
    cu_norm_rope_job j[2];
    cu_store_at_job extra;
    int w = stored_rope(n, n[2]);
    qvl_status s;
    if ((s = cu_norm_rope_job_of(be, n[0], &j[0], err)) != QVL_OK ||
        (s = cu_norm_rope_job_of(be, n[1], &j[1], err)) != QVL_OK ||
        (s = cu_store_at_job_of(be, n[2], &j[w].store, err)) != QVL_OK ||
        (s = cu_store_at_job_of(be, n[3], &extra, err)) != QVL_OK)
        return s;
    return cu_launched(n[0], cu_launch_norm_rope(be->stream, j, 2, &extra), err);
}
