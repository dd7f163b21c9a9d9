/* The scheduler (qvl/split.h) on two reference instances: a graph split over them computes
 * exactly what it computes on one, boundary activations are copied (and only they), views are
 * recomputed where they are read, bad placements are one clear error, nodes a backend refuses
 * fall back to the next one, and a KV cache's write and readers run where the cache lives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/split.h"
#include "test_graph_util.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define N 4
#define D 8

typedef struct two_backends {
    qvl_test_backend a, b;
} two_backends;

static int setup(void **state) {
    static two_backends tb;
    *state = NULL;
    if (!tg_open_reference(&tb.a)) return 0;
    if (!tg_open_reference(&tb.b)) {
        qvl_test_backend_close(&tb.a);
        return 0;
    }
    *state = &tb;
    return 0;
}

static int teardown(void **state) {
    two_backends *tb = *state;
    if (tb) {
        qvl_test_backend_close(&tb->b);
        qvl_test_backend_close(&tb->a);
    }
    return 0;
}

/* Group 0: h = x w1. Group 1: r = rms_norm(h) w2, read through a reshape of h (a view that
 * must be recomputed in group 1's part). Group 2: out = h + r (h again from group 0's part). */
static qvl_graph *three_groups(void) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(N, D));
    qvl_tid w1 = qvl_g_weight(g, "w1", QVL_F32, SHAPE(D, D));
    qvl_tid h = qvl_g_matmul(g, x, w1, -1);
    qvl_g_name(g, h, "h");
    qvl_g_set_group(g, 1);
    qvl_tid gamma = qvl_g_weight(g, "gamma", QVL_F32, SHAPE(D));
    qvl_tid w2 = qvl_g_weight(g, "w2", QVL_F32, SHAPE(D, D));
    qvl_tid hv = qvl_g_reshape(g, h, 3, (int64_t[]){N, 2, D / 2});
    qvl_tid h2 = qvl_g_reshape(g, hv, 2, (int64_t[]){N, D});
    qvl_tid r = qvl_g_matmul(g, qvl_g_rms_norm(g, h2, gamma, 1e-6f), w2, -1);
    qvl_g_set_group(g, 2);
    qvl_tid out = qvl_g_add(g, h, r);
    qvl_g_output(g, out, "out");
    return g;
}

static void fill(const char *name, float *v, int64_t n) { tg_fill_f32(7, name, v, n, 0.5f); }

/* Binds every weight of every part on its own target from the same values by name. */
static void bind_parts(qvl_split *sp, const qvl_test_backend *const *be, qvl_buffer *bufs,
                       size_t *n_bufs) {
    qvl_error err = {0};
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_split_part p = qvl_split_part_at(sp, i);
        const qvl_test_backend *tb = be[p.target];
        for (size_t t = 0; t < qvl_graph_n_tensors(p.graph); t++) {
            if (qvl_graph_kind(p.graph, (qvl_tid)t) != QVL_TENSOR_WEIGHT) continue;
            const qvl_tensor_desc *d = qvl_graph_desc(p.graph, (qvl_tid)t);
            int64_t n = 1;
            for (int k = 0; k < d->ndim; k++) n *= d->shape[k];
            float *v = malloc((size_t)n * sizeof *v);
            fill(qvl_graph_tensor_name(p.graph, (qvl_tid)t), v, n);
            qvl_buffer *b = &bufs[(*n_bufs)++];
            assert_int_equal(tb->iface->buffer_alloc(tb->be, (size_t)n * 4, b, &err), QVL_OK);
            assert_int_equal(tb->iface->upload(tb->be, b->data, v, (size_t)n * 4, &err), QVL_OK);
            assert_int_equal(qvl_exec_bind(p.exec, (qvl_tid)t, b->data, &err), QVL_OK);
            free(v);
        }
    }
}

static void free_bufs(const qvl_test_backend *const *be, qvl_split *sp, qvl_buffer *bufs,
                      size_t n_bufs) {
    /* buffers were allocated part by part in order: free them the same way */
    size_t k = 0;
    for (size_t i = 0; i < qvl_split_n_parts(sp); i++) {
        qvl_split_part p = qvl_split_part_at(sp, i);
        for (size_t t = 0; t < qvl_graph_n_tensors(p.graph); t++)
            if (qvl_graph_kind(p.graph, (qvl_tid)t) == QVL_TENSOR_WEIGHT && k < n_bufs)
                be[p.target]->iface->buffer_free(be[p.target]->be, &bufs[k++]);
    }
}

/* Progress over the parts (qvl_split_set_progress): done never goes back, the total is the
 * whole graph's (two [N, D] x [D, D] matmuls), and the last call reaches it. */
typedef struct progress_log {
    int calls;
    double last, total;
    bool backwards;
} progress_log;

static void log_progress(void *arg, double done, double total) {
    progress_log *l = arg;
    if (done < l->last) l->backwards = true;
    l->calls++;
    l->last = done;
    l->total = total;
}

/* Runs g split by place (n_groups entries) and returns "out" [N, D]; *parts and *bytes the
 * part count and copied bytes. Checks the run's progress on the way. */
static void run_split(const two_backends *tb, const int32_t *place, size_t n_groups, float *out,
                      size_t *parts, size_t *bytes) {
    qvl_graph *g = three_groups();
    const qvl_test_backend *be[2] = {&tb->a, &tb->b};
    qvl_split_target targets[2] = {{tb->a.iface, tb->a.be, true, false}, {tb->b.iface, tb->b.be, true, false}};
    qvl_split_options o = {.target_of_group = place, .n_groups = n_groups};
    qvl_split *sp = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_split_create(g, targets, 2, &o, NULL, &sp, &err);
    if (st != QVL_OK) fail_msg("split: %s", err.msg);
    qvl_graph_free(g); /* the split keeps copies of what it needs */
    qvl_buffer bufs[16];
    size_t n_bufs = 0;
    bind_parts(sp, be, bufs, &n_bufs);
    float x[N * D];
    fill("x", x, N * D);
    assert_int_equal(qvl_split_set(sp, "x", x, sizeof x, &err), QVL_OK);
    progress_log l = {0};
    qvl_split_set_progress(sp, log_progress, &l);
    st = qvl_split_run(sp, &err);
    if (st != QVL_OK) fail_msg("run: %s", err.msg);
    /* once per node: matmul, rms_norm, matmul, add (the norm and its matmul fused or not) */
    assert_true(l.calls >= 3 && l.calls <= 4);
    assert_false(l.backwards);
    assert_true(l.total == 2.0 * 2 * N * D * D);
    assert_true(l.last == l.total);
    assert_int_equal(qvl_split_get(sp, "out", out, N * D * sizeof(float), &err), QVL_OK);
    *parts = qvl_split_n_parts(sp);
    *bytes = qvl_split_copy_bytes(sp);
    free_bufs(be, sp, bufs, n_bufs);
    qvl_split_free(sp);
}

#define NEED_BACKENDS(state)          \
    two_backends *tb = *(state);      \
    if (!tb) {                        \
        skip();                       \
    }

static void split_equals_whole(void **state) {
    NEED_BACKENDS(state);
    float whole[N * D], split[N * D], back[N * D];
    size_t parts, bytes;
    run_split(tb, (int32_t[]){0, 0, 0}, 3, whole, &parts, &bytes);
    assert_int_equal(parts, 1);
    assert_int_equal(bytes, 0);
    run_split(tb, (int32_t[]){0, 1, 0}, 3, split, &parts, &bytes);
    assert_int_equal(parts, 3);
    /* part 1 reads h; part 2 reads h and r: three [N, D] f32 activations */
    assert_int_equal(bytes, 3 * N * D * sizeof(float));
    assert_memory_equal(whole, split, sizeof whole);
    run_split(tb, (int32_t[]){1, 1, 0}, 3, back, &parts, &bytes);
    assert_int_equal(parts, 2);
    assert_int_equal(bytes, 2 * N * D * sizeof(float));
    assert_memory_equal(whole, back, sizeof whole);
}

static void bad_placements(void **state) {
    NEED_BACKENDS(state);
    qvl_split_target targets[2] = {{tb->a.iface, tb->a.be, true, false}, {tb->b.iface, tb->b.be, true, false}};
    qvl_split *sp = NULL;
    qvl_error err = {0};
    qvl_graph *g = three_groups();
    qvl_split_options short_map = {.target_of_group = (int32_t[]){0, 1}, .n_groups = 2};
    assert_int_equal(qvl_split_create(g, targets, 2, &short_map, NULL, &sp, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "group 2, which has no placement"));
    assert_null(sp);
    qvl_split_options far = {.target_of_group = (int32_t[]){0, 5, 0}, .n_groups = 3};
    assert_int_equal(qvl_split_create(g, targets, 2, &far, NULL, &sp, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "backend 5 of 2"));
    qvl_graph_free(g);

    /* A cache write read from another backend would copy the whole cache: its reader runs
     * where the write runs, whatever its group says (one part, no copy). */
    g = qvl_graph_new();
    qvl_tid kv = qvl_g_input(g, "kv", QVL_F32, SHAPE(8, D));
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(N, D));
    qvl_tid all = qvl_g_store_rows(g, kv, x, 0);
    qvl_g_set_group(g, 1);
    qvl_g_output(g, qvl_g_scale(g, all, 2.0f), "out");
    qvl_split_options two = {.target_of_group = (int32_t[]){0, 1}, .n_groups = 2};
    assert_int_equal(qvl_split_create(g, targets, 2, &two, NULL, &sp, &err), QVL_OK);
    assert_int_equal(qvl_split_n_parts(sp), 1);
    assert_int_equal(qvl_split_part_at(sp, 0).target, 0);
    assert_int_equal(qvl_split_copy_bytes(sp), 0);
    qvl_split_free(sp);
    sp = NULL;
    qvl_graph_free(g);
}

/* A backend that runs MATMUL only: the reference's table with every other op removed. */
static qvl_op_impl matmul_only_ops[QVL_OP_COUNT];
static qvl_backend_iface matmul_only(const qvl_test_backend *ref) {
    qvl_backend_iface t = *ref->iface;
    memset(matmul_only_ops, 0, sizeof matmul_only_ops);
    matmul_only_ops[QVL_OP_MATMUL] = ref->iface->ops[QVL_OP_MATMUL];
    t.name = "matmul_only";
    t.ops = matmul_only_ops;
    return t;
}

/* Per-op fallback: every group on the matmul-only backend, the nodes it refuses on the
 * reference; the result equals the whole graph's on one backend. Without a fallback order, or
 * with the backend marked no_fallback, the first refused node is the executor's one-line
 * refusal. */
static void fallback_per_op(void **state) {
    NEED_BACKENDS(state);
    float whole[N * D], split[N * D];
    size_t parts, bytes;
    run_split(tb, (int32_t[]){0, 0, 0}, 3, whole, &parts, &bytes);

    const qvl_backend_iface mo = matmul_only(&tb->a);
    qvl_split_target targets[2] = {{&mo, tb->a.be, true, false}, {tb->b.iface, tb->b.be, true, false}};
    const int32_t order[2] = {0, 1};
    qvl_split_options o = {.target_of_group = (int32_t[]){0, 0, 0}, .n_groups = 3,
                           .fallback_order = order, .n_fallback = 2};
    qvl_graph *g = three_groups();
    int32_t placed[64];
    assert_true(qvl_graph_n_tensors(g) <= 64);
    qvl_error err = {0};
    assert_int_equal(qvl_split_place(g, targets, 2, &o, placed, &err), QVL_OK);
    for (size_t t = 0; t < qvl_graph_n_tensors(g); t++) {
        qvl_tid id = (qvl_tid)t;
        if (qvl_graph_kind(g, id) != QVL_TENSOR_NODE || qvl_op_is_view(qvl_graph_op(g, id)))
            assert_int_equal(placed[t], -1);
        else
            assert_int_equal(placed[t], qvl_graph_op(g, id) == QVL_OP_MATMUL ? 0 : 1);
    }
    qvl_split *sp = NULL;
    assert_int_equal(qvl_split_create(g, targets, 2, &o, NULL, &sp, &err), QVL_OK);
    /* matmul | rms_norm | matmul | add */
    assert_int_equal(qvl_split_n_parts(sp), 4);
    const qvl_test_backend *be[2] = {&tb->a, &tb->b};
    qvl_buffer bufs[16];
    size_t n_bufs = 0;
    bind_parts(sp, be, bufs, &n_bufs);
    float x[N * D];
    fill("x", x, N * D);
    assert_int_equal(qvl_split_set(sp, "x", x, sizeof x, &err), QVL_OK);
    if (qvl_split_run(sp, &err) != QVL_OK) fail_msg("run: %s", err.msg);
    assert_int_equal(qvl_split_get(sp, "out", split, sizeof split, &err), QVL_OK);
    assert_memory_equal(whole, split, sizeof whole);
    free_bufs(be, sp, bufs, n_bufs);
    qvl_split_free(sp);
    sp = NULL;

    targets[0].no_fallback = true;
    assert_int_equal(qvl_split_create(g, targets, 2, &o, NULL, &sp, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "backend matmul_only does not support rms_norm (node "));
    assert_null(strstr(err.msg, "no other backend"));
    assert_null(sp);
    targets[0].no_fallback = false;
    o.fallback_order = NULL;
    assert_int_equal(qvl_split_create(g, targets, 2, &o, NULL, &sp, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "backend matmul_only does not support rms_norm (node "));
    qvl_graph_free(g);
}

static int32_t kv_home_of(void *ctx, const char *name) {
    return strcmp(name, "kv") == 0 ? *(const int32_t *)ctx : -1;
}

/* The KV cache rule with fallback: a cache write runs where its cache lives, and a node that
 * reads the write runs there too, even one its group's backend would take (a matmul over the
 * cache); a cache whose home refuses the write is an error saying so. */
static void cache_write_and_readers_stay_home(void **state) {
    NEED_BACKENDS(state);
    const qvl_backend_iface mo = matmul_only(&tb->a);
    qvl_split_target targets[2] = {{&mo, tb->a.be, true, false}, {tb->b.iface, tb->b.be, true, false}};
    const int32_t order[2] = {0, 1};
    int32_t home = 1;
    qvl_split_options o = {.target_of_group = (int32_t[]){0}, .n_groups = 1,
                           .fallback_order = order, .n_fallback = 2,
                           .input_home = kv_home_of, .input_home_ctx = &home};
    qvl_graph *g = qvl_graph_new();
    qvl_tid kv = qvl_g_input(g, "kv", QVL_F32, SHAPE(8, D));
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(N, D));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(D, D));
    qvl_tid all = qvl_g_store_rows(g, kv, x, 0);
    qvl_tid y = qvl_g_matmul(g, all, w, -1);
    qvl_g_output(g, y, "y");
    int32_t placed[16];
    qvl_error err = {0};
    assert_int_equal(qvl_split_place(g, targets, 2, &o, placed, &err), QVL_OK);
    assert_int_equal(placed[all], 1);
    assert_int_equal(placed[y], 1);
    home = 0;
    assert_int_equal(qvl_split_place(g, targets, 2, &o, placed, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "backend matmul_only does not support store_rows"));
    assert_non_null(strstr(err.msg, "run where the cache lives"));
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_equals_whole),
        cmocka_unit_test(bad_placements),
        cmocka_unit_test(fallback_per_op),
        cmocka_unit_test(cache_write_and_readers_stay_home),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
