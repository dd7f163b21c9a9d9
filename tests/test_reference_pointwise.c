/* The reference backend checked against ops.h itself: it is the oracle every other backend
 * is compared with (qvl-backend-ops, tests/conformance/), so nothing else would notice if it
 * were wrong.
 *
 * Primitive ops are compared with expectations computed here, in double, straight from the
 * formulas in ops.h and the model spec (or with hand-computed numbers); fused ops are compared
 * with the primitive kernels run one after another. Also its table and buffers, and the nodes
 * it refuses. Tensors are built by hand in host memory and nodes are handed to the kernels
 * the way the executor does.
 *
 * One file over ~800 lines: every test shares the tensor and expectation helpers at the top,
 * and the ops are checked one after another in the order of ops.def. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/backend.h"
#include "qvl/dtype.h"
#include "test_backend.h"

static qvl_test_backend tb;

/* ---- test tensors (freed after every test) ---------------------------------------------- */

#define MAX_ALLOCS 1024
static void *allocs[MAX_ALLOCS];
static int n_allocs;

static void *keep(void *p) {
    assert_non_null(p);
    assert_true(n_allocs < MAX_ALLOCS);
    allocs[n_allocs++] = p;
    return p;
}

static int free_all(void **state) {
    (void)state;
    for (int i = 0; i < n_allocs; i++) free(allocs[i]);
    n_allocs = 0;
    return 0;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define IDX(...) ((const int64_t[]){__VA_ARGS__})

static size_t elem_bytes(qvl_dtype dt) {
    return dt == QVL_F32 || dt == QVL_I32 ? 4 : 2;
}

static size_t storage_bytes(qvl_dtype dt, int64_t n) {
    if (dt == QVL_Q8_0) return (size_t)((n + 31) / 32) * sizeof(qvl_block_q8_0);
    return (size_t)n * elem_bytes(dt);
}

static int64_t nelem(const qvl_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->desc.ndim; i++) n *= t->desc.shape[i];
    return n;
}

static void set_desc(qvl_tensor *t, qvl_dtype dt, int ndim, const int64_t *shape,
                     const int64_t *stride) {
    t->desc.dtype = dt;
    t->desc.ndim = ndim;
    for (int i = 0; i < QVL_MAX_DIMS; i++) {
        t->desc.shape[i] = i < ndim ? shape[i] : 1;
        t->desc.stride[i] = i < ndim ? stride[i] : 1;
    }
}

/* A zeroed contiguous tensor. */
static qvl_tensor *mk(qvl_dtype dt, int ndim, const int64_t *shape) {
    qvl_tensor *t = keep(calloc(1, sizeof *t));
    int64_t stride[QVL_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = n;
        n *= shape[i];
    }
    set_desc(t, dt, ndim, shape, stride);
    t->data = keep(calloc(1, storage_bytes(dt, n)));
    return t;
}

/* A view into base's storage: own shape and strides, element 0 at `offset` elements. */
static qvl_tensor *view(const qvl_tensor *base, int ndim, const int64_t *shape,
                        const int64_t *stride, int64_t offset) {
    qvl_tensor *t = keep(calloc(1, sizeof *t));
    set_desc(t, base->desc.dtype, ndim, shape, stride);
    size_t bytes = base->desc.dtype == QVL_Q8_0
                       ? (size_t)(offset / 32) * sizeof(qvl_block_q8_0)
                       : (size_t)offset * elem_bytes(base->desc.dtype);
    t->data = (char *)base->data + bytes;
    return t;
}

/* Element at a multi-index, decoded here from the dtype definitions in dtype.h. */
static double at(const qvl_tensor *t, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->desc.ndim; i++) off += idx[i] * t->desc.stride[i];
    switch (t->desc.dtype) {
    case QVL_F32: return ((const float *)t->data)[off];
    case QVL_F16: return qvl_f16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_BF16: return qvl_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_I32: return ((const int32_t *)t->data)[off];
    case QVL_Q8_0: {
        const qvl_block_q8_0 *b = (const qvl_block_q8_0 *)t->data + off / 32;
        return (double)qvl_f16_to_f32(b->d) * b->qs[off % 32];
    }
    default: fail_msg("bad dtype"); return 0;
    }
}

/* Flat element i of a contiguous f32 tensor. */
static double flat(const qvl_tensor *t, int64_t i) {
    return ((const float *)t->data)[i];
}

static uint32_t rng = 12345u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}

/* A contiguous tensor of random values in [lo, hi) (q8_0: random scales and quants). */
static qvl_tensor *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    qvl_tensor *t = mk(dt, ndim, shape);
    int64_t n = nelem(t);
    if (dt == QVL_Q8_0) {
        qvl_block_q8_0 *b = t->data;
        for (int64_t i = 0; i < (n + 31) / 32; i++) {
            b[i].d = qvl_f32_to_f16(frand(0.002f, 0.01f));
            for (int j = 0; j < 32; j++) b[i].qs[j] = (int8_t)(int)frand(-127.0f, 127.99f);
        }
        return t;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = frand(lo, hi);
        switch (dt) {
        case QVL_F32: ((float *)t->data)[i] = v; break;
        case QVL_F16: ((uint16_t *)t->data)[i] = qvl_f32_to_f16(v); break;
        case QVL_BF16: ((uint16_t *)t->data)[i] = qvl_f32_to_bf16(v); break;
        default: fail_msg("rnd: bad dtype");
        }
    }
    return t;
}

static qvl_tensor *f32_of(int ndim, const int64_t *shape, const float *values) {
    qvl_tensor *t = mk(QVL_F32, ndim, shape);
    memcpy(t->data, values, (size_t)nelem(t) * sizeof(float));
    return t;
}

static qvl_tensor *i32_of(int ndim, const int64_t *shape, const int32_t *values) {
    qvl_tensor *t = mk(QVL_I32, ndim, shape);
    memcpy(t->data, values, (size_t)nelem(t) * sizeof(int32_t));
    return t;
}

/* ---- running nodes ------------------------------------------------------------------------ */

#define SRC(...) ((const qvl_tensor *[QVL_MAX_SRC]){__VA_ARGS__})

static qvl_node node_of(qvl_op op, const qvl_params *p, qvl_tensor *dst,
                        const qvl_tensor *const *src) {
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    if (p) n.params = *p;
    n.n_src = qvl_op_max_inputs(op);
    for (uint32_t i = 0; i < QVL_MAX_SRC; i++) n.src[i] = src[i];
    n.dst = dst;
    n.name = "t";
    return n;
}

static qvl_status run(qvl_op op, const qvl_params *p, qvl_tensor *dst,
                      const qvl_tensor *const *src, qvl_error *err) {
    qvl_node n = node_of(op, p, dst, src);
    qvl_kernel_fn k = qvl_test_kernel(&tb, op);
    if (!k) return qvl_fail(err, QVL_E_UNSUPPORTED, "no kernel");
    return k(tb.be, &n, err);
}

static bool supported(qvl_op op, const qvl_params *p, qvl_tensor *dst,
                      const qvl_tensor *const *src) {
    qvl_node n = node_of(op, p, dst, src);
    return (qvl_test_supports(&tb, &n, NULL) == QVL_OK);
}

static void run_ok(qvl_op op, const qvl_params *p, qvl_tensor *dst,
                   const qvl_tensor *const *src) {
    qvl_error err = {0};
    if (!supported(op, p, dst, src)) {
        run(op, p, dst, src, &err);
        fail_msg("%s: not supported: %s", qvl_op_name(op), err.msg);
    }
    qvl_status s = run(op, p, dst, src, &err);
    if (s != QVL_OK) fail_msg("%s failed: %s", qvl_op_name(op), err.msg);
}

/* Expect a failure with status `want` whose message names the op and contains `word`. */
static void run_fails(qvl_op op, const qvl_params *p, qvl_tensor *dst,
                      const qvl_tensor *const *src, qvl_status want, const char *word) {
    qvl_error err = {0};
    qvl_status s = run(op, p, dst, src, &err);
    if (s != want) fail_msg("%s: status %d (%s), expected %d", qvl_op_name(op), s, err.msg, want);
    if (!strstr(err.msg, qvl_op_name(op)) || (word && !strstr(err.msg, word)))
        fail_msg("message '%s' should name %s and say '%s'", err.msg, qvl_op_name(op),
                 word ? word : "");
}

/* got (f32, contiguous) against want[] within tol * max(1, |want|). */
static void expect_close(const qvl_tensor *got, const double *want, double tol) {
    for (int64_t i = 0; i < nelem(got); i++) {
        double g = flat(got, i), w = want[i];
        if (isinf(w) && g == w) continue;
        if (!(fabs(g - w) <= tol * fmax(1.0, fabs(w))))
            fail_msg("element %lld: got %.9g, expected %.9g", (long long)i, g, w);
    }
}

/* A fused result against the primitive chain: within rel relative (1e-5 as agreed). */
static void expect_same(const qvl_tensor *got, const qvl_tensor *want) {
    assert_int_equal(nelem(got), nelem(want));
    for (int64_t i = 0; i < nelem(got); i++) {
        double g = flat(got, i), w = flat(want, i);
        if (!(fabs(g - w) <= 1e-5 * fabs(w) + 1e-7))
            fail_msg("element %lld: fused %.9g, primitives %.9g", (long long)i, g, w);
    }
}

static double *want_buf(const qvl_tensor *like) {
    return keep(calloc((size_t)nelem(like), sizeof(double)));
}

/* ---- backend table, buffers ------------------------------------------------------------- */

static void test_iface_and_buffers(void **state) {
    (void)state;
    const qvl_backend_iface *f = tb.iface;
    assert_string_equal(f->name, "reference");
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        if (op == QVL_OP_VIEW) assert_null(qvl_test_kernel(&tb, (qvl_op)op));
        else if (!qvl_test_kernel(&tb, (qvl_op)op)) fail_msg("no kernel for %s", qvl_op_name((qvl_op)op));
    }
    qvl_device_info info;
    assert_int_equal(f->describe(tb.be, &info), QVL_OK);
    assert_string_equal(info.name, "reference (scalar C)");
    assert_true(info.host_memory);
    assert_true(info.memory_total > 0);

    qvl_error err = {0};
    qvl_buffer buf;
    assert_int_equal(f->buffer_alloc(tb.be, 1000, &buf, &err), QVL_OK);
    assert_int_equal((uintptr_t)buf.data % 64, 0);
    assert_int_equal(buf.size, 1000);
    unsigned char in[1000], out[1000];
    for (int i = 0; i < 1000; i++) in[i] = (unsigned char)(i * 7);
    assert_int_equal(f->upload(tb.be, buf.data, in, sizeof in, &err), QVL_OK);
    memset(out, 0, sizeof out);
    assert_int_equal(f->download(tb.be, out, buf.data, sizeof out, &err), QVL_OK);
    assert_memory_equal(in, out, sizeof in);
    assert_int_equal(f->synchronize(tb.be, &err), QVL_OK);
    f->buffer_free(tb.be, &buf);

    assert_int_equal(f->buffer_alloc(tb.be, 0, &buf, &err), QVL_OK);
    f->buffer_free(tb.be, &buf);

    /* Wrapped host memory is used in place and not freed by buffer_free. */
    assert_non_null(f->buffer_wrap_host);
    float host[16] = {1.0f};
    assert_int_equal(f->buffer_wrap_host(tb.be, host, sizeof host, &buf, &err), QVL_OK);
    assert_ptr_equal(buf.data, host);
    f->buffer_free(tb.be, &buf);
    assert_true(host[0] == 1.0f);
}

/* ---- MATMUL ------------------------------------------------------------------------------ */

/* want[m, n] = sum_k a[m, k] * w[n, k] + bias[n], for 2-D a (or rows of a) and 2-D w. */
static void want_linear(const qvl_tensor *a2, const qvl_tensor *w, const qvl_tensor *bias,
                        double *want) {
    int64_t M = a2->desc.shape[0], K = a2->desc.shape[1], N = w->desc.shape[0];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = bias ? at(bias, IDX(n)) : 0.0;
            for (int64_t k = 0; k < K; k++) acc += at(a2, IDX(m, k)) * at(w, IDX(n, k));
            want[m * N + n] = acc;
        }
}

static void test_matmul_2d_weight_dtypes(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16};
    for (int i = 0; i < 3; i++) {
        qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(3, 37), -1, 1);
        qvl_tensor *w = rnd(dts[i], 2, SHAPE(5, 37), -1, 1);
        qvl_tensor *bias = rnd(dts[i], 1, SHAPE(5), -1, 1);
        qvl_tensor *out = mk(QVL_F32, 2, SHAPE(3, 5));
        double *want = want_buf(out);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias));
        want_linear(a, w, bias, want);
        expect_close(out, want, 1e-5);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, NULL));
        want_linear(a, w, NULL, want);
        expect_close(out, want, 1e-5);
    }
    /* Leading dims of a are kept: [2, 3, 37] . [5, 37]^T -> [2, 3, 5]. */
    qvl_tensor *a = rnd(QVL_F32, 3, SHAPE(2, 3, 37), -1, 1);
    qvl_tensor *w = rnd(QVL_BF16, 2, SHAPE(5, 37), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 3, SHAPE(2, 3, 5));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
    want_linear(view(a, 2, SHAPE(6, 37), SHAPE(37, 1), 0), w, NULL, want);
    expect_close(out, want, 1e-5);
}

static void test_matmul_q8_0(void **state) {
    (void)state;
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(4, 64), -1, 1);
    qvl_tensor *w = rnd(QVL_Q8_0, 2, SHAPE(6, 64), 0, 0);
    qvl_tensor *bias = rnd(QVL_F32, 1, SHAPE(6), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(4, 6));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias));
    want_linear(a, w, bias, want); /* w dequantized by at(): d * q per block */
    expect_close(out, want, 1e-5);
}

static void test_matmul_3d_gqa(void **state) {
    (void)state;
    /* a [B=4, M=3, K=8], w [Bw=2, N=5, K=8]: batch b uses w batch b / 2. */
    const qvl_dtype dts[] = {QVL_F32, QVL_BF16};
    for (int t = 0; t < 2; t++) {
        qvl_tensor *a = rnd(QVL_F32, 3, SHAPE(4, 3, 8), -1, 1);
        qvl_tensor *w = rnd(dts[t], 3, SHAPE(2, 5, 8), -1, 1);
        qvl_tensor *out = mk(QVL_F32, 3, SHAPE(4, 3, 5));
        double *want = want_buf(out);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
        for (int64_t b = 0; b < 4; b++)
            for (int64_t m = 0; m < 3; m++)
                for (int64_t n = 0; n < 5; n++) {
                    double acc = 0;
                    for (int64_t k = 0; k < 8; k++)
                        acc += at(a, IDX(b, m, k)) * at(w, IDX(b / 2, n, k));
                    want[(b * 3 + m) * 5 + n] = acc;
                }
        expect_close(out, want, 1e-5);
    }
}

static void test_matmul_strided_a(void **state) {
    (void)state;
    /* a = transpose of a contiguous [7, 5]: shape [5, 7], strides {1, 5}. */
    qvl_tensor *base = rnd(QVL_F32, 2, SHAPE(7, 5), -1, 1);
    qvl_tensor *a = view(base, 2, SHAPE(5, 7), SHAPE(1, 5), 0);
    qvl_tensor *w = rnd(QVL_F16, 2, SHAPE(3, 7), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(5, 3));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
    want_linear(a, w, NULL, want);
    expect_close(out, want, 1e-5);

    /* Heads first: q [N=3, H=4, D=8] read as [H, N, D], against k [L=5, 2, 8] as [2, L, D]. */
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(3, 4, 8), -1, 1);
    qvl_tensor *k = rnd(QVL_F32, 3, SHAPE(5, 2, 8), -1, 1);
    qvl_tensor *qp = view(q, 3, SHAPE(4, 3, 8), SHAPE(8, 32, 1), 0);
    qvl_tensor *kp = view(k, 3, SHAPE(2, 5, 8), SHAPE(8, 16, 1), 0);
    qvl_tensor *s = mk(QVL_F32, 3, SHAPE(4, 3, 5));
    double *ws = want_buf(s);
    run_ok(QVL_OP_MATMUL, NULL, s, SRC(qp, kp));
    for (int64_t h = 0; h < 4; h++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 5; j++) {
                double acc = 0;
                for (int64_t d = 0; d < 8; d++) acc += at(q, IDX(i, h, d)) * at(k, IDX(j, h / 2, d));
                ws[(h * 3 + i) * 5 + j] = acc;
            }
    expect_close(s, ws, 1e-5);
}

/* ---- GET_ROWS ------------------------------------------------------------------------------ */

static void test_get_rows(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
    const int32_t id_values[3] = {4, 0, 4};
    for (int t = 0; t < 4; t++) {
        qvl_tensor *table = rnd(dts[t], 2, SHAPE(5, 64), -2, 2);
        qvl_tensor *ids = i32_of(1, SHAPE(3), id_values);
        qvl_tensor *out = mk(QVL_F32, 2, SHAPE(3, 64));
        double *want = want_buf(out);
        run_ok(QVL_OP_GET_ROWS, NULL, out, SRC(table, ids));
        for (int64_t n = 0; n < 3; n++)
            for (int64_t d = 0; d < 64; d++) want[n * 64 + d] = at(table, IDX(id_values[n], d));
        expect_close(out, want, 0.0);
    }
    /* Ids are data: one out of range is an error, not a read past the table. */
    qvl_tensor *table = rnd(QVL_F32, 2, SHAPE(5, 4), -1, 1);
    const int32_t bad[2] = {1, 5};
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 4));
    run_fails(QVL_OP_GET_ROWS, NULL, out, SRC(table, i32_of(1, SHAPE(2), bad)), QVL_E_INVALID,
              "5");
}

/* ---- ADD, MUL, SCALE, activations -------------------------------------------------------- */

/* a [2, 3, 4] (op) b with b broadcast from the innermost dims. */
static void check_binary(qvl_op op, const qvl_tensor *a, const qvl_tensor *b) {
    qvl_tensor *out = mk(QVL_F32, 3, SHAPE(2, 3, 4));
    double *want = want_buf(out);
    run_ok(op, NULL, out, SRC(a, b));
    int pad = 3 - b->desc.ndim;
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t k = 0; k < 4; k++) {
                int64_t full[3] = {i, j, k}, bi[3];
                for (int d = 0; d < b->desc.ndim; d++)
                    bi[d] = b->desc.shape[d] == 1 ? 0 : full[d + pad];
                double x = at(a, full), y = at(b, bi);
                want[(i * 3 + j) * 4 + k] = op == QVL_OP_ADD ? x + y : x * y;
            }
    expect_close(out, want, 1e-6);
}

static void test_add_mul_broadcast(void **state) {
    (void)state;
    qvl_tensor *a = rnd(QVL_F32, 3, SHAPE(2, 3, 4), -2, 2);
    /* a as a permuted view of a [4, 3, 2] tensor */
    qvl_tensor *a_t = view(rnd(QVL_F32, 3, SHAPE(4, 3, 2), -2, 2), 3, SHAPE(2, 3, 4),
                           SHAPE(1, 2, 6), 0);
    qvl_tensor *bs[] = {
        rnd(QVL_F32, 3, SHAPE(2, 3, 4), -2, 2), rnd(QVL_F32, 1, SHAPE(4), -2, 2),
        rnd(QVL_F32, 2, SHAPE(3, 1), -2, 2),    rnd(QVL_F32, 3, SHAPE(2, 1, 4), -2, 2),
        rnd(QVL_F32, 1, SHAPE(1), -2, 2),       rnd(QVL_F32, 2, SHAPE(1, 4), -2, 2),
    };
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        check_binary(QVL_OP_ADD, a, bs[i]);
        check_binary(QVL_OP_MUL, a, bs[i]);
        check_binary(QVL_OP_ADD, a_t, bs[i]);
    }
    /* Hand-computed: [[1, 2], [3, 4]] + [10, 20] and * [10, 20]. */
    qvl_tensor *x = f32_of(2, SHAPE(2, 2), (const float[]){1, 2, 3, 4});
    qvl_tensor *y = f32_of(1, SHAPE(2), (const float[]){10, 20});
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 2));
    run_ok(QVL_OP_ADD, NULL, out, SRC(x, y));
    expect_close(out, (const double[]){11, 22, 13, 24}, 0);
    run_ok(QVL_OP_MUL, NULL, out, SRC(x, y));
    expect_close(out, (const double[]){10, 40, 30, 80}, 0);
    /* b with a dim that neither matches nor is 1 does not broadcast */
    qvl_tensor *bad = rnd(QVL_F32, 1, SHAPE(3), 0, 1);
    assert_false(supported(QVL_OP_ADD, NULL, mk(QVL_F32, 3, SHAPE(2, 3, 4)), SRC(a, bad)));
}

static void test_scale(void **state) {
    (void)state;
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(2, 5), -2, 2);
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 5));
    double *want = want_buf(out);
    qvl_params p = {.scale = {.s = -1.5f}};
    run_ok(QVL_OP_SCALE, &p, out, SRC(x));
    for (int64_t i = 0; i < 10; i++) want[i] = flat(x, i) * -1.5;
    expect_close(out, want, 1e-7);
}

static void test_activations(void **state) {
    (void)state;
    const float xs[8] = {-3, -1, -0.5f, 0, 0.5f, 1, 2, 3};
    /* Evaluated in double from the formulas in ops.h. */
    const double silu[8] = {-0.1422776195, -0.2689414214, -0.1887703344, 0,
                            0.3112296656,  0.7310585786,  1.761594156,   2.85772238};
    const double gelu_tanh[8] = {-0.003637392082, -0.1588080094, -0.1542859902, 0,
                                 0.3457140098,    0.8411919906,  1.954597694,   2.996362608};
    const double gelu_erf[8] = {-0.004049694095, -0.1586552539, -0.1542687694, 0,
                                0.3457312306,    0.8413447461,  1.954499736,   2.995950306};
    qvl_tensor *x = f32_of(1, SHAPE(8), xs);
    qvl_tensor *out = mk(QVL_F32, 1, SHAPE(8));
    run_ok(QVL_OP_SILU, NULL, out, SRC(x));
    expect_close(out, silu, 1e-6);
    run_ok(QVL_OP_GELU_TANH, NULL, out, SRC(x));
    expect_close(out, gelu_tanh, 1e-6);
    run_ok(QVL_OP_GELU_ERF, NULL, out, SRC(x));
    expect_close(out, gelu_erf, 1e-6);
}

/* ---- RMS_NORM, LAYER_NORM ---------------------------------------------------------------- */

static void test_rms_norm(void **state) {
    (void)state;
    /* Hand-computed: [3, 4] -> mean square 12.5 -> [3, 4] / 3.5355339 */
    qvl_params p = {.norm = {.eps = 0.0f}};
    qvl_tensor *x = f32_of(1, SHAPE(2), (const float[]){3, 4});
    qvl_tensor *g = f32_of(1, SHAPE(2), (const float[]){1, 2});
    qvl_tensor *out = mk(QVL_F32, 1, SHAPE(2));
    run_ok(QVL_OP_RMS_NORM, &p, out, SRC(x, g));
    expect_close(out, (const double[]){0.8485281374, 2.2627416998}, 1e-6);

    /* Random rows, x a transposed view, gamma bf16. */
    p.norm.eps = 1e-6f;
    qvl_tensor *base = rnd(QVL_F32, 2, SHAPE(10, 3), -3, 3);
    qvl_tensor *xv = view(base, 2, SHAPE(3, 10), SHAPE(1, 3), 0);
    qvl_tensor *gamma = rnd(QVL_BF16, 1, SHAPE(10), 0.5f, 1.5f);
    qvl_tensor *o = mk(QVL_F32, 2, SHAPE(3, 10));
    double *want = want_buf(o);
    run_ok(QVL_OP_RMS_NORM, &p, o, SRC(xv, gamma));
    for (int64_t r = 0; r < 3; r++) {
        double ms = 0;
        for (int64_t i = 0; i < 10; i++) ms += at(xv, IDX(r, i)) * at(xv, IDX(r, i));
        ms /= 10;
        for (int64_t i = 0; i < 10; i++)
            want[r * 10 + i] = at(xv, IDX(r, i)) / sqrt(ms + 1e-6) * at(gamma, IDX(i));
    }
    expect_close(o, want, 1e-5);
}

static void test_layer_norm(void **state) {
    (void)state;
    /* Hand-computed: [1, 2, 3, 4]: mean 2.5, biased variance 1.25. */
    qvl_params p = {.norm = {.eps = 0.0f}};
    qvl_tensor *x = f32_of(1, SHAPE(4), (const float[]){1, 2, 3, 4});
    qvl_tensor *g = f32_of(1, SHAPE(4), (const float[]){1, 1, 1, 1});
    qvl_tensor *b = f32_of(1, SHAPE(4), (const float[]){0, 0, 0, 10});
    qvl_tensor *out = mk(QVL_F32, 1, SHAPE(4));
    run_ok(QVL_OP_LAYER_NORM, &p, out, SRC(x, g, NULL));
    expect_close(out, (const double[]){-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865},
                 1e-6);
    run_ok(QVL_OP_LAYER_NORM, &p, out, SRC(x, g, b));
    expect_close(out, (const double[]){-1.3416407865, -0.4472135955, 0.4472135955, 11.3416407865},
                 1e-6);

    p.norm.eps = 1e-6f;
    for (int with_beta = 0; with_beta < 2; with_beta++) {
        qvl_tensor *xr = rnd(QVL_F32, 3, SHAPE(2, 3, 12), -3, 5);
        qvl_tensor *gamma = rnd(QVL_F16, 1, SHAPE(12), 0.5f, 1.5f);
        qvl_tensor *beta = with_beta ? rnd(QVL_BF16, 1, SHAPE(12), -1, 1) : NULL;
        qvl_tensor *o = mk(QVL_F32, 3, SHAPE(2, 3, 12));
        double *want = want_buf(o);
        run_ok(QVL_OP_LAYER_NORM, &p, o, SRC(xr, gamma, beta));
        for (int64_t r = 0; r < 6; r++) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < 12; i++) mean += flat(xr, r * 12 + i);
            mean /= 12;
            for (int64_t i = 0; i < 12; i++)
                var += (flat(xr, r * 12 + i) - mean) * (flat(xr, r * 12 + i) - mean);
            var /= 12;
            for (int64_t i = 0; i < 12; i++)
                want[r * 12 + i] = (flat(xr, r * 12 + i) - mean) / sqrt(var + 1e-6) *
                                       at(gamma, IDX(i)) +
                                   (beta ? at(beta, IDX(i)) : 0.0);
        }
        expect_close(o, want, 1e-5);
    }
}

/* ---- ROPE ---------------------------------------------------------------------------------- */

/* Rotate x (all heads) by the angles of ops.h, in double. */
static void want_rope(const qvl_rope_params *p, const qvl_tensor *x, const qvl_tensor *pos,
                      double *want) {
    int64_t N = x->desc.shape[0], H = x->desc.shape[1], D = x->desc.shape[2], half = D / 2;
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < half; j++) {
            double freq, position;
            if (p->mode == QVL_ROPE_VISION_2D) {
                int64_t Q = D / 4;
                freq = pow(p->theta, -(double)(j % Q) / (double)Q);
                position = at(pos, IDX(j < Q ? 0 : 1, n));
            } else {
                freq = pow(p->theta, -2.0 * (double)j / (double)D);
                int owner = 0;
                if (p->mode == QVL_ROPE_MROPE_INTERLEAVED) {
                    if (j % 3 == 1 && j < 3 * p->sections[1]) owner = 1;
                    else if (j % 3 == 2 && j < 3 * p->sections[2]) owner = 2;
                }
                position = at(pos, IDX(owner, n));
            }
            double c = cos(position * freq), s = sin(position * freq);
            for (int64_t h = 0; h < H; h++) {
                double x1 = at(x, IDX(n, h, j)), x2 = at(x, IDX(n, h, j + half));
                want[(n * H + h) * D + j] = x1 * c - x2 * s;
                want[(n * H + h) * D + j + half] = x2 * c + x1 * s;
            }
        }
}

static void test_rope_modes(void **state) {
    (void)state;
    const int32_t pos3[3 * 3] = {0, 5, 17, /* t */ 1, 7, 3, /* h */ 2, 11, 19 /* w */};
    qvl_rope_params modes[3] = {
        {.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 5e6f, .sections = {6, 5, 5}},
        {.mode = QVL_ROPE_VISION_2D, .theta = 1e4f},
        {.mode = QVL_ROPE_NEOX, .theta = 1e6f},
    };
    const int64_t pos_rows[3] = {3, 2, 1};
    for (int m = 0; m < 3; m++) {
        /* x is a slice of a fused [N, 3*H*D] qkv row block: strides {3*H*D, D, 1}, offset H*D */
        qvl_tensor *qkv = rnd(QVL_F32, 2, SHAPE(3, 3 * 2 * 32), -1, 1);
        qvl_tensor *x = view(qkv, 3, SHAPE(3, 2, 32), SHAPE(192, 32, 1), 64);
        qvl_tensor *pos = i32_of(2, SHAPE(pos_rows[m], 3), pos3);
        qvl_tensor *out = mk(QVL_F32, 3, SHAPE(3, 2, 32));
        double *want = want_buf(out);
        qvl_params p = {.rope = modes[m]};
        run_ok(QVL_OP_ROPE, &p, out, SRC(x, pos));
        want_rope(&modes[m], x, pos, want);
        expect_close(out, want, 2e-5);
    }
}

/* Rotating the unit vector e_j by pos recovers angle_j = atan2(out[j + D/2], out[j]). */
static double rope_angle(const qvl_tensor *out, int64_t j) {
    int64_t half = out->desc.shape[2] / 2;
    return atan2(flat(out, j + half), flat(out, j));
}

static qvl_tensor *rope_units(int64_t D) {
    qvl_tensor *x = mk(QVL_F32, 3, SHAPE(1, 1, D));
    for (int64_t j = 0; j < D / 2; j++) ((float *)x->data)[j] = 1.0f;
    return x;
}

static void test_rope_spec_self_checks(void **state) {
    (void)state;
    /* Text (spec 15): inv_freq j=0 -> 1.0, j=1 -> 0.78583, j=63 -> 2.5451e-7 (theta 5e6, D 128). */
    qvl_tensor *x = rope_units(128), *out = mk(QVL_F32, 3, SHAPE(1, 1, 128));
    qvl_params p = {.rope = {.mode = QVL_ROPE_NEOX, .theta = 5e6f}};
    run_ok(QVL_OP_ROPE, &p, out, SRC(x, i32_of(2, SHAPE(1, 1), (const int32_t[]){1})));
    assert_true(fabs(rope_angle(out, 0) - 1.0) < 1e-6);
    assert_true(fabs(rope_angle(out, 1) - 0.78583) < 1e-5);
    assert_true(fabs(rope_angle(out, 63) / 2.5451e-7 - 1.0) < 1e-3);

    /* MRoPE owners for sections (24, 20, 20): THW x 20 then TTTT, read back by giving t, h, w
     * the positions 1, 2, 3 and dividing each angle by that pair's frequency. */
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 5e6f,
                               .sections = {24, 20, 20}};
    run_ok(QVL_OP_ROPE, &p, out, SRC(x, i32_of(2, SHAPE(3, 1), (const int32_t[]){1, 2, 3})));
    char owners[65] = {0}, expected[65] = {0};
    for (int i = 0; i < 20; i++) strcat(expected, "THW");
    strcat(expected, "TTTT");
    for (int64_t j = 0; j < 64; j++) {
        double ratio = rope_angle(out, j) / pow(5e6, -(double)j / 64.0);
        owners[j] = fabs(ratio - 1) < 1e-3 ? 'T' : fabs(ratio - 2) < 1e-3 ? 'H'
                  : fabs(ratio - 3) < 1e-3 ? 'W' : '?';
    }
    assert_string_equal(owners, expected);

    /* Vision (spec 5.3, 15): omega_0 = 1, omega_1 = 0.56234, omega_15 = 1.7783e-4 for theta
     * 1e4, D 64; pairs 0..15 follow the row, 16..31 the column. Row 1, column 2: */
    qvl_tensor *xv = rope_units(64), *ov = mk(QVL_F32, 3, SHAPE(1, 1, 64));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_VISION_2D, .theta = 1e4f};
    run_ok(QVL_OP_ROPE, &p, ov, SRC(xv, i32_of(2, SHAPE(2, 1), (const int32_t[]){1, 2})));
    assert_true(fabs(rope_angle(ov, 0) - 1.0) < 1e-6);
    assert_true(fabs(rope_angle(ov, 1) - 0.56234) < 1e-5);
    assert_true(fabs(rope_angle(ov, 15) / 1.7783e-4 - 1.0) < 1e-3);
    assert_true(fabs(rope_angle(ov, 16) - 2.0) < 1e-6);
    assert_true(fabs(rope_angle(ov, 17) - 2 * 0.56234) < 2e-5);

    /* Spec 8.5: with t == h == w, interleaved MRoPE is plain NeoX RoPE. */
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(2, 3, 128), -1, 1);
    qvl_tensor *a = mk(QVL_F32, 3, SHAPE(2, 3, 128)), *b = mk(QVL_F32, 3, SHAPE(2, 3, 128));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 5e6f,
                               .sections = {24, 20, 20}};
    run_ok(QVL_OP_ROPE, &p, a,
           SRC(q, i32_of(2, SHAPE(3, 2), (const int32_t[]){7, 300, 7, 300, 7, 300})));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_NEOX, .theta = 5e6f};
    run_ok(QVL_OP_ROPE, &p, b, SRC(q, i32_of(2, SHAPE(1, 2), (const int32_t[]){7, 300})));
    assert_memory_equal(a->data, b->data, (size_t)nelem(a) * sizeof(float));
}

/* ---- SOFTMAX, masks ------------------------------------------------------------------------ */

static void test_softmax(void **state) {
    (void)state;
    const float ninf = -INFINITY;
    qvl_tensor *x = f32_of(2, SHAPE(4, 4),
                           (const float[]){1, 2, 3, 4, ninf, ninf, ninf, ninf, 0, ninf, 0, ninf,
                                           1000, 1000, 999, ninf});
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(4, 4));
    run_ok(QVL_OP_SOFTMAX, NULL, out, SRC(x));
    double e1 = exp(1), e2 = exp(2), e3 = exp(3), e4 = exp(4), s = e1 + e2 + e3 + e4;
    double z = 2 + exp(-1.0);
    const double want[16] = {e1 / s, e2 / s, e3 / s, e4 / s, 0, 0, 0, 0, 0.5, 0, 0.5, 0,
                             1 / z,  1 / z,  exp(-1.0) / z, 0};
    expect_close(out, want, 1e-6);
}

static void test_mask_causal(void **state) {
    (void)state;
    /* s [2, N=3, L=5] with n_past 2: query i sees keys j <= 2 + i. */
    qvl_tensor *s = rnd(QVL_F32, 3, SHAPE(2, 3, 5), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 3, SHAPE(2, 3, 5));
    double *want = want_buf(out);
    qvl_params p = {.mask = {.n_past = 2}};
    run_ok(QVL_OP_MASK_CAUSAL, &p, out, SRC(s));
    for (int64_t i = 0; i < 30; i++) {
        int64_t q = (i / 5) % 3, k = i % 5;
        want[i] = k > 2 + q ? -INFINITY : flat(s, i);
    }
    expect_close(out, want, 0);
    assert_true(isinf(flat(out, 3)) && flat(out, 3) < 0); /* (0, 0, 3): 3 > 2 + 0 */
    assert_false(isinf(flat(out, 2)));                     /* (0, 0, 2) is visible */
}

static void test_mask_segments(void **state) {
    (void)state;
    qvl_tensor *s = rnd(QVL_F32, 3, SHAPE(2, 5, 5), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 3, SHAPE(2, 5, 5));
    double *want = want_buf(out);
    qvl_tensor *seg = i32_of(1, SHAPE(3), (const int32_t[]){0, 2, 5});
    run_ok(QVL_OP_MASK_SEGMENTS, NULL, out, SRC(s, seg));
    for (int64_t i = 0; i < 50; i++) {
        int64_t q = (i / 5) % 5, k = i % 5;
        want[i] = (q < 2) != (k < 2) ? -INFINITY : flat(s, i);
    }
    expect_close(out, want, 0);
    /* Bounds are data: checked at run time. */
    run_fails(QVL_OP_MASK_SEGMENTS, NULL, out,
              SRC(s, i32_of(1, SHAPE(3), (const int32_t[]){0, 2, 4})), QVL_E_INVALID, "end");
    run_fails(QVL_OP_MASK_SEGMENTS, NULL, out,
              SRC(s, i32_of(1, SHAPE(4), (const int32_t[]){0, 9, 2, 5})), QVL_E_INVALID,
              "decrease");
}

/* ---- VIEW, CONT, STORE_ROWS ---------------------------------------------------------------- */

/* qvl computes view addresses itself: no backend has a VIEW kernel (and so the test helper,
 * which asks for a kernel first, never reports VIEW as supported). */
static void test_view_has_no_kernel(void **state) {
    (void)state;
    assert_null(qvl_test_kernel(&tb, QVL_OP_VIEW));
}

static void test_cont(void **state) {
    (void)state;
    /* A permuted f32 view [4, 2, 3] of a contiguous [2, 3, 4]. */
    qvl_tensor *base = rnd(QVL_F32, 3, SHAPE(2, 3, 4), -1, 1);
    qvl_tensor *perm = view(base, 3, SHAPE(4, 2, 3), SHAPE(1, 12, 4), 0);
    qvl_tensor *out = mk(QVL_F32, 3, SHAPE(4, 2, 3));
    double *want = want_buf(out);
    run_ok(QVL_OP_CONT, NULL, out, SRC(perm));
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t k = 0; k < 3; k++) want[(i * 2 + j) * 3 + k] = at(base, IDX(j, k, i));
    expect_close(out, want, 0);

    /* f16 keeps its dtype and bits. */
    qvl_tensor *b16 = rnd(QVL_F16, 2, SHAPE(3, 5), -1, 1);
    qvl_tensor *t16 = view(b16, 2, SHAPE(5, 3), SHAPE(1, 5), 0);
    qvl_tensor *o16 = mk(QVL_F16, 2, SHAPE(5, 3));
    run_ok(QVL_OP_CONT, NULL, o16, SRC(t16));
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 3; j++)
            assert_int_equal(((uint16_t *)o16->data)[i * 3 + j],
                             ((uint16_t *)b16->data)[j * 5 + i]);

    /* q8_0: rows 1..2 of a [4, 64] table, copied block for block. */
    qvl_tensor *q8 = rnd(QVL_Q8_0, 2, SHAPE(4, 64), 0, 0);
    qvl_tensor *rows = view(q8, 2, SHAPE(2, 64), SHAPE(64, 1), 64);
    qvl_tensor *oq = mk(QVL_Q8_0, 2, SHAPE(2, 64));
    run_ok(QVL_OP_CONT, NULL, oq, SRC(rows));
    assert_memory_equal(oq->data, (qvl_block_q8_0 *)q8->data + 2, 4 * sizeof(qvl_block_q8_0));
}

static void test_store_rows(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16};
    for (int t = 0; t < 3; t++) {
        qvl_tensor *cache = mk(dts[t], 3, SHAPE(6, 2, 4));
        /* src [2, 2, 4] as a permuted view of [2, 4, 2] */
        qvl_tensor *src = view(rnd(QVL_F32, 3, SHAPE(2, 4, 2), -3, 3), 3, SHAPE(2, 2, 4),
                               SHAPE(8, 1, 2), 0);
        qvl_tensor *seen = view(cache, 3, SHAPE(5, 2, 4), SHAPE(8, 4, 1), 0); /* rows [0, 5) */
        qvl_params p = {.store = {.offset = 3}};
        run_ok(QVL_OP_STORE_ROWS, &p, seen, SRC(cache, src));
        for (int64_t r = 0; r < 6; r++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t d = 0; d < 4; d++) {
                    double got = at(cache, IDX(r, h, d)), want = 0;
                    if (r == 3 || r == 4) {
                        float v = (float)at(src, IDX(r - 3, h, d));
                        want = dts[t] == QVL_F16    ? qvl_f16_to_f32(qvl_f32_to_f16(v))
                             : dts[t] == QVL_BF16 ? qvl_bf16_to_f32(qvl_f32_to_bf16(v))
                                                  : v;
                    }
                    if (got != want)
                        fail_msg("%s cache [%lld, %lld, %lld]: %g, expected %g",
                                 qvl_dtype_name(dts[t]), (long long)r, (long long)h,
                                 (long long)d, got, want);
                }
        /* Rows past the end do not fit. */
        p.store.offset = 5;
        qvl_tensor *all = view(cache, 3, SHAPE(7, 2, 4), SHAPE(8, 4, 1), 0);
        assert_false(supported(QVL_OP_STORE_ROWS, &p, all, SRC(cache, src)));
        run_fails(QVL_OP_STORE_ROWS, &p, all, SRC(cache, src), QVL_E_SHAPE, "fit");
    }
    /* The output must be the cache itself (an alias), not some other memory. */
    qvl_tensor *cache = mk(QVL_F32, 2, SHAPE(4, 3));
    qvl_tensor *src = rnd(QVL_F32, 2, SHAPE(1, 3), -1, 1);
    qvl_params p = {.store = {.offset = 0}};
    run_fails(QVL_OP_STORE_ROWS, &p, mk(QVL_F32, 2, SHAPE(1, 3)), SRC(cache, src),
              QVL_E_INVALID, "alias");
}

/* ---- fused ops against the primitive kernels --------------------------------------------- */

static void check_norm_linear(int norm, bool with_beta, int n_proj, const qvl_dtype *w_dt,
                              bool with_bias) {
    const int64_t D = 64, widths[3] = {5, 3, 7};
    qvl_tensor *x = rnd(QVL_F32, 3, SHAPE(2, 3, D), -2, 2);
    qvl_tensor *gamma = rnd(QVL_BF16, 1, SHAPE(D), 0.5f, 1.5f);
    qvl_tensor *beta = with_beta ? rnd(QVL_F32, 1, SHAPE(D), -1, 1) : NULL;
    qvl_tensor *w[3] = {NULL}, *b[3] = {NULL};
    int64_t total = 0;
    for (int i = 0; i < n_proj; i++) {
        w[i] = rnd(w_dt[i], 2, SHAPE(widths[i], D), -0.5f, 0.5f);
        b[i] = with_bias ? rnd(QVL_BF16, 1, SHAPE(widths[i]), -1, 1) : NULL;
        total += widths[i];
    }
    qvl_params p = {.norm_linear = {.norm = norm, .eps = 1e-6f, .n_proj = n_proj}};
    qvl_tensor *fused = mk(QVL_F32, 3, SHAPE(2, 3, total));
    run_ok(QVL_OP_NORM_LINEAR, &p, fused, SRC(x, gamma, beta, w[0], b[0], w[1], b[1], w[2], b[2]));

    /* The same with primitives: norm, then each matmul into its own tensor. */
    qvl_params pn = {.norm = {.eps = 1e-6f}};
    qvl_tensor *normed = mk(QVL_F32, 3, SHAPE(2, 3, D));
    if (norm == QVL_NORM_RMS) run_ok(QVL_OP_RMS_NORM, &pn, normed, SRC(x, gamma));
    else run_ok(QVL_OP_LAYER_NORM, &pn, normed, SRC(x, gamma, beta));
    int64_t col = 0;
    for (int i = 0; i < n_proj; i++) {
        qvl_tensor *y = mk(QVL_F32, 3, SHAPE(2, 3, widths[i]));
        run_ok(QVL_OP_MATMUL, NULL, y, SRC(normed, w[i], b[i]));
        qvl_tensor *slice = mk(QVL_F32, 3, SHAPE(2, 3, widths[i]));
        for (int64_t r = 0; r < 6; r++)
            memcpy((float *)slice->data + r * widths[i], (float *)fused->data + r * total + col,
                   (size_t)widths[i] * sizeof(float));
        expect_same(slice, y);
        col += widths[i];
    }
}

static void test_norm_linear(void **state) {
    (void)state;
    const qvl_dtype f32s[3] = {QVL_F32, QVL_F32, QVL_F32};
    const qvl_dtype mixed[3] = {QVL_BF16, QVL_Q8_0, QVL_F16};
    check_norm_linear(QVL_NORM_RMS, false, 1, f32s, false);
    check_norm_linear(QVL_NORM_RMS, false, 3, mixed, true);  /* q, k, v with biases */
    check_norm_linear(QVL_NORM_RMS, false, 2, mixed, false); /* gate, up */
    check_norm_linear(QVL_NORM_LAYER, true, 1, mixed, true); /* vision qkv-like */
    check_norm_linear(QVL_NORM_LAYER, false, 3, f32s, true);
    check_norm_linear(QVL_NORM_LAYER, true, 2, mixed, false);

    /* n_proj says 2 but a third weight is present: refused. */
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(2, 4), -1, 1), *g = rnd(QVL_F32, 1, SHAPE(4), 0, 1);
    qvl_tensor *w = rnd(QVL_F32, 2, SHAPE(3, 4), -1, 1);
    qvl_params p = {.norm_linear = {.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 2}};
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 9));
    assert_false(supported(QVL_OP_NORM_LINEAR, &p, out, SRC(x, g, NULL, w, NULL, w, NULL, w)));
}

/* Attention in double straight from ops.h: softmax(mask(scale q.k)) . v, kv head h / group. */
static void want_attention(const qvl_tensor *q, const qvl_tensor *k, const qvl_tensor *v,
                           const qvl_attention_params *p, const int32_t *seg_of, double *want) {
    int64_t N = q->desc.shape[0], Hq = q->desc.shape[1], D = q->desc.shape[2];
    int64_t L = k->desc.shape[0], group = Hq / k->desc.shape[1];
    double *s = calloc((size_t)L, sizeof *s);
    assert_non_null(s);
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < N; i++) {
            double max = -INFINITY, sum = 0;
            for (int64_t j = 0; j < L; j++) {
                double dot = 0;
                for (int64_t d = 0; d < D; d++) dot += at(q, IDX(i, h, d)) * at(k, IDX(j, h / group, d));
                bool hidden = (p->mask == QVL_MASK_CAUSAL && j > p->n_past + i) ||
                              (p->mask == QVL_MASK_SEGMENTS && seg_of[i] != seg_of[j]);
                s[j] = hidden ? -INFINITY : p->scale * dot;
                if (s[j] > max) max = s[j];
            }
            for (int64_t j = 0; j < L; j++) {
                s[j] = exp(s[j] - max);
                sum += s[j];
            }
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t j = 0; j < L; j++) o += s[j] / sum * at(v, IDX(j, h / group, d));
                want[(i * Hq + h) * D + d] = o;
            }
        }
    free(s);
}

static void check_attention(int64_t N, int64_t L, int64_t Hq, int64_t Hkv, int64_t D,
                            qvl_dtype kv_dt, int mask, int64_t n_past, const qvl_tensor *seg,
                            const int32_t *seg_of) {
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(N, Hq, D), -1, 1);
    qvl_tensor *k = rnd(kv_dt, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_tensor *v = rnd(kv_dt, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_params p = {.attention = {.scale = 1.0f / sqrtf((float)D), .mask = mask, .n_past = n_past}};
    qvl_tensor *fused = mk(QVL_F32, 3, SHAPE(N, Hq, D));
    run_ok(QVL_OP_ATTENTION, &p, fused, SRC(q, k, v, seg));

    /* Independent: the formula in double. */
    double *want = want_buf(fused);
    want_attention(q, k, v, &p.attention, seg_of, want);
    expect_close(fused, want, 1e-5);

    /* Primitives: heads-first views, matmul (3-D, GQA), scale, mask, softmax, matmul with v^T,
     * then back to [N, Hq, D] with a permuted view and cont. */
    qvl_tensor *qh = view(q, 3, SHAPE(Hq, N, D), SHAPE(D, Hq * D, 1), 0);
    qvl_tensor *kh = view(k, 3, SHAPE(Hkv, L, D), SHAPE(D, Hkv * D, 1), 0);
    qvl_tensor *vt = view(v, 3, SHAPE(Hkv, D, L), SHAPE(D, 1, Hkv * D), 0);
    qvl_tensor *scores = mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *scaled = mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *masked = mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *probs = mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *o = mk(QVL_F32, 3, SHAPE(Hq, N, D));
    qvl_tensor *prim = mk(QVL_F32, 3, SHAPE(N, Hq, D));
    run_ok(QVL_OP_MATMUL, NULL, scores, SRC(qh, kh));
    qvl_params ps = {.scale = {.s = p.attention.scale}};
    run_ok(QVL_OP_SCALE, &ps, scaled, SRC(scores));
    if (mask == QVL_MASK_CAUSAL) {
        qvl_params pm = {.mask = {.n_past = n_past}};
        run_ok(QVL_OP_MASK_CAUSAL, &pm, masked, SRC(scaled));
    } else if (mask == QVL_MASK_SEGMENTS) {
        run_ok(QVL_OP_MASK_SEGMENTS, NULL, masked, SRC(scaled, seg));
    } else {
        masked = scaled;
    }
    run_ok(QVL_OP_SOFTMAX, NULL, probs, SRC(masked));
    run_ok(QVL_OP_MATMUL, NULL, o, SRC(probs, vt));
    run_ok(QVL_OP_CONT, NULL, prim, SRC(view(o, 3, SHAPE(N, Hq, D), SHAPE(D, N * D, 1), 0)));
    expect_same(fused, prim);
}

static void test_attention(void **state) {
    (void)state;
    check_attention(3, 3, 2, 2, 8, QVL_F32, QVL_MASK_NONE, 0, NULL, NULL);
    check_attention(4, 4, 4, 2, 16, QVL_F32, QVL_MASK_CAUSAL, 0, NULL, NULL);  /* prefill */
    check_attention(2, 5, 4, 2, 16, QVL_F16, QVL_MASK_CAUSAL, 3, NULL, NULL);  /* decode, f16 cache */
    check_attention(1, 6, 8, 2, 8, QVL_BF16, QVL_MASK_CAUSAL, 5, NULL, NULL);
    const int32_t bounds[3] = {0, 2, 6}, seg_of[6] = {0, 0, 1, 1, 1, 1};
    check_attention(6, 6, 2, 1, 8, QVL_F32, QVL_MASK_SEGMENTS, 0, i32_of(1, SHAPE(3), bounds),
                    seg_of);
}

static void check_mlp(int act, bool gated, bool with_bias, qvl_dtype w_dt, int64_t F) {
    const int64_t M = 3, D = 8;
    qvl_tensor *res = rnd(QVL_F32, 2, SHAPE(M, D), -2, 2);
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, F), -3, 3);
    qvl_tensor *up = gated ? rnd(QVL_F32, 2, SHAPE(M, F), -2, 2) : NULL;
    qvl_tensor *w = rnd(w_dt, 2, SHAPE(D, F), -0.5f, 0.5f);
    qvl_tensor *bias = with_bias ? rnd(QVL_BF16, 1, SHAPE(D), -1, 1) : NULL;
    qvl_params p = {.mlp = {.act = act}};
    qvl_tensor *fused = mk(QVL_F32, 2, SHAPE(M, D));
    run_ok(QVL_OP_MLP_RESIDUAL, &p, fused, SRC(res, a, w, up, bias));

    qvl_tensor *h = mk(QVL_F32, 2, SHAPE(M, F)), *hu = mk(QVL_F32, 2, SHAPE(M, F));
    qvl_tensor *y = mk(QVL_F32, 2, SHAPE(M, D)), *prim = mk(QVL_F32, 2, SHAPE(M, D));
    qvl_op act_op = act == QVL_ACT_SILU ? QVL_OP_SILU
                  : act == QVL_ACT_GELU_TANH ? QVL_OP_GELU_TANH : QVL_OP_GELU_ERF;
    if (act != QVL_ACT_NONE) run_ok(act_op, NULL, h, SRC(a));
    if (gated) run_ok(QVL_OP_MUL, NULL, hu, SRC(h, up));
    run_ok(QVL_OP_MATMUL, NULL, y, SRC(gated ? hu : act == QVL_ACT_NONE ? a : h, w, bias));
    run_ok(QVL_OP_ADD, NULL, prim, SRC(res, y));
    expect_same(fused, prim);
}

static void test_mlp_residual(void **state) {
    (void)state;
    check_mlp(QVL_ACT_SILU, true, false, QVL_BF16, 20);  /* text MLP */
    check_mlp(QVL_ACT_SILU, true, true, QVL_Q8_0, 64);
    check_mlp(QVL_ACT_GELU_TANH, false, true, QVL_F32, 20); /* vision block MLP */
    check_mlp(QVL_ACT_GELU_ERF, false, true, QVL_F16, 20);  /* merger */
    check_mlp(QVL_ACT_GELU_ERF, false, false, QVL_Q8_0, 32);
    check_mlp(QVL_ACT_NONE, false, true, QVL_BF16, 24); /* o_proj + residual */
    check_mlp(QVL_ACT_NONE, false, false, QVL_Q8_0, 64);

    /* up given with a gelu activation: refused. */
    qvl_tensor *res = rnd(QVL_F32, 2, SHAPE(1, 4), -1, 1), *a = rnd(QVL_F32, 2, SHAPE(1, 6), -1, 1);
    qvl_tensor *w = rnd(QVL_F32, 2, SHAPE(4, 6), -1, 1);
    qvl_params p = {.mlp = {.act = QVL_ACT_GELU_TANH}};
    run_fails(QVL_OP_MLP_RESIDUAL, &p, mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w, a),
              QVL_E_INVALID, "silu");
    p.mlp.act = QVL_ACT_NONE; /* and with no activation at all */
    run_fails(QVL_OP_MLP_RESIDUAL, &p, mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w, a),
              QVL_E_INVALID, "silu");
    p.mlp.act = 4; /* no such activation */
    run_fails(QVL_OP_MLP_RESIDUAL, &p, mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w),
              QVL_E_INVALID, "gelu_tanh");
}

/* ---- what is refused, and how ------------------------------------------------------------- */

static void test_unsupported(void **state) {
    (void)state;
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(2, 8), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 3));
    /* A weight of a dtype no kernel reads. */
    qvl_tensor *wi = mk(QVL_I32, 2, SHAPE(3, 8));
    assert_false(supported(QVL_OP_MATMUL, NULL, out, SRC(a, wi)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a, wi), QVL_E_DTYPE, "i32"); /* the contract's */
    /* A cache of a dtype STORE_ROWS cannot write. */
    qvl_tensor *q8 = mk(QVL_Q8_0, 2, SHAPE(4, 32)), *src = rnd(QVL_F32, 2, SHAPE(1, 32), -1, 1);
    qvl_params ps = {.store = {.offset = 0}};
    run_fails(QVL_OP_STORE_ROWS, &ps, view(q8, 2, SHAPE(1, 32), SHAPE(32, 1), 0), SRC(q8, src),
              QVL_E_DTYPE, "q8_0");
    /* Shapes that do not fit. */
    qvl_tensor *w5 = rnd(QVL_F32, 2, SHAPE(3, 5), -1, 1);
    assert_false(supported(QVL_OP_MATMUL, NULL, out, SRC(a, w5)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a, w5), QVL_E_SHAPE, "inner dim");
    qvl_tensor *w8 = rnd(QVL_F32, 2, SHAPE(3, 8), -1, 1);
    run_fails(QVL_OP_MATMUL, NULL, mk(QVL_F32, 2, SHAPE(2, 4)), SRC(a, w8), QVL_E_SHAPE, "output");
    /* A missing input, an unknown mode, an op beyond the table. */
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a), QVL_E_INVALID, "missing");
    qvl_params pr = {.rope = {.mode = 7, .theta = 1e4f}};
    qvl_tensor *x = rnd(QVL_F32, 3, SHAPE(1, 1, 4), -1, 1);
    qvl_tensor *pos = i32_of(2, SHAPE(1, 1), (const int32_t[]){0});
    run_fails(QVL_OP_ROPE, &pr, mk(QVL_F32, 3, SHAPE(1, 1, 4)), SRC(x, pos), QVL_E_INVALID,
              "mode");
    qvl_node n = node_of(QVL_OP_MATMUL, NULL, out, SRC(a, w8));
    n.op = QVL_OP_COUNT;
    assert_false((qvl_test_supports(&tb, &n, NULL) == QVL_OK));
    /* Supported when asked without memory, refused when run without it. */
    qvl_tensor nodata = *a;
    nodata.data = NULL;
    assert_true(supported(QVL_OP_MATMUL, NULL, out, SRC(&nodata, w8)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(&nodata, w8), QVL_E_INVALID, "memory");
}

/* ---- main ----------------------------------------------------------------------------------- */

static int open_backend(void **state) {
    (void)state;
    return qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb);
}

static int close_backend(void **state) {
    (void)state;
    qvl_test_backend_close(&tb);
    return 0;
}

#define T(fn) cmocka_unit_test_teardown(fn, free_all)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_iface_and_buffers),
        T(test_matmul_2d_weight_dtypes),
        T(test_matmul_q8_0),
        T(test_matmul_3d_gqa),
        T(test_matmul_strided_a),
        T(test_get_rows),
        T(test_add_mul_broadcast),
        T(test_scale),
        T(test_activations),
        T(test_rms_norm),
        T(test_layer_norm),
        T(test_rope_modes),
        T(test_rope_spec_self_checks),
        T(test_softmax),
        T(test_mask_causal),
        T(test_mask_segments),
        T(test_view_has_no_kernel),
        T(test_cont),
        T(test_store_rows),
        T(test_norm_linear),
        T(test_attention),
        T(test_mlp_residual),
        T(test_unsupported),
    };
    return cmocka_run_group_tests(tests, open_backend, close_backend);
}
