/* The reference backend checked against ops.h itself, part 2: its table and buffers, the
 * element-wise ops (ADD, MUL, SCALE, activations), norms, ROPE, SOFTMAX and the masks, the data
 * ops (GET_ROWS, VIEW, CONT, STORE_ROWS) and the nodes it refuses. It is the oracle every other
 * backend is compared with (qvl-backend-ops, tests/conformance/), so nothing else would notice
 * if it were wrong: the ops are compared with expectations computed here, in double, straight
 * from the formulas in ops.h and the model spec (or with hand-computed numbers). Part 1, the
 * linear and attention ops, is test_reference_linear.c; the harness both use is
 * test_reference_util.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/dtype.h"
#include "test_reference_util.h"

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

/* ---- GET_ROWS ------------------------------------------------------------------------------ */

static void test_get_rows(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
    const int32_t id_values[3] = {4, 0, 4};
    for (int t = 0; t < 4; t++) {
        qvl_tensor *table = tt_rnd(dts[t], 2, SHAPE(5, 64), -2, 2);
        qvl_tensor *ids = tt_i32_of(1, SHAPE(3), id_values);
        qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(3, 64));
        double *want = want_buf(out);
        run_ok(QVL_OP_GET_ROWS, NULL, out, SRC(table, ids));
        for (int64_t n = 0; n < 3; n++)
            for (int64_t d = 0; d < 64; d++) want[n * 64 + d] = tt_at(table, IDX(id_values[n], d));
        expect_close(out, want, 0.0);
    }
    /* Ids are data: one out of range is an error, not a read past the table. */
    qvl_tensor *table = tt_rnd(QVL_F32, 2, SHAPE(5, 4), -1, 1);
    const int32_t bad[2] = {1, 5};
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(2, 4));
    run_fails(QVL_OP_GET_ROWS, NULL, out, SRC(table, tt_i32_of(1, SHAPE(2), bad)), QVL_E_INVALID,
              "5");
}

/* ---- ADD, MUL, SCALE, activations -------------------------------------------------------- */

/* a [2, 3, 4] (op) b with b broadcast from the innermost dims. */
static void check_binary(qvl_op op, const qvl_tensor *a, const qvl_tensor *b) {
    qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(2, 3, 4));
    double *want = want_buf(out);
    run_ok(op, NULL, out, SRC(a, b));
    int pad = 3 - b->desc.ndim;
    for (int64_t i = 0; i < 2; i++)
        for (int64_t j = 0; j < 3; j++)
            for (int64_t k = 0; k < 4; k++) {
                int64_t full[3] = {i, j, k}, bi[3];
                for (int d = 0; d < b->desc.ndim; d++)
                    bi[d] = b->desc.shape[d] == 1 ? 0 : full[d + pad];
                double x = tt_at(a, full), y = tt_at(b, bi);
                want[(i * 3 + j) * 4 + k] = op == QVL_OP_ADD ? x + y : x * y;
            }
    expect_close(out, want, 1e-6);
}

static void test_add_mul_broadcast(void **state) {
    (void)state;
    qvl_tensor *a = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 4), -2, 2);
    /* a as a permuted view of a [4, 3, 2] tensor */
    qvl_tensor *a_t = tt_view(tt_rnd(QVL_F32, 3, SHAPE(4, 3, 2), -2, 2), 3, SHAPE(2, 3, 4),
                           SHAPE(1, 2, 6), 0);
    qvl_tensor *bs[] = {
        tt_rnd(QVL_F32, 3, SHAPE(2, 3, 4), -2, 2), tt_rnd(QVL_F32, 1, SHAPE(4), -2, 2),
        tt_rnd(QVL_F32, 2, SHAPE(3, 1), -2, 2),    tt_rnd(QVL_F32, 3, SHAPE(2, 1, 4), -2, 2),
        tt_rnd(QVL_F32, 1, SHAPE(1), -2, 2),       tt_rnd(QVL_F32, 2, SHAPE(1, 4), -2, 2),
    };
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        check_binary(QVL_OP_ADD, a, bs[i]);
        check_binary(QVL_OP_MUL, a, bs[i]);
        check_binary(QVL_OP_ADD, a_t, bs[i]);
    }
    /* Hand-computed: [[1, 2], [3, 4]] + [10, 20] and * [10, 20]. */
    qvl_tensor *x = tt_f32_of(2, SHAPE(2, 2), (const float[]){1, 2, 3, 4});
    qvl_tensor *y = tt_f32_of(1, SHAPE(2), (const float[]){10, 20});
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(2, 2));
    run_ok(QVL_OP_ADD, NULL, out, SRC(x, y));
    expect_close(out, (const double[]){11, 22, 13, 24}, 0);
    run_ok(QVL_OP_MUL, NULL, out, SRC(x, y));
    expect_close(out, (const double[]){10, 40, 30, 80}, 0);
    /* b with a dim that neither matches nor is 1 does not broadcast */
    qvl_tensor *bad = tt_rnd(QVL_F32, 1, SHAPE(3), 0, 1);
    assert_false(supported(QVL_OP_ADD, NULL, tt_mk(QVL_F32, 3, SHAPE(2, 3, 4)), SRC(a, bad)));
}

static void test_scale(void **state) {
    (void)state;
    qvl_tensor *x = tt_rnd(QVL_F32, 2, SHAPE(2, 5), -2, 2);
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(2, 5));
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
    qvl_tensor *x = tt_f32_of(1, SHAPE(8), xs);
    qvl_tensor *out = tt_mk(QVL_F32, 1, SHAPE(8));
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
    qvl_tensor *x = tt_f32_of(1, SHAPE(2), (const float[]){3, 4});
    qvl_tensor *g = tt_f32_of(1, SHAPE(2), (const float[]){1, 2});
    qvl_tensor *out = tt_mk(QVL_F32, 1, SHAPE(2));
    run_ok(QVL_OP_RMS_NORM, &p, out, SRC(x, g));
    expect_close(out, (const double[]){0.8485281374, 2.2627416998}, 1e-6);

    /* Random rows, x a transposed view, gamma bf16. */
    p.norm.eps = 1e-6f;
    qvl_tensor *base = tt_rnd(QVL_F32, 2, SHAPE(10, 3), -3, 3);
    qvl_tensor *xv = tt_view(base, 2, SHAPE(3, 10), SHAPE(1, 3), 0);
    qvl_tensor *gamma = tt_rnd(QVL_BF16, 1, SHAPE(10), 0.5f, 1.5f);
    qvl_tensor *o = tt_mk(QVL_F32, 2, SHAPE(3, 10));
    double *want = want_buf(o);
    run_ok(QVL_OP_RMS_NORM, &p, o, SRC(xv, gamma));
    for (int64_t r = 0; r < 3; r++) {
        double ms = 0;
        for (int64_t i = 0; i < 10; i++) ms += tt_at(xv, IDX(r, i)) * tt_at(xv, IDX(r, i));
        ms /= 10;
        for (int64_t i = 0; i < 10; i++)
            want[r * 10 + i] = tt_at(xv, IDX(r, i)) / sqrt(ms + 1e-6) * tt_at(gamma, IDX(i));
    }
    expect_close(o, want, 1e-5);
}

static void test_layer_norm(void **state) {
    (void)state;
    /* Hand-computed: [1, 2, 3, 4]: mean 2.5, biased variance 1.25. */
    qvl_params p = {.norm = {.eps = 0.0f}};
    qvl_tensor *x = tt_f32_of(1, SHAPE(4), (const float[]){1, 2, 3, 4});
    qvl_tensor *g = tt_f32_of(1, SHAPE(4), (const float[]){1, 1, 1, 1});
    qvl_tensor *b = tt_f32_of(1, SHAPE(4), (const float[]){0, 0, 0, 10});
    qvl_tensor *out = tt_mk(QVL_F32, 1, SHAPE(4));
    run_ok(QVL_OP_LAYER_NORM, &p, out, SRC(x, g, NULL));
    expect_close(out, (const double[]){-1.3416407865, -0.4472135955, 0.4472135955, 1.3416407865},
                 1e-6);
    run_ok(QVL_OP_LAYER_NORM, &p, out, SRC(x, g, b));
    expect_close(out, (const double[]){-1.3416407865, -0.4472135955, 0.4472135955, 11.3416407865},
                 1e-6);

    p.norm.eps = 1e-6f;
    for (int with_beta = 0; with_beta < 2; with_beta++) {
        qvl_tensor *xr = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 12), -3, 5);
        qvl_tensor *gamma = tt_rnd(QVL_F16, 1, SHAPE(12), 0.5f, 1.5f);
        qvl_tensor *beta = with_beta ? tt_rnd(QVL_BF16, 1, SHAPE(12), -1, 1) : NULL;
        qvl_tensor *o = tt_mk(QVL_F32, 3, SHAPE(2, 3, 12));
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
                                       tt_at(gamma, IDX(i)) +
                                   (beta ? tt_at(beta, IDX(i)) : 0.0);
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
                position = tt_at(pos, IDX(j < Q ? 0 : 1, n));
            } else {
                freq = pow(p->theta, -2.0 * (double)j / (double)D);
                int owner = 0;
                if (p->mode == QVL_ROPE_MROPE_INTERLEAVED) {
                    if (j % 3 == 1 && j < 3 * p->sections[1]) owner = 1;
                    else if (j % 3 == 2 && j < 3 * p->sections[2]) owner = 2;
                }
                position = tt_at(pos, IDX(owner, n));
            }
            double c = cos(position * freq), s = sin(position * freq);
            for (int64_t h = 0; h < H; h++) {
                double x1 = tt_at(x, IDX(n, h, j)), x2 = tt_at(x, IDX(n, h, j + half));
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
        qvl_tensor *qkv = tt_rnd(QVL_F32, 2, SHAPE(3, 3 * 2 * 32), -1, 1);
        qvl_tensor *x = tt_view(qkv, 3, SHAPE(3, 2, 32), SHAPE(192, 32, 1), 64);
        qvl_tensor *pos = tt_i32_of(2, SHAPE(pos_rows[m], 3), pos3);
        qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(3, 2, 32));
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
    qvl_tensor *x = tt_mk(QVL_F32, 3, SHAPE(1, 1, D));
    for (int64_t j = 0; j < D / 2; j++) ((float *)x->data)[j] = 1.0f;
    return x;
}

static void test_rope_spec_self_checks(void **state) {
    (void)state;
    /* Text (spec 15): inv_freq j=0 -> 1.0, j=1 -> 0.78583, j=63 -> 2.5451e-7 (theta 5e6, D 128). */
    qvl_tensor *x = rope_units(128), *out = tt_mk(QVL_F32, 3, SHAPE(1, 1, 128));
    qvl_params p = {.rope = {.mode = QVL_ROPE_NEOX, .theta = 5e6f}};
    run_ok(QVL_OP_ROPE, &p, out, SRC(x, tt_i32_of(2, SHAPE(1, 1), (const int32_t[]){1})));
    assert_true(fabs(rope_angle(out, 0) - 1.0) < 1e-6);
    assert_true(fabs(rope_angle(out, 1) - 0.78583) < 1e-5);
    assert_true(fabs(rope_angle(out, 63) / 2.5451e-7 - 1.0) < 1e-3);

    /* MRoPE owners for sections (24, 20, 20): THW x 20 then TTTT, read back by giving t, h, w
     * the positions 1, 2, 3 and dividing each angle by that pair's frequency. */
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 5e6f,
                               .sections = {24, 20, 20}};
    run_ok(QVL_OP_ROPE, &p, out, SRC(x, tt_i32_of(2, SHAPE(3, 1), (const int32_t[]){1, 2, 3})));
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
    qvl_tensor *xv = rope_units(64), *ov = tt_mk(QVL_F32, 3, SHAPE(1, 1, 64));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_VISION_2D, .theta = 1e4f};
    run_ok(QVL_OP_ROPE, &p, ov, SRC(xv, tt_i32_of(2, SHAPE(2, 1), (const int32_t[]){1, 2})));
    assert_true(fabs(rope_angle(ov, 0) - 1.0) < 1e-6);
    assert_true(fabs(rope_angle(ov, 1) - 0.56234) < 1e-5);
    assert_true(fabs(rope_angle(ov, 15) / 1.7783e-4 - 1.0) < 1e-3);
    assert_true(fabs(rope_angle(ov, 16) - 2.0) < 1e-6);
    assert_true(fabs(rope_angle(ov, 17) - 2 * 0.56234) < 2e-5);

    /* Spec 8.5: with t == h == w, interleaved MRoPE is plain NeoX RoPE. */
    qvl_tensor *q = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 128), -1, 1);
    qvl_tensor *a = tt_mk(QVL_F32, 3, SHAPE(2, 3, 128)), *b = tt_mk(QVL_F32, 3, SHAPE(2, 3, 128));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 5e6f,
                               .sections = {24, 20, 20}};
    run_ok(QVL_OP_ROPE, &p, a,
           SRC(q, tt_i32_of(2, SHAPE(3, 2), (const int32_t[]){7, 300, 7, 300, 7, 300})));
    p.rope = (qvl_rope_params){.mode = QVL_ROPE_NEOX, .theta = 5e6f};
    run_ok(QVL_OP_ROPE, &p, b, SRC(q, tt_i32_of(2, SHAPE(1, 2), (const int32_t[]){7, 300})));
    assert_memory_equal(a->data, b->data, (size_t)tt_nelem(&a->desc) * sizeof(float));
}

/* ---- SOFTMAX, masks ------------------------------------------------------------------------ */

static void test_softmax(void **state) {
    (void)state;
    const float ninf = -INFINITY;
    qvl_tensor *x = tt_f32_of(2, SHAPE(4, 4),
                           (const float[]){1, 2, 3, 4, ninf, ninf, ninf, ninf, 0, ninf, 0, ninf,
                                           1000, 1000, 999, ninf});
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(4, 4));
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
    qvl_tensor *s = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 5), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(2, 3, 5));
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
    qvl_tensor *s = tt_rnd(QVL_F32, 3, SHAPE(2, 5, 5), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(2, 5, 5));
    double *want = want_buf(out);
    qvl_tensor *seg = tt_i32_of(1, SHAPE(3), (const int32_t[]){0, 2, 5});
    run_ok(QVL_OP_MASK_SEGMENTS, NULL, out, SRC(s, seg));
    for (int64_t i = 0; i < 50; i++) {
        int64_t q = (i / 5) % 5, k = i % 5;
        want[i] = (q < 2) != (k < 2) ? -INFINITY : flat(s, i);
    }
    expect_close(out, want, 0);
    /* Bounds are data: checked at run time. */
    run_fails(QVL_OP_MASK_SEGMENTS, NULL, out,
              SRC(s, tt_i32_of(1, SHAPE(3), (const int32_t[]){0, 2, 4})), QVL_E_INVALID, "end");
    run_fails(QVL_OP_MASK_SEGMENTS, NULL, out,
              SRC(s, tt_i32_of(1, SHAPE(4), (const int32_t[]){0, 9, 2, 5})), QVL_E_INVALID,
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
    qvl_tensor *base = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 4), -1, 1);
    qvl_tensor *perm = tt_view(base, 3, SHAPE(4, 2, 3), SHAPE(1, 12, 4), 0);
    qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(4, 2, 3));
    double *want = want_buf(out);
    run_ok(QVL_OP_CONT, NULL, out, SRC(perm));
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t k = 0; k < 3; k++) want[(i * 2 + j) * 3 + k] = tt_at(base, IDX(j, k, i));
    expect_close(out, want, 0);

    /* f16 keeps its dtype and bits. */
    qvl_tensor *b16 = tt_rnd(QVL_F16, 2, SHAPE(3, 5), -1, 1);
    qvl_tensor *t16 = tt_view(b16, 2, SHAPE(5, 3), SHAPE(1, 5), 0);
    qvl_tensor *o16 = tt_mk(QVL_F16, 2, SHAPE(5, 3));
    run_ok(QVL_OP_CONT, NULL, o16, SRC(t16));
    for (int64_t i = 0; i < 5; i++)
        for (int64_t j = 0; j < 3; j++)
            assert_int_equal(((uint16_t *)o16->data)[i * 3 + j],
                             ((uint16_t *)b16->data)[j * 5 + i]);

    /* q8_0: rows 1..2 of a [4, 64] table, copied block for block. */
    qvl_tensor *q8 = tt_rnd(QVL_Q8_0, 2, SHAPE(4, 64), 0, 0);
    qvl_tensor *rows = tt_view(q8, 2, SHAPE(2, 64), SHAPE(64, 1), 64);
    qvl_tensor *oq = tt_mk(QVL_Q8_0, 2, SHAPE(2, 64));
    run_ok(QVL_OP_CONT, NULL, oq, SRC(rows));
    assert_memory_equal(oq->data, (qvl_block_q8_0 *)q8->data + 2, 4 * sizeof(qvl_block_q8_0));
}

static void test_store_rows(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16};
    for (int t = 0; t < 3; t++) {
        qvl_tensor *cache = tt_mk(dts[t], 3, SHAPE(6, 2, 4));
        /* src [2, 2, 4] as a permuted view of [2, 4, 2] */
        qvl_tensor *src = tt_view(tt_rnd(QVL_F32, 3, SHAPE(2, 4, 2), -3, 3), 3, SHAPE(2, 2, 4),
                               SHAPE(8, 1, 2), 0);
        qvl_tensor *seen = tt_view(cache, 3, SHAPE(5, 2, 4), SHAPE(8, 4, 1), 0); /* rows [0, 5) */
        qvl_params p = {.store = {.offset = 3}};
        run_ok(QVL_OP_STORE_ROWS, &p, seen, SRC(cache, src));
        for (int64_t r = 0; r < 6; r++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t d = 0; d < 4; d++) {
                    double got = tt_at(cache, IDX(r, h, d)), want = 0;
                    if (r == 3 || r == 4) {
                        float v = (float)tt_at(src, IDX(r - 3, h, d));
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
        qvl_tensor *all = tt_view(cache, 3, SHAPE(7, 2, 4), SHAPE(8, 4, 1), 0);
        assert_false(supported(QVL_OP_STORE_ROWS, &p, all, SRC(cache, src)));
        run_fails(QVL_OP_STORE_ROWS, &p, all, SRC(cache, src), QVL_E_SHAPE, "fit");
    }
    /* The output must be the cache itself (an alias), not some other memory. */
    qvl_tensor *cache = tt_mk(QVL_F32, 2, SHAPE(4, 3));
    qvl_tensor *src = tt_rnd(QVL_F32, 2, SHAPE(1, 3), -1, 1);
    qvl_params p = {.store = {.offset = 0}};
    run_fails(QVL_OP_STORE_ROWS, &p, tt_mk(QVL_F32, 2, SHAPE(1, 3)), SRC(cache, src),
              QVL_E_INVALID, "alias");
}

/* ---- what is refused, and how ------------------------------------------------------------- */

static void test_unsupported(void **state) {
    (void)state;
    qvl_tensor *a = tt_rnd(QVL_F32, 2, SHAPE(2, 8), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(2, 3));
    /* A weight of a dtype no kernel reads. */
    qvl_tensor *wi = tt_mk(QVL_I32, 2, SHAPE(3, 8));
    assert_false(supported(QVL_OP_MATMUL, NULL, out, SRC(a, wi)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a, wi), QVL_E_DTYPE, "i32"); /* the contract's */
    /* A cache of a dtype STORE_ROWS cannot write (q8_0 it can, q4_k it cannot). */
    qvl_tensor *q4 = tt_mk(QVL_Q4_K, 2, SHAPE(4, 256)), *src = tt_rnd(QVL_F32, 2, SHAPE(1, 256), -1, 1);
    qvl_params ps = {.store = {.offset = 0}};
    run_fails(QVL_OP_STORE_ROWS, &ps, tt_view(q4, 2, SHAPE(1, 256), SHAPE(256, 1), 0), SRC(q4, src),
              QVL_E_DTYPE, "q4_k");
    /* Shapes that do not fit. */
    qvl_tensor *w5 = tt_rnd(QVL_F32, 2, SHAPE(3, 5), -1, 1);
    assert_false(supported(QVL_OP_MATMUL, NULL, out, SRC(a, w5)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a, w5), QVL_E_SHAPE, "inner dim");
    qvl_tensor *w8 = tt_rnd(QVL_F32, 2, SHAPE(3, 8), -1, 1);
    run_fails(QVL_OP_MATMUL, NULL, tt_mk(QVL_F32, 2, SHAPE(2, 4)), SRC(a, w8), QVL_E_SHAPE, "output");
    /* A missing input, an unknown mode, an op beyond the table. */
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(a), QVL_E_INVALID, "missing");
    qvl_params pr = {.rope = {.mode = 7, .theta = 1e4f}};
    qvl_tensor *x = tt_rnd(QVL_F32, 3, SHAPE(1, 1, 4), -1, 1);
    qvl_tensor *pos = tt_i32_of(2, SHAPE(1, 1), (const int32_t[]){0});
    run_fails(QVL_OP_ROPE, &pr, tt_mk(QVL_F32, 3, SHAPE(1, 1, 4)), SRC(x, pos), QVL_E_INVALID,
              "mode");
    qvl_node n = tt_node(QVL_OP_MATMUL, NULL, out, SRC(a, w8));
    n.op = QVL_OP_COUNT;
    assert_false((qvl_test_supports(&tb, &n, NULL) == QVL_OK));
    /* Supported when asked without memory, refused when run without it. */
    qvl_tensor nodata = *a;
    nodata.data = NULL;
    assert_true(supported(QVL_OP_MATMUL, NULL, out, SRC(&nodata, w8)));
    run_fails(QVL_OP_MATMUL, NULL, out, SRC(&nodata, w8), QVL_E_INVALID, "memory");
}

#define T(fn) cmocka_unit_test_teardown(fn, tt_free_all)

int main(void) {
    tt_seed(12345u);
    const struct CMUnitTest tests[] = {
        T(test_iface_and_buffers),
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
        T(test_unsupported),
    };
    return cmocka_run_group_tests(tests, ref_open_backend, ref_close_backend);
}
