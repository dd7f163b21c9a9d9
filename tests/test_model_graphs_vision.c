#define _POSIX_C_SOURCE 200809L /* strdup */
/* The Qwen3-VL graphs on small configs: structure (inputs, weights, outputs, op counts), what
 * the fusion pass makes of them, and numbers on the reference backend: fused equals unfused,
 * prefill + decode through the KV cache equals one longer prefill, and images attend only
 * within themselves. Also the host-side vision inputs (bilinear taps, rope rows/cols,
 * segments) against the reference values in docs/MODEL.md. */
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
#include "test_backend.h"

/* 2 layers, hidden 64, 4/2 heads of 16, mrope [4,2,2]; vision depth 4, hidden 32, 2 heads,
 * deepstack after blocks 1 and 2, a 4x4 position table. */
static const char SMALL[] =
    "{ \"tie_word_embeddings\": true, \"image_token_id\": 90,\n"
    "  \"text_config\": { \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,\n"
    "    \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    "    \"head_dim\": 16, \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096,\n"
    "    \"hidden_act\": \"silu\", \"rope_theta\": 10000,\n"
    "    \"rope_scaling\": {\"rope_type\": \"default\", \"mrope_section\": [4, 2, 2],\n"
    "                     \"mrope_interleaved\": true} },\n"
    "  \"vision_config\": { \"depth\": 4, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
    "    \"num_heads\": 2, \"patch_size\": 2, \"temporal_patch_size\": 2,\n"
    "    \"spatial_merge_size\": 2, \"in_channels\": 3, \"out_hidden_size\": 64,\n"
    "    \"num_position_embeddings\": 16, \"deepstack_visual_indexes\": [1, 2] } }\n";

/* Untied, 3 layers, head_dim 32 != hidden/heads, GQA 4:1, mrope [6,5,5]. */
static const char UNTIED[] =
    "{ \"tie_word_embeddings\": false,\n"
    "  \"text_config\": { \"vocab_size\": 80, \"hidden_size\": 64, \"intermediate_size\": 80,\n"
    "    \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 32, \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5000000,\n"
    "                        \"mrope_section\": [6, 5, 5], \"mrope_interleaved\": true} } }\n";

/* The 2B's vision geometry (48x48 position table) for docs/MODEL.md's sample points. */
static const char TABLE48[] =
    "{ \"text_config\": { \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,\n"
    "    \"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    "    \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096, \"rope_theta\": 10000 },\n"
    "  \"vision_config\": { \"depth\": 1, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
    "    \"num_heads\": 2, \"patch_size\": 16, \"temporal_patch_size\": 2,\n"
    "    \"spatial_merge_size\": 2, \"in_channels\": 3, \"out_hidden_size\": 64,\n"
    "    \"num_position_embeddings\": 2304 } }\n";

static void load_cfg(const char *json, qvl_qwen3vl_config *c) {
    qvl_error err = {0};
    if (qvl_qwen3vl_config_parse(json, strlen(json), "test-config.json", c, &err) != QVL_OK)
        fail_msg("config: %s", err.msg);
}

static qvl_text_graph_opts text_opts(int64_t n, int64_t past, int64_t cap, bool all) {
    qvl_text_graph_opts o;
    memset(&o, 0, sizeof o);
    o.n_tokens = n;
    o.n_past = past;
    o.kv_capacity = cap;
    o.all_logits = all;
    o.weight_dtype = QVL_F32;
    o.norm_dtype = QVL_F32;
    return o;
}

static qvl_graph *build_text(const qvl_qwen3vl_config *c, const qvl_text_graph_opts *o) {
    qvl_graph *g = NULL;
    qvl_error err = {0};
    if (qvl_qwen3vl_build_text(c, o, &g, &err) != QVL_OK) fail_msg("build_text: %s", err.msg);
    if (qvl_graph_validate(g, &err) != QVL_OK) fail_msg("validate: %s", err.msg);
    return g;
}

static qvl_graph *build_vision(const qvl_qwen3vl_config *c, const qvl_image_grid *grids, size_t n) {
    qvl_vision_graph_opts o = {n, grids, QVL_F32, QVL_F32};
    qvl_graph *g = NULL;
    qvl_error err = {0};
    if (qvl_qwen3vl_build_vision(c, &o, &g, &err) != QVL_OK) fail_msg("build_vision: %s", err.msg);
    if (qvl_graph_validate(g, &err) != QVL_OK) fail_msg("validate: %s", err.msg);
    return g;
}

static void fuse(qvl_graph *g, qvl_fusion_report *rep) {
    qvl_error err = {0};
    memset(rep, 0, sizeof *rep);
    if (qvl_graph_fuse(g, NULL, NULL, rep, &err) != QVL_OK) fail_msg("fuse: %s", err.msg);
    if (qvl_graph_validate(g, &err) != QVL_OK) fail_msg("validate after fusion: %s", err.msg);
}

/* How often the rule whose name contains `part` fired. */
static size_t fired(const qvl_fusion_report *rep, const char *part) {
    for (size_t i = 0; i < rep->n_rules; i++)
        if (strstr(rep->rule[i], part)) return rep->fired[i];
    fail_msg("no fusion rule named like '%s'", part);
    return 0;
}

static void expect_shape(const qvl_graph *g, const char *name, qvl_dtype dt, int ndim, int64_t d0,
                         int64_t d1, int64_t d2) {
    qvl_tid t = qvl_graph_find(g, name);
    if (t < 0) fail_msg("%s: not in the graph", name);
    const qvl_tensor_desc *d = qvl_graph_desc(g, t);
    const int64_t want[3] = {d0, d1, d2};
    bool ok = d->dtype == dt && d->ndim == ndim;
    for (int i = 0; i < ndim && ok; i++) ok = d->shape[i] == want[i];
    if (!ok) {
        char buf[96];
        fail_msg("%s: %s, expected %d dims [%lld, %lld, %lld] %s", name,
                 qvl_desc_str(d, buf, sizeof buf), ndim, (long long)d0, (long long)d1,
                 (long long)d2, qvl_dtype_name(dt));
    }
}

/* The tensor behind output `name`. */
static qvl_tid output(const qvl_graph *g, const char *name) {
    for (size_t i = 0; i < qvl_graph_n_outputs(g); i++) {
        const char *n = NULL;
        qvl_tid t = qvl_graph_output(g, i, &n);
        if (n && strcmp(n, name) == 0) return t;
    }
    fail_msg("no output %s", name);
    return -1;
}

/* ---- structure ----------------------------------------------------------------------------- */

static void test_text_structure(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c);
    const int64_t L = c.text.num_hidden_layers;
    qvl_text_graph_opts o = text_opts(5, 0, 8, false);
    qvl_graph *g = build_text(&c, &o);

    expect_shape(g, "ids", QVL_I32, 1, 5, 0, 0);
    expect_shape(g, "pos", QVL_I32, 2, 3, 5, 0);
    expect_shape(g, "kv.0.k", QVL_F32, 3, 8, 2, 16);
    expect_shape(g, "kv.1.v", QVL_F32, 3, 8, 2, 16);
    assert_int_equal(qvl_graph_find(g, "kv.2.k"), -1);
    expect_shape(g, "model.language_model.embed_tokens.weight", QVL_F32, 2, 100, 64, 0);
    expect_shape(g, "model.language_model.layers.1.self_attn.k_proj.weight", QVL_F32, 2, 32, 64, 0);
    expect_shape(g, "model.language_model.layers.0.self_attn.q_norm.weight", QVL_F32, 1, 16, 0, 0);
    expect_shape(g, "model.language_model.layers.1.mlp.down_proj.weight", QVL_F32, 2, 64, 96, 0);
    expect_shape(g, "model.language_model.norm.weight", QVL_F32, 1, 64, 0, 0);
    assert_int_equal(qvl_graph_find(g, "lm_head.weight"), -1); /* tied */

    assert_int_equal(qvl_graph_n_outputs(g), 1);
    qvl_tid logits = output(g, "logits");
    const qvl_tensor_desc *ld = qvl_graph_desc(g, logits);
    assert_int_equal(ld->ndim, 2);
    assert_int_equal(ld->shape[0], 1); /* only the last token */
    assert_int_equal(ld->shape[1], 100);

    /* Per layer: 7 projections + 2 attention products; one output projection. */
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MATMUL), 9 * L + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_RMS_NORM), 4 * L + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_ROPE), 2 * L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_STORE_ROWS), 2 * L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_SOFTMAX), L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MASK_CAUSAL), L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_SILU), L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_GET_ROWS), 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_ATTENTION), 0);

    size_t before = qvl_graph_n_nodes(g);
    qvl_fusion_report rep;
    fuse(g, &rep);
    assert_int_equal(fired(&rep, "attention"), L);
    assert_int_equal(fired(&rep, "mlp"), 2 * L); /* the MLP, and o_proj + residual */
    /* q/k/v and gate/up per layer, plus the final norm with the output projection. */
    assert_int_equal(fired(&rep, "norm"), 2 * L + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_ATTENTION), L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MLP_RESIDUAL), 2 * L);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_NORM_LINEAR), 2 * L + 1);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_SOFTMAX), 0);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MASK_CAUSAL), 0);
    assert_int_equal(rep.nodes_before, before);
    assert_int_equal(rep.nodes_after, qvl_graph_n_nodes(g));
    assert_true(rep.nodes_after < rep.nodes_before);
    qvl_graph_free(g);

    /* Decode: one token after 7 cached, every logit row when asked. */
    o = text_opts(1, 7, 8, true);
    g = build_text(&c, &o);
    fuse(g, &rep);
    assert_int_equal(fired(&rep, "attention"), L);
    assert_int_equal(fired(&rep, "mlp"), 2 * L);
    qvl_graph_free(g);
    o = text_opts(3, 0, 3, true);
    g = build_text(&c, &o);
    assert_int_equal(qvl_graph_desc(g, output(g, "logits"))->shape[0], 3);
    qvl_graph_free(g);
}

static void test_text_untied_and_head_dim(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(UNTIED, &c);
    qvl_text_graph_opts o = text_opts(4, 0, 4, false);
    qvl_graph *g = build_text(&c, &o);
    expect_shape(g, "lm_head.weight", QVL_F32, 2, 80, 64, 0);
    expect_shape(g, "model.language_model.layers.2.self_attn.q_proj.weight", QVL_F32, 2, 128, 64,
                 0);
    expect_shape(g, "model.language_model.layers.2.self_attn.o_proj.weight", QVL_F32, 2, 64, 128,
                 0);
    expect_shape(g, "kv.2.k", QVL_F32, 3, 4, 1, 32);
    qvl_fusion_report rep;
    fuse(g, &rep);
    assert_int_equal(fired(&rep, "attention"), 3);
    qvl_graph_free(g);

    /* Matrices take weight_dtype, norms norm_dtype. */
    o.weight_dtype = QVL_BF16;
    g = build_text(&c, &o);
    expect_shape(g, "lm_head.weight", QVL_BF16, 2, 80, 64, 0);
    expect_shape(g, "model.language_model.layers.0.input_layernorm.weight", QVL_F32, 1, 64, 0, 0);
    qvl_graph_free(g);
}

static void test_text_bad_options(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c);
    qvl_graph *g = (qvl_graph *)&c; /* must be reset to NULL on failure */
    qvl_error err = {0};
    qvl_text_graph_opts o = text_opts(4, 6, 8, false);
    assert_int_equal(qvl_qwen3vl_build_text(&c, &o, &g, &err), QVL_E_LIMIT);
    assert_null(g);
    assert_non_null(strstr(err.msg, "kv_capacity"));
    o = text_opts(0, 0, 8, false);
    assert_int_not_equal(qvl_qwen3vl_build_text(&c, &o, &g, &err), QVL_OK);
    o = text_opts(1, -1, 8, false);
    assert_int_not_equal(qvl_qwen3vl_build_text(&c, &o, &g, &err), QVL_OK);
    assert_null(g);
}

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
    qvl_vision_graph_opts o = {1, &odd, QVL_F32, QVL_F32};
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

/* Deterministic weights by name, shared by every graph of a test so that two graphs of the
 * same model see the same parameters. */
typedef struct wstore {
    qvl_test_backend *tb;
    size_t n;
    char *names[512];
    qvl_buffer bufs[512];
} wstore;

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

static float next_uniform(uint64_t *s) { /* [-1, 1) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* The host values of weight `name` with descriptor d (malloc'd f32). */
static float *gen_weight(const char *name, const qvl_tensor_desc *d) {
    int64_t n = qvl_desc_nelem(d);
    float *host = malloc((size_t)n * sizeof *host);
    assert_non_null(host);
    uint64_t s = hash_str(name);
    /* Norm weights near 1, biases small, matrices scaled by fan-in, tables O(1). */
    float scale = 1.0f, offset = 0.0f;
    if (ends_with(name, "norm.weight"))
        scale = 0.2f, offset = 1.0f;
    else if (ends_with(name, ".bias"))
        scale = 0.2f;
    else if (d->ndim == 2 && !strstr(name, "embed"))
        scale = 1.5f / sqrtf((float)d->shape[1]);
    for (int64_t i = 0; i < n; i++) host[i] = offset + scale * next_uniform(&s);
    return host;
}

static void *wstore_get(wstore *ws, const char *name, const qvl_tensor_desc *d) {
    for (size_t i = 0; i < ws->n; i++)
        if (strcmp(ws->names[i], name) == 0) return ws->bufs[i].data;
    assert_true(ws->n < 512);
    assert_int_equal(d->dtype, QVL_F32);
    float *host = gen_weight(name, d);
    int64_t n = qvl_desc_nelem(d);
    qvl_error err = {0};
    qvl_buffer *b = &ws->bufs[ws->n];
    size_t bytes = (size_t)n * sizeof *host;
    if (ws->tb->iface->buffer_alloc(ws->tb->be, bytes, b, &err) != QVL_OK ||
        ws->tb->iface->upload(ws->tb->be, b->data, host, bytes, &err) != QVL_OK)
        fail_msg("weight %s: %s", name, err.msg);
    free(host);
    ws->names[ws->n] = strdup(name);
    return ws->bufs[ws->n++].data;
}

static void wstore_free(wstore *ws) {
    for (size_t i = 0; i < ws->n; i++) {
        ws->tb->iface->buffer_free(ws->tb->be, &ws->bufs[i]);
        free(ws->names[i]);
    }
    ws->n = 0;
}

typedef struct input_data {
    const char *name;
    const void *data;
    size_t bytes;
} input_data;

/* The KV caches live in buffers the caller owns and binds, as the engine keeps them across
 * runs (an input set by copy lives in the arena, which the planner reuses after its last
 * reader). */
typedef struct kv_buffers {
    size_t n;
    char names[8][16];
    qvl_buffer buf[8];
    size_t bytes;
} kv_buffers;

static void kv_alloc(kv_buffers *kv, qvl_test_backend *tb, int64_t layers, size_t bytes,
                     const float *init) {
    memset(kv, 0, sizeof *kv);
    assert_true(layers * 2 <= 8);
    kv->bytes = bytes;
    qvl_error err = {0};
    for (int64_t l = 0; l < layers; l++)
        for (int v = 0; v < 2; v++) {
            size_t i = kv->n++;
            snprintf(kv->names[i], sizeof kv->names[i], "kv.%d.%c", (int)l, v ? 'v' : 'k');
            if (tb->iface->buffer_alloc(tb->be, bytes, &kv->buf[i], &err) != QVL_OK ||
                tb->iface->upload(tb->be, kv->buf[i].data, init, bytes, &err) != QVL_OK)
                fail_msg("kv buffer: %s", err.msg);
        }
}

static float *kv_read(kv_buffers *kv, qvl_test_backend *tb, const char *name) {
    for (size_t i = 0; i < kv->n; i++) {
        if (strcmp(kv->names[i], name) != 0) continue;
        float *host = malloc(kv->bytes);
        assert_non_null(host);
        qvl_error err = {0};
        if (tb->iface->download(tb->be, host, kv->buf[i].data, kv->bytes, &err) != QVL_OK)
            fail_msg("download %s: %s", name, err.msg);
        return host;
    }
    fail_msg("no kv buffer %s", name);
    return NULL;
}

static void kv_free(kv_buffers *kv, qvl_test_backend *tb) {
    for (size_t i = 0; i < kv->n; i++) tb->iface->buffer_free(tb->be, &kv->buf[i]);
    kv->n = 0;
}

/* Create an executor, bind weights (and the KV caches when given), set the named inputs and
 * run. */
static qvl_exec *run_kv(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in,
                        kv_buffers *kv) {
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    if (qvl_exec_create(g, ws->tb->iface, ws->tb->be, &ex, &err) != QVL_OK)
        fail_msg("exec_create: %s", err.msg);
    for (size_t i = 0; i < qvl_graph_n_tensors(g); i++) {
        qvl_tid t = (qvl_tid)i;
        if (qvl_graph_kind(g, t) != QVL_TENSOR_WEIGHT) continue;
        void *addr = wstore_get(ws, qvl_graph_tensor_name(g, t), qvl_graph_desc(g, t));
        if (qvl_exec_bind(ex, t, addr, &err) != QVL_OK) fail_msg("bind: %s", err.msg);
    }
    for (size_t i = 0; kv && i < kv->n; i++) {
        qvl_tid t = qvl_graph_find(g, kv->names[i]);
        if (t < 0) fail_msg("no input %s", kv->names[i]);
        if (qvl_exec_bind(ex, t, kv->buf[i].data, &err) != QVL_OK)
            fail_msg("bind %s: %s", kv->names[i], err.msg);
    }
    for (size_t i = 0; i < n_in; i++) {
        qvl_tid t = qvl_graph_find(g, in[i].name);
        if (t < 0) fail_msg("no input %s", in[i].name);
        if (qvl_exec_set(ex, t, in[i].data, in[i].bytes, &err) != QVL_OK)
            fail_msg("set %s: %s", in[i].name, err.msg);
    }
    if (qvl_exec_run(ex, &err) != QVL_OK) fail_msg("run: %s", err.msg);
    return ex;
}

static qvl_exec *run(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in) {
    return run_kv(g, ws, in, n_in, NULL);
}

static float *get(qvl_exec *ex, qvl_tid t, const qvl_graph *g, int64_t *n_out) {
    int64_t n = qvl_desc_nelem(qvl_graph_desc(g, t));
    float *out = malloc((size_t)n * sizeof *out);
    assert_non_null(out);
    qvl_error err = {0};
    if (qvl_exec_get(ex, t, out, (size_t)n * sizeof *out, &err) != QVL_OK)
        fail_msg("get: %s", err.msg);
    if (n_out) *n_out = n;
    return out;
}

static double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

static void expect_close(const char *what, const float *a, const float *b, int64_t n, double rtol) {
    double scale = fmax(1.0, max_abs(a, n)), worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_false(isnan(a[i]) || isnan(b[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst) worst = d, at = i;
    }
    if (worst > rtol * scale)
        fail_msg("%s: differ by %g at %lld (%g vs %g; scale %g)", what, worst, (long long)at,
                 (double)a[at], (double)b[at], scale);
}

static int setup_backend(void **state) {
    static qvl_test_backend tb;
    if (qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb) != 0) return -1;
    *state = &tb;
    return 0;
}

static int teardown_backend(void **state) {
    qvl_test_backend_close(*state);
    return 0;
}

/* Token ids and (t,h,w) positions with distinct components so MRoPE sections matter. */
static void text_inputs(int64_t n, int64_t first, int32_t *ids, int32_t *pos, int64_t vocab) {
    for (int64_t i = 0; i < n; i++) {
        int64_t p = first + i;
        ids[i] = (int32_t)((p * 37 + 11) % vocab);
        pos[i] = (int32_t)p;
        pos[n + i] = (int32_t)(p + 2 * (p % 3));
        pos[2 * n + i] = (int32_t)(3 * p + 1);
    }
}

static void test_text_fused_matches_unfused(void **state) {
    qvl_test_backend *tb = *state;
    const char *cfgs[2] = {SMALL, UNTIED};
    for (int ci = 0; ci < 2; ci++) {
        qvl_qwen3vl_config c;
        load_cfg(cfgs[ci], &c);
        wstore ws = {.tb = tb};
        const int64_t N = 5, past = 2, cap = 8, L = c.text.num_hidden_layers;
        const int64_t row = c.text.num_key_value_heads * c.text.head_dim, kv_n = cap * row;
        qvl_text_graph_opts o = text_opts(N, past, cap, true);
        qvl_graph *g[2] = {build_text(&c, &o), build_text(&c, &o)};
        qvl_fusion_report rep;
        fuse(g[1], &rep);

        int32_t ids[5], pos[15];
        text_inputs(N, past, ids, pos, c.text.vocab_size);
        float *kv = malloc((size_t)kv_n * sizeof *kv);
        assert_non_null(kv);
        uint64_t s = 99;
        for (int64_t i = 0; i < kv_n; i++) kv[i] = next_uniform(&s);
        input_data in[2] = {{"ids", ids, sizeof ids}, {"pos", pos, sizeof pos}};
        float *logits[2], *cache[2];
        int64_t n_logits = 0;
        for (int k = 0; k < 2; k++) {
            kv_buffers kvb;
            kv_alloc(&kvb, tb, L, (size_t)kv_n * sizeof *kv, kv);
            qvl_exec *ex = run_kv(g[k], &ws, in, 2, &kvb);
            logits[k] = get(ex, output(g[k], "logits"), g[k], &n_logits);
            cache[k] = kv_read(&kvb, tb, "kv.1.k");
            qvl_exec_free(ex);
            kv_free(&kvb, tb);
        }
        assert_int_equal(n_logits, N * c.text.vocab_size);
        assert_true(max_abs(logits[0], n_logits) > 1e-3); /* not trivially zero */
        expect_close("fused vs unfused logits", logits[0], logits[1], n_logits, 1e-4);
        expect_close("fused vs unfused kv cache", cache[0], cache[1], kv_n, 1e-5);
        /* The cache rows before n_past and after the new ones are untouched; the new ones
         * were written. */
        assert_memory_equal(cache[0], kv, (size_t)(past * row) * sizeof *kv);
        assert_memory_not_equal(cache[0] + past * row, kv + past * row,
                                (size_t)(N * row) * sizeof *kv);
        assert_memory_equal(cache[0] + (past + N) * row, kv + (past + N) * row,
                            (size_t)((cap - past - N) * row) * sizeof *kv);
        for (int k = 0; k < 2; k++) {
            free(logits[k]);
            free(cache[k]);
            qvl_graph_free(g[k]);
        }
        free(kv);
        wstore_free(&ws);
    }
}

/* Prefill of 4 tokens then one decode step through the KV cache gives the same logits as a
 * prefill of all 5; earlier rows do not depend on later tokens. */
static void test_text_kv_cache_continuity(void **state) {
    qvl_test_backend *tb = *state;
    qvl_qwen3vl_config c;
    load_cfg(SMALL, &c);
    wstore ws = {.tb = tb};
    const int64_t V = c.text.vocab_size, cap = 8, L = c.text.num_hidden_layers;
    const size_t kv_bytes =
        (size_t)(cap * c.text.num_key_value_heads * c.text.head_dim) * sizeof(float);
    float *zeros = calloc(1, kv_bytes);
    assert_non_null(zeros);
    qvl_fusion_report rep;

    /* Reference: all five at once. */
    int32_t ids5[5], pos5[15];
    text_inputs(5, 0, ids5, pos5, V);
    qvl_text_graph_opts o = text_opts(5, 0, cap, true);
    qvl_graph *g5 = build_text(&c, &o);
    fuse(g5, &rep);
    kv_buffers kv5;
    kv_alloc(&kv5, tb, L, kv_bytes, zeros);
    input_data in[2] = {{"ids", ids5, sizeof ids5}, {"pos", pos5, sizeof pos5}};
    qvl_exec *ex = run_kv(g5, &ws, in, 2, &kv5);
    float *all5 = get(ex, output(g5, "logits"), g5, NULL);
    qvl_exec_free(ex);
    kv_free(&kv5, tb);

    /* Prefill of the first four into one set of caches ... */
    int32_t ids4[4], pos4[12];
    text_inputs(4, 0, ids4, pos4, V);
    o = text_opts(4, 0, cap, true);
    qvl_graph *g4 = build_text(&c, &o);
    fuse(g4, &rep);
    kv_buffers kv;
    kv_alloc(&kv, tb, L, kv_bytes, zeros);
    in[0] = (input_data){"ids", ids4, sizeof ids4};
    in[1] = (input_data){"pos", pos4, sizeof pos4};
    ex = run_kv(g4, &ws, in, 2, &kv);
    float *all4 = get(ex, output(g4, "logits"), g4, NULL);
    qvl_exec_free(ex);
    expect_close("rows 0..3 with and without token 4", all5, all4, 4 * V, 1e-4);

    /* ... then one decode step for token 4 on the same caches. */
    int32_t id1[1] = {ids5[4]}, pos1[3] = {pos5[4], pos5[5 + 4], pos5[10 + 4]};
    o = text_opts(1, 4, cap, false);
    qvl_graph *g1 = build_text(&c, &o);
    fuse(g1, &rep);
    in[0] = (input_data){"ids", id1, sizeof id1};
    in[1] = (input_data){"pos", pos1, sizeof pos1};
    ex = run_kv(g1, &ws, in, 2, &kv);
    float *step = get(ex, output(g1, "logits"), g1, NULL);
    qvl_exec_free(ex);
    expect_close("decode step vs prefill row 4", all5 + 4 * V, step, V, 1e-4);

    /* Positions 3 and 4 give different logits, so the comparisons above are not vacuous. */
    double diff = 0;
    for (int64_t i = 0; i < V; i++) diff = fmax(diff, fabs(all5[4 * V + i] - all5[3 * V + i]));
    assert_true(diff > 1e-4);

    kv_free(&kv, tb);
    free(all5);
    free(all4);
    free(step);
    free(zeros);
    qvl_graph_free(g5);
    qvl_graph_free(g4);
    qvl_graph_free(g1);
    wstore_free(&ws);
}

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
        cmocka_unit_test(test_text_structure),
        cmocka_unit_test(test_text_untied_and_head_dim),
        cmocka_unit_test(test_text_bad_options),
        cmocka_unit_test(test_vision_structure),
        cmocka_unit_test(test_vision_aux_sample_points),
        cmocka_unit_test(test_vision_aux_window_order),
    };
    int rc = cmocka_run_group_tests_name("graphs", tests, NULL, NULL);
#ifdef QVL_REFERENCE_SO
    const struct CMUnitTest numeric[] = {
        cmocka_unit_test(test_text_fused_matches_unfused),
        cmocka_unit_test(test_text_kv_cache_continuity),
        cmocka_unit_test(test_vision_numerics),
    };
    rc |=
        cmocka_run_group_tests_name("reference backend", numeric, setup_backend, teardown_backend);
#else
    print_message("skipped the numeric tests: the reference backend is not built\n");
#endif
    return rc;
}
