/* The host side of every cuda_sm61 kernel: check the node (the op contract and this backend's
 * limits), turn its tensors into cu_views, validate the data-dependent inputs (token ids,
 * segment bounds) and queue the launch on the backend's stream. */
#include "cu_ops.h"

#include <stdlib.h>
#include <string.h>

#include "cu_check.h"

static cu_view view_of(const qvl_tensor *t) {
    cu_view v;
    memset(&v, 0, sizeof v);
    v.ndim = 1;
    for (int i = 0; i < QVL_MAX_DIMS; i++) v.shape[i] = v.stride[i] = 1;
    if (!t) return v; /* data NULL: an absent optional input */
    v.data = t->data;
    v.dtype = (int32_t)t->desc.dtype;
    v.ndim = t->desc.ndim;
    for (int i = 0; i < t->desc.ndim; i++) {
        v.shape[i] = t->desc.shape[i];
        v.stride[i] = t->desc.stride[i];
    }
    return v;
}

/* A contiguous f32 [rows, cols] matrix in device scratch, as a view. */
static cu_view view_rows(const float *data, int64_t rows, int64_t cols) {
    cu_view v = view_of(NULL);
    v.data = data;
    v.dtype = QVL_F32;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.stride[0] = cols;
    v.stride[1] = 1;
    return v;
}

/* Weight w ([N, K] or [Bw, N, K]) as a matmul operand. */
static cu_mat mat_of(const qvl_tensor *w) {
    const qvl_tensor_desc *d = &w->desc;
    int r = d->ndim - 2, c = d->ndim - 1;
    cu_mat m = {
        .data = w->data,
        .dtype = (int32_t)d->dtype,
        .rows = d->shape[r],
        .cols = d->shape[c],
        .row_stride = d->stride[r],
        .col_stride = d->stride[c],
        .batch_stride = d->ndim == 3 ? d->stride[0] : 0,
    };
    return m;
}

qvl_status cu_launched(const qvl_node *n, int rc, qvl_error *err) {
    if (rc == 0) return QVL_OK;
    return cu_fail(n, err, QVL_E_BACKEND, "kernel launch failed: %s",
                   cudaGetErrorString((cudaError_t)rc));
}

/* Copy n i32 elements of t (stride step, from element 0) to the host for validation. */
static qvl_status read_i32(qvl_backend *be, const qvl_node *n, const qvl_tensor *t,
                           int64_t count, int64_t step, int32_t **out, qvl_error *err) {
    int64_t last = (count - 1) * step, lo = last < 0 ? last : 0, hi = last < 0 ? 0 : last;
    size_t span = (size_t)(hi - lo + 1);
    if (span > be->host_i32_count) {
        int32_t *p = realloc(be->host_i32, span * sizeof *p);
        if (!p) return cu_fail(n, err, QVL_E_NOMEM, "out of host memory for %zu ids", span);
        be->host_i32 = p;
        be->host_i32_count = span;
    }
    cudaError_t e = cudaMemcpyAsync(be->host_i32, (const int32_t *)t->data + lo,
                                    span * sizeof(int32_t), cudaMemcpyDeviceToHost, be->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(be->stream);
    if (e != cudaSuccess)
        return cu_fail(n, err, QVL_E_BACKEND, "reading %lld indices: %s", (long long)count,
                       cudaGetErrorString(e));
    *out = be->host_i32 - lo; /* element k of t is (*out)[k * step] */
    return QVL_OK;
}

/* Segment bounds seg [G+1], copied to the host, checked by core's one check (start at 0,
 * never decrease, end at len), as every backend checks them. */
static qvl_status check_segments(qvl_backend *be, const qvl_node *n, const qvl_tensor *seg,
                                 int64_t len, qvl_error *err) {
    int64_t bounds = seg->desc.shape[0], step = seg->desc.stride[0];
    int32_t *b = NULL;
    qvl_status s = read_i32(be, n, seg, bounds, step, &b, err);
    return s != QVL_OK ? s : qvl_check_segments(CU_NAME, n, b, bounds, step, len, NULL, err);
}

/* ---- element-wise ---- */

static qvl_status run_unary(const qvl_node *n, cu_unary op,
                            qvl_backend *be, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    float scale = op == CU_SCALE ? n->params.scale.s : 1.0f;
    return cu_launched(n, cu_launch_unary(be->stream, op, scale, view_of(n->src[0]), n->dst->data),
                    err);
}

qvl_status cu_op_scale(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(n, CU_SCALE, be, err);
}
qvl_status cu_op_silu(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(n, CU_SILU, be, err);
}
qvl_status cu_op_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(n, CU_GELU_TANH, be, err);
}
qvl_status cu_op_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_unary(n, CU_GELU_ERF, be, err);
}

/* b padded on the left to a's 4 dims, aligned on the innermost dims; stride 0 where b has
 * size 1, which is the broadcast. The shape is a's, so flat indices decompose alike. */
static cu_view broadcast_to(const qvl_tensor *a, const qvl_tensor *b) {
    cu_view v = view_of(b);
    int pad_a = 4 - a->desc.ndim, pad_b = 4 - b->desc.ndim;
    v.ndim = 4;
    for (int i = 0; i < 4; i++) {
        int64_t bs = i < pad_b ? 1 : b->desc.shape[i - pad_b];
        v.shape[i] = i < pad_a ? 1 : a->desc.shape[i - pad_a];
        v.stride[i] = bs == 1 ? 0 : b->desc.stride[i - pad_b];
    }
    return v;
}

static qvl_status run_binary(const qvl_node *n, int is_mul, qvl_backend *be, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    cu_view a = view_of(n->src[0]), b = broadcast_to(n->src[0], n->src[1]);
    return cu_launched(n, cu_launch_binary(be->stream, is_mul, a, b, n->dst->data), err);
}

qvl_status cu_op_add(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(n, 0, be, err);
}
qvl_status cu_op_mul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_binary(n, 1, be, err);
}

/* ---- norms, rope ---- */

static qvl_status run_norm(const qvl_node *n, int layer, qvl_backend *be, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    cu_view beta = view_of(layer ? qvl_node_src(n, 2) : NULL);
    return cu_launched(n, cu_launch_norm(be->stream, layer, n->params.norm.eps, view_of(n->src[0]),
                                      view_of(n->src[1]), beta, n->dst->data),
                    err);
}

qvl_status cu_op_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_norm(n, 0, be, err);
}
qvl_status cu_op_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_norm(n, 1, be, err);
}

qvl_status cu_op_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_rope_params *p = &n->params.rope;
    return cu_launched(n, cu_launch_rope(be->stream, p->mode, p->theta, p->sections,
                                      view_of(n->src[0]), view_of(n->src[1]), n->dst->data),
                    err);
}

qvl_status cu_norm_rope_job_of(qvl_backend *be, const qvl_node *n, cu_norm_rope_job *j,
                               qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_norm_rope_params *p = &n->params.norm_rope;
    *j = (cu_norm_rope_job){.x = view_of(n->src[0]), .pos = view_of(n->src[1]),
                            .gamma = view_of(n->src[2]), .out = n->dst->data, .mode = p->mode,
                            .sections = {p->sections[0], p->sections[1], p->sections[2]},
                            .theta = p->theta, .eps = p->eps};
    return QVL_OK;
}

qvl_status cu_op_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    cu_norm_rope_job j;
    qvl_status s = cu_norm_rope_job_of(be, n, &j, err);
    return s != QVL_OK ? s : cu_launched(n, cu_launch_norm_rope(be->stream, &j, 1, NULL), err);
}

/* ---- softmax, masks, attention ---- */

qvl_status cu_op_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_softmax(be->stream, view_of(n->src[0]), n->dst->data), err);
}

qvl_status cu_op_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_argmax(be->stream, view_of(n->src[0]), n->dst->data), err);
}

qvl_status cu_op_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_mask(be->stream, view_of(n->src[0]), n->params.mask.n_past,
                                      NULL, NULL, 0, 0, n->dst->data),
                    err);
}

/* n_past is read from `at` by the kernel: nothing here waits for the device. */
qvl_status cu_op_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_mask(be->stream, view_of(n->src[0]), 0, n->src[1]->data, NULL,
                                      0, 0, n->dst->data),
                    err);
}

qvl_status cu_op_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *seg = n->src[1];
    if ((s = check_segments(be, n, seg, qvl_desc_row_len(&n->src[0]->desc), err)) != QVL_OK) return s;
    return cu_launched(n, cu_launch_mask(be->stream, view_of(n->src[0]), 0, NULL, seg->data,
                                      seg->desc.stride[0], seg->desc.shape[0], n->dst->data),
                    err);
}

static qvl_status scratch_f32(qvl_backend *be, const qvl_node *n, int slot, int64_t count,
                              float **out, qvl_error *err);

/* Segments are checked on the host (a sync); CAUSAL_AT's `at` is read by the kernel. Few
 * (query, head) rows over many keys run split-KV with partials in scratch. */
qvl_status cu_op_attention(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_attention_params *p = &n->params.attention;
    const qvl_tensor *seg = p->mask == QVL_MASK_SEGMENTS ? n->src[3] : NULL;
    const qvl_tensor *at = p->mask == QVL_MASK_CAUSAL_AT ? n->src[3] : NULL;
    if (seg && (s = check_segments(be, n, seg, n->src[0]->desc.shape[0], err)) != QVL_OK)
        return s;
    const qvl_tensor_desc *q = &n->src[0]->desc;
    int64_t N = q->shape[0], Hq = q->shape[1], D = q->shape[2], L = n->src[1]->desc.shape[0];
    int splits = cu_attention_splits(N, Hq, n->src[1]->desc.shape[1], L);
    float *part = NULL;
    if (splits > 1 &&
        (s = scratch_f32(be, n, CU_SCRATCH_C, cu_attention_part_floats(N, Hq, D, splits), &part,
                         err)) != QVL_OK)
        return s;
    return cu_launched(n, cu_launch_attention(be->stream, view_of(n->src[0]), view_of(n->src[1]),
                                           view_of(n->src[2]), p->scale, p->mask, p->n_past,
                                           at ? at->data : NULL, seg ? seg->data : NULL,
                                           seg ? seg->desc.stride[0] : 0,
                                           seg ? seg->desc.shape[0] : 0, splits, part,
                                           n->dst->data),
                    err);
}

/* ---- matmul and the fused ops ---- */

/* Scratch for the int8 (__dp4a) path of a matmul with weights w (NULL when the path does not
 * apply to these shapes). */
static qvl_status q8_scratch(qvl_backend *be, const qvl_node *n, const qvl_tensor *w,
                             int64_t batches, int64_t M, void **out, qvl_error *err) {
    *out = NULL;
    int64_t bytes = cu_matmul_q8_scratch_bytes(mat_of(w), batches, M);
    if (bytes <= 0) return QVL_OK;
    qvl_error e = {0};
    qvl_status s = cu_scratch(be, CU_SCRATCH_Q8, (size_t)bytes, out, &e);
    if (s != QVL_OK) return cu_fail(n, err, s, "%s", e.msg);
    return QVL_OK;
}

qvl_status cu_op_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *a = n->src[0], *w = n->src[1];
    int64_t rows = qvl_desc_n_rows(&a->desc), N = w->desc.shape[w->desc.ndim - 2];
    int64_t batches = w->desc.ndim == 3 ? a->desc.shape[0] : 1;
    int64_t per_w = w->desc.ndim == 3 ? batches / w->desc.shape[0] : 1;
    cu_mat wm = mat_of(w);
    cu_view bias = view_of(qvl_node_src(n, 2));
    if (w->desc.ndim == 2 && cu_gemv_fused_fits(&wm, 1, rows, CU_FUSED_COPY, 0)) /* decode: one launch */
        return cu_launched(n, cu_launch_gemv_fused(be->stream, CU_FUSED_COPY, 0, 0.0f, view_of(a),
                                                view_of(NULL), view_of(NULL), view_of(NULL),
                                                rows, &wm, &bias, 1, n->dst->data, N,
                                                be->sm_count),
                        err);
    void *q8 = NULL;
    if ((s = q8_scratch(be, n, w, batches, rows / batches, &q8, err)) != QVL_OK) return s;
    return cu_launched(n, cu_launch_matmul(be->stream, view_of(a), batches, rows / batches,
                                        mat_of(w), per_w, view_of(qvl_node_src(n, 2)), view_of(NULL),
                                        n->dst->data, N, 0, q8, 0, QVL_ACT_NONE),
                    err);
}

static qvl_status scratch_f32(qvl_backend *be, const qvl_node *n, int slot, int64_t count,
                              float **out, qvl_error *err) {
    void *p = NULL;
    qvl_error e = {0};
    qvl_status s = cu_scratch(be, slot, (size_t)count * sizeof(float), &p, &e);
    if (s != QVL_OK) return cu_fail(n, err, s, "%s", e.msg);
    *out = p;
    return QVL_OK;
}

/* May projections of these weight dtypes share one grouped launch (cu_launch_matmul_group)?
 * The same dtype, or the two k-quants (its kernel picks per part). */
static bool groupable(qvl_dtype a, qvl_dtype b) {
    bool kq_a = a == QVL_Q4_K || a == QVL_Q6_K, kq_b = b == QVL_Q4_K || b == QVL_Q6_K;
    return a == b || (kq_a && kq_b);
}

/* A few rows with f32/f16/bf16 weights alike: one fused launch (cu_gemv_fused.cu). Where
 * every projection runs on the int8 kernels, the norm goes straight into their int8 rows;
 * else into scratch [M, D]. Then each projection into its column range of the output, the
 * output activation (params.act) in the matmul's epilogue. */
qvl_status cu_op_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    const qvl_tensor *x = n->src[0];
    int64_t D = qvl_desc_row_len(&x->desc), M = qvl_desc_n_rows(&x->desc);
    int64_t total = qvl_desc_row_len(&n->dst->desc);
    cu_mat ws[3];
    cu_view bs[3];
    for (int i = 0; i < p->n_proj && i < 3; i++) {
        ws[i] = mat_of(n->src[CU_NL_W_SLOT(i)]);
        bs[i] = view_of(qvl_node_src(n, CU_NL_B_SLOT(i)));
    }
    /* the fused GEMV has no output activation: with one, the rows take the general path */
    if (p->act == QVL_ACT_NONE && cu_gemv_fused_fits(ws, p->n_proj, M, CU_FUSED_NORM, p->norm == QVL_NORM_LAYER))
        return cu_launched(n, cu_launch_gemv_fused(be->stream, CU_FUSED_NORM,
                                                p->norm == QVL_NORM_LAYER, p->eps, view_of(x),
                                                view_of(n->src[1]), view_of(qvl_node_src(n, 2)),
                                                view_of(NULL), M, ws, bs, p->n_proj,
                                                n->dst->data, total, be->sm_count),
                        err);
    int layer = p->norm == QVL_NORM_LAYER;
    cu_view beta = view_of(layer ? qvl_node_src(n, 2) : NULL);
    bool all_int8 = p->n_proj > 0;
    for (int i = 0; i < p->n_proj; i++)
        all_int8 = all_int8 && cu_matmul_int8_takes(mat_of(n->src[CU_NL_W_SLOT(i)]), 1, M);
    float *xn = NULL;
    bool quantised = false; /* the scratch holds xn as int8 blocks (cu_matmul_int8_takes) */
    if (all_int8) { /* the norm straight into int8 blocks: no f32 xn at all */
        void *q8 = NULL;
        if ((s = q8_scratch(be, n, n->src[CU_NL_W_SLOT(0)], 1, M, &q8, err)) != QVL_OK) return s;
        s = cu_launched(n, cu_launch_norm_quantize(be->stream, layer, p->eps, view_of(x),
                                                view_of(n->src[1]), beta, M, q8),
                     err);
        quantised = true;
    } else {
        if ((s = scratch_f32(be, n, CU_SCRATCH_A, M * D, &xn, err)) != QVL_OK) return s;
        s = cu_launched(n, cu_launch_norm(be->stream, layer, p->eps, view_of(x), view_of(n->src[1]),
                                       beta, xn),
                     err);
    }
    int64_t col = 0;
    bool try_group = true;
    for (int i = 0; s == QVL_OK && i < p->n_proj; i++) {
        const qvl_tensor *w = n->src[CU_NL_W_SLOT(i)];
        void *q8 = NULL;
        if ((s = q8_scratch(be, n, w, 1, M, &q8, err)) != QVL_OK) return s;
        /* the rest of the projections of this dtype in one launch, where the GEMVs allow:
         * the int8 ones on rows the norm quantised, the 16-bit ones on xn (once refused, the
         * rest are refused too: same rows, same switches) */
        int run = 1;
        while (try_group && (quantised || !all_int8) && i + run < p->n_proj && i + run < 3 &&
               groupable(w->desc.dtype, n->src[CU_NL_W_SLOT(i + run)]->desc.dtype))
            run++;
        if (run > 1) {
            int rc = cu_launch_matmul_group(be->stream, view_rows(xn, M, D), M, ws + i, bs + i, run,
                                            n->dst->data, total, col, quantised ? q8 : NULL,
                                            p->act);
            if (rc >= 0) {
                s = cu_launched(n, rc, err);
                for (int j = 0; j < run; j++) col += ws[i + j].rows;
                i += run - 1;
                continue;
            }
            try_group = false;
        }
        bool int8 = cu_matmul_int8_takes(mat_of(w), 1, M) != 0;
        s = cu_launched(n, cu_launch_matmul(be->stream, view_rows(xn, M, D), 1, M, mat_of(w), 1,
                                         view_of(qvl_node_src(n, CU_NL_B_SLOT(i))), view_of(NULL),
                                         n->dst->data, total, col, q8, quantised && int8, p->act),
                     err);
        quantised = int8;
        col += w->desc.shape[0];
    }
    return s;
}

/* A few rows with f32/f16/bf16 weights: one fused launch (cu_gemv_fused.cu). Else the
 * activation into the int8 rows of the int8 kernels, or into scratch h [M, F] (none: a
 * itself), then h . w_down^T + b_down + res straight into out. */
qvl_status cu_op_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *res = n->src[0], *a = n->src[1];
    int64_t M = qvl_desc_n_rows(&res->desc), F = qvl_desc_row_len(&a->desc), D = qvl_desc_row_len(&res->desc);
    int act = n->params.mlp.act;
    cu_mat wd = mat_of(n->src[2]);
    cu_view bd = view_of(qvl_node_src(n, 4));
    if (cu_gemv_fused_fits(&wd, 1, M, act == QVL_ACT_NONE ? CU_FUSED_COPY : CU_FUSED_ACT, 0))
        return cu_launched(n, cu_launch_gemv_fused(be->stream, act == QVL_ACT_NONE ? CU_FUSED_COPY
                                                                                : CU_FUSED_ACT,
                                                act, 0.0f, view_of(a), view_of(qvl_node_src(n, 3)),
                                                view_of(NULL), view_of(res), M, &wd, &bd, 1,
                                                n->dst->data, D, be->sm_count),
                        err);
    void *q8 = NULL;
    if ((s = q8_scratch(be, n, n->src[2], 1, M, &q8, err)) != QVL_OK) return s;
    if (act == QVL_ACT_NONE)
        return cu_launched(n, cu_launch_matmul(be->stream, view_of(a), 1, M, wd, 1, bd, view_of(res),
                                            n->dst->data, D, 0, q8, 0, QVL_ACT_NONE),
                        err);
    if (cu_matmul_int8_takes(wd, 1, M)) { /* the activation straight into int8 blocks */
        s = cu_launched(n, cu_launch_act_quantize(be->stream, act, view_of(a),
                                               view_of(qvl_node_src(n, 3)), M, q8),
                     err);
        if (s != QVL_OK) return s;
        return cu_launched(n, cu_launch_matmul(be->stream, view_rows(NULL, M, F), 1, M, wd, 1, bd,
                                            view_of(res), n->dst->data, D, 0, q8, 1, QVL_ACT_NONE),
                        err);
    }
    float *h = NULL;
    if ((s = scratch_f32(be, n, CU_SCRATCH_B, M * F, &h, err)) != QVL_OK) return s;
    s = cu_launched(n, cu_launch_mlp_act(be->stream, n->params.mlp.act, view_of(a),
                                      view_of(qvl_node_src(n, 3)), h),
                 err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_matmul(be->stream, view_rows(h, M, F), 1, M,
                                        mat_of(n->src[2]), 1, view_of(qvl_node_src(n, 4)),
                                        view_of(res), n->dst->data, D, 0, q8, 0, QVL_ACT_NONE),
                    err);
}

/* ---- data movement ---- */

qvl_status cu_op_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *table = n->src[0], *ids = n->src[1];
    int64_t V = table->desc.shape[0], N = ids->desc.shape[0], step = ids->desc.stride[0];
    int32_t *id = NULL;
    if ((s = read_i32(be, n, ids, N, step, &id, err)) != QVL_OK) return s;
    /* ids are data: checked here (on the host copy), not trusted */
    if ((s = qvl_check_indices(CU_NAME, n, id, N, step, V, "id", err)) != QVL_OK) return s;
    return cu_launched(n, cu_launch_get_rows(be->stream, view_of(table), view_of(ids), n->dst->data),
                    err);
}

qvl_status cu_op_cont(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    return cu_launched(n, cu_launch_cont(be->stream, view_of(n->src[0]), n->dst->data), err);
}

qvl_status cu_op_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return cu_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    const qvl_tensor *src = n->src[1];
    int64_t row_size = 1;
    for (int i = 1; i < src->desc.ndim; i++) row_size *= src->desc.shape[i];
    return cu_launched(n, cu_launch_store_rows(be->stream, view_of(src), n->dst->data,
                                            (int32_t)n->dst->desc.dtype,
                                            n->params.store.offset * row_size),
                    err);
}

/* The places come from device memory (at; slot for STORE_SLOT_ROWS); one out of range writes
 * nothing (the kernel checks it, the host cannot without waiting). */
qvl_status cu_store_at_job_of(qvl_backend *be, const qvl_node *n, cu_store_at_job *j,
                              qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    if (n->dst->data != n->src[0]->data)
        return cu_fail(n, err, QVL_E_INVALID, "the output must alias dst (it is a view of it)");
    const qvl_tensor_desc *d = &n->src[0]->desc;
    const bool slots = n->op == QVL_OP_STORE_SLOT_ROWS; /* dst [n_slots, dst_rows, ...] */
    *j = (cu_store_at_job){.src = view_of(n->src[1]), .dst = n->dst->data,
                           .dst_dtype = (int32_t)n->dst->desc.dtype,
                           .dst_rows = d->shape[slots ? 1 : 0],
                           .at = n->src[slots ? 3 : 2]->data,
                           .slot = slots ? n->src[2]->data : NULL,
                           .n_slots = slots ? d->shape[0] : 0};
    return QVL_OK;
}

/* STORE_ROWS_AT and STORE_SLOT_ROWS alone (run_graph launches neighbours in pairs). */
qvl_status cu_op_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    cu_store_at_job j;
    qvl_status s = cu_store_at_job_of(be, n, &j, err);
    return s != QVL_OK ? s : cu_launched(n, cu_launch_store_rows_at(be->stream, &j, 1), err);
}

/* ---- the batched decode step over pooled caches: places come from device memory per row ---- */

/* Slot 0 of a pool [S, L, Hkv, D] as [L, Hkv, D] (the kernel moves to each row's slot). */
static cu_view slot0_of(const qvl_tensor *pool) {
    cu_view v = view_of(pool);
    v.ndim = 3;
    for (int i = 0; i < 3; i++) {
        v.shape[i] = pool->desc.shape[i + 1];
        v.stride[i] = pool->desc.stride[i + 1];
    }
    v.shape[3] = v.stride[3] = 1;
    return v;
}

qvl_status cu_op_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *q = &n->src[0]->desc, *k = &n->src[1]->desc;
    int64_t N = q->shape[0], Hq = q->shape[1], D = q->shape[2], L = k->shape[1];
    int splits = cu_attention_splits(N, Hq, k->shape[2], L);
    float *part = NULL;
    if (splits > 1 &&
        (s = scratch_f32(be, n, CU_SCRATCH_C, cu_attention_part_floats(N, Hq, D, splits), &part,
                         err)) != QVL_OK)
        return s;
    return cu_launched(n, cu_launch_attention_slots(be->stream, view_of(n->src[0]),
                                                    slot0_of(n->src[1]), slot0_of(n->src[2]),
                                                    n->params.attention.scale, n->src[3]->data,
                                                    n->src[4]->data, k->shape[0], k->stride[0],
                                                    splits, part, n->dst->data),
                       err);
}

/* ---- SET_ROWS / ADD_ROWS ---- */

/* The indices stay on the device: the kernel skips one outside [0, N) (the host would have to
 * wait for the data to check it, which also keeps the node out of captured graphs). */
static qvl_status run_scatter(qvl_backend *be, const qvl_node *n, int add, qvl_error *err) {
    qvl_status s = cu_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0], *idx = n->src[1];
    return cu_launched(n, cu_launch_scatter_rows(be->stream, add, view_of(x), view_of(idx),
                                              view_of(n->src[2]), n->dst->data),
                    err);
}

qvl_status cu_op_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_scatter(be, n, 0, err);
}

qvl_status cu_op_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    return run_scatter(be, n, 1, err);
}

/* ---- extension QVL_EXT_SCRATCH: what the kernels above grow, asked before running ----
 * The same choices as the op functions (the same shape-only predicates: fused GEMV, int8
 * path, split-KV) and the same sizes; test_cuda_scratch_plan runs nodes and checks that the
 * scratch they grew is what this said. */
static void need_bytes(size_t *slot, int64_t bytes) {
    if (bytes > 0 && (size_t)bytes > *slot) *slot = (size_t)bytes;
}

static void need_attention(size_t s[QVL_SCRATCH_SLOTS], int64_t N, int64_t Hq, int64_t D,
                           int splits) {
    if (splits > 1)
        need_bytes(&s[CU_SCRATCH_C],
                   cu_attention_part_floats(N, Hq, D, splits) * (int64_t)sizeof(float));
}

void cu_scratch_need(qvl_backend *be, const qvl_node *n, size_t s[QVL_SCRATCH_SLOTS]) {
    (void)be;
    if (n->op == QVL_OP_MATMUL) {
        const qvl_tensor *a = n->src[0], *w = n->src[1];
        int64_t rows = qvl_desc_n_rows(&a->desc);
        int64_t batches = w->desc.ndim == 3 ? a->desc.shape[0] : 1;
        cu_mat wm = mat_of(w);
        if (w->desc.ndim == 2 && cu_gemv_fused_fits(&wm, 1, rows, CU_FUSED_COPY, 0)) return;
        need_bytes(&s[CU_SCRATCH_Q8], cu_matmul_q8_scratch_bytes(wm, batches, rows / batches));
    } else if (n->op == QVL_OP_NORM_LINEAR) {
        const qvl_norm_linear_params *p = &n->params.norm_linear;
        int64_t D = qvl_desc_row_len(&n->src[0]->desc), M = qvl_desc_n_rows(&n->src[0]->desc);
        cu_mat ws[3];
        for (int i = 0; i < p->n_proj && i < 3; i++) ws[i] = mat_of(n->src[CU_NL_W_SLOT(i)]);
        if (p->act == QVL_ACT_NONE && cu_gemv_fused_fits(ws, p->n_proj, M, CU_FUSED_NORM, p->norm == QVL_NORM_LAYER)) return;
        bool all_int8 = p->n_proj > 0;
        for (int i = 0; i < p->n_proj; i++) {
            cu_mat w = mat_of(n->src[CU_NL_W_SLOT(i)]);
            all_int8 = all_int8 && cu_matmul_int8_takes(w, 1, M);
            need_bytes(&s[CU_SCRATCH_Q8], cu_matmul_q8_scratch_bytes(w, 1, M));
        }
        if (!all_int8) need_bytes(&s[CU_SCRATCH_A], M * D * (int64_t)sizeof(float));
    } else if (n->op == QVL_OP_MLP_RESIDUAL) {
        int64_t M = qvl_desc_n_rows(&n->src[0]->desc), F = qvl_desc_row_len(&n->src[1]->desc);
        cu_mat wd = mat_of(n->src[2]);
        if (cu_gemv_fused_fits(&wd, 1, M,
                               n->params.mlp.act == QVL_ACT_NONE ? CU_FUSED_COPY : CU_FUSED_ACT, 0))
            return;
        need_bytes(&s[CU_SCRATCH_Q8], cu_matmul_q8_scratch_bytes(wd, 1, M));
        if (n->params.mlp.act != QVL_ACT_NONE && !cu_matmul_int8_takes(wd, 1, M))
            need_bytes(&s[CU_SCRATCH_B], M * F * (int64_t)sizeof(float));
    } else if (n->op == QVL_OP_ATTENTION) {
        const qvl_tensor_desc *q = &n->src[0]->desc, *k = &n->src[1]->desc;
        need_attention(s, q->shape[0], q->shape[1], q->shape[2],
                       cu_attention_splits(q->shape[0], q->shape[1], k->shape[1], k->shape[0]));
    } else if (n->op == QVL_OP_ATTENTION_SLOTS) {
        const qvl_tensor_desc *q = &n->src[0]->desc, *k = &n->src[1]->desc;
        need_attention(s, q->shape[0], q->shape[1], q->shape[2],
                       cu_attention_splits(q->shape[0], q->shape[1], k->shape[2], k->shape[1]));
    }
}
