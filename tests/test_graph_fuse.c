/* The fusion pass: on graphs shaped like Qwen3-VL's text layers and vision blocks every rule
 * fires where it should (node counts per op, fire counts), the fused graph computes what the
 * unfused one does on the reference backend, and near-miss patterns are left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test_graph_util.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* Fuses g for backend f (NULL: every rule) and validates the result. The report starts as
 * 0xff bytes so that a field the pass leaves unset shows. */
static qvl_fusion_report fuse_for(qvl_graph *g, const qvl_backend_iface *f) {
    qvl_fusion_report rep;
    memset(&rep, 0xff, sizeof rep);
    qvl_error err = {0};
    qvl_status s = qvl_graph_fuse(g, f, NULL, &rep, &err);
    if (s != QVL_OK) print_error("fuse: %s\n", err.msg);
    assert_int_equal(s, QVL_OK);
    assert_int_equal(qvl_graph_validate(g, &err), QVL_OK);
    return rep;
}

static qvl_fusion_report fuse(qvl_graph *g) {
    return fuse_for(g, NULL);
}

/* Where `rule` stands in the report; the test fails when it is missing. */
static size_t rule_index(const qvl_fusion_report *r, const char *rule) {
    for (size_t i = 0; i < r->n_rules; i++)
        if (strcmp(r->rule[i], rule) == 0) return i;
    fail_msg("rule %s missing from the report", rule);
    return 0;
}

static size_t fired(const qvl_fusion_report *r, const char *rule) {
    return r->fired[rule_index(r, rule)];
}

/* Runs both graphs on the reference backend with the same data; every output must agree to
 * 1e-4 of its largest magnitude. Skips (returns) when the backend is not built. */
static void expect_same_results(qvl_graph *a, qvl_graph *b, void *i32_user) {
    qvl_test_backend tb;
    if (!tg_open_reference(&tb)) return;
    size_t n_out = qvl_graph_n_outputs(a);
    assert_int_equal(n_out, qvl_graph_n_outputs(b));
    float **oa = calloc(n_out, sizeof *oa), **ob = calloc(n_out, sizeof *ob);
    assert_non_null(oa);
    assert_non_null(ob);
    tg_run(a, tb.iface, tb.be, 42, i32_user, oa);
    tg_run(b, tb.iface, tb.be, 42, i32_user, ob);
    for (size_t i = 0; i < n_out; i++) {
        const char *name_a, *name_b;
        qvl_tid ta = qvl_graph_output(a, i, &name_a), tb_ = qvl_graph_output(b, i, &name_b);
        assert_string_equal(name_a, name_b);
        const qvl_tensor_desc *da = qvl_graph_desc(a, ta);
        assert_true(qvl_desc_same_shape(da, qvl_graph_desc(b, tb_)));
        int64_t n = qvl_desc_nelem(da);
        double max_a = 0;
        for (int64_t j = 0; j < n; j++) max_a = fmax(max_a, fabs(oa[i][j]));
        assert_true(max_a > 1e-3); /* a real signal, not an all-zero output */
        assert_true(tg_close(oa[i], ob[i], n, 1e-4, 1e-6));
        free(oa[i]);
        free(ob[i]);
    }
    free(oa);
    free(ob);
    qvl_test_backend_close(&tb);
}

static size_t count_n_proj(const qvl_graph *g, int n_proj) {
    size_t c = 0;
    for (qvl_tid t = 0; t < (qvl_tid)qvl_graph_n_tensors(g); t++)
        if (qvl_graph_is_live(g, t) && qvl_graph_op(g, t) == QVL_OP_NORM_LINEAR &&
            qvl_graph_params(g, t)->norm_linear.n_proj == n_proj)
            c++;
    return c;
}

static qvl_tid find_op(const qvl_graph *g, qvl_op op) {
    for (qvl_tid t = 0; t < (qvl_tid)qvl_graph_n_tensors(g); t++)
        if (qvl_graph_is_live(g, t) && qvl_graph_op(g, t) == op) return t;
    return -1;
}

static void text_stack(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    const size_t L = (size_t)d.n_layers;
    qvl_graph *g = tg_build_text(&d);
    assert_int_equal(tg_count(g, QVL_OP_RMS_NORM), 4 * L + 1);
    assert_int_equal(tg_count(g, QVL_OP_MATMUL), 9 * L + 1);
    assert_int_equal(tg_count(g, QVL_OP_SOFTMAX), L);
    assert_int_equal(tg_count(g, QVL_OP_ADD), 2 * L);
    size_t before = qvl_graph_n_nodes(g);

    qvl_fusion_report r = fuse(g);
    assert_int_equal(r.n_rules, 5);
    assert_int_equal(fired(&r, "norm+linear"), 2 * L + 1);
    assert_int_equal(fired(&r, "attention+softmax"), L);
    assert_int_equal(fired(&r, "mlp+residual"), 2 * L); /* the MLP, and o_proj + its residual */
    assert_int_equal(fired(&r, "norm+rope"), 2 * L);
    assert_int_equal(fired(&r, "linear+act"), 0); /* the gated MLP keeps its silu */
    assert_int_equal(r.nodes_before, before);
    assert_int_equal(r.nodes_after, qvl_graph_n_nodes(g));
    assert_true(r.nodes_after < r.nodes_before);

    /* Each layer: NORM_LINEAR x2 (q/k/v and gate/up), NORM_ROPE x2 (q and k), ATTENTION,
     * MLP_RESIDUAL x2 (o_proj + residual with act none, the MLP). */
    assert_int_equal(tg_count(g, QVL_OP_NORM_LINEAR), 2 * L + 1);
    assert_int_equal(count_n_proj(g, 3), L);
    assert_int_equal(count_n_proj(g, 2), L);
    assert_int_equal(count_n_proj(g, 1), 1); /* final norm + lm_head */
    assert_int_equal(tg_count(g, QVL_OP_ATTENTION), L);
    assert_int_equal(tg_count(g, QVL_OP_MLP_RESIDUAL), 2 * L);
    size_t n_none = 0;
    for (size_t t = 0; t < qvl_graph_n_tensors(g); t++)
        if (qvl_graph_kind(g, (qvl_tid)t) == QVL_TENSOR_NODE && qvl_graph_is_live(g, (qvl_tid)t) &&
            qvl_graph_op(g, (qvl_tid)t) == QVL_OP_MLP_RESIDUAL &&
            qvl_graph_params(g, (qvl_tid)t)->mlp.act == QVL_ACT_NONE)
            n_none++;
    assert_int_equal(n_none, L);
    assert_int_equal(tg_count(g, QVL_OP_NORM_ROPE), 2 * L);
    /* What stays primitive: the cache writes. */
    assert_int_equal(tg_count(g, QVL_OP_STORE_ROWS), 2 * L);
    const qvl_op gone[] = {QVL_OP_SOFTMAX, QVL_OP_SCALE, QVL_OP_MASK_CAUSAL, QVL_OP_SILU,
                           QVL_OP_MUL, QVL_OP_CONT, QVL_OP_RMS_NORM, QVL_OP_ROPE,
                           QVL_OP_MATMUL, QVL_OP_ADD};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        assert_int_equal(tg_count(g, gone[i]), 0);

    qvl_tid att = find_op(g, QVL_OP_ATTENTION);
    const qvl_params *p = qvl_graph_params(g, att);
    assert_int_equal(p->attention.mask, QVL_MASK_CAUSAL);
    assert_int_equal(p->attention.n_past, d.n_past);
    assert_true(fabsf(p->attention.scale - 0.25f) < 1e-7f);
    const char *name = qvl_graph_tensor_name(g, att);
    assert_non_null(name);
    assert_non_null(strstr(name, "attn_out"));
    qvl_tid logits = qvl_graph_find(g, "logits");
    assert_int_equal(qvl_graph_op(g, logits), QVL_OP_NORM_LINEAR);

    /* A second pass finds nothing more. */
    qvl_fusion_report r2 = fuse(g);
    for (size_t i = 0; i < r2.n_rules; i++) assert_int_equal(r2.fired[i], 0);

    qvl_graph *plain = tg_build_text(&d);
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);
}

static void text_decode_step(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    d.n_tokens = 1;
    d.n_past = 7;
    d.n_layers = 1;
    d.lm_head = false; /* the output is the last residual add, i.e. the MLP_RESIDUAL */
    qvl_graph *g = tg_build_text(&d);
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "norm+linear"), 2);
    assert_int_equal(fired(&r, "attention+softmax"), 1);
    assert_int_equal(fired(&r, "mlp+residual"), 2);
    assert_int_equal(qvl_graph_op(g, qvl_graph_find(g, "out")), QVL_OP_MLP_RESIDUAL);
    qvl_graph *plain = tg_build_text(&d);
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);
}

static void vision_block(void **state) {
    (void)state;
    tg_vision_dims d = tg_vision_default();
    qvl_graph *g = tg_build_vision(&d);
    assert_int_equal(tg_count(g, QVL_OP_LAYER_NORM), 2);
    assert_int_equal(tg_count(g, QVL_OP_MATMUL), 6);
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "norm+linear"), 2);
    assert_int_equal(fired(&r, "attention+softmax"), 1);
    assert_int_equal(fired(&r, "mlp+residual"), 2); /* the MLP, and proj + its residual */
    assert_int_equal(fired(&r, "linear+act"), 1);   /* the gelu into fc1's epilogue */
    assert_int_equal(tg_count(g, QVL_OP_LAYER_NORM), 0);
    assert_int_equal(count_n_proj(g, 1), 2);
    assert_int_equal(tg_count(g, QVL_OP_MATMUL), 0);
    assert_int_equal(tg_count(g, QVL_OP_ADD), 0);
    assert_int_equal(tg_count(g, QVL_OP_GELU_TANH), 0);
    qvl_tid att = find_op(g, QVL_OP_ATTENTION);
    assert_int_equal(qvl_graph_params(g, att)->attention.mask, QVL_MASK_SEGMENTS);
    assert_int_equal(qvl_graph_srcs(g, att)[3], qvl_graph_find(g, "segments"));
    qvl_tid mlp = qvl_graph_find(g, "out");
    assert_int_equal(qvl_graph_op(g, mlp), QVL_OP_MLP_RESIDUAL);
    assert_int_equal(qvl_graph_params(g, mlp)->mlp.act, QVL_ACT_NONE);
    assert_int_equal(qvl_graph_srcs(g, mlp)[3], -1);                             /* no up */
    assert_int_equal(qvl_graph_srcs(g, mlp)[4], qvl_graph_find(g, "v.fc2.b")); /* b_down */
    qvl_tid fc1 = qvl_graph_srcs(g, mlp)[1];
    assert_int_equal(qvl_graph_op(g, fc1), QVL_OP_NORM_LINEAR);
    assert_int_equal(qvl_graph_params(g, fc1)->norm_linear.act, QVL_ACT_GELU_TANH);
    for (qvl_tid t = 0; t < (qvl_tid)qvl_graph_n_tensors(g); t++)
        if (qvl_graph_is_live(g, t) && qvl_graph_op(g, t) == QVL_OP_NORM_LINEAR) {
            assert_int_equal(qvl_graph_params(g, t)->norm_linear.norm, QVL_NORM_LAYER);
            if (t != fc1) /* the qkv projection feeds views: no activation */
                assert_int_equal(qvl_graph_params(g, t)->norm_linear.act, QVL_ACT_NONE);
        }
    qvl_graph *plain = tg_build_vision(&d);
    int64_t patches = d.n_patches;
    expect_same_results(plain, g, &patches);
    qvl_graph_free(plain);
    qvl_graph_free(g);
}

/* Views under a fused projection (reshape, then permute) are rewritten into the fused
 * layout and still read the right elements. */
static qvl_graph *build_views_under_slices(void) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(3, 16));
    qvl_tid h = qvl_g_rms_norm(g, x, qvl_g_weight(g, "g", QVL_F32, SHAPE(16)), 1e-5f);
    qvl_tid a = qvl_g_matmul(g, h, qvl_g_weight(g, "wa", QVL_F32, SHAPE(16, 16)), -1);
    qvl_tid b = qvl_g_matmul(g, h, qvl_g_weight(g, "wb", QVL_F32, SHAPE(8, 16)),
                             qvl_g_weight(g, "bb", QVL_F32, SHAPE(8)));
    qvl_tid ar = qvl_g_reshape(g, a, SHAPE(3, 2, 8));
    qvl_tid ap = qvl_g_permute(g, ar, (const int[]){1, 0, 2});
    qvl_tid as = qvl_g_slice(g, ap, 2, 3, 4);
    qvl_g_output(g, qvl_g_cont(g, as), "a");
    qvl_g_output(g, qvl_g_cont(g, qvl_g_slice(g, b, 1, 2, 5)), "b");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    return g;
}

static void views_under_slices(void **state) {
    (void)state;
    qvl_graph *g = build_views_under_slices();
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "norm+linear"), 1);
    assert_int_equal(count_n_proj(g, 2), 1);
    qvl_graph *plain = build_views_under_slices();
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);
}

/* ---- patterns that must not fuse ---- */

static void norm_with_other_readers(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 32));
    qvl_tid h = qvl_g_rms_norm(g, x, qvl_g_weight(g, "g", QVL_F32, SHAPE(32)), 1e-5f);
    qvl_tid y = qvl_g_matmul(g, h, qvl_g_weight(g, "w", QVL_F32, SHAPE(32, 32)), -1);
    qvl_g_output(g, qvl_g_add(g, y, h), "y"); /* the norm is also read by the add */
    /* A norm feeding four projections: NORM_LINEAR has three slots, so it stays. */
    qvl_tid h4 = qvl_g_rms_norm(g, x, qvl_g_weight(g, "g4", QVL_F32, SHAPE(32)), 1e-5f);
    for (int i = 0; i < 4; i++) {
        char n[16];
        snprintf(n, sizeof n, "w4.%d", i);
        char o[16];
        snprintf(o, sizeof o, "o4.%d", i);
        qvl_g_output(g, qvl_g_matmul(g, h4, qvl_g_weight(g, n, QVL_F32, SHAPE(8, 32)), -1), o);
    }
    /* Two projections whose first output is a graph output: it would become a strided slice. */
    qvl_tid h2 = qvl_g_rms_norm(g, x, qvl_g_weight(g, "g2", QVL_F32, SHAPE(32)), 1e-5f);
    qvl_g_output(g, qvl_g_matmul(g, h2, qvl_g_weight(g, "w2a", QVL_F32, SHAPE(8, 32)), -1), "o2a");
    qvl_g_output(g, qvl_g_matmul(g, h2, qvl_g_weight(g, "w2b", QVL_F32, SHAPE(8, 32)), -1), "o2b");
    /* A reshape that runs across projection blocks cannot be a view of the fused output. */
    qvl_tid h3 = qvl_g_rms_norm(g, x, qvl_g_weight(g, "g3", QVL_F32, SHAPE(32)), 1e-5f);
    qvl_tid m3 = qvl_g_matmul(g, h3, qvl_g_weight(g, "w3a", QVL_F32, SHAPE(16, 32)), -1);
    qvl_g_output(g, qvl_g_cont(g, qvl_g_reshape(g, m3, SHAPE(32))), "o3a");
    qvl_g_output(g, qvl_g_cont(g, qvl_g_matmul(g, h3, qvl_g_weight(g, "w3b", QVL_F32, SHAPE(8, 32)), -1)), "o3b");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    size_t nodes = qvl_graph_n_nodes(g);
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "norm+linear"), 0);
    assert_int_equal(tg_count(g, QVL_OP_RMS_NORM), 4);
    /* only y = h . w + h changed: a linear layer and its residual (mlp+residual, act none) */
    assert_int_equal(fired(&r, "mlp+residual"), 1);
    assert_int_equal(qvl_graph_n_nodes(g), nodes - 1);
    qvl_graph_free(g);
}

/* norm+rope: the fused node carries the rope's parameters and the norm's eps; a norm that
 * something else also reads stays as it is (the fused op would compute it twice). */
static void norm_rope_rule(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(3, 2, 16));
    qvl_tid pos = qvl_g_input(g, "pos", QVL_I32, SHAPE(3, 3));
    qvl_rope_params rp = {.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 1e4f, .sections = {3, 2, 2, 0}};
    qvl_tid gq = qvl_g_weight(g, "gq", QVL_BF16, SHAPE(16)), gk = qvl_g_weight(g, "gk", QVL_F32, SHAPE(16));
    qvl_tid q = qvl_g_rope(g, qvl_g_rms_norm(g, x, gq, 1e-6f), pos, &rp);
    qvl_tid kn = qvl_g_rms_norm(g, x, gk, 1e-5f);
    qvl_tid k = qvl_g_rope(g, kn, pos, &rp);
    qvl_g_output(g, q, "q");
    qvl_g_output(g, qvl_g_add(g, k, kn), "k_plus_norm"); /* kn has a second reader */
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "norm+rope"), 1);
    qvl_tid fq = qvl_graph_output(g, 0, NULL);
    assert_int_equal(qvl_graph_op(g, fq), QVL_OP_NORM_ROPE);
    const qvl_params *p = qvl_graph_params(g, fq);
    assert_int_equal(p->norm_rope.mode, QVL_ROPE_MROPE_INTERLEAVED);
    assert_true(p->norm_rope.theta == 1e4f && p->norm_rope.eps == 1e-6f);
    assert_int_equal(p->norm_rope.sections[0], 3);
    assert_int_equal(p->norm_rope.sections[1], 2);
    assert_int_equal(p->norm_rope.sections[2], 2);
    const qvl_tid *src = qvl_graph_srcs(g, fq);
    assert_int_equal(src[0], x);
    assert_int_equal(src[1], pos);
    assert_int_equal(src[2], gq);
    assert_int_equal(tg_count(g, QVL_OP_RMS_NORM), 1);
    assert_int_equal(tg_count(g, QVL_OP_ROPE), 1);
    qvl_graph_free(g);
}

/* q [4,4,16] reshaped (not permuted) to [4,4,16] has the permute's shape but other strides:
 * the attention rule must look at strides, not just at the op. */
static qvl_graph *build_fake_permute_attention(void) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid q = qvl_g_input(g, "q", QVL_F32, SHAPE(4, 4, 16));
    qvl_tid k = qvl_g_input(g, "k", QVL_F32, SHAPE(4, 2, 16));
    qvl_tid v = qvl_g_input(g, "v", QVL_F32, SHAPE(4, 2, 16));
    qvl_tid qp = qvl_g_reshape(g, q, SHAPE(4, 4, 16));
    qvl_tid s = qvl_g_matmul(g, qp, qvl_g_permute(g, k, (const int[]){1, 0, 2}), -1);
    s = qvl_g_softmax(g, qvl_g_scale(g, s, 0.25f));
    qvl_tid o = qvl_g_matmul(g, s, qvl_g_permute(g, v, (const int[]){1, 2, 0}), -1);
    qvl_g_output(g, qvl_g_cont(g, qvl_g_permute(g, o, (const int[]){1, 0, 2})), "o");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    return g;
}

static void attention_near_misses(void **state) {
    (void)state;
    qvl_graph *g = build_fake_permute_attention();
    qvl_fusion_report r = fuse(g);
    assert_int_equal(fired(&r, "attention+softmax"), 0);
    assert_int_equal(tg_count(g, QVL_OP_SOFTMAX), 1);
    qvl_graph_free(g);

    /* The real permute fuses (no mask, no scale is fine)... */
    g = qvl_graph_new();
    qvl_tid q = qvl_g_input(g, "q", QVL_F32, SHAPE(4, 4, 16));
    qvl_tid k = qvl_g_input(g, "k", QVL_F32, SHAPE(6, 2, 16));
    qvl_tid v = qvl_g_input(g, "v", QVL_F32, SHAPE(6, 2, 16));
    qvl_tid s = qvl_g_matmul(g, qvl_g_permute(g, q, (const int[]){1, 0, 2}),
                             qvl_g_permute(g, k, (const int[]){1, 0, 2}), -1);
    qvl_tid p = qvl_g_softmax(g, s);
    qvl_tid o = qvl_g_matmul(g, p, qvl_g_permute(g, v, (const int[]){1, 2, 0}), -1);
    qvl_tid ob = qvl_g_permute(g, o, (const int[]){1, 0, 2});
    qvl_tid y = qvl_g_scale(g, ob, 2.0f); /* a compute op reads the permute directly */
    qvl_g_output(g, y, "y");
    r = fuse(g);
    assert_int_equal(fired(&r, "attention+softmax"), 1);
    qvl_tid att = qvl_graph_srcs(g, y)[0];
    assert_int_equal(qvl_graph_op(g, att), QVL_OP_ATTENTION);
    assert_int_equal(qvl_graph_params(g, att)->attention.mask, QVL_MASK_NONE);
    assert_true(qvl_graph_params(g, att)->attention.scale == 1.0f);
    qvl_graph_free(g);

    /* ...but not when the probabilities are also a graph output. */
    g = qvl_graph_new();
    q = qvl_g_input(g, "q", QVL_F32, SHAPE(4, 4, 16));
    k = qvl_g_input(g, "k", QVL_F32, SHAPE(6, 2, 16));
    v = qvl_g_input(g, "v", QVL_F32, SHAPE(6, 2, 16));
    s = qvl_g_matmul(g, qvl_g_permute(g, q, (const int[]){1, 0, 2}),
                     qvl_g_permute(g, k, (const int[]){1, 0, 2}), -1);
    p = qvl_g_softmax(g, s);
    qvl_g_output(g, p, "probs");
    o = qvl_g_matmul(g, p, qvl_g_permute(g, v, (const int[]){1, 2, 0}), -1);
    qvl_g_output(g, qvl_g_cont(g, qvl_g_permute(g, o, (const int[]){1, 0, 2})), "o");
    r = fuse(g);
    assert_int_equal(fired(&r, "attention+softmax"), 0);
    qvl_graph_free(g);
}

static void mlp_near_misses(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid res = qvl_g_input(g, "res", QVL_F32, SHAPE(3, 16));
    qvl_tid a = qvl_g_input(g, "a", QVL_F32, SHAPE(3, 24));
    qvl_tid up = qvl_g_input(g, "up", QVL_F32, SHAPE(3, 24));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(16, 24));
    /* The activation is also an output. */
    qvl_tid act = qvl_g_unary(g, QVL_OP_SILU, a);
    qvl_g_output(g, act, "act");
    qvl_g_output(g, qvl_g_add(g, res, qvl_g_matmul(g, qvl_g_mul(g, act, up), w, -1)), "y1");
    /* The residual broadcasts: [16] onto [3,16] would change the output shape. */
    qvl_tid r1 = qvl_g_input(g, "r1", QVL_F32, SHAPE(16));
    qvl_tid d = qvl_g_matmul(g, qvl_g_unary(g, QVL_OP_GELU_ERF, a), w, -1);
    qvl_g_output(g, qvl_g_add(g, d, r1), "y2");
    /* A plain (non-activation) product. */
    qvl_tid prod = qvl_g_mul(g, a, up);
    qvl_tid y3 = qvl_g_add(g, res, qvl_g_matmul(g, prod, w, -1));
    qvl_g_output(g, y3, "y3");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    qvl_fusion_report r = fuse(g);
    /* No activation is folded in: y1 and y3 become linear + residual (act none) of the
     * product, which stays; the broadcasting y2 stays an ADD. */
    assert_int_equal(fired(&r, "mlp+residual"), 2);
    assert_int_equal(tg_count(g, QVL_OP_ADD), 1);
    assert_int_equal(tg_count(g, QVL_OP_SILU), 1);
    assert_int_equal(tg_count(g, QVL_OP_MUL), 2);
    assert_int_equal(qvl_graph_op(g, y3), QVL_OP_MLP_RESIDUAL);
    assert_int_equal(qvl_graph_params(g, y3)->mlp.act, QVL_ACT_NONE);
    assert_int_equal(qvl_graph_srcs(g, y3)[1], prod);
    assert_int_equal(qvl_graph_srcs(g, y3)[3], -1);

    /* The gated form with the SiLU on the right fuses. */
    qvl_graph *g2 = qvl_graph_new();
    res = qvl_g_input(g2, "res", QVL_F32, SHAPE(3, 16));
    a = qvl_g_input(g2, "a", QVL_F32, SHAPE(3, 24));
    up = qvl_g_input(g2, "up", QVL_F32, SHAPE(3, 24));
    w = qvl_g_weight(g2, "w", QVL_F32, SHAPE(16, 24));
    qvl_tid m = qvl_g_mul(g2, up, qvl_g_unary(g2, QVL_OP_SILU, a));
    qvl_tid y = qvl_g_add(g2, qvl_g_matmul(g2, m, w, -1), res);
    qvl_g_output(g2, y, "y");
    r = fuse(g2);
    assert_int_equal(fired(&r, "mlp+residual"), 1);
    const qvl_tid *src = qvl_graph_srcs(g2, y);
    assert_int_equal(qvl_graph_op(g2, y), QVL_OP_MLP_RESIDUAL);
    assert_int_equal(src[0], res);
    assert_int_equal(src[1], a);
    assert_int_equal(src[2], w);
    assert_int_equal(src[3], up);
    assert_int_equal(src[4], -1);
    assert_int_equal(qvl_graph_n_nodes(g2), 1);
    qvl_graph_free(g2);
    qvl_graph_free(g);
}

/* ---- fusion asks the backend ---------------------------------------------------------------- */

/* A backend table that has a kernel for every op (never run here: fusion only asks), and an
 * accepts() that refuses what `refused` names. */
static qvl_status never_run(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    return qvl_fail(err, QVL_E_INVALID, "%s: fusion must not run kernels", qvl_op_name(n->op));
}
static qvl_op_impl every_op[QVL_OP_COUNT];
static qvl_op refused = QVL_OP_COUNT;
static bool refuse_nl_act; /* also refuse NORM_LINEAR with an output activation */
static qvl_status refuse_one(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    if (n->op == refused) return qvl_fail(err, QVL_E_UNSUPPORTED, "not this one");
    if (refuse_nl_act && n->op == QVL_OP_NORM_LINEAR &&
        n->params.norm_linear.act != QVL_ACT_NONE)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "no output activation");
    return QVL_OK;
}
static qvl_backend_iface asking_iface(void) {
    for (int op = 0; op < QVL_OP_COUNT; op++) every_op[op].kernel = never_run;
    return qvl_test_declared_iface("asked", every_op, refuse_one);
}

static size_t declined(const qvl_fusion_report *r, const char *rule) {
    return r->declined[rule_index(r, rule)];
}

/* A backend that refuses one fused op gets every other fusion, and that op's pattern stays
 * primitive; the result still computes what the unfused graph does. */
static void fusion_asks_the_backend(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    const size_t L = (size_t)d.n_layers;
    qvl_backend_iface f = asking_iface();
    refused = QVL_OP_ATTENTION;
    qvl_graph *g = tg_build_text(&d);
    qvl_fusion_report r = fuse_for(g, &f);
    assert_int_equal(fired(&r, "attention+softmax"), 0);
    assert_int_equal(declined(&r, "attention+softmax"), L);
    assert_int_equal(fired(&r, "norm+linear"), 2 * L + 1);
    assert_int_equal(fired(&r, "mlp+residual"), 2 * L);
    assert_int_equal(fired(&r, "norm+rope"), 2 * L);
    assert_int_equal(declined(&r, "norm+linear"), 0);
    assert_int_equal(tg_count(g, QVL_OP_ATTENTION), 0);
    assert_int_equal(tg_count(g, QVL_OP_SOFTMAX), L);
    qvl_graph *plain = tg_build_text(&d);
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);
    refused = QVL_OP_COUNT;
}

/* A backend without fused kernels (or whose declared dtypes leave them out) gets the graph
 * unfused: no fused op appears, and every match is reported as declined. */
static void primitive_backend_gets_primitive_graph(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    qvl_backend_iface f = asking_iface();
    for (int op = 0; op < QVL_OP_COUNT; op++)
        if (qvl_op_is_fused((qvl_op)op)) every_op[op].kernel = NULL;
    qvl_graph *g = tg_build_text(&d);
    size_t before = qvl_graph_n_nodes(g);
    qvl_fusion_report r = fuse_for(g, &f);
    assert_int_equal(r.nodes_after, before);
    size_t total_declined = 0;
    for (size_t i = 0; i < r.n_rules; i++) {
        assert_int_equal(r.fired[i], 0);
        total_declined += r.declined[i];
    }
    assert_true(total_declined > 0);
    for (int op = 0; op < QVL_OP_COUNT; op++)
        if (qvl_op_is_fused((qvl_op)op)) assert_int_equal(tg_count(g, (qvl_op)op), 0);
    qvl_graph_free(g);

    /* The same through the dtype declaration, slot by slot: a backend whose NORM_LINEAR and
     * MLP_RESIDUAL read only bf16 weights keeps these f32 projections primitive. */
    f = asking_iface();
    const uint32_t bf16_only = QVL_DTYPE_BIT(QVL_BF16);
    for (int p = 0; p < 3; p++) every_op[QVL_OP_NORM_LINEAR].dtypes[3 + 2 * p] = bf16_only;
    every_op[QVL_OP_MLP_RESIDUAL].dtypes[2] = bf16_only;
    g = tg_build_text(&d);
    r = fuse_for(g, &f);
    assert_int_equal(tg_count(g, QVL_OP_NORM_LINEAR), 0);
    assert_int_equal(tg_count(g, QVL_OP_MLP_RESIDUAL), 0);
    assert_true(declined(&r, "norm+linear") > 0);
    assert_true(declined(&r, "mlp+residual") > 0);
    assert_int_equal(tg_count(g, QVL_OP_ATTENTION), (size_t)d.n_layers); /* not declared */
    for (int op = 0; op < QVL_OP_COUNT; op++)
        memset(every_op[op].dtypes, 0, sizeof every_op[op].dtypes);
    qvl_graph_free(g);
}

/* A plain MLP with its residual: out = x + act(NORM(x) . fc1^T + b1) . fc2^T. With
 * second_reader the fc1 output is also read by a SCALE (another output). */
static qvl_graph *build_plain_mlp(qvl_op act, bool layer, bool second_reader) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(5, 16));
    qvl_tid gamma = qvl_g_weight(g, "g", QVL_F32, SHAPE(16));
    qvl_tid h = layer ? qvl_g_layer_norm(g, x, gamma, qvl_g_weight(g, "b", QVL_F32, SHAPE(16)),
                                         1e-6f)
                      : qvl_g_rms_norm(g, x, gamma, 1e-6f);
    qvl_tid f = qvl_g_matmul(g, h, qvl_g_weight(g, "fc1.w", QVL_F32, SHAPE(40, 16)),
                             qvl_g_weight(g, "fc1.b", QVL_F32, SHAPE(40)));
    qvl_tid y = qvl_g_matmul(g, qvl_g_unary(g, act, f),
                             qvl_g_weight(g, "fc2.w", QVL_F32, SHAPE(16, 40)), -1);
    qvl_g_output(g, qvl_g_add(g, x, y), "out");
    if (second_reader) qvl_g_output(g, qvl_g_scale(g, f, 0.5f), "side");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    return g;
}

/* linear+act: the MLP's gelu moves into fc1's NORM_LINEAR where the backend takes that node,
 * and only when the MLP is fc1's one reader; the result computes what the unfused graph
 * does. */
/* The rule did not fire: the MLP node "out" keeps its activation, its fc1 has none. */
static void assert_act_in_mlp(qvl_graph *g, int32_t act) {
    qvl_tid mlp = qvl_graph_find(g, "out");
    assert_int_equal(qvl_graph_params(g, mlp)->mlp.act, act);
    assert_int_equal(qvl_graph_params(g, qvl_graph_srcs(g, mlp)[1])->norm_linear.act,
                     QVL_ACT_NONE);
}

static void linear_act_rule(void **state) {
    (void)state;
    qvl_backend_iface f = asking_iface();
    /* the vision block (gelu_tanh, layer norm) and an rms-norm gelu_erf MLP: fused */
    tg_vision_dims d = tg_vision_default();
    qvl_graph *g = tg_build_vision(&d);
    qvl_fusion_report r = fuse_for(g, &f);
    assert_int_equal(fired(&r, "linear+act"), 1);
    assert_int_equal(declined(&r, "linear+act"), 0);
    qvl_tid mlp = qvl_graph_find(g, "out");
    assert_int_equal(qvl_graph_params(g, mlp)->mlp.act, QVL_ACT_NONE);
    qvl_tid fc1 = qvl_graph_srcs(g, mlp)[1];
    assert_int_equal(qvl_graph_op(g, fc1), QVL_OP_NORM_LINEAR);
    assert_int_equal(qvl_graph_params(g, fc1)->norm_linear.act, QVL_ACT_GELU_TANH);
    assert_int_equal(qvl_graph_params(g, fc1)->norm_linear.n_proj, 1);
    qvl_graph *plain = tg_build_vision(&d);
    int64_t patches = d.n_patches;
    expect_same_results(plain, g, &patches);
    qvl_graph_free(plain);
    qvl_graph_free(g);

    g = build_plain_mlp(QVL_OP_GELU_ERF, false, false);
    r = fuse_for(g, &f);
    assert_int_equal(fired(&r, "linear+act"), 1);
    mlp = qvl_graph_find(g, "out");
    fc1 = qvl_graph_srcs(g, mlp)[1];
    assert_int_equal(qvl_graph_params(g, fc1)->norm_linear.act, QVL_ACT_GELU_ERF);
    assert_int_equal(qvl_graph_params(g, fc1)->norm_linear.norm, QVL_NORM_RMS);
    assert_int_equal(qvl_graph_params(g, mlp)->mlp.act, QVL_ACT_NONE);
    assert_int_equal(qvl_graph_n_nodes(g), 2);
    plain = build_plain_mlp(QVL_OP_GELU_ERF, false, false);
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);

    /* fc1 also read by another node: it must stay the plain projection */
    g = build_plain_mlp(QVL_OP_GELU_TANH, true, true);
    r = fuse_for(g, &f);
    assert_int_equal(fired(&r, "norm+linear"), 1);
    assert_int_equal(fired(&r, "mlp+residual"), 1);
    assert_int_equal(fired(&r, "linear+act"), 0);
    assert_act_in_mlp(g, QVL_ACT_GELU_TANH);
    plain = build_plain_mlp(QVL_OP_GELU_TANH, true, true);
    expect_same_results(plain, g, NULL);
    qvl_graph_free(plain);
    qvl_graph_free(g);

    /* a backend without the activation epilogue: declined, MLP as before */
    refuse_nl_act = true;
    g = tg_build_vision(&d);
    r = fuse_for(g, &f);
    assert_int_equal(fired(&r, "linear+act"), 0);
    assert_int_equal(declined(&r, "linear+act"), 1);
    assert_int_equal(fired(&r, "norm+linear"), 2);
    assert_int_equal(fired(&r, "mlp+residual"), 2);
    assert_act_in_mlp(g, QVL_ACT_GELU_TANH);
    qvl_graph_free(g);
    refuse_nl_act = false;
}

static void fuse_reports_builder_error(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 8));
    qvl_g_matmul(g, x, qvl_g_weight(g, "w", QVL_F32, SHAPE(4, 6)), -1);
    qvl_error err = {0};
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "matmul"));
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_stack),
        cmocka_unit_test(text_decode_step),
        cmocka_unit_test(vision_block),
        cmocka_unit_test(views_under_slices),
        cmocka_unit_test(norm_with_other_readers),
        cmocka_unit_test(attention_near_misses),
        cmocka_unit_test(mlp_near_misses),
        cmocka_unit_test(norm_rope_rule),
        cmocka_unit_test(fuse_reports_builder_error),
        cmocka_unit_test(fusion_asks_the_backend),
        cmocka_unit_test(linear_act_rule),
        cmocka_unit_test(primitive_backend_gets_primitive_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
