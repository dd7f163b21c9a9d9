/* SOFTMAX, ARGMAX, the two masks, and fused ATTENTION (built from the same pieces). */
#include <math.h>
#include <stdlib.h>

#include "ref_ops.h"
#include "ref_math.h"

void ref_softmax_row(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    if (max == -INFINITY) { /* nothing visible: the row contributes nothing */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int64_t i = 0; i < n; i++) x[i] = (float)(x[i] / sum);
}

int ref_causal_hides(int64_t i, int64_t j, int64_t n_past) {
    return j > n_past + i;
}

/* Segment number of each of the len positions, from bounds seg [G+1], which are data:
 * checked here, at run time, by core's one check (seg[0] = 0, non-decreasing, seg[G] = len). */
static qvl_status segment_ids(const qvl_node *n, const qvl_tensor *seg, int64_t len,
                              int32_t *id, qvl_error *err) {
    return qvl_check_segments(REF_NAME, n, seg->data, seg->desc.shape[0], seg->desc.stride[0],
                              len, id, err);
}

/* ---- SOFTMAX(x) over the innermost dim ---- */

qvl_status ref_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    int64_t L = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    float *out = n->dst->data;
    for (int64_t r = 0; r < rows; r++) {
        qvl_tensor_read_row(x, r, out + r * L);
        ref_softmax_row(out + r * L, L);
    }
    return QVL_OK;
}

/* ---- ARGMAX(x [R, V]) -> [R] i32 ---- */

qvl_status ref_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    int64_t V = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    float *row = malloc((size_t)V * sizeof *row);
    if (!row) return ref_fail(n, err, QVL_E_NOMEM, "out of memory for a row of %lld", (long long)V);
    int32_t *out = n->dst->data;
    for (int64_t r = 0; r < rows; r++) {
        qvl_tensor_read_row(x, r, row);
        out[r] = qvl_argmax_row(row, V);
    }
    free(row);
    return QVL_OK;
}

/* ---- MASK_CAUSAL(s [..., N, L]) and MASK_SEGMENTS(s [..., N, N], seg [G+1]) ---- */

/* Copy s to the output, hiding (i, j) where hidden(i, j): rows of s are (query i, all keys). */
static void copy_masked(const qvl_node *n, int64_t n_past, const int32_t *seg_id) {
    const qvl_tensor *x = n->src[0];
    int64_t L = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    int64_t N = x->desc.shape[x->desc.ndim - 2];
    float *out = n->dst->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t i = r % N; /* query index of this row */
        float *o = out + r * L;
        qvl_tensor_read_row(x, r, o);
        for (int64_t j = 0; j < L; j++) {
            int hidden = seg_id ? seg_id[i] != seg_id[j] : ref_causal_hides(i, j, n_past);
            if (hidden) o[j] = -INFINITY;
        }
    }
}

qvl_status ref_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    copy_masked(n, n->params.mask.n_past, NULL);
    return QVL_OK;
}

/* The row count in an "at" input [1] i32 (shape checked by the op contract). */
static int64_t at_value(const qvl_node *n, uint32_t slot) { return qvl_elem_get_i32(n->src[slot], 0); }

qvl_status ref_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    int64_t at = at_value(n, 1);
    /* any at >= 0 defines the mask: no upper limit */
    if ((s = qvl_check_at(REF_NAME, n, at, 0, INT64_MAX, "queries", err)) != QVL_OK) return s;
    copy_masked(n, at, NULL);
    return QVL_OK;
}

qvl_status ref_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    int64_t N = qvl_desc_row_len(&n->src[0]->desc);
    int32_t *seg_id = malloc((size_t)N * sizeof *seg_id);
    if (!seg_id) return ref_fail(n, err, QVL_E_NOMEM, "out of memory for %lld segment ids",
                                 (long long)N);
    s = segment_ids(n, n->src[1], N, seg_id, err);
    if (s == QVL_OK) copy_masked(n, 0, seg_id);
    free(seg_id);
    return s;
}

/* ---- ATTENTION(q [N, Hq, D], k [L, Hkv, D], v [L, Hkv, D], seg?) -> [N, Hq, D] ----
 *
 * The same steps as the unfused graph, per head h reading kv head g = h / (Hq / Hkv):
 * scores = matmul(q_h, k_g) (double dot, f32 result); scale (f32 multiply); mask; softmax;
 * out = matmul(probs, v_g^T) (double dot over keys, in key order). */

/* Keys [0, L) of head g of k or v [.., H, D] as a contiguous [L, D] matrix, or transposed to
 * [D, L]. */
static void read_head(const qvl_tensor *t, int64_t g, int64_t L, float *out) {
    const qvl_tensor_desc *d = &t->desc;
    for (int64_t j = 0; j < L; j++)
        qvl_elem_gather(t, j * d->stride[0] + g * d->stride[1], d->stride[2], d->shape[2],
                   out + j * d->shape[2]);
}

static void read_head_transposed(const qvl_tensor *t, int64_t g, int64_t L, float *out) {
    const qvl_tensor_desc *d = &t->desc;
    for (int64_t e = 0; e < d->shape[2]; e++)
        qvl_elem_gather(t, g * d->stride[1] + e * d->stride[2], d->stride[0], L, out + e * L);
}

qvl_status ref_attention(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_attention_params *p = &n->params.attention;
    const qvl_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    int64_t N = q->desc.shape[0], Hq = q->desc.shape[1], D = q->desc.shape[2];
    int64_t L = k->desc.shape[0], Hkv = k->desc.shape[1], group = Hq / Hkv;
    int64_t n_past = p->n_past;
    if (p->mask == QVL_MASK_CAUSAL_AT) {
        /* Keys past at + N are not written yet: never read them. */
        n_past = at_value(n, 3);
        if ((s = qvl_check_at(REF_NAME, n, n_past, N, L, "queries", err)) != QVL_OK) return s;
        L = n_past + N;
    }

    float *k_g = ref_scratch(L * D), *vt_g = ref_scratch(D * L);
    float *q_row = ref_scratch(D), *probs = ref_scratch(L);
    int32_t *seg_id = p->mask == QVL_MASK_SEGMENTS ? malloc((size_t)N * sizeof *seg_id) : NULL;
    if (!k_g || !vt_g || !q_row || !probs || (p->mask == QVL_MASK_SEGMENTS && !seg_id)) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for %lld keys", (long long)L);
        goto done;
    }
    if (seg_id && (s = segment_ids(n, n->src[3], N, seg_id, err)) != QVL_OK) goto done;

    float *out = n->dst->data;
    for (int64_t g = 0; g < Hkv; g++) {
        read_head(k, g, L, k_g);
        read_head_transposed(v, g, L, vt_g); /* v^T: the weight of the second product */
        for (int64_t h = g * group; h < (g + 1) * group; h++) {
            for (int64_t i = 0; i < N; i++) {
                qvl_elem_gather(q, i * q->desc.stride[0] + h * q->desc.stride[1], q->desc.stride[2], D,
                           q_row);
                for (int64_t j = 0; j < L; j++) {
                    probs[j] = (float)ref_dot(q_row, k_g + j * D, D) * p->scale;
                    int hidden = p->mask == QVL_MASK_CAUSAL || p->mask == QVL_MASK_CAUSAL_AT
                                     ? ref_causal_hides(i, j, n_past)
                               : p->mask == QVL_MASK_SEGMENTS ? seg_id[i] != seg_id[j]
                               : 0;
                    if (hidden) probs[j] = -INFINITY;
                }
                ref_softmax_row(probs, L);
                float *o = out + (i * Hq + h) * D;
                for (int64_t d = 0; d < D; d++) o[d] = (float)ref_dot(probs, vt_g + d * L, L);
            }
        }
    }
done:
    free(k_g);
    free(vt_g);
    free(q_row);
    free(probs);
    free(seg_id);
    return s;
}

/* ---- the batched decode step's ops over pooled caches: row by row (core's qvl_slot_row) ---- */

qvl_status ref_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : qvl_run_slot_rows(REF_NAME, be, n, ref_attention, err);
}

qvl_status ref_store_slot_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : qvl_run_slot_rows(REF_NAME, be, n, ref_store_rows_at, err);
}
