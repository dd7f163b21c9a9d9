/* Cross-check: the reference backend agrees with itself on the Qwen-shaped graphs (fused and
 * not), and a backend whose ADD kernel is off by a little is caught at the first ADD node. */
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

static qvl_test_backend tb;

static int setup(void **state) {
    *state = tg_open_reference(&tb) ? &tb : NULL;
    return 0;
}

static int teardown(void **state) {
    if (*state) qvl_test_backend_close(&tb);
    return 0;
}

static void reference_agrees_with_itself(void **state) {
    if (!*state) skip();
    for (int fused = 0; fused < 2; fused++) {
        tg_text_dims td = tg_text_default();
        qvl_graph *g = tg_build_text(&td);
        if (fused) assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
        qvl_crosscheck_result res;
        qvl_error err = {0};
        qvl_status s = qvl_graph_crosscheck(g, tb.iface, tb.be, tb.iface, tb.be, 7, tg_fill_i32,
                                            NULL, &res, &err);
        if (s != QVL_OK) print_error("%s\n", err.msg);
        assert_int_equal(s, QVL_OK);
        assert_int_equal(res.first_bad, -1);
        assert_true(res.worst_abs == 0); /* the same deterministic code on both sides */
        /* Every live node except views is compared. */
        size_t views = 0;
        for (qvl_tid t = 0; t < (qvl_tid)qvl_graph_n_tensors(g); t++)
            views += qvl_graph_is_live(g, t) && qvl_graph_op(g, t) == QVL_OP_VIEW;
        assert_int_equal(res.nodes_compared, qvl_graph_n_nodes(g) - views);
        qvl_graph_free(g);
    }
    tg_vision_dims vd = tg_vision_default();
    qvl_graph *g = tg_build_vision(&vd);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    int64_t patches = vd.n_patches;
    qvl_error err = {0};
    assert_int_equal(qvl_graph_crosscheck(g, tb.iface, tb.be, tb.iface, tb.be, 8, tg_fill_i32,
                                          &patches, NULL, &err),
                     QVL_OK);
    qvl_graph_free(g);
}

static void i32_inputs_need_a_callback(void **state) {
    if (!*state) skip();
    tg_vision_dims vd = tg_vision_default();
    qvl_graph *g = tg_build_vision(&vd);
    qvl_error err = {0};
    assert_int_equal(qvl_graph_crosscheck(g, tb.iface, tb.be, tb.iface, tb.be, 1, NULL, NULL,
                                          NULL, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "rope_pos"));
    qvl_graph_free(g);
}

/* ADD that computes the right thing and then nudges one element by 1e-2 of the row's scale. */
static qvl_kernel_fn real_mlp;
static qvl_status nudged_mlp(qvl_backend *be, const qvl_node *node, qvl_error *err) {
    qvl_status s = real_mlp(be, node, err);
    if (s == QVL_OK) {
        float *out = node->dst->data; /* the reference backend's memory is host memory */
        out[1] += 0.01f * (1.0f + fabsf(out[1]));
    }
    return s;
}

static void mismatch_names_first_bad_node(void **state) {
    if (!*state) skip();
    static qvl_op_impl kernels[QVL_OP_COUNT];
    memcpy(kernels, tb.iface->ops, tb.iface->n_ops * sizeof kernels[0]);
    real_mlp = kernels[QVL_OP_MLP_RESIDUAL].kernel;
    kernels[QVL_OP_MLP_RESIDUAL].kernel = nudged_mlp;
    qvl_backend_iface nudged = *tb.iface;
    nudged.ops = kernels;
    nudged.name = "nudged";

    tg_text_dims td = tg_text_default();
    qvl_graph *g = tg_build_text(&td);
    assert_int_equal(qvl_graph_fuse(g, NULL, NULL, NULL, NULL), QVL_OK);
    qvl_crosscheck_result res;
    qvl_error err = {0};
    qvl_status s = qvl_graph_crosscheck(g, tb.iface, tb.be, &nudged, tb.be, 7, tg_fill_i32, NULL,
                                        &res, &err);
    assert_int_equal(s, QVL_E_MISMATCH);
    /* The first MLP_RESIDUAL after fusion is layer 0's o_proj with its residual add. */
    assert_int_equal(qvl_graph_op(g, res.first_bad), QVL_OP_MLP_RESIDUAL);
    assert_string_equal(qvl_graph_tensor_name(g, res.first_bad), "blk.0.attn_res");
    assert_non_null(strstr(err.msg, "blk.0.attn_res"));
    assert_non_null(strstr(err.msg, "nudged"));
    assert_true(res.bad_abs > 0);
    assert_true(res.worst >= 0);
    assert_true(res.nodes_compared > 0);
    qvl_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_agrees_with_itself),
        cmocka_unit_test(i32_inputs_need_a_callback),
        cmocka_unit_test(mismatch_names_first_bad_node),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
