/* The per-op checks of the cuda_sm61 backend: the reference backend's checks (same inputs
 * accepted, same messages), plus the few limits of these kernels (attention head size, grid
 * dimensions), so that supports() answers false for what the kernels cannot run. */
#include <math.h>

#include "cu_check.h"
#include "cu_kernels.h"
#include "qvl/dtype.h"

qvl_status cu_check_matmul(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "a", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "w", CU_READABLE, 2, 3, err)) ||
        (s = cu_maybe(n, 2, "bias", CU_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *a = &n->src[0]->desc, *w = &n->src[1]->desc;
    int64_t K = cu_row_len(a), N = w->shape[w->ndim - 2];
    if (w->shape[w->ndim - 1] != K)
        return cu_fail(n, err, QVL_E_SHAPE, "a has K = %lld but w has K = %lld", (long long)K,
                        (long long)w->shape[w->ndim - 1]);
    if (w->ndim == 3) {
        if (a->ndim != 3)
            return cu_fail(n, err, QVL_E_SHAPE, "a 3-D w needs a 3-D a, not %d-D", a->ndim);
        if (a->shape[0] % w->shape[0] != 0)
            return cu_fail(n, err, QVL_E_SHAPE, "a batch %lld is not a multiple of w batch %lld",
                            (long long)a->shape[0], (long long)w->shape[0]);
        if ((s = cu_absent(n, 2, "bias", err))) return s;
        if (a->shape[0] > CU_MAX_GRID_YZ)
            return cu_fail(n, err, QVL_E_UNSUPPORTED, "batch %lld is above this kernel's %d",
                           (long long)a->shape[0], CU_MAX_GRID_YZ);
    }
    if ((s = cu_vector_len(n, 2, "bias", N, err))) return s;
    int64_t per_batch = cu_n_rows(a) / (w->ndim == 3 ? a->shape[0] : 1);
    if (per_batch > (int64_t)CU_MAX_GRID_YZ * 16)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "%lld rows are above this kernel's limit",
                       (long long)per_batch);
    int64_t shape[QVL_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[i];
    shape[a->ndim - 1] = N;
    return cu_output(n, CU_DT(QVL_F32), a->ndim, shape, err);
}

static qvl_status check_unary(const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_need(n, 0, "x", CU_READABLE, 1, 4, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    return cu_output(n, CU_DT(QVL_F32), x->ndim, x->shape, err);
}

qvl_status cu_check_scale(const qvl_node *n, qvl_error *err) { return check_unary(n, err); }

qvl_status cu_check_silu(const qvl_node *n, qvl_error *err) { return check_unary(n, err); }

qvl_status cu_check_gelu_tanh(const qvl_node *n, qvl_error *err) { return check_unary(n, err); }

qvl_status cu_check_gelu_erf(const qvl_node *n, qvl_error *err) { return check_unary(n, err); }

static qvl_status check_binary(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "a", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "b", CU_READABLE, 1, 4, err)))
        return s;
    const qvl_tensor_desc *a = &n->src[0]->desc, *b = &n->src[1]->desc;
    if (b->ndim > a->ndim)
        return cu_fail(n, err, QVL_E_SHAPE, "b has more dims (%d) than a (%d)", b->ndim,
                        a->ndim);
    /* Aligned on the innermost dims: b's dim i sits under a's dim i + (a.ndim - b.ndim). */
    for (int i = 0; i < b->ndim; i++) {
        int64_t bd = b->shape[i], ad = a->shape[i + a->ndim - b->ndim];
        if (bd != ad && bd != 1)
            return cu_fail(n, err, QVL_E_SHAPE, "b dim %d is %lld, a has %lld there", i,
                            (long long)bd, (long long)ad);
    }
    return cu_output(n, CU_DT(QVL_F32), a->ndim, a->shape, err);
}

qvl_status cu_check_add(const qvl_node *n, qvl_error *err) { return check_binary(n, err); }

qvl_status cu_check_mul(const qvl_node *n, qvl_error *err) { return check_binary(n, err); }

static qvl_status check_norm(const qvl_node *n, int has_beta, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "x", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "gamma", CU_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    int64_t D = cu_row_len(x);
    if ((s = cu_vector_len(n, 1, "gamma", D, err))) return s;
    if (has_beta) {
        if ((s = cu_maybe(n, 2, "beta", CU_READABLE, 1, 1, err)) ||
            (s = cu_vector_len(n, 2, "beta", D, err)))
            return s;
    } else if ((s = cu_absent(n, 2, "beta", err))) {
        return s;
    }
    return cu_output(n, CU_DT(QVL_F32), x->ndim, x->shape, err);
}

qvl_status cu_check_rms_norm(const qvl_node *n, qvl_error *err) { return check_norm(n, 0, err); }

qvl_status cu_check_layer_norm(const qvl_node *n, qvl_error *err) { return check_norm(n, 1, err); }

static int64_t rope_pos_rows(int32_t mode) {
    switch (mode) {
    case QVL_ROPE_MROPE_INTERLEAVED: return 3;
    case QVL_ROPE_VISION_2D: return 2;
    case QVL_ROPE_NEOX: return 1;
    default: return 0;
    }
}

qvl_status cu_check_rope(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "x", CU_READABLE, 3, 3, err)) ||
        (s = cu_need(n, 1, "pos", CU_INDEX, 2, 2, err)))
        return s;
    const qvl_rope_params *p = &n->params.rope;
    const qvl_tensor_desc *x = &n->src[0]->desc, *pos = &n->src[1]->desc;
    int64_t C = rope_pos_rows(p->mode), D = x->shape[2];
    if (C == 0) return cu_fail(n, err, QVL_E_INVALID, "unknown rope mode %d", (int)p->mode);
    if (!(p->theta > 0.0f) || !isfinite(p->theta))
        return cu_fail(n, err, QVL_E_INVALID, "theta %g is not a positive number", p->theta);
    if (D % (p->mode == QVL_ROPE_VISION_2D ? 4 : 2) != 0)
        return cu_fail(n, err, QVL_E_SHAPE, "head size %lld does not split into %s", (long long)D,
                        p->mode == QVL_ROPE_VISION_2D ? "4 quarters" : "2 halves");
    if (p->mode == QVL_ROPE_MROPE_INTERLEAVED &&
        (p->sections[0] < 0 || p->sections[1] < 0 || p->sections[2] < 0))
        return cu_fail(n, err, QVL_E_INVALID, "negative mrope section");
    if (pos->shape[0] != C || pos->shape[1] != x->shape[0])
        return cu_fail(n, err, QVL_E_SHAPE, "pos is [%lld, %lld], expected [%lld, %lld]",
                        (long long)pos->shape[0], (long long)pos->shape[1], (long long)C,
                        (long long)x->shape[0]);
    return cu_output(n, CU_DT(QVL_F32), 3, x->shape, err);
}

qvl_status cu_check_softmax(const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_need(n, 0, "x", CU_READABLE, 1, 4, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    return cu_output(n, CU_DT(QVL_F32), x->ndim, x->shape, err);
}

qvl_status cu_check_mask_causal(const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_need(n, 0, "s", CU_READABLE, 2, 4, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    return cu_output(n, CU_DT(QVL_F32), x->ndim, x->shape, err);
}

qvl_status cu_check_mask_segments(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "s", CU_READABLE, 2, 4, err)) ||
        (s = cu_need(n, 1, "seg", CU_INDEX, 1, 1, err)))
        return s;
    const qvl_tensor_desc *x = &n->src[0]->desc, *seg = &n->src[1]->desc;
    if (x->shape[x->ndim - 1] != x->shape[x->ndim - 2])
        return cu_fail(n, err, QVL_E_SHAPE, "scores are %lld x %lld, not square",
                        (long long)x->shape[x->ndim - 2], (long long)x->shape[x->ndim - 1]);
    if (seg->shape[0] < 2)
        return cu_fail(n, err, QVL_E_SHAPE, "seg needs at least 2 bounds, has %lld",
                        (long long)seg->shape[0]);
    return cu_output(n, CU_DT(QVL_F32), x->ndim, x->shape, err);
}

qvl_status cu_check_attention(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "q", CU_READABLE, 3, 3, err)) ||
        (s = cu_need(n, 1, "k", CU_READABLE, 3, 3, err)) ||
        (s = cu_need(n, 2, "v", CU_READABLE, 3, 3, err)))
        return s;
    const qvl_attention_params *p = &n->params.attention;
    const qvl_tensor_desc *q = &n->src[0]->desc, *k = &n->src[1]->desc, *v = &n->src[2]->desc;
    int64_t N = q->shape[0], Hq = q->shape[1], D = q->shape[2];
    int64_t L = k->shape[0], Hkv = k->shape[1];
    if (k->shape[2] != D || v->shape[0] != L || v->shape[1] != Hkv || v->shape[2] != D)
        return cu_fail(n, err, QVL_E_SHAPE, "q/k/v shapes do not fit together");
    if (D > CU_ATTN_MAX_D)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "head size %lld is above this kernel's %d",
                       (long long)D, CU_ATTN_MAX_D);
    if (Hq % Hkv != 0)
        return cu_fail(n, err, QVL_E_SHAPE, "%lld query heads do not group over %lld kv heads",
                        (long long)Hq, (long long)Hkv);
    if (p->mask == QVL_MASK_SEGMENTS) {
        if ((s = cu_need(n, 3, "seg", CU_INDEX, 1, 1, err))) return s;
        if (N != L)
            return cu_fail(n, err, QVL_E_SHAPE, "segments need as many queries as keys");
        if (n->src[3]->desc.shape[0] < 2)
            return cu_fail(n, err, QVL_E_SHAPE, "seg needs at least 2 bounds");
    } else if (p->mask == QVL_MASK_NONE || p->mask == QVL_MASK_CAUSAL) {
        if ((s = cu_absent(n, 3, "seg", err))) return s;
    } else {
        return cu_fail(n, err, QVL_E_INVALID, "unknown mask kind %d", (int)p->mask);
    }
    return cu_output(n, CU_DT(QVL_F32), 3, q->shape, err);
}

qvl_status cu_check_get_rows(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "table", CU_READABLE, 2, 2, err)) ||
        (s = cu_need(n, 1, "ids", CU_INDEX, 1, 1, err)))
        return s;
    int64_t shape[2] = {n->src[1]->desc.shape[0], n->src[0]->desc.shape[1]};
    return cu_output(n, CU_DT(QVL_F32), 2, shape, err);
}

qvl_status cu_check_cont(const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_need(n, 0, "x", CU_ANY, 1, 4, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    if (x->dtype == QVL_Q8_0 && cu_row_len(x) % QVL_Q8_0_BLOCK != 0)
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "q8_0 rows of %lld are not whole blocks",
                        (long long)cu_row_len(x));
    return cu_output(n, CU_DT(x->dtype), x->ndim, x->shape, err);
}

qvl_status cu_check_store_rows(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "dst", CU_WRITABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "src", CU_READABLE, 1, 4, err)))
        return s;
    const qvl_tensor_desc *dst = &n->src[0]->desc, *src = &n->src[1]->desc;
    int64_t off = n->params.store.offset;
    if (!cu_is_contiguous(dst))
        return cu_fail(n, err, QVL_E_UNSUPPORTED, "dst must be contiguous");
    bool same_rows = dst->ndim == src->ndim;
    for (int i = 1; same_rows && i < dst->ndim; i++) same_rows = dst->shape[i] == src->shape[i];
    if (!same_rows)
        return cu_fail(n, err, QVL_E_SHAPE, "src rows do not match dst rows");
    if (off < 0 || off > dst->shape[0] - src->shape[0])
        return cu_fail(n, err, QVL_E_SHAPE, "rows [%lld, %lld + %lld) do not fit in %lld",
                        (long long)off, (long long)off, (long long)src->shape[0],
                        (long long)dst->shape[0]);
    int64_t shape[QVL_MAX_DIMS];
    for (int i = 0; i < dst->ndim; i++) shape[i] = dst->shape[i];
    shape[0] = off + src->shape[0];
    return cu_output(n, CU_DT(dst->dtype), dst->ndim, shape, err);
}

qvl_status cu_check_view(const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_need(n, 0, "x", CU_ANY, 1, 4, err);
    if (s != QVL_OK) return s;
    if (!n->dst) return cu_fail(n, err, QVL_E_INVALID, "no output tensor");
    return cu_check_tensor(n, n->dst, "output", CU_DT(n->src[0]->desc.dtype), 1, 4, err);
}

#define NL_MAX_PROJ 3
static uint32_t w_slot(int p) { return CU_NL_W_SLOT(p); }
static uint32_t b_slot(int p) { return CU_NL_B_SLOT(p); }
static const char *const w_names[NL_MAX_PROJ] = {"w1", "w2", "w3"};
static const char *const b_names[NL_MAX_PROJ] = {"b1", "b2", "b3"};

qvl_status cu_check_norm_linear(const qvl_node *n, qvl_error *err) {
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    qvl_status s;
    if ((s = cu_need(n, 0, "x", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "gamma", CU_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    int64_t D = cu_row_len(x);
    if ((s = cu_vector_len(n, 1, "gamma", D, err))) return s;
    if (p->norm == QVL_NORM_RMS) {
        if ((s = cu_absent(n, 2, "beta", err))) return s;
    } else if (p->norm == QVL_NORM_LAYER) {
        if ((s = cu_maybe(n, 2, "beta", CU_READABLE, 1, 1, err)) ||
            (s = cu_vector_len(n, 2, "beta", D, err)))
            return s;
    } else {
        return cu_fail(n, err, QVL_E_INVALID, "unknown norm kind %d", (int)p->norm);
    }
    if (p->n_proj < 1 || p->n_proj > NL_MAX_PROJ)
        return cu_fail(n, err, QVL_E_INVALID, "n_proj is %d, not 1..3", (int)p->n_proj);

    int64_t total = 0;
    for (int i = 0; i < NL_MAX_PROJ; i++) {
        if (i >= p->n_proj) {
            if ((s = cu_absent(n, w_slot(i), w_names[i], err)) ||
                (s = cu_absent(n, b_slot(i), b_names[i], err)))
                return s;
            continue;
        }
        if ((s = cu_need(n, w_slot(i), w_names[i], CU_READABLE, 2, 2, err)) ||
            (s = cu_maybe(n, b_slot(i), b_names[i], CU_READABLE, 1, 1, err)))
            return s;
        const qvl_tensor_desc *w = &n->src[w_slot(i)]->desc;
        if (w->shape[1] != D)
            return cu_fail(n, err, QVL_E_SHAPE, "%s has K = %lld, x rows have %lld", w_names[i],
                            (long long)w->shape[1], (long long)D);
        if ((s = cu_vector_len(n, b_slot(i), b_names[i], w->shape[0], err))) return s;
        total += w->shape[0];
    }
    int64_t shape[QVL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = total;
    return cu_output(n, CU_DT(QVL_F32), x->ndim, shape, err);
}

qvl_status cu_check_mlp_residual(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "res", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 1, "a", CU_READABLE, 1, 4, err)) ||
        (s = cu_need(n, 2, "w_down", CU_READABLE, 2, 2, err)) ||
        (s = cu_maybe(n, 3, "up", CU_READABLE, 1, 4, err)) ||
        (s = cu_maybe(n, 4, "b_down", CU_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *res = &n->src[0]->desc, *a = &n->src[1]->desc;
    const qvl_tensor_desc *w = &n->src[2]->desc;
    const qvl_tensor *up = cu_src(n, 3);
    int64_t D = cu_row_len(res), F = cu_row_len(a);
    if (!cu_same_leading(res, a))
        return cu_fail(n, err, QVL_E_SHAPE, "res and a have different rows");
    if (w->shape[0] != D || w->shape[1] != F)
        return cu_fail(n, err, QVL_E_SHAPE, "w_down is [%lld, %lld], expected [%lld, %lld]",
                        (long long)w->shape[0], (long long)w->shape[1], (long long)D,
                        (long long)F);
    if (up && (!cu_same_leading(&up->desc, a) || cu_row_len(&up->desc) != F))
        return cu_fail(n, err, QVL_E_SHAPE, "up and a have different shapes");
    if ((s = cu_vector_len(n, 4, "b_down", D, err))) return s;
    int32_t act = n->params.mlp.act;
    if (up && act != QVL_ACT_SILU)
        return cu_fail(n, err, QVL_E_INVALID, "a gated mlp (with up) needs act silu, not %d",
                        (int)act);
    if (!up && act != QVL_ACT_GELU_TANH && act != QVL_ACT_GELU_ERF)
        return cu_fail(n, err, QVL_E_INVALID,
                        "an mlp without up needs act gelu_tanh or gelu_erf, not %d", (int)act);
    return cu_output(n, CU_DT(QVL_F32), res->ndim, res->shape, err);
}

/* x [N, D] f32, idx [K] i32, src [K, D] f32 -> f32 [N, D]. */
static qvl_status check_scatter(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = cu_need(n, 0, "x", CU_DT(QVL_F32), 2, 2, err)) ||
        (s = cu_need(n, 1, "idx", CU_INDEX, 1, 1, err)) ||
        (s = cu_need(n, 2, "src", CU_DT(QVL_F32), 2, 2, err)))
        return s;
    const qvl_tensor_desc *x = &n->src[0]->desc, *idx = &n->src[1]->desc, *src = &n->src[2]->desc;
    if (src->shape[0] != idx->shape[0] || src->shape[1] != x->shape[1])
        return cu_fail(n, err, QVL_E_SHAPE,
                       "src [%lld, %lld] does not match %lld indices of rows of %lld",
                       (long long)src->shape[0], (long long)src->shape[1],
                       (long long)idx->shape[0], (long long)x->shape[1]);
    return cu_output(n, CU_DT(QVL_F32), 2, x->shape, err);
}

qvl_status cu_check_set_rows(const qvl_node *n, qvl_error *err) { return check_scatter(n, err); }
qvl_status cu_check_add_rows(const qvl_node *n, qvl_error *err) { return check_scatter(n, err); }
