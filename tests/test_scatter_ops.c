/* SET_ROWS and ADD_ROWS: their shape rules (qvl_op_infer) and the reference kernels, which put
 * image features into token embeddings and add deepstack features at image positions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/backend.h"
#include "qvl/ops.h"
#include "test_backend.h"

static qvl_test_backend tb;

static int setup(void **state) {
    (void)state;
    return qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb);
}

static int teardown(void **state) {
    (void)state;
    qvl_test_backend_close(&tb);
    return 0;
}

static void mkdesc(qvl_tensor_desc *d, qvl_dtype dt, int64_t a, int64_t b, int ndim) {
    const int64_t shape[2] = {a, b};
    assert_true(qvl_desc_init(d, dt, ndim, shape));
}

/* A contiguous tensor over caller memory. */
static qvl_tensor tensor(qvl_dtype dt, int ndim, int64_t a, int64_t b, void *data) {
    qvl_tensor t;
    memset(&t, 0, sizeof t);
    mkdesc(&t.desc, dt, a, b, ndim);
    t.data = data;
    return t;
}

static void test_op_table_and_infer(void **state) {
    (void)state;
    assert_string_equal(qvl_op_name(QVL_OP_SET_ROWS), "set_rows");
    assert_string_equal(qvl_op_name(QVL_OP_ADD_ROWS), "add_rows");
    assert_int_equal(qvl_op_max_inputs(QVL_OP_SET_ROWS), 3);
    /* Appended after the fused ops, so existing backends' kernel tables keep their meaning. */
    assert_true(QVL_OP_SET_ROWS > QVL_OP_MLP_RESIDUAL && QVL_OP_ADD_ROWS > QVL_OP_SET_ROWS);

    qvl_tensor_desc x, idx, src, out, bad;
    mkdesc(&x, QVL_F32, 5, 8, 2);
    mkdesc(&idx, QVL_I32, 3, 1, 1);
    mkdesc(&src, QVL_F32, 3, 8, 2);
    const qvl_tensor_desc *in[3] = {&x, &idx, &src};
    qvl_error err = {0};
    for (qvl_op op = QVL_OP_SET_ROWS; op <= QVL_OP_ADD_ROWS; op++) {
        assert_int_equal(qvl_op_infer(op, NULL, 3, in, &out, &err), QVL_OK);
        assert_int_equal(out.ndim, 2);
        assert_int_equal(out.shape[0], 5);
        assert_int_equal(out.shape[1], 8);
        assert_int_equal(out.dtype, QVL_F32);
    }
    mkdesc(&bad, QVL_F32, 3, 7, 2); /* src rows of the wrong width */
    in[2] = &bad;
    assert_int_equal(qvl_op_infer(QVL_OP_SET_ROWS, NULL, 3, in, &out, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "input 2 (src)"));
    mkdesc(&bad, QVL_F32, 2, 8, 2); /* fewer rows than indices */
    assert_int_equal(qvl_op_infer(QVL_OP_ADD_ROWS, NULL, 3, in, &out, &err), QVL_E_SHAPE);
    in[2] = &src;
    mkdesc(&bad, QVL_F32, 3, 1, 1); /* float indices */
    in[1] = &bad;
    assert_int_equal(qvl_op_infer(QVL_OP_SET_ROWS, NULL, 3, in, &out, &err), QVL_E_DTYPE);
    assert_non_null(strstr(err.msg, "input 1 (idx)"));
    in[1] = &idx;
    assert_int_equal(qvl_op_infer(QVL_OP_SET_ROWS, NULL, 2, in, &out, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "missing"));
}

static qvl_status run(qvl_op op, qvl_tensor *x, qvl_tensor *idx, qvl_tensor *src, qvl_tensor *dst,
                      qvl_error *err) {
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_src = 3;
    n.src[0] = x;
    n.src[1] = idx;
    n.src[2] = src;
    n.dst = dst;
    n.name = "scatter";
    assert_true((qvl_test_supports(&tb, &n, NULL) == QVL_OK));
    return qvl_test_kernel(&tb, op)(tb.be, &n, err);
}

static void test_reference_kernels(void **state) {
    (void)state;
    float xv[4 * 3], sv[2 * 3], ov[4 * 3];
    for (int i = 0; i < 12; i++) xv[i] = (float)(i + 1);         /* row r = 3r+1 .. 3r+3 */
    for (int i = 0; i < 6; i++) sv[i] = (float)(100 * (i + 1)); /* 100..600 */
    int32_t iv[2] = {2, 0};
    qvl_tensor x = tensor(QVL_F32, 2, 4, 3, xv), idx = tensor(QVL_I32, 1, 2, 1, iv),
               src = tensor(QVL_F32, 2, 2, 3, sv), out = tensor(QVL_F32, 2, 4, 3, ov);
    qvl_error err = {0};

    assert_int_equal(run(QVL_OP_SET_ROWS, &x, &idx, &src, &out, &err), QVL_OK);
    const float set_want[12] = {400, 500, 600, 4, 5, 6, 100, 200, 300, 10, 11, 12};
    for (int i = 0; i < 12; i++) assert_float_equal(ov[i], set_want[i], 0);
    assert_float_equal(xv[0], 1, 0); /* the input is not modified */

    assert_int_equal(run(QVL_OP_ADD_ROWS, &x, &idx, &src, &out, &err), QVL_OK);
    const float add_want[12] = {401, 502, 603, 4, 5, 6, 107, 208, 309, 10, 11, 12};
    for (int i = 0; i < 12; i++) assert_float_equal(ov[i], add_want[i], 0);

    /* Repeated indices: ADD_ROWS adds both, SET_ROWS keeps the last. */
    iv[0] = iv[1] = 3;
    assert_int_equal(run(QVL_OP_ADD_ROWS, &x, &idx, &src, &out, &err), QVL_OK);
    assert_float_equal(ov[9], 10 + 100 + 400, 0);
    assert_float_equal(ov[11], 12 + 300 + 600, 0);
    assert_int_equal(run(QVL_OP_SET_ROWS, &x, &idx, &src, &out, &err), QVL_OK);
    assert_float_equal(ov[9], 400, 0);

    /* A strided src (a transposed view) is read through its strides. */
    float tv[3 * 2] = {1, 4, 2, 5, 3, 6}; /* [3,2] holding src^T */
    qvl_tensor srcT = tensor(QVL_F32, 2, 2, 3, tv);
    srcT.desc.stride[0] = 1;
    srcT.desc.stride[1] = 2;
    iv[0] = 1;
    iv[1] = 2;
    assert_int_equal(run(QVL_OP_SET_ROWS, &x, &idx, &srcT, &out, &err), QVL_OK);
    const float strided_want[6] = {1, 2, 3, 4, 5, 6};
    for (int i = 0; i < 6; i++) assert_float_equal(ov[3 + i], strided_want[i], 0);

    /* Indices are data: out of range is an error naming the position. */
    iv[1] = 4;
    assert_int_equal(run(QVL_OP_SET_ROWS, &x, &idx, &src, &out, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "outside [0, 4)"));
    iv[1] = -1;
    assert_int_equal(run(QVL_OP_ADD_ROWS, &x, &idx, &src, &out, &err), QVL_E_INVALID);
}

static void test_supports_rejects(void **state) {
    (void)state;
    float xv[6] = {0}, ov[6] = {0};
    uint16_t hv[6] = {0};
    int32_t iv[1] = {0};
    qvl_tensor x = tensor(QVL_F32, 2, 2, 3, xv), idx = tensor(QVL_I32, 1, 1, 1, iv),
               half = tensor(QVL_F16, 2, 1, 3, hv), out = tensor(QVL_F32, 2, 2, 3, ov);
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = QVL_OP_SET_ROWS;
    n.n_src = 3;
    n.src[0] = &x;
    n.src[1] = &idx;
    n.src[2] = &half; /* features are f32 activations */
    n.dst = &out;
    assert_false((qvl_test_supports(&tb, &n, NULL) == QVL_OK));
    qvl_error err = {0};
    assert_int_not_equal(qvl_test_kernel(&tb, QVL_OP_SET_ROWS)(tb.be, &n, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "src"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table_and_infer),
        cmocka_unit_test(test_reference_kernels),
        cmocka_unit_test(test_supports_rejects),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
