/* The executor on the reference backend: results of a small graph against values computed
 * here, binding and setting rules, errors that name the node, and refusing a backend that
 * lacks a kernel or says it does not support a node. */
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

static int setup(void **state) {
    static qvl_test_backend tb;
    if (!tg_open_reference(&tb)) {
        *state = NULL;
        return 0;
    }
    *state = &tb;
    return 0;
}

static int teardown(void **state) {
    if (*state) qvl_test_backend_close(*state);
    return 0;
}

#define NEED_BACKEND(state)                                   \
    qvl_test_backend *tb = *(state);                          \
    if (!tb) {                                                \
        skip();                                               \
    }

/* y = (x . w^T + b) * x2[:, 1:3] with x2 read through a slice view, then kept as output. */
static void small_graph_results(void **state) {
    NEED_BACKEND(state);
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 3));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(2, 3));
    qvl_tid b = qvl_g_weight(g, "b", QVL_F32, SHAPE(2));
    qvl_tid x2 = qvl_g_input(g, "x2", QVL_F32, SHAPE(2, 4));
    qvl_tid y = qvl_g_mul(g, qvl_g_matmul(g, x, w, b), qvl_g_slice(g, x2, 1, 1, 2));
    qvl_g_output(g, y, "y");
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    assert_int_equal(qvl_exec_create(g, tb->iface, tb->be, &ex, &err), QVL_OK);

    const float xv[6] = {1, 2, 3, 4, 5, 6}, wv[6] = {1, 0, -1, 0.5f, 0.5f, 0.5f}, bv[2] = {10, 20};
    const float x2v[8] = {0, 1, 2, 0, 0, -1, 3, 0};
    qvl_buffer wb, bb;
    assert_int_equal(tb->iface->buffer_alloc(tb->be, sizeof wv, &wb, &err), QVL_OK);
    assert_int_equal(tb->iface->buffer_alloc(tb->be, sizeof bv, &bb, &err), QVL_OK);
    assert_int_equal(tb->iface->upload(tb->be, wb.data, wv, sizeof wv, &err), QVL_OK);

    /* Running before everything is bound and set names what is missing. */
    assert_int_equal(qvl_exec_run(ex, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "not"));

    assert_int_equal(qvl_exec_bind(ex, w, wb.data, &err), QVL_OK);
    assert_int_equal(qvl_exec_bind(ex, b, bb.data, &err), QVL_OK);
    assert_int_equal(qvl_exec_set(ex, b, bv, sizeof bv, &err), QVL_OK); /* bound weights can be set */
    assert_ptr_equal(qvl_exec_addr(ex, w), wb.data);
    assert_int_equal(qvl_exec_set(ex, x, xv, sizeof xv, &err), QVL_OK);
    assert_int_equal(qvl_exec_run(ex, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "x2"));
    assert_int_equal(qvl_exec_set(ex, x2, x2v, sizeof x2v, &err), QVL_OK);
    qvl_status s = qvl_exec_run(ex, &err);
    if (s != QVL_OK) print_error("%s\n", err.msg);
    assert_int_equal(s, QVL_OK);

    float out[4];
    assert_int_equal(qvl_exec_get(ex, y, out, sizeof out, &err), QVL_OK);
    /* row 0: x.w0 = 1-3 = -2, +10 = 8; x.w1 = 3, +20 = 23; times x2[0][1..2] = 1, 2 */
    /* row 1: x.w0 = 4-6 = -2, +10 = 8; x.w1 = 7.5, +20 = 27.5; times -1, 3 */
    const float want[4] = {8, 46, -8, 82.5f};
    for (int i = 0; i < 4; i++) assert_true(fabsf(out[i] - want[i]) < 1e-5f);

    /* Views get their root's address plus the offset. */
    qvl_tid view = qvl_graph_srcs(g, y)[1];
    assert_ptr_equal(qvl_exec_addr(ex, view), (char *)qvl_exec_addr(ex, x2) + 4);
    /* ... and follow it when the root is bound elsewhere; other tensors stay put. */
    void *x_addr = qvl_exec_addr(ex, x);
    qvl_buffer x2b;
    assert_int_equal(tb->iface->buffer_alloc(tb->be, sizeof x2v, &x2b, &err), QVL_OK);
    assert_int_equal(qvl_exec_bind(ex, x2, x2b.data, &err), QVL_OK);
    assert_ptr_equal(qvl_exec_addr(ex, x2), x2b.data);
    assert_ptr_equal(qvl_exec_addr(ex, view), (char *)x2b.data + 4);
    assert_ptr_equal(qvl_exec_addr(ex, x), x_addr);

    /* Wrong sizes, wrong kinds, non-contiguous reads. */
    assert_int_equal(qvl_exec_set(ex, x, xv, sizeof xv - 4, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "x"));
    assert_int_equal(qvl_exec_set(ex, y, out, sizeof out, &err), QVL_E_INVALID);
    assert_int_equal(qvl_exec_bind(ex, y, wb.data, &err), QVL_E_INVALID);
    assert_int_equal(qvl_exec_get(ex, view, out, 4 * sizeof(float), &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "contiguous"));
    assert_int_equal(qvl_exec_get(ex, 999, out, sizeof out, &err), QVL_E_INVALID);

    qvl_exec_free(ex);
    tb->iface->buffer_free(tb->be, &wb);
    tb->iface->buffer_free(tb->be, &bb);
    tb->iface->buffer_free(tb->be, &x2b);
    qvl_graph_free(g);
}

/* An unbound weight cannot be set (it has no memory yet). */
static void unbound_weight_cannot_be_set(void **state) {
    NEED_BACKEND(state);
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(4));
    qvl_g_output(g, qvl_g_add(g, x, w), "y");
    qvl_exec *ex = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, tb->iface, tb->be, &ex, &err), QVL_OK);
    float v[4] = {0};
    assert_int_equal(qvl_exec_set(ex, w, v, sizeof v, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "w"));
    qvl_exec_free(ex);
    qvl_graph_free(g);
}

/* A copy of the reference table with one kernel removed, or with accepts() refusing MUL. */
static qvl_op_impl kernels_copy[QVL_OP_COUNT];
static const qvl_backend_iface *real_iface;

static qvl_status refuse_mul(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    if (node->op == QVL_OP_MUL) return qvl_fail(err, QVL_E_UNSUPPORTED, "no mul today");
    return real_iface->accepts ? real_iface->accepts(be, node, err) : QVL_OK;
}

static void unsupported_op_is_named(void **state) {
    NEED_BACKEND(state);
    real_iface = tb->iface;
    qvl_backend_iface crippled = *tb->iface;
    assert_true(tb->iface->n_ops <= QVL_OP_COUNT);
    memcpy(kernels_copy, tb->iface->ops, tb->iface->n_ops * sizeof kernels_copy[0]);
    kernels_copy[QVL_OP_SOFTMAX].kernel = NULL;
    crippled.ops = kernels_copy;
    crippled.name = "crippled";

    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(3, 5));
    qvl_tid p = qvl_g_softmax(g, qvl_g_mul(g, x, x));
    qvl_g_name(g, p, "blk.0.probs");
    qvl_g_output(g, p, "p");
    qvl_exec *ex = (qvl_exec *)1;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, &crippled, tb->be, &ex, &err), QVL_E_UNSUPPORTED);
    assert_null(ex);
    assert_non_null(strstr(err.msg, "backend crippled does not support softmax"));
    assert_non_null(strstr(err.msg, "blk.0.probs"));
    assert_non_null(strstr(err.msg, "[3, 5]"));

    kernels_copy[QVL_OP_SOFTMAX] = tb->iface->ops[QVL_OP_SOFTMAX];
    crippled.accepts = refuse_mul;
    assert_int_equal(qvl_exec_create(g, &crippled, tb->be, &ex, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "does not support mul"));
    assert_non_null(strstr(err.msg, "no mul today")); /* the backend's reason is passed on */

    /* Ops beyond n_ops count as missing (a plugin built before they existed). */
    crippled.accepts = tb->iface->accepts;
    crippled.n_ops = QVL_OP_SOFTMAX;
    assert_int_equal(qvl_exec_create(g, &crippled, tb->be, &ex, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "softmax"));
    qvl_graph_free(g);
}

/* A kernel failing at run time: the error names the node and the op. */
static qvl_status failing_add(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    (void)be;
    (void)node;
    return qvl_fail(err, QVL_E_BACKEND, "device on fire");
}

static void kernel_error_names_node(void **state) {
    NEED_BACKEND(state);
    qvl_backend_iface broken = *tb->iface;
    memcpy(kernels_copy, tb->iface->ops, tb->iface->n_ops * sizeof kernels_copy[0]);
    kernels_copy[QVL_OP_ADD].kernel = failing_add;
    broken.ops = kernels_copy;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4));
    qvl_tid y = qvl_g_add(g, qvl_g_scale(g, x, 2.0f), x);
    qvl_g_name(g, y, "the_sum");
    qvl_g_output(g, y, "y");
    qvl_exec *ex = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, &broken, tb->be, &ex, &err), QVL_OK);
    float v[4] = {1, 2, 3, 4};
    assert_int_equal(qvl_exec_set(ex, x, v, sizeof v, &err), QVL_OK);
    assert_int_equal(qvl_exec_run(ex, &err), QVL_E_BACKEND);
    assert_non_null(strstr(err.msg, "the_sum"));
    assert_non_null(strstr(err.msg, "add"));
    assert_non_null(strstr(err.msg, "device on fire"));
    qvl_exec_free(ex);
    qvl_graph_free(g);
}

/* The fused text graph runs, and the KV cache written by STORE_ROWS lands in bound memory. */
static void kv_cache_written_through_store_rows(void **state) {
    NEED_BACKEND(state);
    tg_text_dims d = tg_text_default();
    d.n_layers = 1;
    d.lm_head = false;
    qvl_graph *g = tg_build_text(&d);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    qvl_exec *ex = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, tb->iface, tb->be, &ex, &err), QVL_OK);
    size_t n = qvl_graph_n_tensors(g);
    qvl_buffer *bufs = calloc(n, sizeof *bufs);
    assert_non_null(bufs);
    int64_t kv_elems = d.kv_capacity * d.n_kv_heads * d.head_dim;
    float *cache = calloc((size_t)kv_elems, sizeof *cache);
    assert_non_null(cache);
    qvl_tid kc = qvl_graph_find(g, "kv.0.k");
    for (qvl_tid t = 0; t < (qvl_tid)n; t++) {
        if (!qvl_graph_is_live(g, t) || qvl_graph_kind(g, t) == QVL_TENSOR_NODE) continue;
        const qvl_tensor_desc *desc = qvl_graph_desc(g, t);
        int64_t ne = qvl_desc_nelem(desc);
        size_t bytes = (size_t)ne * 4;
        void *host = calloc((size_t)ne, 4);
        assert_non_null(host);
        if (desc->dtype == QVL_I32) tg_fill_i32(t, qvl_graph_tensor_name(g, t), host, ne, NULL);
        else if (t != kc) tg_fill_f32(1, qvl_graph_tensor_name(g, t), host, ne, 0.5f);
        if (qvl_graph_kind(g, t) == QVL_TENSOR_WEIGHT || t == kc) {
            assert_int_equal(tb->iface->buffer_alloc(tb->be, bytes, &bufs[t], &err), QVL_OK);
            assert_int_equal(qvl_exec_bind(ex, t, bufs[t].data, &err), QVL_OK);
        }
        assert_int_equal(qvl_exec_set(ex, t, host, bytes, &err), QVL_OK);
        free(host);
    }
    qvl_status s = qvl_exec_run(ex, &err);
    if (s != QVL_OK) print_error("%s\n", err.msg);
    assert_int_equal(s, QVL_OK);
    assert_int_equal(qvl_exec_get(ex, kc, cache, (size_t)kv_elems * 4, &err), QVL_OK);
    /* Rows before n_past stay as they were (zero), rows n_past.. n_past+N got keys. */
    int64_t row = d.n_kv_heads * d.head_dim;
    double before = 0, written = 0;
    for (int64_t i = 0; i < d.n_past * row; i++) before += fabs(cache[i]);
    for (int64_t i = d.n_past * row; i < (d.n_past + d.n_tokens) * row; i++) written += fabs(cache[i]);
    assert_true(before == 0);
    assert_true(written > 0);
    qvl_exec_free(ex);
    for (size_t t = 0; t < n; t++)
        if (bufs[t].data) tb->iface->buffer_free(tb->be, &bufs[t]);
    free(bufs);
    free(cache);
    qvl_graph_free(g);
}

/* Inputs bound before the first run (a KV cache) take no arena space. */
static size_t last_alloc;
static qvl_status counting_alloc(qvl_backend *be, size_t bytes, qvl_buffer *out, qvl_error *err) {
    last_alloc = bytes;
    return real_iface->buffer_alloc(be, bytes, out, err);
}

static size_t arena_bytes(qvl_test_backend *tb, bool bind_kv) {
    tg_text_dims d = tg_text_default();
    d.n_layers = 1;
    d.kv_capacity = 4096;
    qvl_graph *g = tg_build_text(&d);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    real_iface = tb->iface;
    qvl_backend_iface counting = *tb->iface;
    counting.buffer_alloc = counting_alloc;
    qvl_exec *ex = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, &counting, tb->be, &ex, &err), QVL_OK);
    size_t kv_bytes = (size_t)(d.kv_capacity * d.n_kv_heads * d.head_dim) * sizeof(float);
    qvl_buffer kv[2] = {{0}};
    const char *names[2] = {"kv.0.k", "kv.0.v"};
    for (int i = 0; bind_kv && i < 2; i++) {
        assert_int_equal(tb->iface->buffer_alloc(tb->be, kv_bytes, &kv[i], &err), QVL_OK);
        assert_int_equal(qvl_exec_bind(ex, qvl_graph_find(g, names[i]), kv[i].data, &err), QVL_OK);
    }
    last_alloc = 0;
    float *x = calloc((size_t)(d.n_tokens * d.hidden), sizeof *x);
    assert_non_null(x);
    /* Setting the first arena input allocates the arena. */
    assert_int_equal(qvl_exec_set(ex, qvl_graph_find(g, "x"), x,
                                  (size_t)(d.n_tokens * d.hidden) * sizeof *x, &err), QVL_OK);
    size_t bytes = last_alloc;
    assert_true(bytes > 0);
    if (bind_kv) assert_true(bytes < kv_bytes);
    else assert_true(bytes >= 2 * kv_bytes);
    /* Addresses inside the arena are known now; the bound cache keeps its own. */
    assert_non_null(qvl_exec_addr(ex, qvl_graph_find(g, "x")));
    if (bind_kv) assert_ptr_equal(qvl_exec_addr(ex, qvl_graph_find(g, "kv.0.k")), kv[0].data);
    free(x);
    qvl_exec_free(ex);
    for (int i = 0; bind_kv && i < 2; i++) tb->iface->buffer_free(tb->be, &kv[i]);
    qvl_graph_free(g);
    return bytes;
}

static void bound_inputs_take_no_arena(void **state) {
    NEED_BACKEND(state);
    size_t with_cache = arena_bytes(tb, false), without = arena_bytes(tb, true);
    assert_true(without < with_cache);
}

/* A backend's whole-graph entry runs instead of the kernels; declining it falls back. */
static size_t run_graph_calls, run_graph_nodes;
static qvl_status decline_run_graph(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                                    qvl_error *err) {
    (void)be;
    (void)nodes;
    run_graph_calls++;
    run_graph_nodes = n;
    return qvl_fail(err, QVL_E_UNSUPPORTED, "not today");
}
static qvl_status own_run_graph(qvl_backend *be, const qvl_node *const *nodes, size_t n,
                                qvl_error *err) {
    run_graph_calls++;
    for (size_t i = 0; i < n; i++) {
        qvl_status s = real_iface->ops[nodes[i]->op].kernel(be, nodes[i], err);
        if (s != QVL_OK) return s;
    }
    return QVL_OK;
}

static void whole_graph_entry(void **state) {
    NEED_BACKEND(state);
    real_iface = tb->iface;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4));
    qvl_tid y = qvl_g_add(g, qvl_g_scale(g, qvl_g_reshape(g, x, SHAPE(2, 2)), 2.0f),
                          qvl_g_reshape(g, x, SHAPE(2, 2)));
    qvl_g_output(g, y, "y");
    const float v[4] = {1, 2, 3, 4};
    for (int mode = 0; mode < 2; mode++) {
        qvl_backend_iface whole = *tb->iface;
        memcpy(kernels_copy, tb->iface->ops, tb->iface->n_ops * sizeof kernels_copy[0]);
        whole.ops = kernels_copy;
        if (mode == 0) {
            whole.run_graph = decline_run_graph;
        } else {
            whole.run_graph = own_run_graph;
            kernels_copy[QVL_OP_ADD].kernel = failing_add; /* the per-node path would fail */
        }
        run_graph_calls = run_graph_nodes = 0;
        qvl_exec *ex = NULL;
        qvl_error err = {0};
        assert_int_equal(qvl_exec_create(g, &whole, tb->be, &ex, &err), QVL_OK);
        assert_int_equal(qvl_exec_set(ex, x, v, sizeof v, &err), QVL_OK);
        qvl_status s = qvl_exec_run(ex, &err);
        if (s != QVL_OK) print_error("%s\n", err.msg);
        assert_int_equal(s, QVL_OK);
        assert_int_equal(run_graph_calls, 1);
        if (mode == 0) assert_int_equal(run_graph_nodes, 2); /* views have no kernel */
        float out[4];
        assert_int_equal(qvl_exec_get(ex, y, out, sizeof out, &err), QVL_OK);
        for (int i = 0; i < 4; i++) assert_true(out[i] == 3 * v[i]);
        qvl_exec_free(ex);
    }
    qvl_graph_free(g);
}

/* Progress (qvl_exec_set_progress): once per node, in the nodes' flops, done never going back
 * and ending at the total; by node count where no node has flops; once at the end of a
 * whole-graph run; nothing once it is off. */
typedef struct progress_log {
    int calls;
    double done[8], total;
} progress_log;

static void log_progress(void *arg, double done, double total) {
    progress_log *l = arg;
    if (l->calls < 8) l->done[l->calls] = done;
    l->calls++;
    l->total = total;
}

static void progress_by_work(void **state) {
    NEED_BACKEND(state);
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4, 8));
    qvl_tid w1 = qvl_g_weight(g, "w1", QVL_F32, SHAPE(16, 8));
    qvl_tid w2 = qvl_g_weight(g, "w2", QVL_F32, SHAPE(8, 16));
    qvl_tid h = qvl_g_scale(g, qvl_g_matmul(g, x, w1, -1), 0.5f);
    qvl_g_output(g, qvl_g_matmul(g, h, w2, -1), "y");
    float xv[32] = {0}, w1v[128] = {0}, w2v[128] = {0};
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    assert_int_equal(qvl_exec_create(g, tb->iface, tb->be, &ex, &err), QVL_OK);
    qvl_buffer b1, b2;
    assert_int_equal(tb->iface->buffer_alloc(tb->be, sizeof w1v, &b1, &err), QVL_OK);
    assert_int_equal(tb->iface->buffer_alloc(tb->be, sizeof w2v, &b2, &err), QVL_OK);
    assert_int_equal(tb->iface->upload(tb->be, b1.data, w1v, sizeof w1v, &err), QVL_OK);
    assert_int_equal(tb->iface->upload(tb->be, b2.data, w2v, sizeof w2v, &err), QVL_OK);
    assert_int_equal(qvl_exec_bind(ex, w1, b1.data, &err), QVL_OK);
    assert_int_equal(qvl_exec_bind(ex, w2, b2.data, &err), QVL_OK);
    assert_int_equal(qvl_exec_set(ex, x, xv, sizeof xv, &err), QVL_OK);

    /* 2 x 4 x 8 x 16 flops per matmul; the scale has none */
    assert_true(qvl_exec_work(ex) == 2048.0);
    progress_log l = {0};
    qvl_exec_set_progress(ex, log_progress, &l);
    assert_int_equal(qvl_exec_run(ex, &err), QVL_OK);
    assert_int_equal(l.calls, 3);
    assert_true(l.total == 2048.0);
    assert_true(l.done[0] == 1024.0 && l.done[1] == 1024.0 && l.done[2] == 2048.0);

    qvl_exec_set_progress(ex, NULL, NULL);
    memset(&l, 0, sizeof l);
    assert_int_equal(qvl_exec_run(ex, &err), QVL_OK);
    assert_int_equal(l.calls, 0);
    qvl_exec_free(ex);
    tb->iface->buffer_free(tb->be, &b1);
    tb->iface->buffer_free(tb->be, &b2);
    qvl_graph_free(g);

    /* No flops anywhere: each node counts one; a whole-graph run reports once, at its end. */
    real_iface = tb->iface;
    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(4));
    qvl_g_output(g, qvl_g_add(g, qvl_g_scale(g, x, 2.0f), x), "y");
    for (int whole_graph = 0; whole_graph < 2; whole_graph++) {
        qvl_backend_iface iface = *tb->iface;
        iface.run_graph = whole_graph ? own_run_graph : NULL;
        assert_int_equal(qvl_exec_create(g, &iface, tb->be, &ex, &err), QVL_OK);
        assert_int_equal(qvl_exec_set(ex, x, xv, 4 * sizeof(float), &err), QVL_OK);
        memset(&l, 0, sizeof l);
        qvl_exec_set_progress(ex, log_progress, &l);
        assert_int_equal(qvl_exec_run(ex, &err), QVL_OK);
        assert_true(l.total == 2.0);
        if (whole_graph) {
            assert_int_equal(l.calls, 1);
            assert_true(l.done[0] == 2.0);
        } else {
            assert_int_equal(l.calls, 2);
            assert_true(l.done[0] == 1.0 && l.done[1] == 2.0);
        }
        qvl_exec_free(ex);
    }
    qvl_graph_free(g);
}

/* A released arena comes back at the next set: the inputs it held must be set again, the
 * plan and results stay. */
static void released_arena_comes_back(void **state) {
    NEED_BACKEND(state);
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4));
    qvl_tid y = qvl_g_add(g, qvl_g_scale(g, x, 2.0f), x);
    qvl_g_output(g, y, "y");
    const float v[4] = {1, 2, 3, 4};
    qvl_exec *ex = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_exec_create(g, tb->iface, tb->be, &ex, &err), QVL_OK);
    for (int round = 0; round < 2; round++) {
        assert_int_equal(qvl_exec_set(ex, x, v, sizeof v, &err), QVL_OK);
        assert_int_equal(qvl_exec_run(ex, &err), QVL_OK);
        float out[4];
        assert_int_equal(qvl_exec_get(ex, y, out, sizeof out, &err), QVL_OK);
        for (int i = 0; i < 4; i++) assert_true(out[i] == 3 * v[i]);
        qvl_exec_release_arena(ex);
        assert_int_equal(qvl_exec_run(ex, &err), QVL_E_INVALID);
        assert_non_null(strstr(err.msg, "not set"));
    }
    qvl_exec_release_arena(ex); /* twice is harmless */
    qvl_exec_free(ex);
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_graph_results),
        cmocka_unit_test(unbound_weight_cannot_be_set),
        cmocka_unit_test(unsupported_op_is_named),
        cmocka_unit_test(kernel_error_names_node),
        cmocka_unit_test(kv_cache_written_through_store_rows),
        cmocka_unit_test(bound_inputs_take_no_arena),
        cmocka_unit_test(whole_graph_entry),
        cmocka_unit_test(released_arena_comes_back),
        cmocka_unit_test(progress_by_work),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
