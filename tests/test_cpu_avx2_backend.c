/* What the cpu_avx2 backend promises beyond agreeing with the reference (which
 * qvl-backend-ops checks for every op, tests/conformance/):
 *  - its GEMM converts bf16, f16 and q8_0 weights to f32 exactly while packing: the result is
 *    bit for bit the one for the same values stored as f32;
 *  - ROPE and GELU_ERF are computed exactly as the reference computes them (same angle code,
 *    scalar erff): identical bits;
 *  - the vector exp behind SILU and GELU_TANH against the double-precision formula on a dense
 *    sweep (a bound tighter than the suite's, derived below);
 *  - one, two or three threads give bit-identical results; the threads option is checked;
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

static qvl_test_backend ref, avx;
static bool have_avx2;

/* ---- tensors (freed after every test) ---------------------------------------------------- */

#define MAX_ALLOCS 4096
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

static size_t storage_bytes(qvl_dtype dt, int64_t n) {
    if (dt == QVL_Q8_0) return (size_t)((n + 31) / 32) * sizeof(qvl_block_q8_0);
    return (size_t)n * (dt == QVL_F32 || dt == QVL_I32 ? 4 : 2);
}

static int64_t nelem(const qvl_tensor_desc *d) {
    int64_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= d->shape[i];
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

static qvl_tensor *mk(qvl_dtype dt, int ndim, const int64_t *shape) {
    qvl_tensor *t = keep(calloc(1, sizeof *t));
    int64_t stride[QVL_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = n;
        n *= shape[i];
    }
    set_desc(t, dt, ndim, shape, stride);
    /* odd start address: weights mapped from safetensors are only 2-byte aligned */
    char *mem = keep(calloc(1, storage_bytes(dt, n) + 8));
    t->data = mem + (dt == QVL_F32 || dt == QVL_I32 ? 4 : 2);
    return t;
}

/* A view into base's storage: own shape and strides, element 0 at `offset` elements. */
static qvl_tensor *view(const qvl_tensor *base, int ndim, const int64_t *shape,
                        const int64_t *stride, int64_t offset) {
    qvl_tensor *t = keep(calloc(1, sizeof *t));
    set_desc(t, base->desc.dtype, ndim, shape, stride);
    size_t bytes = base->desc.dtype == QVL_Q8_0 ? (size_t)(offset / 32) * sizeof(qvl_block_q8_0)
                                                : storage_bytes(base->desc.dtype, offset);
    t->data = (char *)base->data + bytes;
    return t;
}

static uint32_t rng = 777u;
static float frand(float lo, float hi) {
    rng = rng * 1664525u + 1013904223u;
    return lo + (hi - lo) * (float)(rng >> 8) / (float)(1u << 24);
}

/* Random values in [lo, hi) stored as dt (q8_0: quantised rows of the innermost dim). */
static qvl_tensor *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    qvl_tensor *t = mk(dt, ndim, shape);
    int64_t n = nelem(&t->desc);
    float *v = keep(malloc((size_t)(n + 32) * sizeof *v));
    for (int64_t i = 0; i < n; i++) v[i] = frand(lo, hi);
    assert_true(dt != QVL_Q8_0 || n % 32 == 0);
    qvl_from_f32(dt, v, t->data, n);
    return t;
}

static qvl_tensor *i32_of(int ndim, const int64_t *shape, const int32_t *values) {
    qvl_tensor *t = mk(QVL_I32, ndim, shape);
    memcpy(t->data, values, (size_t)nelem(&t->desc) * sizeof(int32_t));
    return t;
}

/* Element at element offset off, as the dtype definitions say. */
static double get(const qvl_tensor *t, int64_t off) {
    switch (t->desc.dtype) {
    case QVL_F32: return ((const float *)t->data)[off];
    case QVL_F16: return qvl_f16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_BF16: return qvl_bf16_to_f32(((const uint16_t *)t->data)[off]);
    case QVL_Q8_0: {
        const qvl_block_q8_0 *b = (const qvl_block_q8_0 *)t->data + off / 32;
        return (double)qvl_f16_to_f32(b->d) * b->qs[off % 32];
    }
    default: return ((const int32_t *)t->data)[off];
    }
}
/* ---- running a node on a backend ------------------------------------------------------- */

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

static void run_on(const qvl_test_backend *b, qvl_op op, const qvl_params *p, qvl_tensor *dst,
                   const qvl_tensor *const *src) {
    qvl_node n = node_of(op, p, dst, src);
    qvl_error err = {0};
    if (qvl_test_supports(b, &n, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_status s = qvl_test_kernel(b, op)(b->be, &n, &err);
    if (s != QVL_OK) fail_msg("%s on %s: %s", qvl_op_name(op), b->iface->name, err.msg);
}

/* A fresh output like `like` (contiguous f32, or dst's dtype for STORE_ROWS-like copies). */
static qvl_tensor *out_like(qvl_dtype dt, int ndim, const int64_t *shape) {
    return mk(dt, ndim, shape);
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
    int64_t n = nelem(&r->desc);
    double max_ref = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) max_ref = fmax(max_ref, fabs(get(r, i)));
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(get(a, i) - get(r, i)), tol = atol + rtol * max_ref + (extra ? extra[i] : 0);
        if (isnan(get(a, i)) != isnan(get(r, i)) || d > tol)
            fail_msg("%s: element %lld: cpu_avx2 %.9g, reference %.9g (diff %.3g > tol %.3g)",
                     what, (long long)i, get(a, i), get(r, i), d, tol);
        worst = fmax(worst, d);
    }
    (void)worst;
}

static void compare_exact(const char *what, const qvl_tensor *r, const qvl_tensor *a) {
    size_t bytes = storage_bytes(r->desc.dtype, nelem(&r->desc));
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

static const qvl_dtype wdtypes[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};

/* The GEMM (M >= 4) converts bf16, f16 and q8_0 weights to f32 exactly while packing its
 * panels and then runs one f32 kernel: its result must be bit for bit the result for the same
 * values stored as f32. Widths that leave partial 16-column panels, K with a
 * tail past the last 8 values (q8_0: whole blocks) and several K blocks of 256. */
static void test_matmul_gemm_exact_conversion(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t shapes[][3] = {{4, 45, 21}, {7, 600, 37}, {13, 264, 16}, {6, 1031, 50}};
    static const qvl_dtype dts[] = {QVL_BF16, QVL_F16, QVL_Q8_0};
    for (size_t d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            if (dts[d] == QVL_Q8_0) K = K / 32 * 32 + 32;
            qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1), *w = rnd(dts[d], 2, SHAPE(N, K), -1, 1);
            qvl_tensor *wf = mk(QVL_F32, 2, SHAPE(N, K));
            for (int64_t i = 0; i < N * K; i++) ((float *)wf->data)[i] = (float)get(w, i);
            qvl_tensor *o = mk(QVL_F32, 2, SHAPE(M, N)), *of = mk(QVL_F32, 2, SHAPE(M, N));
            run_on(&avx, QVL_OP_MATMUL, NULL, o, SRC(a, w));
            run_on(&avx, QVL_OP_MATMUL, NULL, of, SRC(a, wf));
            compare_exact(qvl_dtype_name(dts[d]), of, o);
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
    qvl_tensor *x = view(base, 3, SHAPE(N, H, D), SHAPE((H + 1) * D, D, 1), D);
    int32_t pos[3 * 64];
    for (int64_t i = 0; i < C * N; i++) pos[i] = (int32_t)frand(0, 300);
    qvl_tensor *ps = i32_of(2, SHAPE(C, N), pos);
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
    qvl_tensor *x = mk(QVL_F32, 1, SHAPE(n));
    float *xv = x->data;
    for (int64_t i = 0; i < n; i++) xv[i] = -20.0f + 40.0f * (float)i / (float)(n - 1);
    /* GELU_ERF is scalar erff, like the reference: test_unary_ops checks it is identical */
    static const qvl_op ops[] = {QVL_OP_SILU, QVL_OP_GELU_TANH};
    for (size_t o = 0; o < 2; o++) {
        qvl_tensor *y = mk(QVL_F32, 1, SHAPE(n));
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
    qvl_tensor *x = view(base, 3, SHAPE(3, 13, 5), SHAPE(65, 1, 13), 0); /* permuted */
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_GELU_ERF, NULL, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare_exact("gelu_erf", ro, ao);
}

/* Bad data met at run time: cpu_avx2's own messages say what was bad and where. */
static void expect_error(qvl_op op, qvl_tensor *dst, const qvl_tensor *const *src,
                         const char *const *words) {
    qvl_node n = node_of(op, NULL, dst, src);
    qvl_error err = {0};
    assert_int_equal(qvl_test_kernel(&avx, n.op)(avx.be, &n, &err), QVL_E_INVALID);
    for (; *words; words++)
        if (!strstr(err.msg, *words)) fail_msg("'%s' should say '%s'", err.msg, *words);
}

static void test_error_messages(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *s2 = rnd(QVL_F32, 3, SHAPE(3, 10, 10), -1, 1);
    qvl_tensor *bad = i32_of(1, SHAPE(3), (const int32_t[]){0, 7, 3});
    expect_error(QVL_OP_MASK_SEGMENTS, mk(QVL_F32, 3, SHAPE(3, 10, 10)), SRC(s2, bad),
                 (const char *const[]){"cpu_avx2: mask_segments 't':", NULL});
    qvl_tensor *table = rnd(QVL_BF16, 2, SHAPE(50, 8), -1, 1);
    qvl_tensor *ids = i32_of(1, SHAPE(2), (const int32_t[]){1, 50});
    expect_error(QVL_OP_GET_ROWS, mk(QVL_F32, 2, SHAPE(2, 8)), SRC(table, ids),
                 (const char *const[]){"cpu_avx2: get_rows", "outside [0, 50)", NULL});
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(9, 37), -1, 1), *src = rnd(QVL_F32, 2, SHAPE(4, 37), -1, 1);
    qvl_tensor *idx = i32_of(1, SHAPE(4), (const int32_t[]){1, 2, 9, 3});
    expect_error(QVL_OP_ADD_ROWS, mk(QVL_F32, 2, SHAPE(9, 37)), SRC(x, idx, src),
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
    for (size_t d = 0; d < 4; d++) {
        static const int64_t Ms[] = {1, 2, 9, 40};
        for (int mi = 0; mi < 4; mi++) {
            int64_t M = Ms[mi], K = 320, N = mi == 3 ? 300 : 101; /* 300: several GEMM chunks */
            qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1), *w = rnd(wdtypes[d], 2, SHAPE(N, K), -1, 1);
            qvl_tensor *o1 = mk(QVL_F32, 2, SHAPE(M, N)), *o3 = mk(QVL_F32, 2, SHAPE(M, N));
            run_on(&one, QVL_OP_MATMUL, NULL, o1, SRC(a, w));
            run_on(&three, QVL_OP_MATMUL, NULL, o3, SRC(a, w));
            compare_exact("matmul threads 1 vs 3", o1, o3);
            run_on(&avx, QVL_OP_MATMUL, NULL, o3, SRC(a, w));
            compare_exact("matmul threads 1 vs 2", o1, o3);
        }
    }
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(9, 4, 16), -1, 1), *k = rnd(QVL_F32, 3, SHAPE(20, 2, 16), -1, 1);
    qvl_tensor *v = rnd(QVL_F32, 3, SHAPE(20, 2, 16), -1, 1);
    qvl_tensor *o1 = mk(QVL_F32, 3, SHAPE(9, 4, 16)), *o3 = mk(QVL_F32, 3, SHAPE(9, 4, 16));
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
    qvl_tensor *n1 = mk(QVL_F32, 2, SHAPE(5, 64)), *n2 = mk(QVL_F32, 2, SHAPE(5, 64));
    run_on(&one, QVL_OP_NORM_LINEAR, &np, n1, SRC(x, g, NULL, w1, NULL, w2));
    run_on(&avx, QVL_OP_NORM_LINEAR, &np, n2, SRC(x, g, NULL, w1, NULL, w2));
    compare_exact("norm_linear threads 1 vs 2", n1, n2);
    /* and at decode size (one row), projections wide enough for several chunks each */
    qvl_tensor *x1 = rnd(QVL_F32, 2, SHAPE(1, 64), -1, 1);
    qvl_tensor *w3 = rnd(QVL_BF16, 2, SHAPE(333, 64), -1, 1), *w4 = rnd(QVL_Q8_0, 2, SHAPE(250, 64), -1, 1);
    qvl_tensor *d1 = mk(QVL_F32, 2, SHAPE(1, 583)), *d3 = mk(QVL_F32, 2, SHAPE(1, 583));
    run_on(&one, QVL_OP_NORM_LINEAR, &np, d1, SRC(x1, g, NULL, w3, NULL, w4));
    run_on(&three, QVL_OP_NORM_LINEAR, &np, d3, SRC(x1, g, NULL, w3, NULL, w4));
    compare_exact("norm_linear decode threads 1 vs 3", d1, d3);
    qvl_test_backend_close(&one);
    qvl_test_backend_close(&three);
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
        cmocka_unit_test_teardown(test_matmul_gemm_exact_conversion, free_all),
        cmocka_unit_test_teardown(test_rope_bit_identical, free_all),
        cmocka_unit_test_teardown(test_gelu_erf_bit_identical, free_all),
        cmocka_unit_test_teardown(test_activations_accuracy, free_all),
        cmocka_unit_test_teardown(test_error_messages, free_all),
        cmocka_unit_test_teardown(test_host_memory_and_view, free_all),
        cmocka_unit_test_teardown(test_threads_same_results, free_all),
        cmocka_unit_test_teardown(test_threads_option_errors, free_all),
        cmocka_unit_test_teardown(test_disable_falls_back, free_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
