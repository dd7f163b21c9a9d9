/* The Qwen3-VL vision encoder graph on small configs: structure (inputs, weights, outputs, op
 * counts) and what the fusion pass makes of it; the host-side vision inputs (bilinear taps,
 * rope rows/cols, segments) against the reference values in docs/MODEL.md; and numbers on the
 * reference backend: the graph against an independent encoder written here from docs/MODEL.md,
 * fused equals unfused, and images attend only within themselves. The text graphs are
 * test_model_graphs_text.c; what both share is test_model_graphs_util.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "test_model_graphs_util.h"

/* The 2B's vision geometry (48x48 position table) for docs/MODEL.md's sample points. */
static const char TABLE48[] =
    "{ \"text_config\": { \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,\n"
    "    \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    "    \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096, \"rope_theta\": 10000 },\n"
    "  \"vision_config\": { \"depth\": 1, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
    "    \"num_heads\": 2, \"patch_size\": 16, \"temporal_patch_size\": 2,\n"
    "    \"spatial_merge_size\": 2, \"in_channels\": 3, \"out_hidden_size\": 64,\n"
    "    \"num_position_embeddings\": 2304 } }\n";

static qvl_graph *build_vision(const qvl_qwen3vl_config *c, const qvl_image_grid *grids, size_t n) {
    qvl_vision_graph_opts o = {.n_images = n, .grids = grids, .weight_dtype = QVL_F32,
                               .norm_dtype = QVL_F32};
    qvl_graph *g = NULL;
    qvl_error err = {0};
    if (qvl_qwen3vl_build_vision(c, &o, &g, &err) != QVL_OK) fail_msg("build_vision: %s", err.msg);
    if (qvl_graph_validate(g, &err) != QVL_OK) fail_msg("validate: %s", err.msg);
    return g;
}

/* ---- structure ----------------------------------------------------------------------------- */

static void test_vision_structure(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c);
    const int64_t depth = c.vision.depth, nds = c.vision.n_deepstack;
    const qvl_image_grid grids[2] = {{1, 4, 4}, {1, 4, 6}};
    qvl_graph *g = build_vision(&c, grids, 2);
    const int64_t S = 16 + 24, M = S / 4;
    expect_shape(g, "patches", QVL_F32, 2, S, 3 * 2 * 2 * 2, 0);
    expect_shape(g, "pos_interp.idx", QVL_I32, 2, 4, S, 0);
    expect_shape(g, "pos_interp.w", QVL_F32, 3, 4, S, 1);
    expect_shape(g, "rope_pos", QVL_I32, 2, 2, S, 0);
    expect_shape(g, "segments", QVL_I32, 1, 3, 0, 0);
    expect_shape(g, "model.visual.patch_embed.proj.weight", QVL_F32, 2, 32, 24, 0);
    expect_shape(g, "model.visual.pos_embed.weight", QVL_F32, 2, 16, 32, 0);
    expect_shape(g, "model.visual.blocks.3.attn.qkv.weight", QVL_F32, 2, 96, 32, 0);
    expect_shape(g, "model.visual.merger.norm.weight", QVL_F32, 1, 32, 0, 0);
    expect_shape(g, "model.visual.deepstack_merger_list.1.norm.bias", QVL_F32, 1, 128, 0, 0);
    expect_shape(g, "model.visual.merger.linear_fc1.weight", QVL_F32, 2, 128, 128, 0);
    expect_shape(g, "model.visual.deepstack_merger_list.0.linear_fc2.weight", QVL_F32, 2, 64, 128,
                 0);
    assert_int_equal(qvl_graph_find(g, "model.visual.deepstack_merger_list.2.norm.weight"), -1);

    assert_int_equal(qvl_graph_n_outputs(g), 3);
    const char *outs[3] = {"merger", "deepstack.0", "deepstack.1"};
    for (int i = 0; i < 3; i++) {
        const qvl_tensor_desc *d = qvl_graph_desc(g, output(g, outs[i]));
        assert_int_equal(d->ndim, 2);
        assert_int_equal(d->shape[0], M);
        assert_int_equal(d->shape[1], 64);
    }
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_LAYER_NORM), 2 * depth + nds + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_ROPE), 2 * depth);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_SOFTMAX), depth);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MASK_SEGMENTS), depth);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_GELU_TANH), depth);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_GELU_ERF), nds + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_GET_ROWS), 4);

    qvl_fusion_report rep;
    fuse(g, &rep);
    assert_int_equal(fired(&rep, "attention"), depth);
    /* per block the MLP and the attention's projection + residual; the patch embedding plus
     * the position embeddings */
    assert_int_equal(fired(&rep, "mlp"), 2 * depth + 1);
    assert_true(fired(&rep, "norm") >= (size_t)(2 * depth + nds));
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_ATTENTION), depth);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_SOFTMAX), 0);
    qvl_graph_free(g);

    /* Grids must be whole merge windows; the config must have a vision part. */
    qvl_error err = {0};
    const qvl_image_grid odd = {1, 4, 5};
    qvl_vision_graph_opts o = {.n_images = 1, .grids = &odd, .weight_dtype = QVL_F32,
                               .norm_dtype = QVL_F32};
    g = NULL;
    assert_int_not_equal(qvl_qwen3vl_build_vision(&c, &o, &g, &err), QVL_OK);
    assert_null(g);
    assert_non_null(strstr(err.msg, "spatial_merge_size"));
    c.has_vision = false;
    o.grids = grids;
    assert_int_not_equal(qvl_qwen3vl_build_vision(&c, &o, &g, &err), QVL_OK);
}

/* ---- vision host inputs -------------------------------------------------------------------- */

static void test_vision_aux_sample_points(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(TABLE48, &c);
    const qvl_image_grid grid = {1, 30, 2};
    enum { S = 60 };
    int32_t idx[4 * S], rope[2 * S], seg[2];
    float w[4 * S];
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_vision_aux(&c, 1, &grid, idx, w, rope, seg, &err), QVL_OK);
    assert_int_equal(seg[0], 0);
    assert_int_equal(seg[1], S);
    bool seen_row[30] = {false};
    for (int s = 0; s < S; s++) {
        int row = rope[s], col = rope[S + s];
        assert_true(row >= 0 && row < 30 && col >= 0 && col < 2);
        seen_row[row] = true;
        /* Spec 5.2: y = row * 47/29 (0, 1.62069, 3.24138, ..., 47), x = col * 47. */
        double y = row * 47.0 / 29.0, x = col * 47.0;
        int y0 = idx[s] / 48, x0 = idx[s] % 48;
        float dy = w[2 * S + s] + w[3 * S + s], dx = w[1 * S + s] + w[3 * S + s];
        assert_int_equal(y0, (int)floor(y + 1e-9));
        assert_int_equal(x0, (int)floor(x + 1e-9));
        assert_true(fabs(y0 + dy - y) < 1e-5);
        assert_true(fabs(x0 + dx - x) < 1e-5);
        float sum = w[s] + w[S + s] + w[2 * S + s] + w[3 * S + s];
        assert_true(fabsf(sum - 1.0f) < 1e-6f);
        int y1 = y0 + 1 < 48 ? y0 + 1 : 47, x1 = x0 + 1 < 48 ? x0 + 1 : 47;
        assert_int_equal(idx[S + s], y0 * 48 + x1);
        assert_int_equal(idx[2 * S + s], y1 * 48 + x0);
        assert_int_equal(idx[3 * S + s], y1 * 48 + x1);
        if (row == 1) assert_true(fabsf((float)y0 + dy - 1.62069f) < 1e-5f);
        if (row == 2) assert_true(fabsf((float)y0 + dy - 3.24138f) < 1e-5f);
        if (row == 29) { /* the last sample sits exactly on the table's last row */
            assert_int_equal(y0, 47);
            assert_true(dy == 0.0f);
        }
    }
    for (int r = 0; r < 30; r++) assert_true(seen_row[r]);
}

static void test_vision_aux_window_order(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c); /* 4x4 table, merge 2 */
    /* A 4x4 grid on a 4x4 table: every sample on a table point, weight 1 on the first tap. */
    const qvl_image_grid g1 = {1, 4, 4};
    int32_t idx[64], rope[32], seg[2];
    float w[64];
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_vision_aux(&c, 1, &g1, idx, w, rope, seg, &err), QVL_OK);
    /* Spec 4.6: 2x2 windows in row-major order, each TL, TR, BL, BR. */
    static const int want[16][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3},
                                    {2, 0}, {2, 1}, {3, 0}, {3, 1}, {2, 2}, {2, 3}, {3, 2}, {3, 3}};
    for (int s = 0; s < 16; s++) {
        assert_int_equal(rope[s], want[s][0]);
        assert_int_equal(rope[16 + s], want[s][1]);
        int r = want[s][0], col = want[s][1];
        assert_int_equal(idx[s], r * 4 + col);
        assert_int_equal(idx[16 + s], r * 4 + (col + 1 < 4 ? col + 1 : 3));
        assert_true(w[s] == 1.0f);
        assert_true(w[16 + s] == 0.0f && w[32 + s] == 0.0f && w[48 + s] == 0.0f);
    }

    /* Segments: h*w per temporal group per image; rope rows repeat for each group. */
    const qvl_image_grid gs[3] = {{1, 4, 4}, {2, 2, 2}, {1, 2, 4}};
    enum { S = 16 + 8 + 8 };
    int32_t idx2[4 * S], rope2[2 * S], seg2[5];
    float w2[4 * S];
    assert_int_equal(qvl_qwen3vl_vision_aux(&c, 3, gs, idx2, w2, rope2, seg2, &err), QVL_OK);
    const int32_t want_seg[5] = {0, 16, 20, 24, 32};
    assert_memory_equal(seg2, want_seg, sizeof want_seg);
    for (int s = 0; s < 4; s++) {
        assert_int_equal(rope2[16 + s], rope2[20 + s]);         /* second frame, same rows */
        assert_int_equal(rope2[S + 16 + s], rope2[S + 20 + s]); /* and cols */
        assert_int_equal(idx2[16 + s], idx2[20 + s]);
    }
    /* The 2x4 image: windows (0,0..1) then (0,2..3). */
    assert_int_equal(rope2[24 + 4], 0);
    assert_int_equal(rope2[S + 24 + 4], 2);

    /* Bad grids and configs. */
    const qvl_image_grid bad[3] = {{0, 4, 4}, {1, 3, 4}, {1, 4, 0}};
    for (int i = 0; i < 3; i++) {
        qvl_error e = {0};
        assert_int_equal(qvl_qwen3vl_vision_aux(&c, 1, &bad[i], idx, w, rope, seg, &e),
                         QVL_E_INVALID);
        assert_true(strlen(e.msg) > 0);
    }
    c.has_vision = false;
    assert_int_not_equal(qvl_qwen3vl_vision_aux(&c, 1, &g1, idx, w, rope, seg, &err), QVL_OK);
}

/* ---- running on the reference backend ------------------------------------------------------ */

#ifdef QVL_REFERENCE_SO

typedef struct vision_run {
    float *merger, *ds0, *ds1;
    int64_t n;
} vision_run;

static vision_run run_vision(qvl_graph *g, wstore *ws, const qvl_qwen3vl_config *c,
                             const qvl_image_grid *grids, size_t n_img, const float *patches,
                             int64_t S, int64_t width) {
    int64_t G = 0;
    for (size_t i = 0; i < n_img; i++) G += grids[i].t;
    int32_t *idx = malloc((size_t)(4 * S) * sizeof *idx),
            *rope = malloc((size_t)(2 * S) * sizeof *rope);
    int32_t *seg = malloc((size_t)(G + 1) * sizeof *seg);
    float *w = malloc((size_t)(4 * S) * sizeof *w);
    assert_true(idx && rope && seg && w);
    qvl_error err = {0};
    if (qvl_qwen3vl_vision_aux(c, n_img, grids, idx, w, rope, seg, &err) != QVL_OK)
        fail_msg("aux: %s", err.msg);
    input_data in[5] = {
        {"patches", patches, (size_t)(S * width) * sizeof(float)},
        {"pos_interp.idx", idx, (size_t)(4 * S) * sizeof *idx},
        {"pos_interp.w", w, (size_t)(4 * S) * sizeof *w},
        {"rope_pos", rope, (size_t)(2 * S) * sizeof *rope},
        {"segments", seg, (size_t)(G + 1) * sizeof *seg},
    };
    qvl_exec *ex = run(g, ws, in, 5);
    vision_run r;
    r.merger = get(ex, output(g, "merger"), g, &r.n);
    r.ds0 = get(ex, output(g, "deepstack.0"), g, NULL);
    r.ds1 = get(ex, output(g, "deepstack.1"), g, NULL);
    qvl_exec_free(ex);
    free(idx);
    free(rope);
    free(seg);
    free(w);
    return r;
}

static void vision_run_free(vision_run *r) {
    free(r->merger);
    free(r->ds0);
    free(r->ds1);
}

/* ---- an independent vision encoder (docs/MODEL.md), in double, from the formulas ---- */

/* Weight `name` of graph g as host doubles; its element count must be n. */
static double *host_weight(const qvl_graph *g, int64_t n, const char *fmt, ...) QVL_PRINTF(3, 4);
static double *host_weight(const qvl_graph *g, int64_t n, const char *fmt, ...) {
    char name[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    qvl_tid t = qvl_graph_find(g, name);
    if (t < 0) fail_msg("reference: no weight %s", name);
    const qvl_tensor_desc *d = qvl_graph_desc(g, t);
    if (qvl_desc_nelem(d) != n)
        fail_msg("reference: %s has %lld elements, expected %lld", name,
                 (long long)qvl_desc_nelem(d), (long long)n);
    float *f = gen_weight(name, d);
    double *out = malloc((size_t)n * sizeof *out);
    assert_non_null(out);
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
    return out;
}

/* y[r] = x[r] . W^T + b for rows r; W is [n_out, n_in]. */
static double *ref_linear(const double *x, int64_t rows, int64_t n_in, int64_t n_out,
                          const double *w, const double *b) {
    double *y = malloc((size_t)(rows * n_out) * sizeof *y);
    assert_non_null(y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < n_out; o++) {
            double acc = b ? b[o] : 0.0;
            for (int64_t i = 0; i < n_in; i++) acc += x[r * n_in + i] * w[o * n_in + i];
            y[r * n_out + o] = acc;
        }
    return y;
}

static double *ref_layer_norm(const double *x, int64_t rows, int64_t n, const double *g,
                              const double *b) {
    double *y = malloc((size_t)(rows * n) * sizeof *y);
    assert_non_null(y);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++) mean += x[r * n + i];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
        var /= (double)n;
        for (int64_t i = 0; i < n; i++)
            y[r * n + i] = (x[r * n + i] - mean) / sqrt(var + 1e-6) * g[i] + b[i];
    }
    return y;
}

static double gelu_tanh(double z) {
    return 0.5 * z * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (z + 0.044715 * z * z * z)));
}
static double gelu_erf(double z) {
    return 0.5 * z * (1.0 + erf(z / sqrt(2.0)));
}

/* A merger (docs/MODEL.md, "Vision encoder") on z [rows, width]: fc1 -> gelu_erf -> fc2. */
static double *ref_merger_mlp(const qvl_graph *g, const char *prefix, int k, const double *z,
                              int64_t rows, int64_t width, int64_t out) {
    char fmt[128];
    snprintf(fmt, sizeof fmt, "%s.linear_fc1.weight", prefix);
    double *w1 = host_weight(g, width * width, fmt, k);
    snprintf(fmt, sizeof fmt, "%s.linear_fc1.bias", prefix);
    double *b1 = host_weight(g, width, fmt, k);
    snprintf(fmt, sizeof fmt, "%s.linear_fc2.weight", prefix);
    double *w2 = host_weight(g, out * width, fmt, k);
    snprintf(fmt, sizeof fmt, "%s.linear_fc2.bias", prefix);
    double *b2 = host_weight(g, out, fmt, k);
    double *h = ref_linear(z, rows, width, width, w1, b1);
    for (int64_t i = 0; i < rows * width; i++) h[i] = gelu_erf(h[i]);
    double *y = ref_linear(h, rows, width, out, w2, b2);
    free(w1), free(b1), free(w2), free(b2), free(h);
    return y;
}

/* Spec 5.1-5.7 for grids of t = 1 frames with merge size 2: returns merger and deepstack
 * outputs ([S/4, out] each; ds has n_deepstack entries). Weights come from the graph's names. */
static void ref_vision(const qvl_qwen3vl_config *c, const qvl_graph *g, const qvl_image_grid *grids,
                       size_t n_img, const float *patches, double **merger, double **ds) {
    const qvl_vision_config *v = &c->vision;
    const int64_t C = v->hidden_size, H = v->num_heads, D = C / H, F = v->intermediate_size;
    const int64_t W = v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
    const int64_t side = (int64_t)llround(sqrt((double)v->num_position_embeddings));
    const int64_t out = v->out_hidden_size, M = 4 * C;
    assert_int_equal(v->spatial_merge_size, 2);
    int64_t S = 0;
    for (size_t i = 0; i < n_img; i++) S += grids[i].h * grids[i].w;
    /* Per patch: image start, (row, col) of the 2-D rope and the image's grid. */
    int64_t *row = malloc((size_t)S * sizeof *row), *col = malloc((size_t)S * sizeof *col);
    int64_t *img_start = malloc((size_t)S * sizeof *img_start),
            *img_end = malloc((size_t)S * sizeof *img_end);
    double *x = malloc((size_t)(S * W) * sizeof *x);
    assert_true(row && col && img_start && img_end && x);
    for (int64_t i = 0; i < S * W; i++) x[i] = patches[i];
    for (size_t i = 0, base = 0; i < n_img; base += (size_t)(grids[i].h * grids[i].w), i++) {
        const int64_t h = grids[i].h, w = grids[i].w;
        for (int64_t s = 0; s < h * w; s++) {
            int64_t b = s / 4, u = s % 4;
            row[base + s] = 2 * (b / (w / 2)) + u / 2;
            col[base + s] = 2 * (b % (w / 2)) + u % 2;
            img_start[base + s] = (int64_t)base;
            img_end[base + s] = (int64_t)base + h * w;
        }
    }

    /* 5.1 patch embedding, 5.2 bilinear position embedding (align corners). */
    double *wp = host_weight(g, C * W, "model.visual.patch_embed.proj.weight");
    double *bp = host_weight(g, C, "model.visual.patch_embed.proj.bias");
    double *table = host_weight(g, side * side * C, "model.visual.pos_embed.weight");
    double *hs = ref_linear(x, S, W, C, wp, bp);
    for (int64_t s = 0; s < S; s++) {
        int64_t n_img_rows = 0, n_img_cols = 0;
        for (size_t i = 0, base = 0; i < n_img; base += (size_t)(grids[i].h * grids[i].w), i++)
            if ((int64_t)base == img_start[s]) n_img_rows = grids[i].h, n_img_cols = grids[i].w;
        double y = n_img_rows > 1 ? row[s] * (double)(side - 1) / (double)(n_img_rows - 1) : 0;
        double xx = n_img_cols > 1 ? col[s] * (double)(side - 1) / (double)(n_img_cols - 1) : 0;
        int64_t y0 = (int64_t)floor(y), x0 = (int64_t)floor(xx);
        int64_t y1 = y0 + 1 < side ? y0 + 1 : side - 1, x1 = x0 + 1 < side ? x0 + 1 : side - 1;
        double dy = y - (double)y0, dx = xx - (double)x0;
        for (int64_t e = 0; e < C; e++)
            hs[s * C + e] += (1 - dy) * (1 - dx) * table[(y0 * side + x0) * C + e] +
                             (1 - dy) * dx * table[(y0 * side + x1) * C + e] +
                             dy * (1 - dx) * table[(y1 * side + x0) * C + e] +
                             dy * dx * table[(y1 * side + x1) * C + e];
    }
    free(wp), free(bp), free(table), free(x);

    for (int blk = 0; blk < v->depth; blk++) {
        /* 5.4 attention half. */
        double *g1 = host_weight(g, C, "model.visual.blocks.%d.norm1.weight", blk);
        double *b1 = host_weight(g, C, "model.visual.blocks.%d.norm1.bias", blk);
        double *wqkv = host_weight(g, 3 * C * C, "model.visual.blocks.%d.attn.qkv.weight", blk);
        double *bqkv = host_weight(g, 3 * C, "model.visual.blocks.%d.attn.qkv.bias", blk);
        double *wo = host_weight(g, C * C, "model.visual.blocks.%d.attn.proj.weight", blk);
        double *bo = host_weight(g, C, "model.visual.blocks.%d.attn.proj.bias", blk);
        double *u = ref_layer_norm(hs, S, C, g1, b1);
        double *qkv = ref_linear(u, S, C, 3 * C, wqkv, bqkv);
        /* 5.3 rope: pairs (k, k + D/2); the first D/4 pairs turn with the row, the rest with
         * the column, at 10000^(-(k mod D/4)/(D/4)). */
        const int64_t Q = D / 4;
        for (int64_t s = 0; s < S; s++)
            for (int part = 0; part < 2; part++)
                for (int64_t hh = 0; hh < H; hh++) {
                    double *vec = qkv + s * 3 * C + part * C + hh * D;
                    for (int64_t k = 0; k < D / 2; k++) {
                        double omega = pow(10000.0, -(double)(k % Q) / (double)Q);
                        double a = (k < Q ? (double)row[s] : (double)col[s]) * omega;
                        double p = vec[k], q = vec[k + D / 2];
                        vec[k] = p * cos(a) - q * sin(a);
                        vec[k + D / 2] = q * cos(a) + p * sin(a);
                    }
                }
        double *ctx = calloc((size_t)(S * C), sizeof *ctx), *sc = malloc((size_t)S * sizeof *sc);
        assert_true(ctx && sc);
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t i = 0; i < S; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = img_start[i]; j < img_end[i]; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < D; e++)
                        d += qkv[i * 3 * C + hh * D + e] * qkv[j * 3 * C + C + hh * D + e];
                    sc[j] = d / sqrt((double)D);
                    mx = fmax(mx, sc[j]);
                }
                for (int64_t j = img_start[i]; j < img_end[i]; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int64_t j = img_start[i]; j < img_end[i]; j++)
                    for (int64_t e = 0; e < D; e++)
                        ctx[i * C + hh * D + e] +=
                            sc[j] / sum * qkv[j * 3 * C + 2 * C + hh * D + e];
            }
        double *a = ref_linear(ctx, S, C, C, wo, bo);
        for (int64_t i = 0; i < S * C; i++) hs[i] += a[i];
        free(g1), free(b1), free(wqkv), free(bqkv), free(wo), free(bo), free(u), free(qkv);
        free(ctx), free(sc), free(a);

        /* MLP half. */
        double *g2 = host_weight(g, C, "model.visual.blocks.%d.norm2.weight", blk);
        double *b2 = host_weight(g, C, "model.visual.blocks.%d.norm2.bias", blk);
        double *w1 = host_weight(g, F * C, "model.visual.blocks.%d.mlp.linear_fc1.weight", blk);
        double *bb1 = host_weight(g, F, "model.visual.blocks.%d.mlp.linear_fc1.bias", blk);
        double *w2 = host_weight(g, C * F, "model.visual.blocks.%d.mlp.linear_fc2.weight", blk);
        double *bb2 = host_weight(g, C, "model.visual.blocks.%d.mlp.linear_fc2.bias", blk);
        double *n2 = ref_layer_norm(hs, S, C, g2, b2);
        double *f = ref_linear(n2, S, C, F, w1, bb1);
        for (int64_t i = 0; i < S * F; i++) f[i] = gelu_tanh(f[i]);
        double *f2 = ref_linear(f, S, F, C, w2, bb2);
        for (int64_t i = 0; i < S * C; i++) hs[i] += f2[i];
        free(g2), free(b2), free(w1), free(bb1), free(w2), free(bb2), free(n2), free(f), free(f2);

        /* 5.6 deepstack: 4 consecutive patches concatenated, then norm over 4*C. */
        for (int k = 0; k < v->n_deepstack; k++) {
            if (v->deepstack_visual_indexes[k] != blk) continue;
            double *gn = host_weight(g, M, "model.visual.deepstack_merger_list.%d.norm.weight", k);
            double *bn = host_weight(g, M, "model.visual.deepstack_merger_list.%d.norm.bias", k);
            double *z = ref_layer_norm(hs, S / 4, M, gn, bn);
            ds[k] = ref_merger_mlp(g, "model.visual.deepstack_merger_list.%d", k, z, S / 4, M, out);
            free(gn), free(bn), free(z);
        }
    }
    /* 5.7 merger: norm per patch, then concat and MLP. */
    double *gm = host_weight(g, C, "model.visual.merger.norm.weight");
    double *bm = host_weight(g, C, "model.visual.merger.norm.bias");
    double *y = ref_layer_norm(hs, S, C, gm, bm);
    *merger = ref_merger_mlp(g, "model.visual.merger", 0, y, S / 4, M, out);
    free(gm), free(bm), free(y), free(hs), free(row), free(col), free(img_start), free(img_end);
}

static void expect_close_ref(const char *what, const double *ref, const float *got, int64_t n,
                             double rtol) {
    double scale = 1.0, worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(ref[i] - (double)got[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    if (worst > rtol * scale)
        fail_msg("%s: graph differs from the spec by %g at %lld (%g vs %g; scale %g)", what, worst,
                 (long long)at, (double)got[at], ref[at], scale);
}

static void test_vision_numerics(void **state) {
    qvl_test_backend *tb = *state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c);
    wstore ws = {.tb = tb};
    const qvl_image_grid grids[2] = {{1, 4, 4}, {1, 4, 6}};
    const int64_t S = 40, S1 = 16, width = 24, out = c.vision.out_hidden_size;
    const int64_t rows1 = S1 / 4 * out; /* image 1's merged rows, as floats */
    float *patches = malloc((size_t)(S * width) * sizeof *patches);
    assert_non_null(patches);
    uint64_t s = 7;
    for (int64_t i = 0; i < S * width; i++) patches[i] = next_uniform(&s);

    qvl_graph *plain = build_vision(&c, grids, 2), *fused = build_vision(&c, grids, 2);
    qvl_fusion_report rep;
    fuse(fused, &rep);
    vision_run a = run_vision(plain, &ws, &c, grids, 2, patches, S, width);
    vision_run b = run_vision(fused, &ws, &c, grids, 2, patches, S, width);
    assert_true(max_abs(a.merger, a.n) > 1e-3);
    /* The graph computes what docs/MODEL.md, "Vision encoder", says. */
    double *ref_m = NULL, *ref_ds[QVL_MAX_DEEPSTACK] = {NULL};
    ref_vision(&c, plain, grids, 2, patches, &ref_m, ref_ds);
    expect_close_ref("merger", ref_m, a.merger, a.n, 1e-4);
    expect_close_ref("deepstack.0", ref_ds[0], a.ds0, a.n, 1e-4);
    expect_close_ref("deepstack.1", ref_ds[1], a.ds1, a.n, 1e-4);
    free(ref_m);
    free(ref_ds[0]);
    free(ref_ds[1]);
    expect_close("vision merger fused vs unfused", a.merger, b.merger, a.n, 1e-4);
    expect_close("deepstack.0 fused vs unfused", a.ds0, b.ds0, a.n, 1e-4);
    expect_close("deepstack.1 fused vs unfused", a.ds1, b.ds1, a.n, 1e-4);

    /* Changing image 2's patches leaves image 1's rows alone and changes image 2's. */
    for (int64_t i = S1 * width; i < S * width; i++) patches[i] = next_uniform(&s);
    vision_run c2 = run_vision(fused, &ws, &c, grids, 2, patches, S, width);
    expect_close("image 1 merger rows", b.merger, c2.merger, rows1, 1e-6);
    expect_close("image 1 deepstack.0 rows", b.ds0, c2.ds0, rows1, 1e-6);
    expect_close("image 1 deepstack.1 rows", b.ds1, c2.ds1, rows1, 1e-6);
    double diff = 0;
    for (int64_t i = rows1; i < a.n; i++) diff = fmax(diff, fabs(b.merger[i] - c2.merger[i]));
    assert_true(diff > 1e-3);

    /* Image 1 alone gives the same rows as within the pair. */
    qvl_graph *single = build_vision(&c, grids, 1);
    fuse(single, &rep);
    vision_run d = run_vision(single, &ws, &c, grids, 1, patches, S1, width);
    assert_int_equal(d.n, rows1);
    expect_close("image 1 alone vs in a pair", c2.merger, d.merger, rows1, 1e-5);
    expect_close("image 1 alone vs in a pair (deepstack.1)", c2.ds1, d.ds1, rows1, 1e-5);

    vision_run_free(&a);
    vision_run_free(&b);
    vision_run_free(&c2);
    vision_run_free(&d);
    qvl_graph_free(plain);
    qvl_graph_free(fused);
    qvl_graph_free(single);
    free(patches);
    wstore_free(&ws);
}

#endif /* QVL_REFERENCE_SO */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vision_structure),
        cmocka_unit_test(test_vision_aux_sample_points),
        cmocka_unit_test(test_vision_aux_window_order),
    };
    int rc = cmocka_run_group_tests_name("vision graphs", tests, NULL, NULL);
#ifdef QVL_REFERENCE_SO
    const struct CMUnitTest numeric[] = {
        cmocka_unit_test(test_vision_numerics),
    };
    rc |=
        cmocka_run_group_tests_name("reference backend", numeric, setup_backend, teardown_backend);
#else
    print_message("skipped the numeric tests: the reference backend is not built\n");
#endif
    return rc;
}
