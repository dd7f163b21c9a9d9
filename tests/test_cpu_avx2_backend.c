/* What the cpu_avx2 backend promises beyond agreeing with the reference (which
 * qvl-backend-ops checks for every op, tests/conformance/):
 *  - its GEMM converts bf16, f16, q8_0, q4_k and q6_k weights to f32 exactly while packing:
 *    the result is bit for bit the one for the same values stored as f32;
 *  - its float-weight GEMV agrees with the reference at every row count of a batched decode
 *    step (1 .. 8 rows, each a tile of its own) with and without a tail past the last
 *    16-element step (the suite's batched rows have K = 2048 only);
 *  - ROPE and GELU_ERF are computed exactly as the reference computes them (same angle code,
 *    scalar erff): identical bits;
 *  - the vector exp behind SILU and GELU_TANH against the double-precision formula on a dense
 *    sweep (a bound tighter than the suite's, derived below);
 *  - one, two or three threads give bit-identical results; the threads option is checked;
 *  - NORM_LINEAR's output activation gives the bits of the projection followed by the GELU op
 *    (so fusing the vision MLP's activation into fc1 changes nothing);
 *  - QVL_CPU_AVX2_DISABLE=1 makes init fail so that the registry falls back to the reference;
 *  - its own run-time error messages (bad ids, segment bounds, row indices) say what was bad;
 *  - buffers are host memory; VIEW has no kernel. */
#define _POSIX_C_SOURCE 200809L
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
#include "qvl/registry.h"
#include "test_backend.h"
#include "test_tensors.h"

static qvl_test_backend ref, avx;
static bool have_avx2;

/* ---- tensors (test_tensors.h; freed after every test) ------------------------------------- */

/* Random values in [lo, hi) stored as dt (q8_0: quantised rows of the innermost dim). Not
 * tt_rnd, which draws q8_0 scales and quants directly: here every dtype holds rounded values
 * of one range, as the exact-conversion and thread cases were written for. */
static qvl_tensor *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    qvl_tensor *t = tt_mk(dt, ndim, shape);
    int64_t n = tt_nelem(&t->desc);
    float *v = tt_keep(malloc((size_t)(n + 32) * sizeof *v));
    for (int64_t i = 0; i < n; i++) v[i] = tt_frand(lo, hi);
    assert_true(n % (int64_t)qvl_dtype_block_elems(dt) == 0);
    qvl_from_f32(dt, v, t->data, n);
    return t;
}

/* ---- running a node on a backend ------------------------------------------------------- */

static void run_on(const qvl_test_backend *b, qvl_op op, const qvl_params *p, qvl_tensor *dst,
                   const qvl_tensor *const *src) {
    qvl_node n = tt_node(op, p, dst, src);
    qvl_error err = {0};
    if (qvl_test_supports(b, &n, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_status s = qvl_test_kernel(b, op)(b->be, &n, &err);
    if (s != QVL_OK) fail_msg("%s on %s: %s", qvl_op_name(op), b->iface->name, err.msg);
}

/* A fresh output like `like` (contiguous f32, or dst's dtype for STORE_ROWS-like copies). */
static qvl_tensor *out_like(qvl_dtype dt, int ndim, const int64_t *shape) {
    return tt_mk(dt, ndim, shape);
}

/* Runs op on both backends into separate outputs; returns them through ro/ao. */
static void run_both(qvl_op op, const qvl_params *p, qvl_dtype out_dt, int ndim,
                     const int64_t *shape, const qvl_tensor *const *src, qvl_tensor **ro,
                     qvl_tensor **ao) {
    *ro = out_like(out_dt, ndim, shape);
    *ao = out_like(out_dt, ndim, shape);
    run_on(&ref, op, p, *ro, src);
    run_on(&avx, op, p, *ao, src);
}

/* |a - r| <= atol + rtol * max|r| + extra[i] for every element (extra may be NULL). */
static void compare(const char *what, const qvl_tensor *r, const qvl_tensor *a, double atol,
                    double rtol, const double *extra) {
    int64_t n = tt_nelem(&r->desc);
    double max_ref = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) max_ref = fmax(max_ref, fabs(tt_value(r, i)));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(tt_value(a, i) - tt_value(r, i)), tol = atol + rtol * max_ref + (extra ? extra[i] : 0);
        if (isnan(tt_value(a, i)) != isnan(tt_value(r, i)) || d > tol)
            fail_msg("%s: element %lld: cpu_avx2 %.9g, reference %.9g (diff %.3g > tol %.3g)",
                     what, (long long)i, tt_value(a, i), tt_value(r, i), d, tol);
        worst = fmax(worst, d);
    }
    (void)worst;
}

static void compare_exact(const char *what, const qvl_tensor *r, const qvl_tensor *a) {
    size_t bytes = tt_storage_bytes(r->desc.dtype, tt_nelem(&r->desc));
    if (memcmp(r->data, a->data, bytes) != 0) {
        compare(what, r, a, 0, 0, NULL);
        fail_msg("%s: outputs differ in their bytes", what);
    }
}
static void skip_without_avx2(void) {
    if (!have_avx2) {
        printf("cpu_avx2 is not usable on this machine: skipped\n");
        skip();
    }
}

/* ---- MATMUL ---------------------------------------------------------------------------- */

static const qvl_dtype wdtypes[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0, QVL_Q4_K, QVL_Q6_K};
#define N_WDTYPES (sizeof wdtypes / sizeof wdtypes[0])

/* K rounded up to whole blocks of dt. */
static int64_t whole_blocks(qvl_dtype dt, int64_t K) {
    int64_t be = (int64_t)qvl_dtype_block_elems(dt);
    return (K + be - 1) / be * be;
}

/* The f32 GEMM (more than AVX_GEMV_MAX_ROWS = 8 rows) converts bf16 and f16 weights to f32
 * exactly while packing its panels and then runs one f32 kernel: its result must be bit for
 * bit the result for the same values stored as f32. Widths that leave partial 16-column
 * panels, K with a tail past the last 8 values and several K blocks of 256. (q8_0, q4_k and
 * q6_k take the int8 GEMM, which rounds the activations: the conformance suite's bound.) */
static void test_matmul_gemm_exact_conversion(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t shapes[][3] = {{9, 45, 21}, {15, 600, 37}, {13, 264, 16}, {11, 1031, 50}};
    static const qvl_dtype dts[] = {QVL_BF16, QVL_F16};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], N = shapes[s][2], K = shapes[s][1];
            qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1), *w = rnd(dts[d], 2, SHAPE(N, K), -1, 1);
            qvl_tensor *wf = tt_mk(QVL_F32, 2, SHAPE(N, K));
            for (int64_t i = 0; i < N * K; i++) ((float *)wf->data)[i] = (float)tt_value(w, i);
            qvl_tensor *o = tt_mk(QVL_F32, 2, SHAPE(M, N)), *of = tt_mk(QVL_F32, 2, SHAPE(M, N));
            run_on(&avx, QVL_OP_MATMUL, NULL, o, SRC(a, w));
            run_on(&avx, QVL_OP_MATMUL, NULL, of, SRC(a, wf));
            compare_exact(qvl_dtype_name(dts[d]), of, o);
        }
}
/* The float-weight GEMV (f32, f16, bf16) reads each weight row once for all of a batched
 * decode step's rows, in a tile for each row count 1 .. AVX_GEMV_MAX_ROWS = 8 (one, two and
 * one-accumulator layouts): every count against the reference, with K of no whole 16-element
 * step (9), with a tail after 16 of them (263) and without a tail (1040); N = 37 leaves odd
 * chunks and the 2-row tiles' single last row; a bias on odd M. The suite's MATMUL
 * tolerance, 1e-6 + 1e-6 sqrt(K) max|ref|. */
static void test_matmul_gemv_rows(void **state) {
    (void)state;
    skip_without_avx2();
    static const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16};
    static const int64_t Ks[] = {9, 263, 1040};
    const int64_t N = 37;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (int64_t M = 1; M <= 8; M++) {
                const int64_t K = Ks[ki];
                char what[64];
                snprintf(what, sizeof what, "gemv %s M=%lld K=%lld", qvl_dtype_name(dts[d]),
                         (long long)M, (long long)K);
                qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1);
                qvl_tensor *w = rnd(dts[d], 2, SHAPE(N, K), -1, 1);
                qvl_tensor *bias = M % 2 ? rnd(QVL_F32, 1, SHAPE(N), -1, 1) : NULL;
                qvl_tensor *ro, *ao;
                run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(M, N), SRC(a, w, bias), &ro, &ao);
                compare(what, ro, ao, 1e-6, 1e-6 * sqrt((double)K), NULL);
            }
}

/* q4_k / q6_k / q8_0 products at the extremes of the quants and scales: every q4_k quant 15
 * with 6-bit scales and mins of 63, every q6_k quant 63 with scales of 127 or -128, every q8_0
 * quant -128, against activations of +-1 (int8 +-127 after quantisation), so the integer
 * partial sums reach their largest magnitudes (a wrapped int16 or int32 sum would be off by
 * 65536 or more, a saturated maddubs by at least 256). N = 13: a 4-row GEMV tile and single
 * rows, one whole 8-row int8 GEMM panel and a partial one; M = 1, 2, 7 and 8 (the GEMVs, whose
 * k-quant tiles take every row at once), 9 and 14 (the int8 GEMM from AVX_QGEMM_MIN_ROWS: one
 * row past a panel, and whole and partial 4-row tiles). The activations round to 127 * (1/127
 * in f32), within 1e-7 of 1, so the tolerance is relative 1e-5. */
static void test_matmul_kquant_extremes(void **state) {
    (void)state;
    skip_without_avx2();
    const int64_t K = 512, N = 13;
    static const int64_t Ms[] = {1, 2, 7, 8, 9, 14};
    static const char *names[] = {"q4_k extremes", "q6_k extremes", "q8_0 extremes"};
    for (int dt = 0; dt < 3; dt++)
        for (int sign = -1; sign <= 1; sign += 2)
            for (int mi = 0; mi < (int)(sizeof Ms / sizeof *Ms); mi++) {
                const int64_t M = Ms[mi];
                if (dt == 2) {
                    qvl_tensor *w = tt_mk(QVL_Q8_0, 2, SHAPE(N, K));
                    for (int64_t b = 0; b < N * K / QVL_Q8_0_BLOCK; b++) {
                        qvl_block_q8_0 *blk = (qvl_block_q8_0 *)w->data + b;
                        memset(blk->qs, 0x80, sizeof blk->qs); /* -128 */
                        blk->d = 0x3C00;                       /* 1.0 */
                    }
                    qvl_tensor *a = tt_mk(QVL_F32, 2, SHAPE(M, K));
                    for (int64_t i = 0; i < M * K; i++) ((float *)a->data)[i] = (float)sign;
                    qvl_tensor *ro, *ao;
                    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(M, N), SRC(a, w), &ro, &ao);
                    compare(names[dt], ro, ao, 0, 1e-5, NULL);
                    continue;
                }
                qvl_tensor *w = tt_mk(dt ? QVL_Q6_K : QVL_Q4_K, 2, SHAPE(N, K));
                for (int64_t b = 0; b < N * K / QVL_QK_K; b++) {
                    if (dt) {
                        qvl_block_q6_k *blk = (qvl_block_q6_k *)w->data + b;
                        memset(blk->ql, 0xFF, sizeof blk->ql);
                        memset(blk->qh, 0xFF, sizeof blk->qh);
                        for (int i = 0; i < QVL_QK_K / 16; i++)
                            blk->scales[i] = (int8_t)(sign > 0 ? 127 : -128);
                        blk->d = 0x3C00; /* 1.0 */
                    } else {
                        qvl_block_q4_k *blk = (qvl_block_q4_k *)w->data + b;
                        memset(blk->scales, 0xFF, sizeof blk->scales);
                        memset(blk->qs, 0xFF, sizeof blk->qs);
                        blk->d = 0x3C00;    /* 1.0 */
                        blk->dmin = 0x3800; /* 0.5 */
                    }
                }
                qvl_tensor *a = tt_mk(QVL_F32, 2, SHAPE(M, K));
                for (int64_t i = 0; i < M * K; i++) ((float *)a->data)[i] = (float)sign;
                qvl_tensor *ro, *ao;
                run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(M, N), SRC(a, w), &ro, &ao);
                compare(names[dt], ro, ao, 0, 1e-5, NULL);
            }
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
/* 0.5 x (1 + tanh(y)) written as x / (1 + e^(-2y)), the same function without the
 * cancellation of 1 + tanh(y) for very negative y (where double tanh rounds to -1). */
static double gelu_tanh_d(double x) {
    double y = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * y));
}
/* ---- ROPE, norms, softmax, activations ------------------------------------------------------ */

static void rope_case(int mode, int64_t N, int64_t H, int64_t D) {
    char what[96];
    snprintf(what, sizeof what, "rope mode %d N=%lld H=%lld D=%lld", mode, (long long)N,
             (long long)H, (long long)D);
    int64_t C = mode == QVL_ROPE_MROPE_INTERLEAVED ? 3 : mode == QVL_ROPE_VISION_2D ? 2 : 1;
    qvl_tensor *base = rnd(QVL_F32, 2, SHAPE(N, (H + 1) * D), -2, 2);
    qvl_tensor *x = tt_view(base, 3, SHAPE(N, H, D), SHAPE((H + 1) * D, D, 1), D);
    int32_t pos[3 * 64];
    for (int64_t i = 0; i < C * N; i++) pos[i] = (int32_t)tt_frand(0, 300);
    qvl_tensor *ps = tt_i32_of(2, SHAPE(C, N), pos);
    qvl_params p = {.rope = {.mode = mode, .theta = 1e6f, .sections = {3, 2, 2, 0}}};
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_ROPE, &p, QVL_F32, 3, SHAPE(N, H, D), SRC(x, ps), &ro, &ao);
    compare_exact(what, ro, ao); /* same angles, same products and sums in the same order */
}

static void test_rope_bit_identical(void **state) {
    (void)state;
    skip_without_avx2();
    rope_case(QVL_ROPE_MROPE_INTERLEAVED, 5, 3, 16);
    rope_case(QVL_ROPE_MROPE_INTERLEAVED, 7, 2, 38);
    rope_case(QVL_ROPE_VISION_2D, 6, 2, 24);
    rope_case(QVL_ROPE_NEOX, 3, 4, 64);
}


/* The vector exp behind SILU and GELU_TANH against the double-precision formula on a dense
 * sweep of [-20, 20]. Allowed: 1e-6 relative (exp's polynomial, a division, the final
 * product: a few ulp) plus 2^-22 |z| relative, where z is the argument of the exponential
 * (x for SILU, 2 sqrt(2/pi)(x + 0.044715 x^3) for GELU_TANH): computing z in f32, as the
 * reference also does, rounds it by up to 2^-24 |z|, which moves e^z by that much relative. */
static void test_activations_accuracy(void **state) {
    (void)state;
    skip_without_avx2();
    const int64_t n = 40001;
    qvl_tensor *x = tt_mk(QVL_F32, 1, SHAPE(n));
    float *xv = x->data;
    for (int64_t i = 0; i < n; i++) xv[i] = -20.0f + 40.0f * (float)i / (float)(n - 1);
    /* GELU_ERF is scalar erff, like the reference: test_unary_ops checks it is identical */
    static const qvl_op ops[] = {QVL_OP_SILU, QVL_OP_GELU_TANH};
    for (size_t o = 0; o < 2; o++) {
        qvl_tensor *y = tt_mk(QVL_F32, 1, SHAPE(n));
        run_on(&avx, ops[o], NULL, y, SRC(x));
        const float *yv = y->data;
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double xi = xv[i], z, want;
            if (ops[o] == QVL_OP_SILU) {
                want = silu_d(xi);
                z = xi;
            } else {
                want = gelu_tanh_d(xi);
                z = 2 * 0.79788456080286535588 * (xi + 0.044715 * xi * xi * xi);
            }
            double rel = fabs(yv[i] - want) / fmax(fabs(want), 1e-30);
            if (fabs(want) > 1e-30) worst = fmax(worst, rel);
            double tol = (1e-6 + ldexp(fabs(z), -22)) * fabs(want) + 1e-30;
            if (fabs(yv[i] - want) > tol)
                fail_msg("%s(%.9g) = %.9g, expected %.9g", qvl_op_name(ops[o]), xv[i], yv[i], want);
        }
        printf("%s: max relative error %.3g over [-20, 20]\n", qvl_op_name(ops[o]), worst);
    }
}

/* GELU_ERF is scalar erff, like the reference: identical bits (a transposed view). */
static void test_gelu_erf_bit_identical(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *base = rnd(QVL_F32, 3, SHAPE(3, 5, 13), -6, 6);
    qvl_tensor *x = tt_view(base, 3, SHAPE(3, 13, 5), SHAPE(65, 1, 13), 0); /* permuted */
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_GELU_ERF, NULL, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare_exact("gelu_erf", ro, ao);
}

/* Bad data met at run time: cpu_avx2's own messages say what was bad and where. */
static void expect_error(qvl_op op, qvl_tensor *dst, const qvl_tensor *const *src,
                         const char *const *words) {
    qvl_node n = tt_node(op, NULL, dst, src);
    qvl_error err = {0};
    assert_int_equal(qvl_test_kernel(&avx, n.op)(avx.be, &n, &err), QVL_E_INVALID);
    for (; *words; words++)
        if (!strstr(err.msg, *words)) fail_msg("'%s' should say '%s'", err.msg, *words);
}

static void test_error_messages(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *s2 = rnd(QVL_F32, 3, SHAPE(3, 10, 10), -1, 1);
    qvl_tensor *bad = tt_i32_of(1, SHAPE(3), (const int32_t[]){0, 7, 3});
    expect_error(QVL_OP_MASK_SEGMENTS, tt_mk(QVL_F32, 3, SHAPE(3, 10, 10)), SRC(s2, bad),
                 (const char *const[]){"cpu_avx2: mask_segments 't':", NULL});
    qvl_tensor *table = rnd(QVL_BF16, 2, SHAPE(50, 8), -1, 1);
    qvl_tensor *ids = tt_i32_of(1, SHAPE(2), (const int32_t[]){1, 50});
    expect_error(QVL_OP_GET_ROWS, tt_mk(QVL_F32, 2, SHAPE(2, 8)), SRC(table, ids),
                 (const char *const[]){"cpu_avx2: get_rows", "outside [0, 50)", NULL});
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(9, 37), -1, 1), *src = rnd(QVL_F32, 2, SHAPE(4, 37), -1, 1);
    qvl_tensor *idx = tt_i32_of(1, SHAPE(4), (const int32_t[]){1, 2, 9, 3});
    expect_error(QVL_OP_ADD_ROWS, tt_mk(QVL_F32, 2, SHAPE(9, 37)), SRC(x, idx, src),
                 (const char *const[]){"cpu_avx2: add_rows 't': row index 9 at position 2", NULL});
}

static void test_host_memory_and_view(void **state) {
    (void)state;
    skip_without_avx2();
    assert_null(qvl_test_kernel(&avx, QVL_OP_VIEW)); /* VIEW never has a kernel */
    qvl_device_info info;
    assert_int_equal(avx.iface->describe(avx.be, &info), QVL_OK);
    assert_true(info.host_memory);
}

static int open_with_threads(const char *threads, qvl_test_backend *out) {
    const char *keys[] = {"threads"}, *values[] = {threads};
    qvl_options o = {1, keys, values};
    return qvl_test_backend_open(QVL_CPU_AVX2_SO, &o, out);
}

/* One, two or three threads (an uneven split) compute every element the same way: identical
 * bytes. (`avx` is the instance opened with threads: 2.) */
static void test_threads_same_results(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_test_backend one, three;
    assert_int_equal(open_with_threads("1", &one), 0);
    assert_int_equal(open_with_threads("3", &three), 0);
    for (size_t d = 0; d < N_WDTYPES; d++) {
        static const int64_t Ms[] = {1, 2, 3, 9, 40};
        for (int mi = 0; mi < 5; mi++) {
            /* N = 300: several GEMM chunks; K: several K blocks (q4_k / q6_k: two) */
            int64_t M = Ms[mi], K = whole_blocks(wdtypes[d], 320), N = mi == 4 ? 300 : 101;
            qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1), *w = rnd(wdtypes[d], 2, SHAPE(N, K), -1, 1);
            qvl_tensor *o1 = tt_mk(QVL_F32, 2, SHAPE(M, N)), *o3 = tt_mk(QVL_F32, 2, SHAPE(M, N));
            run_on(&one, QVL_OP_MATMUL, NULL, o1, SRC(a, w));
            run_on(&three, QVL_OP_MATMUL, NULL, o3, SRC(a, w));
            compare_exact("matmul threads 1 vs 3", o1, o3);
            run_on(&avx, QVL_OP_MATMUL, NULL, o3, SRC(a, w));
            compare_exact("matmul threads 1 vs 2", o1, o3);
        }
    }
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(9, 4, 16), -1, 1), *k = rnd(QVL_F32, 3, SHAPE(20, 2, 16), -1, 1);
    qvl_tensor *v = rnd(QVL_F32, 3, SHAPE(20, 2, 16), -1, 1);
    qvl_tensor *o1 = tt_mk(QVL_F32, 3, SHAPE(9, 4, 16)), *o3 = tt_mk(QVL_F32, 3, SHAPE(9, 4, 16));
    qvl_params p = {.attention = {.scale = 0.25f, .mask = QVL_MASK_CAUSAL, .n_past = 11}};
    run_on(&one, QVL_OP_ATTENTION, &p, o1, SRC(q, k, v));
    run_on(&three, QVL_OP_ATTENTION, &p, o3, SRC(q, k, v));
    compare_exact("attention threads 1 vs 3", o1, o3);
    run_on(&avx, QVL_OP_ATTENTION, &p, o3, SRC(q, k, v));
    compare_exact("attention threads 1 vs 2", o1, o3);
    /* and a fused layer input: norm + three projections */
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(5, 64), -1, 1), *g = rnd(QVL_F32, 1, SHAPE(64), 0.5f, 1.5f);
    qvl_tensor *w1 = rnd(QVL_BF16, 2, SHAPE(40, 64), -1, 1), *w2 = rnd(QVL_Q8_0, 2, SHAPE(24, 64), -1, 1);
    qvl_params np = {.norm_linear = {.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 2}};
    qvl_tensor *n1 = tt_mk(QVL_F32, 2, SHAPE(5, 64)), *n2 = tt_mk(QVL_F32, 2, SHAPE(5, 64));
    run_on(&one, QVL_OP_NORM_LINEAR, &np, n1, SRC(x, g, NULL, w1, NULL, w2));
    run_on(&avx, QVL_OP_NORM_LINEAR, &np, n2, SRC(x, g, NULL, w1, NULL, w2));
    compare_exact("norm_linear threads 1 vs 2", n1, n2);
    /* and at decode size (one row), projections wide enough for several chunks each */
    qvl_tensor *x1 = rnd(QVL_F32, 2, SHAPE(1, 64), -1, 1);
    qvl_tensor *w3 = rnd(QVL_BF16, 2, SHAPE(333, 64), -1, 1), *w4 = rnd(QVL_Q8_0, 2, SHAPE(250, 64), -1, 1);
    qvl_tensor *d1 = tt_mk(QVL_F32, 2, SHAPE(1, 583)), *d3 = tt_mk(QVL_F32, 2, SHAPE(1, 583));
    run_on(&one, QVL_OP_NORM_LINEAR, &np, d1, SRC(x1, g, NULL, w3, NULL, w4));
    run_on(&three, QVL_OP_NORM_LINEAR, &np, d3, SRC(x1, g, NULL, w3, NULL, w4));
    compare_exact("norm_linear decode threads 1 vs 3", d1, d3);
    qvl_test_backend_close(&one);
    qvl_test_backend_close(&three);
}

/* NORM_LINEAR with act = NORM_LINEAR without, then GELU_TANH / GELU_ERF: identical bytes, at
 * decode rows (the GEMV), a few rows and many (the GEMM, several column chunks), with one and
 * two projections. */
static void test_norm_linear_act_bit_identical(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t Ms[] = {1, 3, 40};
    static const int acts[] = {QVL_ACT_GELU_TANH, QVL_ACT_GELU_ERF};
    qvl_tensor *g = rnd(QVL_F32, 1, SHAPE(64), 0.5f, 1.5f), *be = rnd(QVL_F32, 1, SHAPE(64), -1, 1);
    qvl_tensor *w1 = rnd(QVL_BF16, 2, SHAPE(333, 64), -1, 1);
    qvl_tensor *b1 = rnd(QVL_F32, 1, SHAPE(333), -1, 1);
    qvl_tensor *w2 = rnd(QVL_Q8_0, 2, SHAPE(40, 64), -1, 1);
    for (int mi = 0; mi < 3; mi++)
        for (int ai = 0; ai < 2; ai++)
            for (int np = 1; np <= 2; np++) {
                int64_t M = Ms[mi], N = np == 1 ? 333 : 373;
                qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(M, 64), -2, 2);
                qvl_tensor *plain = tt_mk(QVL_F32, 2, SHAPE(M, N));
                qvl_tensor *sep = tt_mk(QVL_F32, 2, SHAPE(M, N));
                qvl_tensor *fused = tt_mk(QVL_F32, 2, SHAPE(M, N));
                qvl_params p = {.norm_linear = {.norm = QVL_NORM_LAYER, .eps = 1e-6f}};
                p.norm_linear.n_proj = np;
                const qvl_tensor *const *src = SRC(x, g, be, w1, b1, np == 2 ? w2 : NULL);
                run_on(&avx, QVL_OP_NORM_LINEAR, &p, plain, src);
                run_on(&avx, acts[ai] == QVL_ACT_GELU_TANH ? QVL_OP_GELU_TANH : QVL_OP_GELU_ERF,
                       NULL, sep, SRC(plain));
                p.norm_linear.act = acts[ai];
                run_on(&avx, QVL_OP_NORM_LINEAR, &p, fused, src);
                compare_exact("norm_linear act vs norm_linear + gelu", sep, fused);
            }
}

/* The f32 GEMM's row blocks (QVL_AVX2_GEMM_ROWS, else 576 rows) leave every output's sum as
 * it was: identical bytes with blocks of 6 rows, of the default size (700 rows: two blocks)
 * and with none, for a matmul of each float dtype and for NORM_LINEAR with an activation. */
static void test_gemm_row_blocks_bit_identical(void **state) {
    (void)state;
    skip_without_avx2();
    static const char *const rows[] = {"6", "", "1000000"};
    const int64_t M = 700, K = 320, N = 150;
    static const qvl_dtype dts[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1), *w = rnd(dts[d], 2, SHAPE(N, K), -1, 1);
        qvl_tensor *out[3];
        for (int r = 0; r < 3; r++) {
            setenv("QVL_AVX2_GEMM_ROWS", rows[r], 1);
            out[r] = tt_mk(QVL_F32, 2, SHAPE(M, N));
            run_on(&avx, QVL_OP_MATMUL, NULL, out[r], SRC(a, w));
        }
        compare_exact("matmul, row blocks of 6 against none", out[2], out[0]);
        compare_exact("matmul, row blocks of 576 against none", out[2], out[1]);
    }
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(M, 64), -2, 2), *g = rnd(QVL_F32, 1, SHAPE(64), 0.5f, 1.5f);
    qvl_tensor *w1 = rnd(QVL_F16, 2, SHAPE(200, 64), -1, 1), *w2 = rnd(QVL_Q8_0, 2, SHAPE(40, 64), -1, 1);
    qvl_params p = {.norm_linear = {.norm = QVL_NORM_LAYER, .eps = 1e-6f, .n_proj = 2,
                                    .act = QVL_ACT_GELU_ERF}};
    qvl_tensor *nl[3];
    for (int r = 0; r < 3; r++) {
        setenv("QVL_AVX2_GEMM_ROWS", rows[r], 1);
        nl[r] = tt_mk(QVL_F32, 2, SHAPE(M, 240));
        run_on(&avx, QVL_OP_NORM_LINEAR, &p, nl[r], SRC(x, g, NULL, w1, NULL, w2));
    }
    unsetenv("QVL_AVX2_GEMM_ROWS");
    compare_exact("norm_linear, row blocks of 6 against none", nl[2], nl[0]);
    compare_exact("norm_linear, row blocks of 576 against none", nl[2], nl[1]);
}

static void test_threads_option_errors(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_test_backend tb;
    assert_int_equal(open_with_threads("lots", &tb), -1);
    assert_int_equal(open_with_threads("-2", &tb), -1);
    assert_int_equal(open_with_threads("0", &tb), 0); /* 0 = all online CPUs */
    qvl_test_backend_close(&tb);
}

/* QVL_CPU_AVX2_DISABLE=1 simulates a CPU without AVX2: init fails with a clear message and
 * the registry moves on to the next backend, the reference. */
static void test_disable_falls_back(void **state) {
    (void)state;
    char text[2048];
    snprintf(text, sizeof text,
             "backends:\n"
             "  - name: cpu_avx2\n    library: %s\n    priority: 50\n    options: { threads: 2 }\n"
             "  - name: reference\n    library: %s\n    priority: 0\n",
             QVL_CPU_AVX2_SO, QVL_REFERENCE_SO);
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugins_parse_string(text, strlen(text), "/tmp/qvl-test/plugins.yaml",
                                              &cfg, &err), QVL_OK);
    qvl_loaded_backend *lb = NULL;
    if (have_avx2) { /* without the variable cpu_avx2 wins */
        assert_int_equal(qvl_backend_select(cfg, NULL, &lb, &err), QVL_OK);
        assert_string_equal(lb->name, "cpu_avx2");
        qvl_backend_unload(lb);
        lb = NULL;
    }
    assert_int_equal(setenv("QVL_CPU_AVX2_DISABLE", "1", 1), 0);
    const qvl_backend_iface *iface = NULL;
    qvl_test_backend tb;
    assert_int_equal(qvl_test_backend_open(QVL_CPU_AVX2_SO, NULL, &tb), -1);
    /* the message itself, from init */
    assert_int_not_equal(qvl_backend_select(cfg, "cpu_avx2", &lb, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "cpu_avx2: AVX2/FMA not available (QVL_CPU_AVX2_DISABLE is set)"));
    assert_int_equal(qvl_backend_select(cfg, NULL, &lb, &err), QVL_OK);
    assert_string_equal(lb->name, "reference");
    iface = lb->iface;
    assert_string_equal(iface->name, "reference");
    qvl_backend_unload(lb);
    unsetenv("QVL_CPU_AVX2_DISABLE");
    qvl_plugins_free(cfg);
}

static int setup(void **state) {
    (void)state;
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                __builtin_cpu_supports("f16c");
    tt_seed(777u);
    tt_set_misaligned(true); /* weights mapped from safetensors are only 2-byte aligned */
    if (qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &ref) != 0) return -1;
    if (!have_avx2) {
        printf("this CPU lacks AVX2/FMA/F16C: cpu_avx2 kernel tests skip\n");
        return 0;
    }
    return open_with_threads("2", &avx) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    qvl_test_backend_close(&avx);
    qvl_test_backend_close(&ref);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_matmul_gemm_exact_conversion, tt_free_all),
        cmocka_unit_test_teardown(test_matmul_kquant_extremes, tt_free_all),
        cmocka_unit_test_teardown(test_matmul_gemv_rows, tt_free_all),
        cmocka_unit_test_teardown(test_rope_bit_identical, tt_free_all),
        cmocka_unit_test_teardown(test_gelu_erf_bit_identical, tt_free_all),
        cmocka_unit_test_teardown(test_activations_accuracy, tt_free_all),
        cmocka_unit_test_teardown(test_error_messages, tt_free_all),
        cmocka_unit_test_teardown(test_host_memory_and_view, tt_free_all),
        cmocka_unit_test_teardown(test_threads_same_results, tt_free_all),
        cmocka_unit_test_teardown(test_norm_linear_act_bit_identical, tt_free_all),
        cmocka_unit_test_teardown(test_gemm_row_blocks_bit_identical, tt_free_all),
        cmocka_unit_test_teardown(test_threads_option_errors, tt_free_all),
        cmocka_unit_test_teardown(test_disable_falls_back, tt_free_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
