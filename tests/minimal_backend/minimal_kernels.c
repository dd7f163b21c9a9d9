/* The minimal backend's kernels (see minimal.c): one per primitive op, plain f32 loops.
 * Inputs are read through qvl/tensor_access.h, whatever their layout and declared dtype;
 * outputs are f32 and contiguous (the op contract), except CONT (the input's dtype) and the
 * row stores (which write into their cache). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "minimal.h"

/* ---- what every kernel shares ---- */

#define BEGIN(be, node, err)                                \
    do {                                                    \
        qvl_status begin_ = min_begin((be), (node), (err)); \
        if (begin_ != QVL_OK) return begin_;                \
    } while (0)

/* count rows of cols elements, the first at element offset base, as a contiguous f32 copy
 * (weights converted once per kernel call, not once per use). */
static float *matrix_f32(const qvl_tensor *w, int64_t base, int64_t count, int64_t cols,
                         int64_t row_stride, int64_t col_stride) {
    float *out = malloc((size_t)(count * cols > 0 ? count * cols : 1) * sizeof *out);
    if (!out) return NULL;
    for (int64_t r = 0; r < count; r++)
        qvl_elem_gather(w, base + r * row_stride, col_stride, cols, out + r * cols);
    return out;
}

static qvl_status no_memory(const qvl_node *node, qvl_error *err) {
    return qvl_node_fail(NAME, node, err, QVL_E_NOMEM, "out of memory");
}

/* Element offset of the i-th element (row-major order) of a tensor of any strides. */
static int64_t elem_offset(const qvl_tensor_desc *d, int64_t i) {
    int64_t off = 0;
    for (int k = d->ndim - 1; k >= 0; k--) {
        off += (i % d->shape[k]) * d->stride[k];
        i /= d->shape[k];
    }
    return off;
}

static int32_t i32_at(const qvl_tensor *t, int64_t i) {
    return qvl_elem_get_i32(t, elem_offset(&t->desc, i));
}

static float *out_f32(const qvl_node *node) {
    return (float *)node->dst->data; /* the contract: f32 and contiguous */
}

/* ---- gathering ---- */

qvl_status k_get_rows(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *table = node->src[0], *ids = node->src[1];
    const int64_t V = table->desc.shape[0], D = table->desc.shape[1], N = ids->desc.shape[0];
    /* ids are data: every one in [0, V) before any row is read */
    qvl_status s = qvl_check_indices(NAME, node, ids->data, N, ids->desc.stride[0], V, "id", err);
    if (s != QVL_OK) return s;
    for (int64_t n = 0; n < N; n++)
        qvl_elem_gather(table, (int64_t)i32_at(ids, n) * table->desc.stride[0],
                        table->desc.stride[1], D, out_f32(node) + n * D);
    return QVL_OK;
}

/* ---- matmul: out = a . w^T (+ bias) ---- */

static float dot(const float *x, const float *y, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];
    return s;
}

qvl_status k_matmul(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *a = node->src[0], *w = node->src[1], *bias = qvl_node_src(node, 2);
    const qvl_tensor_desc *wd = &w->desc;
    const int64_t K = qvl_desc_row_len(&a->desc), rows = qvl_desc_n_rows(&a->desc);
    const int64_t N = wd->shape[wd->ndim - 2];
    /* 2-D w: one batch holding every row of a. 3-D: a is [B, M, K], w batch b / (B / Bw). */
    const int64_t B = wd->ndim == 3 ? a->desc.shape[0] : 1, M = rows / B;
    const int64_t Bw = wd->ndim == 3 ? wd->shape[0] : 1;
    float *arow = malloc((size_t)K * sizeof *arow), *bvec = NULL, *wf = NULL;
    if (bias) bvec = matrix_f32(bias, 0, 1, N, 0, bias->desc.stride[0]);
    qvl_status st = arow && (!bias || bvec) ? QVL_OK : no_memory(node, err);
    for (int64_t b = 0; st == QVL_OK && b < B; b++) {
        const int64_t wb = b / (B / Bw);
        if (b == 0 || wb != (b - 1) / (B / Bw)) { /* convert w once per w batch */
            free(wf);
            const int64_t base = wd->ndim == 3 ? wb * wd->stride[0] : 0;
            wf = matrix_f32(w, base, N, K, wd->stride[wd->ndim - 2], wd->stride[wd->ndim - 1]);
            if (!wf) {
                st = no_memory(node, err);
                break;
            }
        }
        for (int64_t m = 0; m < M; m++) {
            qvl_tensor_read_row(a, b * M + m, arow);
            float *o = out_f32(node) + (b * M + m) * N;
            for (int64_t n = 0; n < N; n++) o[n] = dot(arow, wf + n * K, K) + (bvec ? bvec[n] : 0);
        }
    }
    free(wf);
    free(bvec);
    free(arow);
    return st;
}

/* ---- elementwise ---- */

/* ADD and MUL: b broadcasts onto a; both padded to 4 dims (size-1 dims get stride 0). */
static qvl_status binary(qvl_backend *be, const qvl_node *node, qvl_error *err, bool mul) {
    BEGIN(be, node, err);
    int64_t as[4], ast[4], bs[4], bst[4];
    qvl_desc_align4(&node->src[0]->desc, as, ast);
    qvl_desc_align4(&node->src[1]->desc, bs, bst);
    float *o = out_f32(node);
    for (int64_t i0 = 0; i0 < as[0]; i0++)
        for (int64_t i1 = 0; i1 < as[1]; i1++)
            for (int64_t i2 = 0; i2 < as[2]; i2++)
                for (int64_t i3 = 0; i3 < as[3]; i3++) {
                    float x = qvl_elem_get(node->src[0],
                                           i0 * ast[0] + i1 * ast[1] + i2 * ast[2] + i3 * ast[3]);
                    float y = qvl_elem_get(node->src[1],
                                           i0 * bst[0] + i1 * bst[1] + i2 * bst[2] + i3 * bst[3]);
                    *o++ = mul ? x * y : x + y;
                }
    return QVL_OK;
}

qvl_status k_add(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return binary(be, node, err, false);
}
qvl_status k_mul(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return binary(be, node, err, true);
}

typedef enum { U_SCALE, U_SILU, U_GELU_TANH, U_GELU_ERF } unary_fn;

static qvl_status unary(qvl_backend *be, const qvl_node *node, qvl_error *err, unary_fn f) {
    BEGIN(be, node, err);
    float *o = out_f32(node);
    const int64_t n = qvl_desc_nelem(&node->dst->desc);
    qvl_tensor_read_rows(node->src[0], o); /* then in place: the output is contiguous */
    for (int64_t i = 0; i < n; i++) {
        float x = o[i];
        switch (f) {
        case U_SCALE: o[i] = x * node->params.scale.s; break;
        case U_SILU: o[i] = x / (1.0f + expf(-x)); break;
        case U_GELU_TANH:
            o[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
            break;
        case U_GELU_ERF: o[i] = 0.5f * x * (1.0f + erff(x * 0.70710678f)); break;
        }
    }
    return QVL_OK;
}

qvl_status k_scale(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return unary(be, node, err, U_SCALE);
}
qvl_status k_silu(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return unary(be, node, err, U_SILU);
}
qvl_status k_gelu_tanh(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return unary(be, node, err, U_GELU_TANH);
}
qvl_status k_gelu_erf(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return unary(be, node, err, U_GELU_ERF);
}

/* ---- row-wise: norms, softmax ---- */

static qvl_status norm(qvl_backend *be, const qvl_node *node, qvl_error *err, bool layer) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0], *beta = layer ? qvl_node_src(node, 2) : NULL;
    const int64_t D = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    float *g = matrix_f32(node->src[1], 0, 1, D, 0, node->src[1]->desc.stride[0]);
    float *bt = beta ? matrix_f32(beta, 0, 1, D, 0, beta->desc.stride[0]) : NULL;
    if (!g || (beta && !bt)) {
        free(g);
        free(bt);
        return no_memory(node, err);
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = out_f32(node) + r * D;
        qvl_tensor_read_row(x, r, o);
        float mean = 0.0f, sq = 0.0f;
        if (layer) {
            for (int64_t i = 0; i < D; i++) mean += o[i];
            mean /= (float)D;
        }
        for (int64_t i = 0; i < D; i++) sq += (o[i] - mean) * (o[i] - mean);
        const float inv = 1.0f / sqrtf(sq / (float)D + node->params.norm.eps);
        for (int64_t i = 0; i < D; i++) o[i] = (o[i] - mean) * inv * g[i] + (bt ? bt[i] : 0.0f);
    }
    free(g);
    free(bt);
    return QVL_OK;
}

qvl_status k_rms_norm(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return norm(be, node, err, false);
}
qvl_status k_layer_norm(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return norm(be, node, err, true);
}

qvl_status k_softmax(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0];
    const int64_t L = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    for (int64_t r = 0; r < rows; r++) {
        float *o = out_f32(node) + r * L, top = -INFINITY, sum = 0.0f;
        qvl_tensor_read_row(x, r, o);
        for (int64_t j = 0; j < L; j++) top = fmaxf(top, o[j]);
        for (int64_t j = 0; j < L; j++) {
            o[j] = top == -INFINITY ? 0.0f : expf(o[j] - top); /* a fully masked row is 0 */
            sum += o[j];
        }
        for (int64_t j = 0; sum > 0.0f && j < L; j++) o[j] /= sum;
    }
    return QVL_OK;
}

/* ---- rope: x [N, H, D], pos [C, N]; pairs (j, j + D/2) rotated by an angle per pair ---- */

static float rope_angle(const qvl_rope_params *p, const qvl_tensor *pos, int64_t n, int64_t N,
                        int64_t j, int64_t D) {
    if (p->mode == QVL_ROPE_VISION_2D) {
        const int64_t Q = D / 4, row = i32_at(pos, n), col = i32_at(pos, N + n);
        const float omega = 1.0f / powf(p->theta, (float)(j % Q) / (float)Q);
        return (float)(j < Q ? row : col) * omega;
    }
    int64_t owner = 0; /* NEOX: the one channel; MROPE: t unless h or w owns the pair */
    if (p->mode == QVL_ROPE_MROPE_INTERLEAVED) {
        if (j % 3 == 1 && j < 3 * (int64_t)p->sections[1]) owner = 1;
        else if (j % 3 == 2 && j < 3 * (int64_t)p->sections[2]) owner = 2;
    }
    const float inv_freq = 1.0f / powf(p->theta, (float)(2 * j) / (float)D);
    return (float)i32_at(pos, owner * N + n) * inv_freq;
}

qvl_status k_rope(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0], *pos = node->src[1];
    const int64_t N = x->desc.shape[0], H = x->desc.shape[1], D = x->desc.shape[2], half = D / 2;
    float *c = malloc((size_t)half * sizeof *c), *s = malloc((size_t)half * sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        return no_memory(node, err);
    }
    for (int64_t n = 0; n < N; n++) {
        for (int64_t j = 0; j < half; j++) {
            const float a = rope_angle(&node->params.rope, pos, n, N, j, D);
            c[j] = cosf(a);
            s[j] = sinf(a);
        }
        for (int64_t h = 0; h < H; h++) {
            float *o = out_f32(node) + (n * H + h) * D;
            qvl_tensor_read_row(x, n * H + h, o);
            for (int64_t j = 0; j < half; j++) {
                const float x0 = o[j], x1 = o[j + half];
                o[j] = x0 * c[j] - x1 * s[j];
                o[j + half] = x1 * c[j] + x0 * s[j];
            }
        }
    }
    free(c);
    free(s);
    return QVL_OK;
}

/* ---- masks on scores [..., N, L] ---- */

/* Copies the scores and hides key j from query i where j > n_past + i. */
static void causal(const qvl_node *node, int64_t n_past) {
    const qvl_tensor *x = node->src[0];
    const int64_t L = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    const int64_t N = x->desc.shape[x->desc.ndim - 2];
    for (int64_t r = 0; r < rows; r++) {
        float *o = out_f32(node) + r * L;
        qvl_tensor_read_row(x, r, o);
        for (int64_t j = n_past + r % N + 1 < 0 ? 0 : n_past + r % N + 1; j < L; j++)
            o[j] = -INFINITY;
    }
}

qvl_status k_mask_causal(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    causal(node, node->params.mask.n_past);
    return QVL_OK;
}

qvl_status k_mask_causal_at(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    /* Any at >= 0 is valid here: the formula says which keys to hide, whatever at is. */
    const int64_t at = i32_at(node->src[1], 0);
    qvl_status s = qvl_check_at(NAME, node, at, 0, INT64_MAX, "queries", err);
    if (s != QVL_OK) return s;
    causal(node, at);
    return QVL_OK;
}

qvl_status k_mask_segments(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0], *seg = node->src[1];
    const int64_t N = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    /* Bounds are data: 0 = seg[0] <= seg[1] <= ... <= seg[G] = N, else the node fails; once
     * they hold, which[i] is the segment of position i. */
    int32_t *which = malloc((size_t)N * sizeof *which);
    if (!which) return no_memory(node, err);
    qvl_status s = qvl_check_segments(NAME, node, seg->data, seg->desc.shape[0],
                                      seg->desc.stride[0], N, which, err);
    if (s != QVL_OK) {
        free(which);
        return s;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *o = out_f32(node) + r * N;
        qvl_tensor_read_row(x, r, o);
        for (int64_t j = 0; j < N; j++)
            if (which[j] != which[r % N]) o[j] = -INFINITY;
    }
    free(which);
    return QVL_OK;
}

/* ---- copies and row writes ---- */

qvl_status k_cont(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0];
    const int64_t n = qvl_desc_nelem(&x->desc);
    /* Same dtype out as in; f16 and bf16 survive the trip through f32 exactly. */
    for (int64_t i = 0; i < n; i++) qvl_elem_set(node->dst, i, qvl_elem_get(x, elem_offset(&x->desc, i)));
    return QVL_OK;
}

/* src's rows into rows [first, first + N) of the contiguous cache in slot 0, converted. */
static void store(const qvl_node *node, int64_t first) {
    qvl_tensor cache = *node->src[0]; /* written through: the node's output aliases it */
    const qvl_tensor *src = node->src[1];
    const int64_t n = qvl_desc_nelem(&src->desc), base = first * cache.desc.stride[0];
    for (int64_t i = 0; i < n; i++)
        qvl_elem_set(&cache, base + i, qvl_elem_get(src, elem_offset(&src->desc, i)));
}

qvl_status k_store_rows(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    store(node, node->params.store.offset);
    return QVL_OK;
}

qvl_status k_store_rows_at(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    BEGIN(be, node, err);
    const int64_t at = i32_at(node->src[2], 0), R = node->src[0]->desc.shape[0];
    const int64_t N = node->src[1]->desc.shape[0];
    qvl_status s = qvl_check_at(NAME, node, at, N, R, "rows", err);
    if (s != QVL_OK) return s;
    store(node, at);
    return QVL_OK;
}

/* SET_ROWS / ADD_ROWS: a copy of x [N, D], then row idx[k] replaced by (or added) src[k]. */
static qvl_status scatter(qvl_backend *be, const qvl_node *node, qvl_error *err, bool add) {
    BEGIN(be, node, err);
    const qvl_tensor *x = node->src[0], *idx = node->src[1], *src = node->src[2];
    const int64_t N = x->desc.shape[0], D = x->desc.shape[1], K = idx->desc.shape[0];
    /* all indices first: nothing is written on failure */
    qvl_status s = qvl_check_indices(NAME, node, idx->data, K, idx->desc.stride[0], N,
                                     "row index", err);
    if (s != QVL_OK) return s;
    float *o = out_f32(node);
    qvl_tensor_read_rows(x, o);
    for (int64_t k = 0; k < K; k++) {
        float *row = o + (int64_t)i32_at(idx, k) * D;
        for (int64_t d = 0; d < D; d++) {
            const float v = qvl_elem_get(src, k * src->desc.stride[0] + d * src->desc.stride[1]);
            row[d] = add ? row[d] + v : v;
        }
    }
    return QVL_OK;
}

qvl_status k_set_rows(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return scatter(be, node, err, false);
}
qvl_status k_add_rows(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    return scatter(be, node, err, true);
}
