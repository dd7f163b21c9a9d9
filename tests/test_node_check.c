/* qvl_node_check (the op contract every backend runs before its kernels) and
 * qvl_backend_check (the contract, then a backend's declaration): what each accepts and how
 * a refusal reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/backend_helpers.h"
#include "test_backend.h"

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

/* ---- a backend's declaration on top of the contract ---- */

static qvl_status kernel_not_run(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    (void)n;
    (void)err;
    return QVL_OK;
}
static qvl_status no_wide_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    if (n->src[0]->desc.shape[n->src[0]->desc.ndim - 1] > 8)
        return qvl_node_fail("decl", n, err, QVL_E_UNSUPPORTED, "rows over 8 are too wide");
    return QVL_OK;
}

static void test_backend_declaration(void **state) {
    (void)state;
    static qvl_op_impl ops[QVL_OP_COUNT];
    ops[QVL_OP_MATMUL].kernel = kernel_not_run;
    ops[QVL_OP_MATMUL].dtypes[1] = QVL_DTYPE_BIT(QVL_F32) | QVL_DTYPE_BIT(QVL_F16);
    qvl_backend_iface f = qvl_test_declared_iface("decl", ops, no_wide_rows);

    qvl_tensor a = make(QVL_F32, 2, (int64_t[]){3, 8}), w = make(QVL_F16, 2, (int64_t[]){5, 8});
    qvl_tensor out = make(QVL_F32, 2, (int64_t[]){3, 5});
    qvl_node n;
    matmul_node(&n, &a, &w, &out);
    qvl_error err = {0};
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_OK);
    assert_true(qvl_backend_supports(&f, NULL, &n));

    /* a dtype the contract allows but the declaration leaves out: named with its slot */
    w.desc.dtype = QVL_BF16;
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "decl: matmul 'blk.0.q': input 1 (w) is bf16"));
    assert_false(qvl_backend_supports(&f, NULL, &n));
    w.desc.dtype = QVL_F16;

    /* the contract comes first, and its message says which backend asked */
    out.desc.shape[1] = 6;
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "decl: "));
    assert_non_null(strstr(err.msg, "output"));
    out.desc.shape[1] = 5;

    /* the backend's own limit, with its reason */
    qvl_tensor a2 = make(QVL_F32, 2, (int64_t[]){3, 16}), w2 = make(QVL_F16, 2, (int64_t[]){5, 16});
    n.src[0] = &a2;
    n.src[1] = &w2;
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "rows over 8 are too wide"));

    /* an op without a kernel, and one beyond n_ops (a plugin built before it existed) */
    n.src[0] = &a;
    n.src[1] = &w;
    f.n_ops = QVL_OP_MATMUL;
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "no kernel"));
    f.n_ops = QVL_OP_COUNT;
    n.op = QVL_OP_ADD;
    n.n_src = 2;
    n.src[1] = &a;
    qvl_tensor sum = make(QVL_F32, 2, (int64_t[]){3, 8});
    n.dst = &sum;
    assert_int_equal(qvl_backend_check(&f, NULL, &n, &err), QVL_E_UNSUPPORTED);

    /* a kernel refuses memoryless tensors after the same checks */
    matmul_node(&n, &a, &w, &out);
    assert_int_equal(qvl_kernel_begin(&f, NULL, &n, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "has no memory"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_node),
        cmocka_unit_test(test_wrong_output),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_backend_declaration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
