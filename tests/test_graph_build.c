/* Building and validating graphs: descriptors of nodes and views, names and outputs, the
 * sticky first error, and the validator catching corrupted graphs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../graph/src/graph_internal.h" /* only to corrupt graphs on purpose */
#include "test_graph_util.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static void expect_error(qvl_graph *g, qvl_status want, const char *needle) {
    qvl_error err = {0};
    qvl_status s = qvl_graph_error(g, &err);
    if (s != want || !strstr(err.msg, needle))
        print_error("got %d \"%s\", wanted %d with \"%s\"\n", (int)s, err.msg, (int)want, needle);
    assert_int_equal(s, want);
    assert_non_null(strstr(err.msg, needle));
}

static void nodes_and_inspection(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(3, 8));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F16, SHAPE(5, 8));
    qvl_tid b = qvl_g_weight(g, "b", QVL_F32, SHAPE(5));
    qvl_tid y = qvl_g_matmul(g, x, w, b);
    qvl_g_name(g, y, "proj.%d", 7);
    qvl_tid z = qvl_g_unary(g, QVL_OP_SILU, y);
    qvl_g_output(g, z, "z");
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);

    assert_int_equal(qvl_graph_n_tensors(g), 5);
    assert_int_equal(qvl_graph_n_nodes(g), 2);
    assert_int_equal(qvl_graph_count_op(g, QVL_OP_MATMUL), 1);
    assert_int_equal(qvl_graph_kind(g, x), QVL_TENSOR_INPUT);
    assert_int_equal(qvl_graph_kind(g, w), QVL_TENSOR_WEIGHT);
    assert_int_equal(qvl_graph_kind(g, y), QVL_TENSOR_NODE);
    assert_int_equal(qvl_graph_op(g, y), QVL_OP_MATMUL);
    const qvl_tensor_desc *d = qvl_graph_desc(g, y);
    assert_int_equal(d->ndim, 2);
    assert_int_equal(d->shape[0], 3);
    assert_int_equal(d->shape[1], 5);
    assert_int_equal(d->dtype, QVL_F32);
    const qvl_tid *src = qvl_graph_srcs(g, y);
    assert_int_equal(src[0], x);
    assert_int_equal(src[1], w);
    assert_int_equal(src[2], b);
    assert_string_equal(qvl_graph_tensor_name(g, y), "proj.7");
    assert_string_equal(qvl_graph_tensor_name(g, z), "z"); /* unnamed nodes take the output name */
    assert_int_equal(qvl_graph_find(g, "x"), x);
    assert_int_equal(qvl_graph_find(g, "w"), w);
    assert_int_equal(qvl_graph_find(g, "z"), z);
    assert_int_equal(qvl_graph_find(g, "proj.7"), -1); /* node names are for display only */
    assert_int_equal(qvl_graph_find(g, "nope"), -1);
    assert_int_equal(qvl_graph_n_outputs(g), 1);
    const char *on = NULL;
    assert_int_equal(qvl_graph_output(g, 0, &on), z);
    assert_string_equal(on, "z");
    assert_int_equal(qvl_graph_output(g, 1, &on), -1);
    assert_true(qvl_graph_is_live(g, y));
    assert_false(qvl_graph_is_live(g, 99));
    assert_null(qvl_graph_desc(g, 99));

    qvl_error err = {0};
    assert_int_equal(qvl_graph_validate(g, &err), QVL_OK);
    qvl_graph_free(g);
}

static void views(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(4, 6, 8));
    qvl_tid p = qvl_g_permute(g, x, (const int[]){1, 0, 2});
    const qvl_tensor_desc *d = qvl_graph_desc(g, p);
    assert_int_equal(qvl_graph_op(g, p), QVL_OP_VIEW);
    assert_int_equal(d->shape[0], 6);
    assert_int_equal(d->shape[1], 4);
    assert_int_equal(d->shape[2], 8);
    assert_int_equal(d->stride[0], 8);
    assert_int_equal(d->stride[1], 48);
    assert_int_equal(d->stride[2], 1);
    assert_int_equal(qvl_graph_params(g, p)->view.offset, 0);

    qvl_tid s = qvl_g_slice(g, p, 0, 2, 3); /* rows 2..4 of the permuted dim 0 */
    d = qvl_graph_desc(g, s);
    assert_int_equal(d->shape[0], 3);
    assert_int_equal(d->stride[0], 8);
    assert_int_equal(qvl_graph_params(g, s)->view.offset, 16);

    qvl_tid r = qvl_g_reshape(g, x, SHAPE(24, 8));
    d = qvl_graph_desc(g, r);
    assert_int_equal(d->ndim, 2);
    assert_int_equal(d->stride[0], 8);
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);

    /* Reshaping a non-contiguous view needs a cont first. */
    assert_int_equal(qvl_g_reshape(g, p, SHAPE(24, 8)), -1);
    expect_error(g, QVL_E_SHAPE, "not contiguous");
    qvl_graph_free(g);

    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(4, 6));
    assert_int_equal(qvl_g_permute(g, x, (const int[]){0, 0}), -1);
    expect_error(g, QVL_E_SHAPE, "permutation");
    qvl_graph_free(g);

    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(4, 6));
    assert_int_equal(qvl_g_slice(g, x, 1, 4, 3), -1);
    expect_error(g, QVL_E_SHAPE, "slice");
    qvl_graph_free(g);

    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(4, 6));
    assert_int_equal(qvl_g_reshape(g, x, SHAPE(5, 5)), -1);
    expect_error(g, QVL_E_SHAPE, "element count");
    qvl_graph_free(g);
}

static void shape_mismatch_is_sticky(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 8));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(4, 6));
    assert_int_equal(qvl_g_matmul(g, x, w, -1), -1);
    expect_error(g, QVL_E_SHAPE, "matmul");
    /* Later calls do nothing and keep the first error. */
    assert_int_equal(qvl_g_input(g, "y", QVL_F32, SHAPE(2)), -1);
    assert_int_equal(qvl_g_add(g, x, 12345), -1);
    expect_error(g, QVL_E_SHAPE, "matmul");
    assert_int_equal(qvl_graph_n_tensors(g), 2);
    qvl_error err = {0};
    assert_int_equal(qvl_graph_validate(g, &err), QVL_E_SHAPE);
    assert_int_equal(qvl_graph_plan(g, true, NULL, &err), QVL_E_SHAPE);
    qvl_graph_free(g);
}

static void unknown_tensor_id(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 8));
    assert_int_equal(qvl_g_add(g, x, 999), -1);
    expect_error(g, QVL_E_INVALID, "unknown tensor id 999");
    qvl_graph_free(g);

    g = qvl_graph_new();
    qvl_g_output(g, 3, "y");
    expect_error(g, QVL_E_INVALID, "unknown tensor id 3");
    qvl_graph_free(g);

    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 8));
    assert_int_equal(qvl_g_unary(g, QVL_OP_ADD, x), -1);
    expect_error(g, QVL_E_INVALID, "not a unary");
    qvl_graph_free(g);
}

static void duplicate_names(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_g_input(g, "x", QVL_F32, SHAPE(2));
    assert_int_equal(qvl_g_input(g, "x", QVL_F32, SHAPE(2)), -1);
    expect_error(g, QVL_E_INVALID, "duplicate name 'x'");
    qvl_graph_free(g);

    g = qvl_graph_new();
    qvl_g_input(g, "x", QVL_F32, SHAPE(2));
    assert_int_equal(qvl_g_weight(g, "x", QVL_F32, SHAPE(2)), -1);
    expect_error(g, QVL_E_INVALID, "duplicate name 'x'");
    qvl_graph_free(g);

    g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(2));
    qvl_tid y = qvl_g_add(g, x, w);
    qvl_g_output(g, y, "y");
    qvl_g_output(g, x, "x"); /* an input may be an output under its own name */
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    qvl_g_output(g, y, "w");
    expect_error(g, QVL_E_INVALID, "duplicate name 'w'");
    qvl_graph_free(g);

    g = qvl_graph_new();
    x = qvl_g_input(g, "x", QVL_F32, SHAPE(2));
    w = qvl_g_weight(g, "w", QVL_F32, SHAPE(2));
    qvl_g_name(g, w, "x");
    expect_error(g, QVL_E_INVALID, "duplicate name");
    qvl_graph_free(g);

    g = qvl_graph_new();
    assert_int_equal(qvl_g_input(g, "", QVL_F32, SHAPE(2)), -1);
    expect_error(g, QVL_E_INVALID, "without a name");
    qvl_graph_free(g);
}

/* The name index: renames free the old name and take the new one, outputs are found before
 * leaves, and a graph with as many weights as a 20,000-layer model builds (building was
 * quadratic in the number of names: minutes here before the index). */
static void name_index(void **state) {
    (void)state;
    qvl_graph *g = qvl_graph_new();
    qvl_tid a = qvl_g_weight(g, "a", QVL_F32, SHAPE(2));
    qvl_tid b = qvl_g_weight(g, "b", QVL_F32, SHAPE(2));
    qvl_g_name(g, a, "a2");
    assert_int_equal(qvl_graph_find(g, "a"), -1);
    assert_int_equal(qvl_graph_find(g, "a2"), a);
    qvl_g_name(g, b, "a"); /* the old name is free again */
    assert_int_equal(qvl_graph_error(g, NULL), QVL_OK);
    assert_int_equal(qvl_graph_find(g, "a"), b);
    qvl_tid s = qvl_g_add(g, a, b);
    qvl_g_output(g, s, "sum");
    assert_int_equal(qvl_graph_find(g, "sum"), s);
    qvl_g_name(g, b, "sum"); /* a leaf may not take an output's name */
    expect_error(g, QVL_E_INVALID, "duplicate name");
    qvl_graph_free(g);

    enum { LAYERS = 20000, PER_LAYER = 10 };
    g = qvl_graph_new();
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < PER_LAYER; k++) {
            char name[64];
            snprintf(name, sizeof name, "model.layers.%d.w%d", l, k);
            assert_true(qvl_g_weight(g, name, QVL_F32, SHAPE(1)) >= 0);
        }
    assert_int_equal(qvl_graph_find(g, "model.layers.19999.w9"), (qvl_tid)(LAYERS * PER_LAYER - 1));
    assert_int_equal(qvl_g_weight(g, "model.layers.12345.w3", QVL_F32, SHAPE(1)), -1);
    expect_error(g, QVL_E_INVALID, "duplicate name 'model.layers.12345.w3'");
    qvl_graph_free(g);
}

/* A tiny valid graph the corruption tests start from: y = silu(x + w), z = y * x. */
static qvl_graph *small(qvl_tid *y, qvl_tid *z) {
    qvl_graph *g = qvl_graph_new();
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(2, 4));
    qvl_tid w = qvl_g_weight(g, "w", QVL_F32, SHAPE(4));
    *y = qvl_g_unary(g, QVL_OP_SILU, qvl_g_add(g, x, w));
    *z = qvl_g_mul(g, *y, x);
    qvl_g_name(g, *z, "zed");
    qvl_g_output(g, *z, "z");
    assert_int_equal(qvl_graph_validate(g, NULL), QVL_OK);
    return g;
}

static void expect_invalid(qvl_graph *g, const char *needle) {
    qvl_error err = {0};
    qvl_status s = qvl_graph_validate(g, &err);
    if (s == QVL_OK || !strstr(err.msg, needle))
        print_error("validate: %d \"%s\", wanted \"%s\"\n", (int)s, err.msg, needle);
    assert_int_not_equal(s, QVL_OK);
    assert_non_null(strstr(err.msg, needle));
}

static void validate_catches_corruption(void **state) {
    (void)state;
    qvl_tid y, z;
    qvl_graph *g = small(&y, &z);
    g->t[z].src[0] = 77; /* dangling reference */
    expect_invalid(g, "unknown tensor id 77");
    qvl_graph_free(g);

    g = small(&y, &z);
    g->t[y].live = false; /* a removed node still read by zed */
    expect_invalid(g, "removed");
    qvl_graph_free(g);

    g = small(&y, &z);
    g->t[z].desc.shape[1] = 5; /* recorded shape no longer matches the inputs */
    expect_invalid(g, "zed");
    qvl_graph_free(g);

    g = small(&y, &z);
    g->t[z].src[2] = 0; /* a slot the op does not have */
    expect_invalid(g, "takes 2");
    qvl_graph_free(g);

    g = small(&y, &z);
    qvl_tid add = g->t[y].src[0];
    g->t[add].src[0] = z; /* add reads zed, which reads silu, which reads add */
    expect_invalid(g, "cycle");
    qvl_graph_free(g);

    g = small(&y, &z);
    g->t[z].live = false; /* the output's node is gone */
    expect_invalid(g, "output z");
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nodes_and_inspection),
        cmocka_unit_test(views),
        cmocka_unit_test(shape_mismatch_is_sticky),
        cmocka_unit_test(unknown_tensor_id),
        cmocka_unit_test(duplicate_names),
        cmocka_unit_test(name_index),
        cmocka_unit_test(validate_catches_corruption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
