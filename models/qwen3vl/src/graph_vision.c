/* The Qwen3-VL vision encoder as a graph of primitive ops (docs/MODEL.md, "Vision encoder"):
 * patch embedding, bilinear position embedding, ViT blocks with 2-D rope and block-diagonal
 * attention, the deepstack mergers and the final merger. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qvl/checked.h"
#include "qvl/qwen3vl_graph.h"
#include "graph_weights.h"

#define VIS_PREFIX "model.visual."
#define VIS_EPS 1e-6f /* hard-coded in the reference model, not in config.json */
#define VIS_ROPE_THETA 10000.0f

static qvl_tid named(qvl_graph *g, qvl_tid t, const char *fmt, ...) QVL_PRINTF(3, 4);
static qvl_tid named(qvl_graph *g, qvl_tid t, const char *fmt, ...) {
    if (t < 0) return t;
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    qvl_g_name(g, t, "%s", buf);
    return t;
}

static qvl_tid weight(qvl_graph *g, qvl_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt,
                      ...) QVL_PRINTF(6, 7);
static qvl_tid weight(qvl_graph *g, qvl_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt,
                      ...) {
    char buf[QVL_TENSOR_NAME_MAX + 32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    const int64_t shape[2] = {d0, d1};
    return qvl_g_weight(g, buf, dt, ndim, shape);
}

/* A strided alias of x (up to 3 dims), offset in elements. */
static qvl_tid view(qvl_graph *g, qvl_tid x, int ndim, const int64_t *shape, const int64_t *stride,
                    int64_t offset) {
    qvl_tensor_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = QVL_F32;
    d.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        d.shape[i] = i < ndim ? shape[i] : 1;
        d.stride[i] = i < ndim ? stride[i] : 1;
    }
    if (x >= 0 && qvl_graph_desc(g, x)) d.dtype = qvl_graph_desc(g, x)->dtype;
    qvl_params p;
    memset(&p, 0, sizeof p);
    p.view.offset = offset;
    const qvl_tid src[1] = {x};
    return qvl_g_node(g, QVL_OP_VIEW, &p, src, &d, NULL);
}

typedef struct vis_dims {
    int64_t S, hidden, heads, head_dim, ffn, merged, merge_width, out_hidden;
    qvl_op block_act;
    qvl_dtype ndt;
    qwen_matrices mat; /* the matrices' dtypes */
} vis_dims;

static qvl_tid linear(qvl_graph *g, const vis_dims *d, qvl_tid x, int64_t n_out, int64_t n_in,
                      const char *prefix) {
    qvl_tid w = qwen_matrix(g, &d->mat, n_out, n_in, "%s.weight", prefix);
    qvl_tid b = weight(g, d->ndt, 1, n_out, 1, "%s.bias", prefix);
    return qvl_g_matmul(g, x, w, b);
}

static qvl_tid layer_norm(qvl_graph *g, const vis_dims *d, qvl_tid x, int64_t width,
                          const char *prefix) {
    qvl_tid w = weight(g, d->ndt, 1, width, 1, "%s.weight", prefix);
    qvl_tid b = weight(g, d->ndt, 1, width, 1, "%s.bias", prefix);
    return qvl_g_layer_norm(g, x, w, b, VIS_EPS);
}

/* Patch embedding plus the bilinearly resampled learned position embedding. */
static qvl_tid build_embedding(qvl_graph *g, const vis_dims *d, const qvl_vision_config *v,
                               int64_t patch_width) {
    const int64_t S = d->S;
    const int64_t patches_shape[2] = {S, patch_width};
    const int64_t idx_shape[2] = {4, S}, w_shape[3] = {4, S, 1};
    qvl_tid patches = qvl_g_input(g, "patches", QVL_F32, 2, patches_shape);
    qvl_tid idx = qvl_g_input(g, "pos_interp.idx", QVL_I32, 2, idx_shape);
    qvl_tid wts = qvl_g_input(g, "pos_interp.w", QVL_F32, 3, w_shape);

    qvl_tid x =
        named(g, linear(g, d, patches, d->hidden, patch_width, VIS_PREFIX "patch_embed.proj"),
              "v.patch_embd");
    qvl_tid table = qwen_matrix(g, &d->mat, v->num_position_embeddings, d->hidden,
                                VIS_PREFIX "pos_embed.weight");
    qvl_tid sum = -1;
    for (int k = 0; k < 4; k++) {
        const int64_t one[1] = {1}, col_shape[2] = {S, 1}, col_stride[2] = {1, 1};
        const int64_t ids_shape[1] = {S};
        qvl_tid ids = named(g, view(g, idx, 1, ids_shape, one, k * S), "v.pos_idx.%d", k);
        qvl_tid wk = named(g, view(g, wts, 2, col_shape, col_stride, k * S), "v.pos_w.%d", k);
        qvl_tid e = named(g, qvl_g_get_rows(g, table, ids), "v.pos_tap.%d", k);
        e = named(g, qvl_g_mul(g, e, wk), "v.pos_tap_weighted.%d", k);
        sum = k == 0 ? e : named(g, qvl_g_add(g, sum, e), "v.pos_sum.%d", k);
    }
    return named(g, qvl_g_add(g, x, sum), "v.embd");
}

/* One ViT block (pre-norm, residual). */
static qvl_tid build_block(qvl_graph *g, const vis_dims *d, int b, qvl_tid x, qvl_tid rope_pos,
                           qvl_tid segments) {
    const int64_t S = d->S, H = d->heads, D = d->head_dim, C = d->hidden;
    char pfx[96];

    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.norm1", b);
    qvl_tid n1 = named(g, layer_norm(g, d, x, C, pfx), "v.blk.%d.attn_norm", b);
    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.attn.qkv", b);
    qvl_tid qkv = named(g, linear(g, d, n1, 3 * C, C, pfx), "v.blk.%d.attn_qkv", b);

    /* Q, K, V are column blocks of qkv: strided [S, H, D] views. */
    const int64_t hs[3] = {S, H, D}, hst[3] = {3 * C, D, 1};
    qvl_tid q = named(g, view(g, qkv, 3, hs, hst, 0), "v.blk.%d.attn_q", b);
    qvl_tid k = named(g, view(g, qkv, 3, hs, hst, C), "v.blk.%d.attn_k", b);
    qvl_tid v = named(g, view(g, qkv, 3, hs, hst, 2 * C), "v.blk.%d.attn_v", b);

    qvl_rope_params rope;
    memset(&rope, 0, sizeof rope);
    rope.mode = QVL_ROPE_VISION_2D;
    rope.theta = VIS_ROPE_THETA;
    q = named(g, qvl_g_rope(g, q, rope_pos, &rope), "v.blk.%d.attn_q_rope", b);
    k = named(g, qvl_g_rope(g, k, rope_pos, &rope), "v.blk.%d.attn_k_rope", b);

    static const int perm_swap01[3] = {1, 0, 2};
    static const int perm_v[3] = {1, 2, 0};
    qvl_tid qp =
        named(g, qvl_g_permute(g, q, perm_swap01), "v.blk.%d.attn_q_perm", b); /* [H,S,D] */
    qvl_tid kp = named(g, qvl_g_permute(g, k, perm_swap01), "v.blk.%d.attn_k_perm", b);
    qvl_tid vp = named(g, qvl_g_permute(g, v, perm_v), "v.blk.%d.attn_v_perm", b); /* [H,D,S] */
    qvl_tid s = named(g, qvl_g_matmul(g, qp, kp, -1), "v.blk.%d.attn_scores", b);
    s = named(g, qvl_g_scale(g, s, (float)(1.0 / sqrt((double)D))), "v.blk.%d.attn_scaled", b);
    s = named(g, qvl_g_mask_segments(g, s, segments), "v.blk.%d.attn_masked", b);
    s = named(g, qvl_g_softmax(g, s), "v.blk.%d.attn_probs", b);
    qvl_tid ctx = named(g, qvl_g_matmul(g, s, vp, -1), "v.blk.%d.attn_ctx", b); /* [H,S,D] */
    ctx = named(g, qvl_g_permute(g, ctx, perm_swap01), "v.blk.%d.attn_ctx_perm", b);
    ctx = named(g, qvl_g_cont(g, ctx), "v.blk.%d.attn_ctx_cont", b);
    const int64_t flat[2] = {S, C};
    ctx = named(g, qvl_g_reshape(g, ctx, 2, flat), "v.blk.%d.attn_ctx_flat", b);
    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.attn.proj", b);
    qvl_tid a = named(g, linear(g, d, ctx, C, C, pfx), "v.blk.%d.attn_out", b);
    x = named(g, qvl_g_add(g, x, a), "v.blk.%d.attn_residual", b);

    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.norm2", b);
    qvl_tid n2 = named(g, layer_norm(g, d, x, C, pfx), "v.blk.%d.ffn_norm", b);
    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.mlp.linear_fc1", b);
    qvl_tid f = named(g, linear(g, d, n2, d->ffn, C, pfx), "v.blk.%d.ffn_up", b);
    f = named(g, qvl_g_unary(g, d->block_act, f), "v.blk.%d.ffn_act", b);
    snprintf(pfx, sizeof pfx, VIS_PREFIX "blocks.%d.mlp.linear_fc2", b);
    f = named(g, linear(g, d, f, C, d->ffn, pfx), "v.blk.%d.ffn_down", b);
    return named(g, qvl_g_add(g, x, f), "v.blk.%d.ffn_out", b);
}

/* fc1 -> gelu_erf -> fc2 of a merger whose input z is [S/m^2, m^2*hidden]. */
static qvl_tid merger_mlp(qvl_graph *g, const vis_dims *d, qvl_tid z, const char *prefix,
                          const char *label) {
    char pfx[96];
    snprintf(pfx, sizeof pfx, "%s.linear_fc1", prefix);
    qvl_tid f = named(g, linear(g, d, z, d->merge_width, d->merge_width, pfx), "%s.fc1", label);
    f = named(g, qvl_g_unary(g, QVL_OP_GELU_ERF, f), "%s.act", label);
    snprintf(pfx, sizeof pfx, "%s.linear_fc2", prefix);
    return named(g, linear(g, d, f, d->out_hidden, d->merge_width, pfx), "%s.fc2", label);
}

static qvl_status check_opts(const qvl_qwen3vl_config *cfg, const qvl_vision_graph_opts *o,
                             int64_t *S_out, qvl_error *err) {
    if (!cfg || !o) return qvl_fail(err, QVL_E_INVALID, "vision graph: no config or options");
    if (!cfg->has_vision)
        return qvl_fail(err, QVL_E_INVALID, "vision graph: the config has no vision_config");
    if (o->n_images == 0 || !o->grids)
        return qvl_fail(err, QVL_E_INVALID, "vision graph: no images");
    if (!qvl_dtype_valid(o->weight_dtype) || o->weight_dtype == QVL_I32 ||
        !qvl_dtype_valid(o->norm_dtype) || o->norm_dtype == QVL_I32)
        return qvl_fail(err, QVL_E_DTYPE,
                        "vision graph: weight and norm dtypes must be float types");
    const qvl_vision_config *v = &cfg->vision;
    const int64_t m = v->spatial_merge_size;
    if (m < 1 || v->num_heads < 1 || v->hidden_size % v->num_heads != 0)
        return qvl_fail(err, QVL_E_INVALID, "vision graph: config is not validated");
    int64_t S = 0;
    for (size_t i = 0; i < o->n_images; i++) {
        const qvl_image_grid *gr = &o->grids[i];
        if (gr->t < 1 || gr->h < 1 || gr->w < 1 || gr->h % m != 0 || gr->w % m != 0)
            return qvl_fail(err, QVL_E_INVALID,
                            "vision graph: image %zu: grid %lldx%lldx%lld must be positive with h "
                            "and w multiples of spatial_merge_size %lld",
                            i, (long long)gr->t, (long long)gr->h, (long long)gr->w, (long long)m);
        int64_t n = 0;
        if (!qvl_mul_i64(gr->t, gr->h, &n) || !qvl_mul_i64(n, gr->w, &n) ||
            !qvl_add_i64(S, n, &S) || S > INT32_MAX)
            return qvl_fail(err, QVL_E_LIMIT, "vision graph: too many patches (image %zu)", i);
    }
    *S_out = S;
    return QVL_OK;
}

qvl_status qvl_qwen3vl_build_vision(const qvl_qwen3vl_config *cfg, const qvl_vision_graph_opts *o,
                                    qvl_graph **out, qvl_error *err) {
    if (out) *out = NULL;
    if (!out) return qvl_fail(err, QVL_E_INVALID, "vision graph: no output pointer");
    int64_t S = 0;
    qvl_status st = check_opts(cfg, o, &S, err);
    if (st != QVL_OK) return st;
    const qvl_vision_config *v = &cfg->vision;
    const int64_t m2 = v->spatial_merge_size * v->spatial_merge_size;
    int64_t G = 0;
    for (size_t i = 0; i < o->n_images; i++) G += o->grids[i].t;
    vis_dims d = {
        .S = S,
        .hidden = v->hidden_size,
        .heads = v->num_heads,
        .head_dim = v->hidden_size / v->num_heads,
        .ffn = v->intermediate_size,
        .merged = S / m2,
        .merge_width = m2 * v->hidden_size,
        .out_hidden = v->out_hidden_size,
        .block_act = strcmp(v->hidden_act, "gelu") == 0 ? QVL_OP_GELU_ERF : QVL_OP_GELU_TANH,
        .ndt = o->norm_dtype,
        .mat = {o->weight_dtype, o->matrix_dtype_of, o->matrix_dtype_ctx},
    };
    const int64_t patch_width =
        v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;

    qvl_graph *g = qvl_graph_new();
    if (!g) return qvl_fail(err, QVL_E_NOMEM, "vision graph: out of memory");

    qvl_tid x = build_embedding(g, &d, v, patch_width);
    const int64_t rope_shape[2] = {2, S}, seg_shape[1] = {G + 1};
    qvl_tid rope_pos = qvl_g_input(g, "rope_pos", QVL_I32, 2, rope_shape);
    qvl_tid segments = qvl_g_input(g, "segments", QVL_I32, 1, seg_shape);
    const int64_t merged_shape[2] = {d.merged, d.merge_width};

    for (int b = 0; b < (int)v->depth; b++) {
        x = build_block(g, &d, b, x, rope_pos, segments);
        for (int k = 0; k < v->n_deepstack; k++) {
            if (v->deepstack_visual_indexes[k] != b) continue;
            char prefix[96], label[32], out_name[32];
            snprintf(prefix, sizeof prefix, VIS_PREFIX "deepstack_merger_list.%d", k);
            snprintf(label, sizeof label, "v.deepstack.%d", k);
            snprintf(out_name, sizeof out_name, "deepstack.%d", k);
            /* Deepstack norms act on the concatenated 2x2 window (m^2*hidden wide). */
            qvl_tid z = named(g, qvl_g_reshape(g, x, 2, merged_shape), "%s.in", label);
            char norm_pfx[112];
            snprintf(norm_pfx, sizeof norm_pfx, "%s.norm", prefix);
            z = named(g, layer_norm(g, &d, z, d.merge_width, norm_pfx), "%s.norm", label);
            qvl_g_output(g, merger_mlp(g, &d, z, prefix, label), out_name);
        }
    }

    /* The main merger normalises each patch (hidden wide) before the concat. */
    qvl_tid y = named(g, layer_norm(g, &d, x, d.hidden, VIS_PREFIX "merger.norm"), "v.merger.norm");
    y = named(g, qvl_g_reshape(g, y, 2, merged_shape), "v.merger.in");
    qvl_g_output(g, merger_mlp(g, &d, y, VIS_PREFIX "merger", "v.merger"), "merger");

    st = qvl_graph_error(g, err);
    if (st != QVL_OK) {
        qvl_error_prefix(err, "vision graph");
        qvl_graph_free(g);
        return st;
    }
    *out = g;
    return QVL_OK;
}
