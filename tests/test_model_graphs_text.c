/* The Qwen3-VL text decoder graph on small configs: structure (inputs, weights, outputs, op
 * counts), what the fusion pass makes of it, and numbers on the reference backend: fused equals
 * unfused, prefill + decode through the KV cache equals one longer prefill. The vision graphs
 * are test_model_graphs_vision.c; what both share is test_model_graphs_util.c. */
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

/* Untied, 3 layers, head_dim 32 != hidden/heads, GQA 4:1, mrope [6,5,5]. */
static const char UNTIED[] =
    "{ \"tie_word_embeddings\": false,\n"
    "  \"text_config\": { \"vocab_size\": 80, \"hidden_size\": 64, \"intermediate_size\": 80,\n"
    "    \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 32, \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5000000,\n"
    "                        \"mrope_section\": [6, 5, 5], \"mrope_interleaved\": true} } }\n";

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

/* ---- running on the reference backend ------------------------------------------------------ */

#ifdef QVL_REFERENCE_SO

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

#endif /* QVL_REFERENCE_SO */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_structure),
        cmocka_unit_test(test_text_untied_and_head_dim),
        cmocka_unit_test(test_text_bad_options),
    };
    int rc = cmocka_run_group_tests_name("text graphs", tests, NULL, NULL);
#ifdef QVL_REFERENCE_SO
    const struct CMUnitTest numeric[] = {
        cmocka_unit_test(test_text_fused_matches_unfused),
        cmocka_unit_test(test_text_kv_cache_continuity),
    };
    rc |=
        cmocka_run_group_tests_name("reference backend", numeric, setup_backend, teardown_backend);
#else
    print_message("skipped the numeric tests: the reference backend is not built\n");
#endif
    return rc;
}
