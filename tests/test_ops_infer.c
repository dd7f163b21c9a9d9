/* qvl_op_infer: for every op, a correct node and its output descriptor, and wrong nodes that
 * must be refused with a message naming the op and the offending input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/ops.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static qvl_tensor_desc mk(qvl_dtype t, int nd, const int64_t *shape) {
    qvl_tensor_desc d;
    assert_true(qvl_desc_init(&d, t, nd, shape));
    return d;
}
#define D(dtype, ...) \
    mk(dtype, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

static qvl_params P0(void) {
    qvl_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* Runs infer on n_src slots (NULL = absent). */
static qvl_status infer(qvl_op op, const qvl_params *p, uint32_t n, const qvl_tensor_desc *const *src,
                        qvl_tensor_desc *out, qvl_error *err) {
    qvl_error_clear(err);
    return qvl_op_infer(op, p, n, src, out, err);
}

static void expect_ok(qvl_op op, const qvl_params *p, uint32_t n, const qvl_tensor_desc *const *src,
                      qvl_tensor_desc *out) {
    qvl_error err;
    qvl_status s = infer(op, p, n, src, out, &err);
    if (s != QVL_OK) print_error("unexpected failure: %s\n", err.msg);
    assert_int_equal(s, QVL_OK);
}

/* The node must fail with status want; the message starts with "<op>: " and mentions needle. */
static void expect_fail_out(qvl_op op, const qvl_params *p, uint32_t n, const qvl_tensor_desc *const *src,
                            qvl_tensor_desc *out, qvl_status want, const char *needle) {
    qvl_error err;
    qvl_status s = infer(op, p, n, src, out, &err);
    if (s != want) print_error("%s: got status %d (%s), wanted %d\n", qvl_op_name(op), (int)s, err.msg, (int)want);
    assert_int_equal(s, want);
    assert_int_equal(err.status, want);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", qvl_op_name(op));
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0 || !strstr(err.msg, needle))
        print_error("message \"%s\" lacks \"%s\" or \"%s\"\n", err.msg, prefix, needle);
    assert_true(strncmp(err.msg, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(err.msg, needle));
}

static void expect_fail(qvl_op op, const qvl_params *p, uint32_t n, const qvl_tensor_desc *const *src,
                        qvl_status want, const char *needle) {
    qvl_tensor_desc out;
    memset(&out, 0, sizeof out);
    expect_fail_out(op, p, n, src, &out, want, needle);
}

/* VIEW takes its output descriptor as an input. */
#define expect_fail_view(p, src, out, want, needle) expect_fail_out(QVL_OP_VIEW, p, 1, src, out, want, needle)

/* out is f32 (or dtype) contiguous with this shape. */
static void expect_out(const qvl_tensor_desc *out, qvl_dtype dtype, int nd, const int64_t *shape) {
    assert_int_equal(out->dtype, dtype);
    assert_int_equal(out->ndim, nd);
    int64_t stride = 1;
    for (int i = nd - 1; i >= 0; i--) {
        assert_int_equal(out->shape[i], shape[i]);
        assert_int_equal(out->stride[i], stride);
        stride *= shape[i];
    }
    assert_true(qvl_desc_is_contiguous(out));
}
#define EXPECT_OUT(out, dtype, ...) \
    expect_out(out, dtype, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

/* A transposed view of a contiguous [r, c] tensor: shape [c, r], strides {1, c}. */
static qvl_tensor_desc transposed(qvl_dtype t, int64_t r, int64_t c) {
    qvl_tensor_desc d = D(t, c, r);
    d.stride[0] = 1;
    d.stride[1] = c;
    return d;
}

/* ---- the op table ------------------------------------------------------------------------- */

static void test_op_table(void **state) {
    (void)state;
    for (int i = 0; i < QVL_OP_COUNT; i++) {
        const char *name = qvl_op_name((qvl_op)i);
        assert_string_not_equal(name, "?");
        qvl_op back;
        assert_true(qvl_op_parse(name, &back));
        assert_int_equal(back, i);
        assert_true(qvl_op_max_inputs((qvl_op)i) >= 1 && qvl_op_max_inputs((qvl_op)i) <= QVL_MAX_SRC);
        assert_int_equal(qvl_op_is_view((qvl_op)i), i == QVL_OP_VIEW);
        for (int j = 0; j < i; j++) assert_string_not_equal(name, qvl_op_name((qvl_op)j));
    }
    assert_string_equal(qvl_op_name(QVL_OP_MATMUL), "matmul");
    assert_string_equal(qvl_op_name(QVL_OP_COUNT), "?");
    assert_int_equal(qvl_op_max_inputs(QVL_OP_MATMUL), 3);
    assert_int_equal(qvl_op_max_inputs(QVL_OP_NORM_LINEAR), 9);
    assert_int_equal(qvl_op_max_inputs(QVL_OP_ATTENTION), 4);
    assert_int_equal(qvl_op_max_inputs(QVL_OP_MLP_RESIDUAL), 5);
    qvl_op op;
    assert_false(qvl_op_parse("conv2d", &op));
    assert_false(qvl_op_parse(NULL, &op));
}

static void test_generic_errors(void **state) {
    (void)state;
    qvl_error err;
    qvl_tensor_desc out, x = D(QVL_F32, 4, 4);
    const qvl_tensor_desc *src[3] = {&x, &x, &x};
    qvl_params p = P0();
    assert_int_equal(infer(QVL_OP_COUNT, &p, 1, src, &out, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "unknown op"));
    /* more inputs than slots */
    expect_fail(QVL_OP_SILU, &p, 2, src, QVL_E_INVALID, "slots");
    /* an op with params given none */
    expect_fail(QVL_OP_ROPE, NULL, 2, src, QVL_E_INVALID, "params");
    /* a malformed input descriptor */
    qvl_tensor_desc bad = x;
    bad.ndim = 0;
    const qvl_tensor_desc *bs[1] = {&bad};
    expect_fail(QVL_OP_SILU, &p, 1, bs, QVL_E_SHAPE, "input 0 (x)");
    bad = x;
    bad.stride[0] = -1;
    expect_fail(QVL_OP_SILU, &p, 1, bs, QVL_E_SHAPE, "input 0 (x)");
    /* no output */
    assert_int_equal(infer(QVL_OP_SILU, &p, 1, src, NULL, &err), QVL_E_INVALID);
    /* fewer slots than the op has: the rest are absent */
    expect_ok(QVL_OP_SILU, &p, 1, src, &out);
    const qvl_tensor_desc *only_a[1] = {&x};
    expect_fail(QVL_OP_ADD, &p, 1, only_a, QVL_E_INVALID, "input 1 (b) is missing");
}

/* ---- op by op ------------------------------------------------------------------------------ */

static void test_get_rows(void **state) {
    (void)state;
    qvl_params p = P0();
    qvl_tensor_desc out, table = D(QVL_BF16, 100, 64), ids = D(QVL_I32, 7);
    const qvl_tensor_desc *src[2] = {&table, &ids};
    expect_ok(QVL_OP_GET_ROWS, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 64);
    table = D(QVL_Q8_0, 100, 64);
    expect_ok(QVL_OP_GET_ROWS, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 64);

    table = D(QVL_Q8_0, 100, 48);
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_SHAPE, "input 0 (table)");
    table = D(QVL_I32, 100, 64);
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_DTYPE, "input 0 (table)");
    table = D(QVL_F32, 2, 100, 64);
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_SHAPE, "input 0 (table)");
    table = D(QVL_F32, 100, 64);
    ids = D(QVL_F32, 7);
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_DTYPE, "input 1 (ids)");
    ids = D(QVL_I32, 7, 2);
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_SHAPE, "input 1 (ids)");
    src[1] = NULL;
    expect_fail(QVL_OP_GET_ROWS, &p, 2, src, QVL_E_INVALID, "input 1 (ids) is missing");
}

static void test_matmul(void **state) {
    (void)state;
    qvl_params p = P0();
    qvl_tensor_desc out, a = D(QVL_F32, 7, 2048), w = D(QVL_F16, 1024, 2048), bias = D(QVL_F32, 1024);
    const qvl_tensor_desc *src[3] = {&a, &w, &bias};
    expect_ok(QVL_OP_MATMUL, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 1024);
    a = D(QVL_F32, 2, 7, 2048); /* leading dims pass through */
    w = D(QVL_Q8_0, 1024, 2048);
    src[2] = NULL;
    expect_ok(QVL_OP_MATMUL, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 7, 1024);
    /* a strided a (transposed) is fine */
    a = transposed(QVL_F32, 7, 2048); /* [2048, 7], strides {1, 2048} */
    w = D(QVL_BF16, 3, 7);
    expect_ok(QVL_OP_MATMUL, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2048, 3);
    /* batched: 16 query heads over 4 shared weight batches */
    a = D(QVL_F32, 16, 5, 64);
    w = D(QVL_F16, 4, 9, 64);
    expect_ok(QVL_OP_MATMUL, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 16, 5, 9);

    /* wrong inner dim: the message names both inputs and shapes */
    a = D(QVL_F32, 7, 2048);
    w = D(QVL_F32, 2048, 1024);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 1 (w) is [2048, 1024] f32");
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 0 (a) [7, 2048] f32");
    /* batch not a multiple */
    a = D(QVL_F32, 6, 5, 64);
    w = D(QVL_F32, 4, 9, 64);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 1 (w)");
    /* 3-D w with a 2-D a, or with a bias */
    a = D(QVL_F32, 5, 64);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 0 (a)");
    a = D(QVL_F32, 8, 5, 64);
    bias = D(QVL_F32, 9);
    src[2] = &bias;
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_INVALID, "input 2 (bias)");
    /* bias of the wrong length or dtype */
    a = D(QVL_F32, 7, 64);
    w = D(QVL_F32, 32, 64);
    bias = D(QVL_F32, 31);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 2 (bias)");
    bias = D(QVL_Q8_0, 32);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_DTYPE, "input 2 (bias)");
    src[2] = NULL;
    /* dtypes */
    a = D(QVL_BF16, 7, 64);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_DTYPE, "input 0 (a)");
    a = D(QVL_F32, 7, 64);
    w = D(QVL_I32, 32, 64);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_DTYPE, "input 1 (w)");
    /* q8_0 needs K in whole blocks */
    a = D(QVL_F32, 7, 48);
    w = D(QVL_Q8_0, 32, 48);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 1 (w)");
    /* 1-D or 4-D w, missing w */
    w = D(QVL_F32, 48);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 1 (w)");
    w = D(QVL_F32, 1, 1, 32, 48);
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_SHAPE, "input 1 (w)");
    src[1] = NULL;
    expect_fail(QVL_OP_MATMUL, &p, 3, src, QVL_E_INVALID, "input 1 (w) is missing");
}

static void check_binary(qvl_op op) {
    qvl_params p = P0();
    qvl_tensor_desc out, a = D(QVL_F32, 2, 3, 4), b = D(QVL_F32, 4);
    const qvl_tensor_desc *src[2] = {&a, &b};
    expect_ok(op, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 3, 4);
    b = D(QVL_F32, 3, 1);
    expect_ok(op, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 3, 4);
    b = D(QVL_F32, 2, 1, 1);
    expect_ok(op, &p, 2, src, &out);
    b = D(QVL_F32, 2, 3, 4);
    expect_ok(op, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 3, 4);

    b = D(QVL_F32, 3);
    expect_fail(op, &p, 2, src, QVL_E_SHAPE, "input 1 (b)");
    b = D(QVL_F32, 2, 1); /* aligned innermost: 2 vs 3 */
    expect_fail(op, &p, 2, src, QVL_E_SHAPE, "input 1 (b)");
    b = D(QVL_F32, 1, 2, 3, 4);
    expect_fail(op, &p, 2, src, QVL_E_SHAPE, "input 1 (b)");
    b = D(QVL_F16, 4);
    expect_fail(op, &p, 2, src, QVL_E_DTYPE, "input 1 (b)");
    a = D(QVL_I32, 2, 3, 4);
    b = D(QVL_F32, 4);
    expect_fail(op, &p, 2, src, QVL_E_DTYPE, "input 0 (a)");
}

static void test_add_mul(void **state) {
    (void)state;
    check_binary(QVL_OP_ADD);
    check_binary(QVL_OP_MUL);
}

static void test_unary(void **state) {
    (void)state;
    const qvl_op ops[] = {QVL_OP_SCALE, QVL_OP_SOFTMAX, QVL_OP_SILU, QVL_OP_GELU_TANH, QVL_OP_GELU_ERF};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        qvl_params p = P0();
        p.scale.s = 0.125f;
        qvl_tensor_desc out, x = transposed(QVL_F32, 3, 5); /* [5, 3], strided */
        const qvl_tensor_desc *src[1] = {&x};
        expect_ok(ops[i], &p, 1, src, &out);
        EXPECT_OUT(&out, QVL_F32, 5, 3);
        x = D(QVL_F16, 5, 3);
        expect_fail(ops[i], &p, 1, src, QVL_E_DTYPE, "input 0 (x)");
        src[0] = NULL;
        expect_fail(ops[i], &p, 1, src, QVL_E_INVALID, "input 0 (x) is missing");
    }
    qvl_params p = P0();
    p.scale.s = INFINITY;
    qvl_tensor_desc x = D(QVL_F32, 4);
    const qvl_tensor_desc *src[1] = {&x};
    expect_fail(QVL_OP_SCALE, &p, 1, src, QVL_E_INVALID, "scale");
}

static void test_norms(void **state) {
    (void)state;
    qvl_params p = P0();
    p.norm.eps = 1e-6f;
    qvl_tensor_desc out, x = D(QVL_F32, 2, 5, 64), gamma = D(QVL_BF16, 64), beta = D(QVL_F32, 64);
    const qvl_tensor_desc *src[3] = {&x, &gamma, &beta};
    expect_ok(QVL_OP_RMS_NORM, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 5, 64);
    expect_ok(QVL_OP_LAYER_NORM, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 5, 64);
    src[2] = NULL; /* beta is optional */
    expect_ok(QVL_OP_LAYER_NORM, &p, 3, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 5, 64);

    gamma = D(QVL_F32, 63);
    expect_fail(QVL_OP_RMS_NORM, &p, 2, src, QVL_E_SHAPE, "input 1 (gamma)");
    gamma = D(QVL_Q8_0, 64);
    expect_fail(QVL_OP_RMS_NORM, &p, 2, src, QVL_E_DTYPE, "input 1 (gamma)");
    gamma = D(QVL_F32, 64);
    beta = D(QVL_F32, 32);
    src[2] = &beta;
    expect_fail(QVL_OP_LAYER_NORM, &p, 3, src, QVL_E_SHAPE, "input 2 (beta)");
    src[2] = NULL;
    p.norm.eps = -1.0f;
    expect_fail(QVL_OP_RMS_NORM, &p, 2, src, QVL_E_INVALID, "eps");
    p.norm.eps = 1e-5f;
    src[1] = NULL;
    expect_fail(QVL_OP_RMS_NORM, &p, 2, src, QVL_E_INVALID, "input 1 (gamma) is missing");
    expect_fail(QVL_OP_LAYER_NORM, &p, 3, src, QVL_E_INVALID, "input 1 (gamma) is missing");
}

static void test_rope(void **state) {
    (void)state;
    qvl_params p = P0();
    p.rope.mode = QVL_ROPE_MROPE_INTERLEAVED;
    p.rope.theta = 5000000.0f;
    p.rope.sections[0] = 24;
    p.rope.sections[1] = 20;
    p.rope.sections[2] = 20;
    qvl_tensor_desc out, x = D(QVL_F32, 7, 16, 128), pos = D(QVL_I32, 3, 7);
    const qvl_tensor_desc *src[2] = {&x, &pos};
    expect_ok(QVL_OP_ROPE, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 16, 128);
    p.rope.mode = QVL_ROPE_NEOX;
    pos = D(QVL_I32, 1, 7);
    expect_ok(QVL_OP_ROPE, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 16, 128);
    p.rope.mode = QVL_ROPE_VISION_2D;
    p.rope.theta = 10000.0f;
    x = D(QVL_F32, 9, 16, 72);
    pos = D(QVL_I32, 2, 9);
    expect_ok(QVL_OP_ROPE, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 9, 16, 72);

    /* pos channels must match the mode */
    pos = D(QVL_I32, 3, 9);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_SHAPE, "input 1 (pos)");
    pos = D(QVL_I32, 2, 8);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_SHAPE, "input 1 (pos)");
    pos = D(QVL_F32, 2, 9);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_DTYPE, "input 1 (pos)");
    pos = D(QVL_I32, 2, 9);
    x = D(QVL_F32, 9, 16, 70); /* even but not a multiple of 4 */
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_SHAPE, "input 0 (x)");
    p.rope.mode = QVL_ROPE_NEOX;
    pos = D(QVL_I32, 1, 9);
    expect_ok(QVL_OP_ROPE, &p, 2, src, &out); /* 70 is fine for NeoX */
    x = D(QVL_F32, 9, 16, 71);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_SHAPE, "input 0 (x)");
    x = D(QVL_F32, 9, 71);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_SHAPE, "input 0 (x)");
    /* mrope sections beyond D/2 */
    p.rope.mode = QVL_ROPE_MROPE_INTERLEAVED;
    p.rope.sections[2] = 21;
    x = D(QVL_F32, 9, 16, 128);
    pos = D(QVL_I32, 3, 9);
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_INVALID, "sections");
    p.rope.sections[2] = 20;
    p.rope.mode = 7;
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_INVALID, "mode");
    p.rope.mode = QVL_ROPE_MROPE_INTERLEAVED;
    p.rope.theta = 0.0f;
    expect_fail(QVL_OP_ROPE, &p, 2, src, QVL_E_INVALID, "theta");
}

static void test_masks(void **state) {
    (void)state;
    qvl_params p = P0();
    p.mask.n_past = 7;
    qvl_tensor_desc out, s = D(QVL_F32, 16, 5, 12), seg = D(QVL_I32, 3);
    const qvl_tensor_desc *src[2] = {&s, &seg};
    expect_ok(QVL_OP_MASK_CAUSAL, &p, 1, src, &out);
    EXPECT_OUT(&out, QVL_F32, 16, 5, 12);
    p.mask.n_past = 8; /* the last query would see 13 keys */
    expect_fail(QVL_OP_MASK_CAUSAL, &p, 1, src, QVL_E_SHAPE, "input 0 (s)");
    p.mask.n_past = -1;
    expect_fail(QVL_OP_MASK_CAUSAL, &p, 1, src, QVL_E_INVALID, "n_past");
    p.mask.n_past = 0;
    s = D(QVL_F32, 12);
    expect_fail(QVL_OP_MASK_CAUSAL, &p, 1, src, QVL_E_SHAPE, "input 0 (s)");

    qvl_params none = P0();
    s = D(QVL_F32, 4, 10, 10);
    expect_ok(QVL_OP_MASK_SEGMENTS, &none, 2, src, &out);
    EXPECT_OUT(&out, QVL_F32, 4, 10, 10);
    s = D(QVL_F32, 4, 10, 9);
    expect_fail(QVL_OP_MASK_SEGMENTS, &none, 2, src, QVL_E_SHAPE, "input 0 (s)");
    s = D(QVL_F32, 10, 10);
    seg = D(QVL_F32, 3);
    expect_fail(QVL_OP_MASK_SEGMENTS, &none, 2, src, QVL_E_DTYPE, "input 1 (seg)");
    seg = D(QVL_I32, 1);
    expect_fail(QVL_OP_MASK_SEGMENTS, &none, 2, src, QVL_E_SHAPE, "input 1 (seg)");
    src[1] = NULL;
    expect_fail(QVL_OP_MASK_SEGMENTS, &none, 2, src, QVL_E_INVALID, "input 1 (seg) is missing");
}

static void test_view(void **state) {
    (void)state;
    qvl_params p = P0();
    qvl_tensor_desc x = D(QVL_F32, 4, 6);
    const qvl_tensor_desc *src[1] = {&x};
    /* rows 2..3 */
    p.view.offset = 12;
    qvl_tensor_desc out = D(QVL_F32, 2, 6), given = out;
    expect_ok(QVL_OP_VIEW, &p, 1, src, &out);
    assert_memory_equal(&out, &given, sizeof out); /* the given descriptor is kept */
    p.view.offset = 13; /* one element past the end */
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "input 0 (x)");
    /* a transpose covers the same storage */
    p.view.offset = 0;
    out = transposed(QVL_F32, 4, 6);
    expect_ok(QVL_OP_VIEW, &p, 1, src, &out);
    out.stride[1] = 7; /* now reaches element 5 + 3*7 = 26 > 23 */
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "outside");
    /* a reshape with more elements than the input */
    out = D(QVL_F32, 5, 5);
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "outside");
    /* dtype changes and negative offsets/strides are refused */
    out = D(QVL_F16, 2, 6);
    expect_fail_view(&p, src, &out, QVL_E_DTYPE, "dtype");
    out = D(QVL_F32, 2, 6);
    p.view.offset = -1;
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "offset");
    p.view.offset = 6;
    out.stride[1] = -1;
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "output");
    /* a view of a strided view: column slice [4, 2] of [4, 6] reaches offsets 0..19 */
    x = D(QVL_F32, 4, 6);
    x.shape[1] = 2;
    p.view.offset = 18;
    out = D(QVL_F32, 2); /* 18, 19 */
    expect_ok(QVL_OP_VIEW, &p, 1, src, &out);
    p.view.offset = 19;
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "outside");
    /* q8_0: offsets in whole blocks */
    x = D(QVL_Q8_0, 2, 64);
    out = D(QVL_Q8_0, 1, 64);
    p.view.offset = 64;
    expect_ok(QVL_OP_VIEW, &p, 1, src, &out);
    p.view.offset = 16;
    out = D(QVL_Q8_0, 1, 32);
    expect_fail_view(&p, src, &out, QVL_E_SHAPE, "multiple of 32");
    src[0] = NULL;
    expect_fail_view(&p, src, &out, QVL_E_INVALID, "input 0 (x) is missing");
}

static void test_cont(void **state) {
    (void)state;
    qvl_params p = P0();
    qvl_tensor_desc out, x = transposed(QVL_F16, 4, 6);
    const qvl_tensor_desc *src[1] = {&x};
    expect_ok(QVL_OP_CONT, &p, 1, src, &out);
    EXPECT_OUT(&out, QVL_F16, 6, 4);
    x = D(QVL_I32, 3, 2);
    expect_ok(QVL_OP_CONT, &p, 1, src, &out);
    EXPECT_OUT(&out, QVL_I32, 3, 2);
    x = D(QVL_Q8_0, 3, 64);
    expect_ok(QVL_OP_CONT, &p, 1, src, &out);
    EXPECT_OUT(&out, QVL_Q8_0, 3, 64);
    x = D(QVL_Q8_0, 40);
    expect_fail(QVL_OP_CONT, &p, 1, src, QVL_E_SHAPE, "input 0 (x)");
    src[0] = NULL;
    expect_fail(QVL_OP_CONT, &p, 1, src, QVL_E_INVALID, "input 0 (x) is missing");
}

static void test_store_rows(void **state) {
    (void)state;
    qvl_params p = P0();
    p.store.offset = 5;
    qvl_tensor_desc out, dst = D(QVL_F16, 10, 4, 8), rows = D(QVL_F32, 3, 4, 8);
    const qvl_tensor_desc *src[2] = {&dst, &rows};
    expect_ok(QVL_OP_STORE_ROWS, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F16, 8, 4, 8); /* rows [0, 8) of dst, dst's dtype and strides */
    p.store.offset = 7;
    expect_ok(QVL_OP_STORE_ROWS, &p, 2, src, &out);
    EXPECT_OUT(&out, QVL_F16, 10, 4, 8);

    p.store.offset = 8; /* 8 + 3 > 10 */
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_SHAPE, "input 1 (src)");
    p.store.offset = -1;
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_INVALID, "offset");
    p.store.offset = 0;
    rows = D(QVL_F32, 3, 4, 7);
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_SHAPE, "input 1 (src)");
    rows = D(QVL_F32, 3, 32);
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_SHAPE, "input 1 (src)");
    rows = D(QVL_F16, 3, 4, 8);
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_DTYPE, "input 1 (src)");
    rows = D(QVL_F32, 3, 8);
    dst = transposed(QVL_F32, 8, 10); /* [10, 8] but not contiguous */
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_SHAPE, "input 0 (dst)");
    dst = D(QVL_I32, 10, 8);
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_DTYPE, "input 0 (dst)");
    src[1] = NULL;
    expect_fail(QVL_OP_STORE_ROWS, &p, 2, src, QVL_E_INVALID, "input 1 (src) is missing");
}

static void test_norm_linear(void **state) {
    (void)state;
    qvl_params p = P0();
    p.norm_linear.norm = QVL_NORM_RMS;
    p.norm_linear.eps = 1e-6f;
    p.norm_linear.n_proj = 3;
    qvl_tensor_desc out, x = D(QVL_F32, 2, 7, 64), gamma = D(QVL_F32, 64), beta = D(QVL_F32, 64);
    qvl_tensor_desc w1 = D(QVL_Q8_0, 32, 64), b1 = D(QVL_F32, 32);
    qvl_tensor_desc w2 = D(QVL_BF16, 16, 64), b2 = D(QVL_BF16, 16);
    qvl_tensor_desc w3 = D(QVL_F16, 8, 64), b3 = D(QVL_F16, 8);
    const qvl_tensor_desc *src[9] = {&x, &gamma, NULL, &w1, &b1, &w2, &b2, &w3, &b3};
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 7, 56);
    src[4] = src[8] = NULL; /* biases are optional */
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, src, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 7, 56);
    /* layer norm with beta, one projection */
    p.norm_linear.norm = QVL_NORM_LAYER;
    p.norm_linear.n_proj = 1;
    const qvl_tensor_desc *one[9] = {&x, &gamma, &beta, &w1, &b1, NULL, NULL, NULL, NULL};
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, one, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 7, 32);

    /* n_proj inconsistent with the weights present */
    p.norm_linear.n_proj = 2;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "input 5 (w2) is missing");
    p.norm_linear.n_proj = 1;
    one[5] = &w2;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "input 5 (w2)");
    one[5] = NULL;
    one[6] = &b2; /* bias without its weight */
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "input 6 (b2)");
    one[6] = NULL;
    p.norm_linear.n_proj = 0;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "n_proj");
    p.norm_linear.n_proj = 4;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "n_proj");
    p.norm_linear.n_proj = 1;
    /* beta only for layer norm */
    p.norm_linear.norm = QVL_NORM_RMS;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "input 2 (beta)");
    p.norm_linear.norm = 5;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "norm");
    p.norm_linear.norm = QVL_NORM_LAYER;
    /* the output activation: none (zeroed params), gelu_tanh or gelu_erf, on any n_proj */
    p.norm_linear.act = QVL_ACT_GELU_TANH;
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, one, &out);
    EXPECT_OUT(&out, QVL_F32, 2, 7, 32);
    p.norm_linear.act = QVL_ACT_GELU_ERF;
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, one, &out);
    p.norm_linear.act = QVL_ACT_SILU; /* no ungated silu */
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "act 1 must be none (0)");
    p.norm_linear.act = 4;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "act 4");
    p.norm_linear.act = -1;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "act -1");
    p.norm_linear.act = QVL_ACT_NONE;
    /* shapes */
    b1 = D(QVL_F32, 31);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 4 (b1)");
    b1 = D(QVL_F32, 32);
    w1 = D(QVL_F32, 32, 63);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 3 (w1)");
    w1 = D(QVL_F32, 2, 32, 64);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 3 (w1)");
    w1 = D(QVL_F32, 32, 64);
    gamma = D(QVL_F32, 32);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 1 (gamma)");
    gamma = D(QVL_F32, 64);
    beta = D(QVL_F32, 65);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 2 (beta)");
    beta = D(QVL_F32, 64);
    /* q8_0 weight with K not in whole blocks */
    x = D(QVL_F32, 7, 48);
    gamma = D(QVL_F32, 48);
    beta = D(QVL_F32, 48);
    w1 = D(QVL_Q8_0, 32, 48);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_SHAPE, "input 3 (w1)");
    w1 = D(QVL_F32, 32, 48);
    expect_ok(QVL_OP_NORM_LINEAR, &p, 9, one, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 32);
    /* dtypes */
    x = D(QVL_F16, 7, 48);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_DTYPE, "input 0 (x)");
    x = D(QVL_F32, 7, 48);
    w1 = D(QVL_I32, 32, 48);
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_DTYPE, "input 3 (w1)");
    w1 = D(QVL_F32, 32, 48);
    one[1] = NULL;
    expect_fail(QVL_OP_NORM_LINEAR, &p, 9, one, QVL_E_INVALID, "input 1 (gamma) is missing");
}

static void test_attention(void **state) {
    (void)state;
    qvl_params p = P0();
    p.attention.scale = 0.125f;
    p.attention.mask = QVL_MASK_CAUSAL;
    p.attention.n_past = 13;
    qvl_tensor_desc out, q = D(QVL_F32, 7, 16, 64), k = D(QVL_F16, 20, 8, 64), v = D(QVL_F16, 20, 8, 64);
    qvl_tensor_desc seg = D(QVL_I32, 3);
    const qvl_tensor_desc *src[4] = {&q, &k, &v, NULL};
    expect_ok(QVL_OP_ATTENTION, &p, 4, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 16, 64);
    p.attention.mask = QVL_MASK_NONE;
    expect_ok(QVL_OP_ATTENTION, &p, 4, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 16, 64);
    /* segments: N == L, seg required */
    p.attention.mask = QVL_MASK_SEGMENTS;
    q = D(QVL_F32, 10, 16, 64);
    k = v = D(QVL_F32, 10, 16, 64);
    src[3] = &seg;
    expect_ok(QVL_OP_ATTENTION, &p, 4, src, &out);
    EXPECT_OUT(&out, QVL_F32, 10, 16, 64);

    src[3] = NULL;
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_INVALID, "input 3 (seg) is missing");
    src[3] = &seg;
    k = v = D(QVL_F32, 12, 16, 64);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 1 (k)");
    seg = D(QVL_F32, 3);
    k = v = D(QVL_F32, 10, 16, 64);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_DTYPE, "input 3 (seg)");
    seg = D(QVL_I32, 3);
    p.attention.mask = QVL_MASK_NONE; /* seg given without a segment mask */
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_INVALID, "input 3 (seg)");
    src[3] = NULL;
    /* GQA: 16 query heads cannot share 5 kv heads */
    k = v = D(QVL_F32, 10, 5, 64);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 1 (k)");
    /* head dims, k/v shapes */
    k = v = D(QVL_F32, 10, 8, 32);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 1 (k)");
    k = D(QVL_F32, 10, 8, 64);
    v = D(QVL_F32, 11, 8, 64);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 2 (v)");
    v = D(QVL_F32, 10, 8, 64);
    /* causal: n_past + N must fit L */
    p.attention.mask = QVL_MASK_CAUSAL;
    p.attention.n_past = 1;
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "n_past");
    p.attention.n_past = -1;
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_INVALID, "n_past");
    p.attention.n_past = 0;
    expect_ok(QVL_OP_ATTENTION, &p, 4, src, &out);
    p.attention.mask = 9;
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_INVALID, "mask");
    p.attention.mask = QVL_MASK_NONE;
    /* dtypes and ranks */
    q = D(QVL_F16, 10, 16, 64);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_DTYPE, "input 0 (q)");
    q = D(QVL_F32, 10, 1024);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 0 (q)");
    q = D(QVL_F32, 10, 16, 64);
    v = D(QVL_Q8_0, 10, 8, 64); /* a q8_0 cache: whole 32-value blocks per head */
    expect_ok(QVL_OP_ATTENTION, &p, 4, src, &out);
    EXPECT_OUT(&out, QVL_F32, 10, 16, 64);
    k = v = D(QVL_Q8_0, 10, 8, 48); /* 48 is not whole blocks */
    q = D(QVL_F32, 10, 16, 48);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_SHAPE, "input 1 (k)");
    q = D(QVL_F32, 10, 16, 64);
    k = D(QVL_F32, 10, 8, 64);
    v = D(QVL_Q4_K, 10, 8, 256);
    q = D(QVL_F32, 10, 16, 256);
    k = D(QVL_F32, 10, 8, 256);
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_DTYPE, "input 2 (v)");
    q = D(QVL_F32, 10, 16, 64);
    k = v = D(QVL_F32, 10, 8, 64);
    src[2] = NULL;
    expect_fail(QVL_OP_ATTENTION, &p, 4, src, QVL_E_INVALID, "input 2 (v) is missing");
}

static void test_mlp_residual(void **state) {
    (void)state;
    qvl_params p = P0();
    p.mlp.act = QVL_ACT_SILU;
    qvl_tensor_desc out, res = D(QVL_F32, 7, 64), a = D(QVL_F32, 7, 256), w = D(QVL_Q8_0, 64, 256);
    qvl_tensor_desc up = D(QVL_F32, 7, 256), b = D(QVL_BF16, 64);
    const qvl_tensor_desc *src[5] = {&res, &a, &w, &up, &b};
    expect_ok(QVL_OP_MLP_RESIDUAL, &p, 5, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 64);
    src[3] = NULL;
    p.mlp.act = QVL_ACT_GELU_TANH;
    expect_ok(QVL_OP_MLP_RESIDUAL, &p, 5, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 64);
    p.mlp.act = QVL_ACT_GELU_ERF;
    src[4] = NULL;
    expect_ok(QVL_OP_MLP_RESIDUAL, &p, 5, src, &out);
    EXPECT_OUT(&out, QVL_F32, 7, 64);

    /* act must fit the presence of up */
    p.mlp.act = QVL_ACT_SILU;
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_INVALID, "input 3 (up)");
    src[3] = &up;
    p.mlp.act = QVL_ACT_GELU_TANH;
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_INVALID, "input 3 (up)");
    p.mlp.act = QVL_ACT_SILU;
    /* shapes */
    up = D(QVL_F32, 7, 255);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_SHAPE, "input 3 (up)");
    up = D(QVL_F32, 7, 256);
    a = D(QVL_F32, 6, 256);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_SHAPE, "input 1 (a)");
    a = D(QVL_F32, 7, 256);
    w = D(QVL_F32, 64, 255);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_SHAPE, "input 2 (w_down)");
    w = D(QVL_F32, 63, 256);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_SHAPE, "input 2 (w_down)");
    w = D(QVL_F32, 64, 256);
    src[4] = &b;
    b = D(QVL_F32, 63);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_SHAPE, "input 4 (b_down)");
    b = D(QVL_F32, 64);
    /* dtypes */
    up = D(QVL_F16, 7, 256);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_DTYPE, "input 3 (up)");
    up = D(QVL_F32, 7, 256);
    w = D(QVL_I32, 64, 256);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_DTYPE, "input 2 (w_down)");
    res = D(QVL_BF16, 7, 64);
    w = D(QVL_F32, 64, 256);
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_DTYPE, "input 0 (res)");
    res = D(QVL_F32, 7, 64);
    src[2] = NULL;
    expect_fail(QVL_OP_MLP_RESIDUAL, &p, 5, src, QVL_E_INVALID, "input 2 (w_down) is missing");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_generic_errors),
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_add_mul),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_norms),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_view),
        cmocka_unit_test(test_cont),
        cmocka_unit_test(test_store_rows),
        cmocka_unit_test(test_norm_linear),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_mlp_residual),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
