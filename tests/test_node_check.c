/* qvl_node_check: the generic node validation every backend runs before its kernels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/backend.h"

static qvl_tensor make(qvl_dtype t, int ndim, const int64_t *shape) {
    qvl_tensor x = {0};
    assert_true(qvl_desc_init(&x.desc, t, ndim, shape));
    return x;
}

/* a [3,8] . w[5,8]^T -> [3,5] */
static void matmul_node(qvl_node *n, qvl_tensor *a, qvl_tensor *w, qvl_tensor *out) {
    memset(n, 0, sizeof *n);
    n->op = QVL_OP_MATMUL;
    n->n_src = qvl_op_max_inputs(QVL_OP_MATMUL);
    n->src[0] = a;
    n->src[1] = w;
    n->dst = out;
    n->name = "blk.0.q";
}

static void test_good_node(void **state) {
    (void)state;
    qvl_tensor a = make(QVL_F32, 2, (int64_t[]){3, 8}), w = make(QVL_BF16, 2, (int64_t[]){5, 8});
    qvl_tensor out = make(QVL_F32, 2, (int64_t[]){3, 5});
    qvl_node n;
    matmul_node(&n, &a, &w, &out);
    qvl_error err = {0};
    assert_int_equal(qvl_node_check(&n, &err), QVL_OK);
}

static void test_wrong_output(void **state) {
    (void)state;
    qvl_tensor a = make(QVL_F32, 2, (int64_t[]){3, 8}), w = make(QVL_BF16, 2, (int64_t[]){5, 8});
    qvl_tensor out = make(QVL_F32, 2, (int64_t[]){3, 6});
    qvl_node n;
    matmul_node(&n, &a, &w, &out);
    qvl_error err = {0};
    assert_int_equal(qvl_node_check(&n, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "matmul 'blk.0.q': output is [3, 6]"));
    /* right shape, but strided: kernels write contiguous outputs */
    out = make(QVL_F32, 2, (int64_t[]){3, 5});
    out.desc.stride[0] = 7;
    assert_int_equal(qvl_node_check(&n, &err), QVL_E_SHAPE);
    out = make(QVL_F16, 2, (int64_t[]){3, 5});
    assert_int_equal(qvl_node_check(&n, &err), QVL_E_SHAPE);
}

static void test_bad_inputs(void **state) {
    (void)state;
    qvl_tensor a = make(QVL_F32, 2, (int64_t[]){3, 8}), w = make(QVL_BF16, 2, (int64_t[]){5, 9});
    qvl_tensor out = make(QVL_F32, 2, (int64_t[]){3, 5});
    qvl_node n;
    matmul_node(&n, &a, &w, &out);
    qvl_error err = {0};
    assert_int_not_equal(qvl_node_check(&n, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "matmul"));
    n.src[1] = NULL;
    assert_int_not_equal(qvl_node_check(&n, &err), QVL_OK);
    n.dst = NULL;
    assert_int_equal(qvl_node_check(&n, &err), QVL_E_INVALID);
    n.dst = &out;
    n.op = (qvl_op)9999;
    assert_int_equal(qvl_node_check(&n, &err), QVL_E_INVALID);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_node),
        cmocka_unit_test(test_wrong_output),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
