/* The planner: buffers alive at the same time never share arena bytes (lifetimes recomputed
 * here from the graph and the plan order), aliases sit inside their storage, and the stats
 * add up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../graph/src/graph_internal.h" /* the plan order */
#include "test_graph_util.h"

#define NO_OFFSET ((size_t)-1)

static bool is_alias(const qvl_graph *g, qvl_tid t) {
    return qvl_graph_kind(g, t) == QVL_TENSOR_NODE &&
           (qvl_graph_op(g, t) == QVL_OP_VIEW || qvl_graph_op(g, t) == QVL_OP_STORE_ROWS);
}

static qvl_tid root_of(const qvl_graph *g, qvl_tid t) {
    while (is_alias(g, t)) t = qvl_graph_srcs(g, t)[0];
    return t;
}

static size_t bytes_of(const qvl_graph *g, qvl_tid t) {
    size_t b = 0;
    const qvl_tensor_desc *d = qvl_graph_desc(g, t);
    assert_true(qvl_dtype_row_bytes(d->dtype, qvl_desc_nelem(d), &b));
    return b;
}

/* Plans g and checks every property; returns the stats. */
static qvl_plan_stats check_plan(qvl_graph *g, bool reuse) {
    qvl_plan_stats st;
    qvl_error err = {0};
    qvl_status s = qvl_graph_plan(g, reuse, &st, &err);
    if (s != QVL_OK) print_error("plan: %s\n", err.msg);
    assert_int_equal(s, QVL_OK);

    size_t n = qvl_graph_n_tensors(g), end = g->n_order + 1;
    size_t *def = calloc(n, sizeof *def), *last = calloc(n, sizeof *last);
    assert_non_null(def);
    assert_non_null(last);
    for (size_t k = 0; k < g->n_order; k++) def[g->order[k]] = last[g->order[k]] = k + 1;
    for (size_t k = 0; k < g->n_order; k++) {
        qvl_tid t = g->order[k];
        const qvl_tid *src = qvl_graph_srcs(g, t);
        for (uint32_t i = 0; i < qvl_op_max_inputs(qvl_graph_op(g, t)); i++) {
            if (src[i] < 0) continue;
            /* Plan order is an execution order: inputs come first. */
            if (qvl_graph_kind(g, src[i]) == QVL_TENSOR_NODE) assert_true(def[src[i]] < k + 1);
            qvl_tid r = root_of(g, src[i]);
            if (last[r] < k + 1) last[r] = k + 1;
        }
        qvl_tid r = root_of(g, t);
        if (last[r] < k + 1) last[r] = k + 1;
    }
    for (size_t i = 0; i < qvl_graph_n_outputs(g); i++) last[root_of(g, qvl_graph_output(g, i, NULL))] = end;

    qvl_tid *owners = malloc(n * sizeof *owners);
    assert_non_null(owners);
    size_t n_owners = 0, total = 0, top = 0;
    for (qvl_tid t = 0; t < (qvl_tid)n; t++) {
        if (!qvl_graph_is_live(g, t)) continue;
        qvl_tensor_kind kind = qvl_graph_kind(g, t);
        size_t off = qvl_graph_offset(g, t);
        if (kind == QVL_TENSOR_WEIGHT) {
            assert_true(off == NO_OFFSET);
            continue;
        }
        if (kind == QVL_TENSOR_NODE && is_alias(g, t)) {
            qvl_tid r = root_of(g, t);
            if (qvl_graph_kind(g, r) == QVL_TENSOR_WEIGHT) continue;
            /* An alias lies inside its root's bytes. */
            assert_true(off >= qvl_graph_offset(g, r));
            assert_true(off < qvl_graph_offset(g, r) + bytes_of(g, r));
            if (qvl_graph_op(g, t) == QVL_OP_STORE_ROWS) assert_true(off == qvl_graph_offset(g, r));
            continue;
        }
        assert_true(off != NO_OFFSET);
        assert_int_equal(off % 256, 0);
        owners[n_owners++] = t;
        size_t b = bytes_of(g, t);
        total += (b + 255) / 256 * 256;
        if (off + b > top) top = off + b;
    }
    assert_int_equal(st.n_buffers, n_owners);
    assert_int_equal(st.total_bytes, total);
    assert_true(st.peak_bytes <= st.total_bytes);
    assert_true(st.peak_bytes >= top);
    if (!reuse) assert_int_equal(st.peak_bytes, st.total_bytes);

    for (size_t i = 0; i < n_owners; i++) {
        for (size_t j = i + 1; j < n_owners; j++) {
            qvl_tid a = owners[i], b = owners[j];
            bool overlap_time = def[a] <= last[b] && def[b] <= last[a];
            if (reuse && !overlap_time) continue;
            size_t oa = qvl_graph_offset(g, a), ob = qvl_graph_offset(g, b);
            bool overlap_bytes = oa < ob + bytes_of(g, b) && ob < oa + bytes_of(g, a);
            if (overlap_bytes)
                print_error("tensors %d [%zu,%zu] and %d [%zu,%zu] share bytes\n", (int)a, def[a],
                            last[a], (int)b, def[b], last[b]);
            assert_false(overlap_bytes);
        }
    }
    free(def);
    free(last);
    free(owners);
    return st;
}

static void text_graph_plans(void **state) {
    (void)state;
    tg_text_dims d = tg_text_default();
    d.n_layers = 3;
    qvl_graph *g = tg_build_text(&d);
    qvl_plan_stats plain = check_plan(g, true);
    assert_true(plain.peak_bytes < plain.total_bytes); /* buffers really are reused */
    check_plan(g, false);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    assert_true(qvl_graph_offset(g, qvl_graph_find(g, "x")) == NO_OFFSET); /* plan dropped */
    qvl_plan_stats fused = check_plan(g, true);
    assert_true(fused.peak_bytes < fused.total_bytes);
    assert_true(fused.n_buffers < plain.n_buffers);
    check_plan(g, false);
    qvl_graph_free(g);
}

static void vision_graph_plans(void **state) {
    (void)state;
    tg_vision_dims d = tg_vision_default();
    qvl_graph *g = tg_build_vision(&d);
    check_plan(g, true);
    check_plan(g, false);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    check_plan(g, true);
    qvl_graph_free(g);
}

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* A chain reuses: x -> a -> b -> c -> d needs only two live buffers at a time. */
static void chain_reuses_memory(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid t = qvl_g_input(g, "x", QVL_F32, SHAPE(1024));
    for (int i = 0; i < 6; i++) t = qvl_g_scale(g, t, 2.0f);
    qvl_g_output(g, t, "y");
    qvl_plan_stats st = check_plan(g, true);
    assert_int_equal(st.n_buffers, 7);
    assert_int_equal(st.total_bytes, 7 * 4096);
    assert_int_equal(st.peak_bytes, 2 * 4096);
    /* A view keeps its storage alive: y = scale(view(a)) must not overwrite a early. */
    qvl_graph_free(g);

    g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(8, 128));
    qvl_tid a = qvl_g_scale(g, x, 2.0f);
    qvl_tid v = qvl_g_slice(g, a, 0, 4, 4);
    qvl_tid b = qvl_g_scale(g, x, 3.0f);
    qvl_tid c = qvl_g_add(g, v, qvl_g_slice(g, b, 0, 0, 4));
    qvl_g_output(g, c, "c");
    check_plan(g, true);
    assert_true(qvl_graph_offset(g, v) == qvl_graph_offset(g, a) + 4 * 128 * 4);
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_graph_plans),
        cmocka_unit_test(vision_graph_plans),
        cmocka_unit_test(chain_reuses_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
