/* What qvl-bench relies on: the executor's per-op profile, the model's load statistics and
 * op profile, converting matrix weights at load (--weights), and backend options laid over
 * plugins.yaml's (-t). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/graph.h"
#include "qvl/mkmodel.h"
#include "qvl/qwen3vl_model.h"
#include "test_backend.h"

#define TINY QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- executor profiling -------------------------------------------------------------------- */

/* y = silu(x . w^T) + x: three kernel nodes of three op kinds. */
static void exec_profile_counts_nodes_per_op(void **state) {
    (void)state;
    qvl_test_backend tb;
    assert_int_equal(qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb), 0);
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(3, 4));
    qvl_tid w = qvl_g_input(g, "w", QVL_F32, SHAPE(4, 4));
    qvl_tid y = qvl_g_add(g, qvl_g_unary(g, QVL_OP_SILU, qvl_g_matmul(g, x, w, -1)), x);
    qvl_g_output(g, y, "y");
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    assert_int_equal(qvl_exec_create(g, tb.iface, tb.be, &ex, &err), QVL_OK);
    float xv[12], wv[16], out[12];
    for (int i = 0; i < 16; i++) {
        if (i < 12) xv[i] = 0.1f * (float)i;
        wv[i] = i % 5 == 0 ? 1.0f : -0.05f;
    }
/* Inputs are set before every run: the arena may reuse their storage. */
#define SET_AND_RUN()                                                          \
    do {                                                                       \
        assert_int_equal(qvl_exec_set(ex, x, xv, sizeof xv, &err), QVL_OK);    \
        assert_int_equal(qvl_exec_set(ex, w, wv, sizeof wv, &err), QVL_OK);    \
        assert_int_equal(qvl_exec_run(ex, &err), QVL_OK);                      \
    } while (0)

    /* Off by default: a run books nothing. */
    SET_AND_RUN();
    float plain[12];
    assert_int_equal(qvl_exec_get(ex, y, plain, sizeof plain, &err), QVL_OK);
    qvl_op_profile p;
    qvl_exec_profile(ex, &p);
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        assert_int_equal(p.calls[op], 0);
        assert_true(p.seconds[op] == 0.0);
    }

    /* On: every node once per run, in its op's slot; results unchanged. */
    qvl_exec_set_profiling(ex, true);
    SET_AND_RUN();
    SET_AND_RUN();
    assert_int_equal(qvl_exec_get(ex, y, out, sizeof out, &err), QVL_OK);
    assert_memory_equal(out, plain, sizeof out);
    qvl_exec_profile(ex, &p);
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        uint64_t want = 2 * (uint64_t)qvl_graph_count_op(g, (qvl_op)op);
        assert_int_equal(p.calls[op], want);
        assert_true(p.seconds[op] >= 0.0 && isfinite(p.seconds[op]));
        if (!want) assert_true(p.seconds[op] == 0.0);
    }
    assert_int_equal(p.calls[QVL_OP_MATMUL], 2);
    /* [3, 4] . [4, 4]^T: 48 multiply-adds a run; the element-wise nodes count none */
    assert_true(p.flops[QVL_OP_MATMUL] == 2 * 96.0);
    assert_true(p.flops[QVL_OP_SILU] == 0.0 && p.flops[QVL_OP_ADD] == 0.0);

    /* Off again: the totals stay as they were. */
    qvl_exec_set_profiling(ex, false);
    SET_AND_RUN();
#undef SET_AND_RUN
    qvl_op_profile q;
    qvl_exec_profile(ex, &q);
    assert_memory_equal(&p, &q, sizeof p);

    qvl_op_profile sum;
    memset(&sum, 0, sizeof sum);
    qvl_op_profile_add(&sum, &p);
    qvl_op_profile_add(&sum, &p);
    assert_int_equal(sum.calls[QVL_OP_ADD], 4);
    assert_true(sum.seconds[QVL_OP_MATMUL] == 2 * p.seconds[QVL_OP_MATMUL]);
    assert_true(sum.flops[QVL_OP_MATMUL] == 2 * p.flops[QVL_OP_MATMUL]);

    qvl_exec_free(ex);
    qvl_graph_free(g);
    qvl_test_backend_close(&tb);
}

/* The arithmetic a profile divides by: products from the shapes, attention by its mask. */
static void node_flops_from_shapes(void **state) {
    (void)state;
    qvl_tensor x = {0}, w1 = {0}, w2 = {0}, a = {0}, wd = {0}, q = {0}, k = {0};
    assert_true(qvl_desc_init(&x.desc, QVL_F32, 2, (int64_t[]){5, 64}));
    assert_true(qvl_desc_init(&w1.desc, QVL_F32, 2, (int64_t[]){96, 64}));
    assert_true(qvl_desc_init(&w2.desc, QVL_F32, 2, (int64_t[]){32, 64}));
    qvl_node nd = {.op = QVL_OP_NORM_LINEAR, .n_src = 6};
    nd.src[0] = &x;
    nd.src[3] = &w1;
    nd.src[5] = &w2;
    assert_true(qvl_node_flops(&nd) == 2.0 * 5 * 64 * (96 + 32));
    assert_true(qvl_desc_init(&a.desc, QVL_F32, 2, (int64_t[]){5, 256}));
    assert_true(qvl_desc_init(&wd.desc, QVL_F32, 2, (int64_t[]){64, 256}));
    nd = (qvl_node){.op = QVL_OP_MLP_RESIDUAL, .n_src = 3};
    nd.src[0] = &x;
    nd.src[1] = &a;
    nd.src[2] = &wd;
    assert_true(qvl_node_flops(&nd) == 2.0 * 5 * 256 * 64);
    /* 6 queries of 4 heads of 16 over 10 keys (2 KV heads) */
    assert_true(qvl_desc_init(&q.desc, QVL_F32, 3, (int64_t[]){6, 4, 16}));
    assert_true(qvl_desc_init(&k.desc, QVL_F32, 3, (int64_t[]){10, 2, 16}));
    nd = (qvl_node){.op = QVL_OP_ATTENTION, .n_src = 3};
    nd.src[0] = &q;
    nd.src[1] = &k;
    nd.src[2] = &k;
    nd.params.attention.mask = QVL_MASK_NONE;
    assert_true(qvl_node_flops(&nd) == 4.0 * 6 * 4 * 16 * 10);
    nd.params.attention.mask = QVL_MASK_CAUSAL; /* query i sees n_past + i + 1 keys */
    nd.params.attention.n_past = 4;
    assert_true(qvl_node_flops(&nd) == 4.0 * 4 * 16 * (5 + 6 + 7 + 8 + 9 + 10));
    nd.params.attention.mask = QVL_MASK_CAUSAL_AT; /* n_past is data: not counted */
    assert_true(qvl_node_flops(&nd) == 0.0);
    nd = (qvl_node){.op = QVL_OP_ADD, .n_src = 2};
    nd.src[0] = nd.src[1] = &x;
    assert_true(qvl_node_flops(&nd) == 0.0);
}

/* ---- the model ----------------------------------------------------------------------------- */

static qvl_model *open_tiny_as(const char *weights, bool no_mmap, qvl_error *err,
                               qvl_status *st) {
    qvl_model_options mo = {.backend_name = "reference", .ctx = 16, .weight_dtype = weights,
                            .no_mmap = no_mmap};
    qvl_model *m = NULL;
    *st = qvl_model_open(TINY, &mo, &m, err);
    return m;
}

static qvl_model *open_tiny(const char *weights, qvl_error *err, qvl_status *st) {
    return open_tiny_as(weights, false, err, st);
}

static void eval_logits(qvl_model *m, float *logits) {
    const int32_t ids[4] = {3, 17, 250, 5};
    qvl_error err = {0};
    qvl_model_truncate(m, 0);
    qvl_status st = qvl_model_eval(m, ids, 4, NULL, false, logits, &err);
    if (st != QVL_OK) fail_msg("eval: %s", err.msg);
}

/* The tiny model's logits with its weights as stored (bf16, in place), its load statistics
 * and vocabulary size: what the conversion tests compare against. */
static float *stored_logits(int64_t *vocab, qvl_model_load_stats *ls) {
    qvl_error err = {0};
    qvl_status st;
    qvl_model *m = open_tiny(NULL, &err, &st);
    if (st != QVL_OK) fail_msg("open: %s", err.msg);
    *vocab = qvl_model_config(m)->text.vocab_size;
    float *ref = malloc((size_t)*vocab * sizeof *ref);
    assert_non_null(ref);
    eval_logits(m, ref);
    qvl_model_get_load_stats(m, ls);
    qvl_model_close(m);
    return ref;
}

static void model_load_stats_and_profile(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_status st;
    qvl_model *m = open_tiny(NULL, &err, &st);
    if (st != QVL_OK) fail_msg("open: %s", err.msg);
    qvl_model_load_stats ls;
    qvl_model_get_load_stats(m, &ls);
    /* bf16 as stored on a host-memory backend: used in place, nothing copied. */
    assert_int_equal(ls.matrix_dtype, QVL_BF16);
    assert_true(ls.weights_in_place_bytes > 0);
    assert_int_equal(ls.weights_copied_bytes, 0);
    /* A decode step reads the text weights (embedding tied: it is the output projection) but
     * not the vision tower's. */
    const qvl_text_config *t = &qvl_model_config(m)->text;
    size_t embed = (size_t)(t->vocab_size * t->hidden_size) * 2;
    assert_true(ls.decode_weight_bytes > embed);
    assert_true(ls.decode_weight_bytes < ls.weights_in_place_bytes);
    /* The default KV cache is f16: 2 bytes a value. */
    assert_int_equal(ls.kv_dtype, QVL_F16);
    assert_int_equal(ls.kv_bytes, (size_t)(2 * t->num_hidden_layers * 16 * t->num_key_value_heads *
                                           t->head_dim) * 2);
    assert_true(ls.config_seconds >= 0 && ls.map_seconds >= 0 && ls.backend_seconds >= 0 &&
                ls.bind_seconds >= 0 && ls.cache_seconds >= 0);

    float *logits = malloc((size_t)t->vocab_size * sizeof *logits);
    assert_non_null(logits);
    qvl_op_profile p;
    eval_logits(m, logits); /* profiling off: nothing booked */
    qvl_model_profile(m, &p);
    for (int op = 0; op < QVL_OP_COUNT; op++) assert_int_equal(p.calls[op], 0);

    qvl_model_set_profiling(m, true);
    eval_logits(m, logits);
    qvl_model_profile(m, &p);
    /* Every layer's attention ran once; the embedding lookup once. */
    assert_int_equal(p.calls[QVL_OP_ATTENTION], (uint64_t)t->num_hidden_layers);
    assert_int_equal(p.calls[QVL_OP_GET_ROWS], 1);
    eval_logits(m, logits);
    qvl_op_profile p2;
    qvl_model_profile(m, &p2);
    assert_int_equal(p2.calls[QVL_OP_ATTENTION], 2 * (uint64_t)t->num_hidden_layers);
    qvl_model_profile_reset(m);
    qvl_model_profile(m, &p);
    assert_int_equal(p.calls[QVL_OP_ATTENTION], 0);
    free(logits);
    qvl_model_close(m);
}

/* no_mmap: the same weights copied into the backend's buffers instead of used in place from
 * the mapping; the same logits, bit for bit. */
static void model_no_mmap_copies_weights(void **state) {
    (void)state;
    int64_t vocab;
    qvl_model_load_stats in_place;
    float *ref = stored_logits(&vocab, &in_place), *got = malloc((size_t)vocab * sizeof *got);
    assert_non_null(got);
    qvl_error err = {0};
    qvl_status st;
    qvl_model *m = open_tiny_as(NULL, true, &err, &st);
    if (st != QVL_OK) fail_msg("open --no-mmap: %s", err.msg);
    qvl_model_load_stats ls;
    qvl_model_get_load_stats(m, &ls);
    assert_int_equal(ls.matrix_dtype, QVL_BF16);
    assert_int_equal(ls.weights_in_place_bytes, 0);
    assert_int_equal(ls.weights_copied_bytes, in_place.weights_in_place_bytes);
    eval_logits(m, got);
    assert_memory_equal(ref, got, (size_t)vocab * sizeof *ref);
    free(ref);
    free(got);
    qvl_model_close(m);
}

static double max_abs(const float *x, int64_t n) {
    double v = 0;
    for (int64_t i = 0; i < n; i++) v = fmax(v, fabs((double)x[i]));
    return v;
}

static double max_diff(const float *a, const float *b, int64_t n) {
    double v = 0;
    for (int64_t i = 0; i < n; i++) v = fmax(v, fabs((double)a[i] - (double)b[i]));
    return v;
}

/* f32 holds every bf16 value exactly: converting the matrices changes nothing but their size.
 * q8_0 rounds each weight to 1/254 of its block's range: logits move a little, not a lot. */
static void model_weights_converted_at_load(void **state) {
    (void)state;
    int64_t vocab;
    qvl_model_load_stats bf;
    float *ref = stored_logits(&vocab, &bf), *got = malloc((size_t)vocab * sizeof *got);
    assert_non_null(got);
    qvl_error err = {0};
    qvl_status st;
    qvl_model *m = open_tiny("f32", &err, &st);
    if (st != QVL_OK) fail_msg("open f32: %s", err.msg);
    qvl_model_load_stats ls;
    qvl_model_get_load_stats(m, &ls);
    assert_int_equal(ls.matrix_dtype, QVL_F32);
    assert_true(ls.weights_copied_bytes > 0);
    /* Matrices doubled in size; the decode figure follows the dtype the graph reads. */
    assert_true(ls.decode_weight_bytes > bf.decode_weight_bytes * 3 / 2);
    eval_logits(m, got);
    assert_true(max_diff(ref, got, vocab) <= 1e-5 * max_abs(ref, vocab));
    qvl_model_close(m);

    m = open_tiny("q8_0", &err, &st);
    if (st != QVL_OK) fail_msg("open q8_0: %s", err.msg);
    qvl_model_get_load_stats(m, &ls);
    assert_int_equal(ls.matrix_dtype, QVL_Q8_0);
    assert_true(ls.decode_weight_bytes < bf.decode_weight_bytes);
    eval_logits(m, got);
    double d = max_diff(ref, got, vocab), scale = max_abs(ref, vocab);
    assert_true(d > 0);            /* it did change the weights */
    assert_true(d < 0.1 * scale);  /* and kept the model */
    qvl_model_close(m);

    m = open_tiny("q3_k", &err, &st); /* not a dtype qvl has */
    assert_null(m);
    assert_int_equal(st, QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "q3_k"));
    m = open_tiny("q4_k", &err, &st); /* the fixture's rows (64) are not whole 256-blocks */
    assert_null(m);
    assert_int_equal(st, QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "cannot be stored as q4_k"));
    free(ref);
    free(got);
}

/* q8_0 blocks run along rows: a matrix with rows of 40 elements cannot be stored so. */
static void model_q8_0_needs_whole_blocks(void **state) {
    (void)state;
    char dir[] = "/tmp/qvl-bench-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cfg_in[512], cfg_out[600], model[600];
    snprintf(cfg_in, sizeof cfg_in, "%s/config.json", TINY);
    snprintf(cfg_out, sizeof cfg_out, "%s/config.json", dir);
    snprintf(model, sizeof model, "%s/m", dir);
    FILE *f = fopen(cfg_in, "rb");
    assert_non_null(f);
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *at = strstr(text, "\"intermediate_size\": 160");
    assert_non_null(at);
    memcpy(at, "\"intermediate_size\":  40", 24); /* same length, rows of 40 */
    f = fopen(cfg_out, "wb");
    assert_non_null(f);
    fwrite(text, 1, n, f);
    fclose(f);
    qvl_error err = {0};
    if (qvl_qwen3vl_mkmodel(cfg_out, model, 1, QVL_BF16, 0.02f, NULL, &err) != QVL_OK)
        fail_msg("mkmodel: %s", err.msg);

    qvl_model_options mo = {.backend_name = "reference", .ctx = 8, .weight_dtype = "q8_0"};
    qvl_model *m = NULL;
    assert_int_equal(qvl_model_open(model, &mo, &m, &err), QVL_E_SHAPE);
    assert_null(m);
    assert_non_null(strstr(err.msg, "down_proj"));
    assert_non_null(strstr(err.msg, "40"));
    mo.weight_dtype = "f16"; /* any float dtype is fine */
    assert_int_equal(qvl_model_open(model, &mo, &m, &err), QVL_OK);
    qvl_model_close(m);

    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- backend options over plugins.yaml ------------------------------------------------------- */

static void backend_options_override_plugins_yaml(void **state) {
    (void)state;
    char path[] = "/tmp/qvl-bench-plugins-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    char yaml[1024];
    int len = snprintf(yaml, sizeof yaml,
                       "backends:\n  - name: dummy\n    library: %s\n    priority: 5\n"
                       "    options: { fail: 1, label: fromfile }\n",
                       QVL_TEST_DUMMY_SO);
    assert_int_equal(write(fd, yaml, (size_t)len), len);
    close(fd);

    qvl_error err = {0};
    qvl_model *m = NULL;
    /* plugins.yaml alone: the dummy refuses to start (fail: 1). */
    qvl_model_options mo = {.plugins_path = path, .backend_name = "dummy", .ctx = 8};
    assert_int_not_equal(qvl_model_open(TINY, &mo, &m, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "refuses"));

    /* fail: 0 laid over it: it starts, and keeps the file's other option. */
    const char *keys[] = {"fail"}, *values[] = {"0"};
    qvl_options extra = {1, keys, values};
    mo.backend_options = &extra;
    assert_int_equal(qvl_model_open(TINY, &mo, &m, &err), QVL_OK);
    const qvl_loaded_backend *lb = qvl_model_backend(m);
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    assert_string_equal(info.name, "dummy fromfile");
    qvl_model_close(m);

    /* Chosen by priority (no --backend) the options apply as well. */
    mo.backend_name = NULL;
    assert_int_equal(qvl_model_open(TINY, &mo, &m, &err), QVL_OK);
    assert_string_equal(qvl_model_backend(m)->name, "dummy");
    qvl_model_close(m);

    /* A --backend that is not listed gets just the given options. */
    const char *keys2[] = {"threads"}, *values2[] = {"2"};
    qvl_options extra2 = {1, keys2, values2};
    mo.backend_name = "reference";
    mo.backend_options = &extra2;
    assert_int_equal(qvl_model_open(TINY, &mo, &m, &err), QVL_OK);
    assert_string_equal(qvl_model_backend(m)->name, "reference");
    qvl_model_close(m);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exec_profile_counts_nodes_per_op),
        cmocka_unit_test(node_flops_from_shapes),
        cmocka_unit_test(model_load_stats_and_profile),
        cmocka_unit_test(model_weights_converted_at_load),
        cmocka_unit_test(model_no_mmap_copies_weights),
        cmocka_unit_test(model_q8_0_needs_whole_blocks),
        cmocka_unit_test(backend_options_override_plugins_yaml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
