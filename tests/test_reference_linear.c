/* The reference backend checked against ops.h itself, part 1: the linear and attention ops
 * (MATMUL, and the fused NORM_LINEAR, ATTENTION and MLP_RESIDUAL). It is the oracle every
 * other backend is compared with (qvl-backend-ops, tests/conformance/), so nothing else would
 * notice if it were wrong. MATMUL is compared with expectations computed here in double from
 * ops.h; the fused ops with the primitive kernels run one after another (and attention also
 * with the formula). Part 2, the element-wise and data ops, the table and what is refused, is
 * test_reference_pointwise.c; the harness both use is test_reference_util.c. */
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

/* ---- MATMUL ------------------------------------------------------------------------------ */

/* want[m, n] = sum_k a[m, k] * w[n, k] + bias[n], for 2-D a (or rows of a) and 2-D w. */
static void want_linear(const qvl_tensor *a2, const qvl_tensor *w, const qvl_tensor *bias,
                        double *want) {
    int64_t M = a2->desc.shape[0], K = a2->desc.shape[1], N = w->desc.shape[0];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = bias ? tt_at(bias, IDX(n)) : 0.0;
            for (int64_t k = 0; k < K; k++) acc += tt_at(a2, IDX(m, k)) * tt_at(w, IDX(n, k));
            want[m * N + n] = acc;
        }
}

static void test_matmul_2d_weight_dtypes(void **state) {
    (void)state;
    const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16};
    for (int i = 0; i < 3; i++) {
        qvl_tensor *a = tt_rnd(QVL_F32, 2, SHAPE(3, 37), -1, 1);
        qvl_tensor *w = tt_rnd(dts[i], 2, SHAPE(5, 37), -1, 1);
        qvl_tensor *bias = tt_rnd(dts[i], 1, SHAPE(5), -1, 1);
        qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(3, 5));
        double *want = want_buf(out);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias));
        want_linear(a, w, bias, want);
        expect_close(out, want, 1e-5);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, NULL));
        want_linear(a, w, NULL, want);
        expect_close(out, want, 1e-5);
    }
    /* Leading dims of a are kept: [2, 3, 37] . [5, 37]^T -> [2, 3, 5]. */
    qvl_tensor *a = tt_rnd(QVL_F32, 3, SHAPE(2, 3, 37), -1, 1);
    qvl_tensor *w = tt_rnd(QVL_BF16, 2, SHAPE(5, 37), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(2, 3, 5));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
    want_linear(tt_view(a, 2, SHAPE(6, 37), SHAPE(37, 1), 0), w, NULL, want);
    expect_close(out, want, 1e-5);
}

static void test_matmul_q8_0(void **state) {
    (void)state;
    qvl_tensor *a = tt_rnd(QVL_F32, 2, SHAPE(4, 64), -1, 1);
    qvl_tensor *w = tt_rnd(QVL_Q8_0, 2, SHAPE(6, 64), 0, 0);
    qvl_tensor *bias = tt_rnd(QVL_F32, 1, SHAPE(6), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(4, 6));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias));
    want_linear(a, w, bias, want); /* w dequantized by tt_at(): d * q per block */
    expect_close(out, want, 1e-5);
}

static void test_matmul_3d_gqa(void **state) {
    (void)state;
    /* a [B=4, M=3, K=8], w [Bw=2, N=5, K=8]: batch b uses w batch b / 2. */
    const qvl_dtype dts[] = {QVL_F32, QVL_BF16};
    for (int t = 0; t < 2; t++) {
        qvl_tensor *a = tt_rnd(QVL_F32, 3, SHAPE(4, 3, 8), -1, 1);
        qvl_tensor *w = tt_rnd(dts[t], 3, SHAPE(2, 5, 8), -1, 1);
        qvl_tensor *out = tt_mk(QVL_F32, 3, SHAPE(4, 3, 5));
        double *want = want_buf(out);
        run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
        for (int64_t b = 0; b < 4; b++)
            for (int64_t m = 0; m < 3; m++)
                for (int64_t n = 0; n < 5; n++) {
                    double acc = 0;
                    for (int64_t k = 0; k < 8; k++)
                        acc += tt_at(a, IDX(b, m, k)) * tt_at(w, IDX(b / 2, n, k));
                    want[(b * 3 + m) * 5 + n] = acc;
                }
        expect_close(out, want, 1e-5);
    }
}

static void test_matmul_strided_a(void **state) {
    (void)state;
    /* a = transpose of a contiguous [7, 5]: shape [5, 7], strides {1, 5}. */
    qvl_tensor *base = tt_rnd(QVL_F32, 2, SHAPE(7, 5), -1, 1);
    qvl_tensor *a = tt_view(base, 2, SHAPE(5, 7), SHAPE(1, 5), 0);
    qvl_tensor *w = tt_rnd(QVL_F16, 2, SHAPE(3, 7), -1, 1);
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(5, 3));
    double *want = want_buf(out);
    run_ok(QVL_OP_MATMUL, NULL, out, SRC(a, w));
    want_linear(a, w, NULL, want);
    expect_close(out, want, 1e-5);

    /* Heads first: q [N=3, H=4, D=8] read as [H, N, D], against k [L=5, 2, 8] as [2, L, D]. */
    qvl_tensor *q = tt_rnd(QVL_F32, 3, SHAPE(3, 4, 8), -1, 1);
    qvl_tensor *k = tt_rnd(QVL_F32, 3, SHAPE(5, 2, 8), -1, 1);
    qvl_tensor *qp = tt_view(q, 3, SHAPE(4, 3, 8), SHAPE(8, 32, 1), 0);
    qvl_tensor *kp = tt_view(k, 3, SHAPE(2, 5, 8), SHAPE(8, 16, 1), 0);
    qvl_tensor *s = tt_mk(QVL_F32, 3, SHAPE(4, 3, 5));
    double *ws = want_buf(s);
    run_ok(QVL_OP_MATMUL, NULL, s, SRC(qp, kp));
    for (int64_t h = 0; h < 4; h++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 5; j++) {
                double acc = 0;
                for (int64_t d = 0; d < 8; d++) acc += tt_at(q, IDX(i, h, d)) * tt_at(k, IDX(j, h / 2, d));
                ws[(h * 3 + i) * 5 + j] = acc;
            }
    expect_close(s, ws, 1e-5);
}

/* ---- fused ops against the primitive kernels --------------------------------------------- */

static void check_norm_linear(int norm, bool with_beta, int n_proj, const qvl_dtype *w_dt,
                              bool with_bias, int act) {
    const int64_t D = 64, widths[3] = {5, 3, 7};
    qvl_tensor *x = tt_rnd(QVL_F32, 3, SHAPE(2, 3, D), -2, 2);
    qvl_tensor *gamma = tt_rnd(QVL_BF16, 1, SHAPE(D), 0.5f, 1.5f);
    qvl_tensor *beta = with_beta ? tt_rnd(QVL_F32, 1, SHAPE(D), -1, 1) : NULL;
    qvl_tensor *w[3] = {NULL}, *b[3] = {NULL};
    int64_t total = 0;
    for (int i = 0; i < n_proj; i++) {
        w[i] = tt_rnd(w_dt[i], 2, SHAPE(widths[i], D), -0.5f, 0.5f);
        b[i] = with_bias ? tt_rnd(QVL_BF16, 1, SHAPE(widths[i]), -1, 1) : NULL;
        total += widths[i];
    }
    qvl_params p = {.norm_linear = {.norm = norm, .eps = 1e-6f, .n_proj = n_proj, .act = act}};
    qvl_tensor *fused = tt_mk(QVL_F32, 3, SHAPE(2, 3, total));
    run_ok(QVL_OP_NORM_LINEAR, &p, fused, SRC(x, gamma, beta, w[0], b[0], w[1], b[1], w[2], b[2]));

    /* The same with primitives: norm, then each matmul into its own tensor, then the
     * activation op, if any. */
    qvl_params pn = {.norm = {.eps = 1e-6f}};
    qvl_tensor *normed = tt_mk(QVL_F32, 3, SHAPE(2, 3, D));
    if (norm == QVL_NORM_RMS) run_ok(QVL_OP_RMS_NORM, &pn, normed, SRC(x, gamma));
    else run_ok(QVL_OP_LAYER_NORM, &pn, normed, SRC(x, gamma, beta));
    int64_t col = 0;
    for (int i = 0; i < n_proj; i++) {
        qvl_tensor *y = tt_mk(QVL_F32, 3, SHAPE(2, 3, widths[i]));
        run_ok(QVL_OP_MATMUL, NULL, y, SRC(normed, w[i], b[i]));
        if (act != QVL_ACT_NONE) {
            qvl_tensor *ya = tt_mk(QVL_F32, 3, SHAPE(2, 3, widths[i]));
            run_ok(act == QVL_ACT_GELU_TANH ? QVL_OP_GELU_TANH : QVL_OP_GELU_ERF, NULL, ya, SRC(y));
            y = ya;
        }
        qvl_tensor *slice = tt_mk(QVL_F32, 3, SHAPE(2, 3, widths[i]));
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
    const int none = QVL_ACT_NONE;
    check_norm_linear(QVL_NORM_RMS, false, 1, f32s, false, none);
    check_norm_linear(QVL_NORM_RMS, false, 3, mixed, true, none);  /* q, k, v with biases */
    check_norm_linear(QVL_NORM_RMS, false, 2, mixed, false, none); /* gate, up */
    check_norm_linear(QVL_NORM_LAYER, true, 1, mixed, true, none); /* vision qkv-like */
    check_norm_linear(QVL_NORM_LAYER, false, 3, f32s, true, none);
    check_norm_linear(QVL_NORM_LAYER, true, 2, mixed, false, none);
    /* an output activation: the GELU op's bits (vision fc1 with its gelu) */
    check_norm_linear(QVL_NORM_LAYER, true, 1, f32s, true, QVL_ACT_GELU_TANH);
    check_norm_linear(QVL_NORM_RMS, false, 1, mixed, false, QVL_ACT_GELU_ERF);
    check_norm_linear(QVL_NORM_LAYER, false, 3, mixed, true, QVL_ACT_GELU_ERF);

    /* n_proj says 2 but a third weight is present: refused. */
    qvl_tensor *x = tt_rnd(QVL_F32, 2, SHAPE(2, 4), -1, 1), *g = tt_rnd(QVL_F32, 1, SHAPE(4), 0, 1);
    qvl_tensor *w = tt_rnd(QVL_F32, 2, SHAPE(3, 4), -1, 1);
    qvl_params p = {.norm_linear = {.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 2}};
    qvl_tensor *out = tt_mk(QVL_F32, 2, SHAPE(2, 9));
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
                for (int64_t d = 0; d < D; d++) dot += tt_at(q, IDX(i, h, d)) * tt_at(k, IDX(j, h / group, d));
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
                for (int64_t j = 0; j < L; j++) o += s[j] / sum * tt_at(v, IDX(j, h / group, d));
                want[(i * Hq + h) * D + d] = o;
            }
        }
    free(s);
}

static void check_attention(int64_t N, int64_t L, int64_t Hq, int64_t Hkv, int64_t D,
                            qvl_dtype kv_dt, int mask, int64_t n_past, const qvl_tensor *seg,
                            const int32_t *seg_of) {
    qvl_tensor *q = tt_rnd(QVL_F32, 3, SHAPE(N, Hq, D), -1, 1);
    qvl_tensor *k = tt_rnd(kv_dt, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_tensor *v = tt_rnd(kv_dt, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_params p = {.attention = {.scale = 1.0f / sqrtf((float)D), .mask = mask, .n_past = n_past}};
    qvl_tensor *fused = tt_mk(QVL_F32, 3, SHAPE(N, Hq, D));
    run_ok(QVL_OP_ATTENTION, &p, fused, SRC(q, k, v, seg));

    /* Independent: the formula in double. */
    double *want = want_buf(fused);
    want_attention(q, k, v, &p.attention, seg_of, want);
    expect_close(fused, want, 1e-5);

    /* Primitives: heads-first views, matmul (3-D, GQA), scale, mask, softmax, matmul with v^T,
     * then back to [N, Hq, D] with a permuted view and cont. */
    qvl_tensor *qh = tt_view(q, 3, SHAPE(Hq, N, D), SHAPE(D, Hq * D, 1), 0);
    qvl_tensor *kh = tt_view(k, 3, SHAPE(Hkv, L, D), SHAPE(D, Hkv * D, 1), 0);
    qvl_tensor *vt = tt_view(v, 3, SHAPE(Hkv, D, L), SHAPE(D, 1, Hkv * D), 0);
    qvl_tensor *scores = tt_mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *scaled = tt_mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *masked = tt_mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *probs = tt_mk(QVL_F32, 3, SHAPE(Hq, N, L));
    qvl_tensor *o = tt_mk(QVL_F32, 3, SHAPE(Hq, N, D));
    qvl_tensor *prim = tt_mk(QVL_F32, 3, SHAPE(N, Hq, D));
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
    run_ok(QVL_OP_CONT, NULL, prim, SRC(tt_view(o, 3, SHAPE(N, Hq, D), SHAPE(D, N * D, 1), 0)));
    expect_same(fused, prim);
}

static void test_attention(void **state) {
    (void)state;
    check_attention(3, 3, 2, 2, 8, QVL_F32, QVL_MASK_NONE, 0, NULL, NULL);
    check_attention(4, 4, 4, 2, 16, QVL_F32, QVL_MASK_CAUSAL, 0, NULL, NULL);  /* prefill */
    check_attention(2, 5, 4, 2, 16, QVL_F16, QVL_MASK_CAUSAL, 3, NULL, NULL);  /* decode, f16 cache */
    check_attention(1, 6, 8, 2, 8, QVL_BF16, QVL_MASK_CAUSAL, 5, NULL, NULL);
    const int32_t bounds[3] = {0, 2, 6}, seg_of[6] = {0, 0, 1, 1, 1, 1};
    check_attention(6, 6, 2, 1, 8, QVL_F32, QVL_MASK_SEGMENTS, 0, tt_i32_of(1, SHAPE(3), bounds),
                    seg_of);
}

static void check_mlp(int act, bool gated, bool with_bias, qvl_dtype w_dt, int64_t F) {
    const int64_t M = 3, D = 8;
    qvl_tensor *res = tt_rnd(QVL_F32, 2, SHAPE(M, D), -2, 2);
    qvl_tensor *a = tt_rnd(QVL_F32, 2, SHAPE(M, F), -3, 3);
    qvl_tensor *up = gated ? tt_rnd(QVL_F32, 2, SHAPE(M, F), -2, 2) : NULL;
    qvl_tensor *w = tt_rnd(w_dt, 2, SHAPE(D, F), -0.5f, 0.5f);
    qvl_tensor *bias = with_bias ? tt_rnd(QVL_BF16, 1, SHAPE(D), -1, 1) : NULL;
    qvl_params p = {.mlp = {.act = act}};
    qvl_tensor *fused = tt_mk(QVL_F32, 2, SHAPE(M, D));
    run_ok(QVL_OP_MLP_RESIDUAL, &p, fused, SRC(res, a, w, up, bias));

    qvl_tensor *h = tt_mk(QVL_F32, 2, SHAPE(M, F)), *hu = tt_mk(QVL_F32, 2, SHAPE(M, F));
    qvl_tensor *y = tt_mk(QVL_F32, 2, SHAPE(M, D)), *prim = tt_mk(QVL_F32, 2, SHAPE(M, D));
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
    qvl_tensor *res = tt_rnd(QVL_F32, 2, SHAPE(1, 4), -1, 1), *a = tt_rnd(QVL_F32, 2, SHAPE(1, 6), -1, 1);
    qvl_tensor *w = tt_rnd(QVL_F32, 2, SHAPE(4, 6), -1, 1);
    qvl_params p = {.mlp = {.act = QVL_ACT_GELU_TANH}};
    run_fails(QVL_OP_MLP_RESIDUAL, &p, tt_mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w, a),
              QVL_E_INVALID, "silu");
    p.mlp.act = QVL_ACT_NONE; /* and with no activation at all */
    run_fails(QVL_OP_MLP_RESIDUAL, &p, tt_mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w, a),
              QVL_E_INVALID, "silu");
    p.mlp.act = 4; /* no such activation */
    run_fails(QVL_OP_MLP_RESIDUAL, &p, tt_mk(QVL_F32, 2, SHAPE(1, 4)), SRC(res, a, w),
              QVL_E_INVALID, "gelu_tanh");
}

#define T(fn) cmocka_unit_test_teardown(fn, tt_free_all)

int main(void) {
    tt_seed(12345u);
    const struct CMUnitTest tests[] = {
        T(test_matmul_2d_weight_dtypes),
        T(test_matmul_q8_0),
        T(test_matmul_3d_gqa),
        T(test_matmul_strided_a),
        T(test_norm_linear),
        T(test_attention),
        T(test_mlp_residual),
    };
    return cmocka_run_group_tests(tests, ref_open_backend, ref_close_backend);
}
