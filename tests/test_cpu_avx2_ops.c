/* The cpu_avx2 backend, op by op, against the reference backend (the oracle).
 *
 * Every op and fused op runs on both backends with the same random inputs (odd sizes that are
 * not multiples of 8 or 32, every weight dtype, strided and permuted views as the graphs make
 * them), and the outputs must agree within a tolerance stated, and justified, next to each
 * check. Also: supports() agrees with the reference, errors name cpu_avx2, thread counts 1
 * and 3 give bit-identical results, and QVL_CPU_AVX2_DISABLE=1 makes init fail so that the
 * registry falls back to the reference.
 *
 * Tolerances (|avx - ref| <= atol + rtol * max|ref| over a node's output, unless stated):
 *  - exact (0): ops that do one f32 operation per element or move data (ADD, MUL, SCALE,
 *    masks, GET_ROWS, CONT, STORE_ROWS, ROPE whose angles are computed the same way).
 *  - dot products with f32/f16/bf16 weights: both sides read the same weight values; the
 *    reference sums in double, cpu_avx2 in f32 vector lanes. A sum of K f32 roundings grows
 *    like sqrt(K) * 6e-8 relative to the magnitude of the terms: rtol = 1e-6 * sqrt(K) leaves
 *    a margin of ~16x (measured: ~1e-7 * sqrt(K)).
 *  - q8_0 weights: cpu_avx2 also rounds the activations to int8 blocks (scale max|a|/127),
 *    moving each a_k by at most max|a_block|/254. The test computes, per output element, the
 *    rigorous bound sum_blocks max|a_block|/254 * sum_k |w_k| and allows that plus the f32
 *    tolerance above.
 *  - exp-based ops (SOFTMAX, SILU, GELU_TANH, ATTENTION): the vector exp is good to 1.2e-7
 *    relative (avx_math.h); SILU and GELU_TANH are checked per element to 1e-6 relative
 *    against a double-precision formula, SOFTMAX and ATTENTION to 1e-5 of the row scale
 *    (a few roundings of the exp plus f32 sums over up to 1100 keys).
 *  - norms: statistics in f32 instead of double: 1e-6 relative. */
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

#include "qvl/backend.h"
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
    assert_true(b->iface->supports(b->be, &n));
    qvl_error err = {0};
    qvl_status s = qvl_backend_kernel(b->iface, op)(b->be, &n, &err);
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

static double f32_rtol(int64_t K) {
    return 1e-6 * sqrt((double)K);
}

/* Per-element q8_0 activation-rounding bound for out[m, j] = a[m] . w[j]: a is given as an
 * [M, K] double array (what the kernel quantises), w as a tensor read through its strides. */
static double *q8_bound(const double *a, int64_t M, int64_t K, const qvl_tensor *w, int64_t ldo,
                        int64_t col) {
    int64_t N = w->desc.shape[0];
    double *b = keep(calloc((size_t)(M * ldo), sizeof *b));
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < N; j++) {
            double sum = 0;
            for (int64_t k0 = 0; k0 < K; k0 += 32) {
                double amax = 0, wsum = 0;
                for (int64_t k = k0; k < k0 + 32 && k < K; k++) {
                    amax = fmax(amax, fabs(a[m * K + k]));
                    wsum += fabs(get(w, j * w->desc.stride[0] + k * w->desc.stride[1]));
                }
                sum += amax / 254.0 * wsum;
            }
            b[m * ldo + col + j] = sum * 1.01; /* 1%: the kernel's a is f32, not double */
        }
    return b;
}

static double *doubles_of(const qvl_tensor *t) {
    int64_t n = nelem(&t->desc);
    double *d = keep(malloc((size_t)n * sizeof *d));
    for (int64_t i = 0; i < n; i++) d[i] = get(t, i);
    return d;
}

static void skip_without_avx2(void) {
    if (!have_avx2) {
        printf("cpu_avx2 is not usable on this machine: skipped\n");
        skip();
    }
}

/* ---- MATMUL ---------------------------------------------------------------------------- */

static const qvl_dtype wdtypes[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};

static void matmul_case(qvl_dtype wdt, int64_t M, int64_t K, int64_t N, bool bias, bool strided_a) {
    char what[128];
    snprintf(what, sizeof what, "matmul %s M=%lld K=%lld N=%lld%s%s", qvl_dtype_name(wdt),
             (long long)M, (long long)K, (long long)N, bias ? " +bias" : "",
             strided_a ? " strided a" : "");
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(M, K + 3), -1, 1);
    a = strided_a ? view(a, 2, SHAPE(M, K), SHAPE(K + 3, 1), 2) : rnd(QVL_F32, 2, SHAPE(M, K), -1, 1);
    qvl_tensor *w = rnd(wdt, 2, SHAPE(N, K), -1, 1);
    qvl_tensor *b = bias ? rnd(QVL_BF16, 1, SHAPE(N), -1, 1) : NULL;
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(M, N), SRC(a, w, b), &ro, &ao);
    double *extra = NULL;
    if (wdt == QVL_Q8_0) {
        double *ad = keep(malloc((size_t)(M * K) * sizeof *ad));
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) ad[m * K + k] = get(a, m * a->desc.stride[0] + k);
        extra = q8_bound(ad, M, K, w, N, 0);
    }
    compare(what, ro, ao, 1e-6, f32_rtol(K), extra);
}

static void test_matmul_2d(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t shapes[][3] = {{1, 37, 13}, {3, 64, 13}, {17, 96, 29}, {4, 160, 33},
                                        {2, 256, 70}, {1, 512, 48}, {6, 33, 5}, {1, 15, 3},
                                        {9, 320, 40}, {5, 7, 1}};
    for (size_t d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            if (wdtypes[d] == QVL_Q8_0 && K % 32 != 0) continue; /* contiguous q8_0 needs blocks */
            matmul_case(wdtypes[d], M, K, N, s % 2 == 0, s % 3 == 1);
        }
}

/* Shapes that cross every block of the prefill GEMM (avx_gemm.c: 6-row tiles, 16-column
 * panels, K blocks of 256, row blocks of 144, 128-column chunks per thread) and end part-way
 * through each: M = 150 (25 tiles, the last of 6 rows, a second row block), K = 600 (two full K
 * blocks and a partial one of 88, not a multiple of 8; 608 for q8_0, whole blocks), N = 290
 * (two chunks and a partial one ending in a 2-column panel), and small M = 4, 5 (one partial
 * tile). */
static void test_matmul_blocked(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t shapes[][3] = {{150, 600, 290}, {4, 300, 17}, {5, 257, 130},
                                        {13, 1024, 144}, {7, 9, 3}, {150, 608, 290}};
    for (size_t d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (wdtypes[d] == QVL_Q8_0 && shapes[s][1] % 32 != 0) continue; /* whole blocks */
            matmul_case(wdtypes[d], shapes[s][0], shapes[s][1], shapes[s][2], s % 2 == 0,
                        s == 2);
        }
}

/* Decode-size products (M < 4) over more weight rows than one thread's chunk (chunks shrink
 * from 128 rows, 256 for q8_0, to 16 near the end): several chunks, a partial last one, and
 * for M = 1 the rows of a chunk read as side-by-side streams (avx_linear.c: 8 streams for
 * f32/f16/bf16, 4 for q8_0) with rows left over after the streams. */
static void test_matmul_gemv_chunks(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t shapes[][3] = {{1, 64, 300}, {2, 96, 301}, {3, 32, 519}, {1, 2048, 1030}};
    for (size_t d = 0; d < 4; d++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            matmul_case(wdtypes[d], shapes[s][0], shapes[s][1], shapes[s][2], s % 2 == 1, false);
}

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

/* Weights that cannot be read in place: q8_0 rows of 37 (a partial last block) in rows of 64,
 * a permuted (transposed) f16 weight, activations that are bf16, rows in reverse order. */
static void test_matmul_odd_layouts(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *wq = rnd(QVL_Q8_0, 2, SHAPE(11, 64), -1, 1);
    qvl_tensor *wq37 = view(wq, 2, SHAPE(11, 37), SHAPE(64, 1), 0);
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(3, 37), -1, 1);
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(3, 11), SRC(a, wq37), &ro, &ao);
    compare("matmul q8_0 K=37 view", ro, ao, 1e-6, f32_rtol(37), NULL); /* dequantised: f32 path */

    qvl_tensor *wt = rnd(QVL_F16, 2, SHAPE(37, 13), -1, 1); /* stored [K, N], used as [N, K] */
    qvl_tensor *w = view(wt, 2, SHAPE(13, 37), SHAPE(1, 13), 0);
    qvl_tensor *a5 = rnd(QVL_BF16, 2, SHAPE(5, 37), -1, 1);
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(5, 13), SRC(a5, w), &ro, &ao);
    compare("matmul permuted f16 w, bf16 a", ro, ao, 1e-6, f32_rtol(37), NULL);

    qvl_tensor *wb = rnd(QVL_BF16, 2, SHAPE(13, 37), -1, 1); /* rows in reverse order */
    qvl_tensor *wr = view(wb, 2, SHAPE(13, 37), SHAPE(-37, 1), 12 * 37);
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 2, SHAPE(5, 13), SRC(a5, wr), &ro, &ao);
    compare("matmul negative row stride", ro, ao, 1e-6, f32_rtol(37), NULL);
}

/* 3-D weights as unfused attention uses them: a [B, M, K], w [Bw, N, K], B = 2 Bw, the
 * scores (k as w, innermost stride 1) and the values (v^T as w: innermost stride Hkv*D). */
static void test_matmul_batched(void **state) {
    (void)state;
    skip_without_avx2();
    const int64_t L = 19, Hkv = 2, D = 12, Hq = 4, N = 5;
    qvl_tensor *kv = rnd(QVL_F32, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_tensor *k = view(kv, 3, SHAPE(Hkv, L, D), SHAPE(D, Hkv * D, 1), 0);
    qvl_tensor *vt = view(kv, 3, SHAPE(Hkv, D, L), SHAPE(D, 1, Hkv * D), 0);
    qvl_tensor *q = rnd(QVL_F32, 3, SHAPE(Hq, N, D), -1, 1);
    qvl_tensor *p = rnd(QVL_F32, 3, SHAPE(Hq, N, L), 0, 1);
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 3, SHAPE(Hq, N, L), SRC(q, k), &ro, &ao);
    compare("matmul q.k^T", ro, ao, 1e-6, f32_rtol(D), NULL);
    run_both(QVL_OP_MATMUL, NULL, QVL_F32, 3, SHAPE(Hq, N, D), SRC(p, vt), &ro, &ao);
    compare("matmul p.v", ro, ao, 1e-6, f32_rtol(L), NULL);
}

/* ---- NORM_LINEAR and MLP_RESIDUAL --------------------------------------------------------- */

/* NORM_LINEAR with projection i of dtype wdts[i] and widths[i] output columns. */
static void norm_linear_parts_case(const qvl_dtype wdts[3], const int64_t widths[3], int norm,
                                   int64_t M, int64_t D, int n_proj) {
    char what[160];
    snprintf(what, sizeof what, "norm_linear %s/%s/%s %s M=%lld D=%lld x%d widths %lld/%lld/%lld",
             qvl_dtype_name(wdts[0]), qvl_dtype_name(wdts[1]), qvl_dtype_name(wdts[2]),
             norm == QVL_NORM_RMS ? "rms" : "layer", (long long)M, (long long)D, n_proj,
             (long long)widths[0], (long long)widths[1], (long long)widths[2]);
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(M, D), -2, 2);
    qvl_tensor *g = rnd(QVL_BF16, 1, SHAPE(D), 0.5f, 1.5f);
    qvl_tensor *beta = norm == QVL_NORM_LAYER ? rnd(QVL_F32, 1, SHAPE(D), -1, 1) : NULL;
    qvl_tensor *w[3] = {0}, *b[3] = {0};
    int64_t total = 0;
    for (int i = 0; i < n_proj; i++) {
        w[i] = rnd(wdts[i], 2, SHAPE(widths[i], D), -1, 1);
        b[i] = i == 1 ? NULL : rnd(QVL_F32, 1, SHAPE(widths[i]), -1, 1);
        total += widths[i];
    }
    qvl_params p = {.norm_linear = {.norm = norm, .eps = 1e-6f, .n_proj = n_proj}};
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_NORM_LINEAR, &p, QVL_F32, 2, SHAPE(M, total),
             SRC(x, g, beta, w[0], b[0], w[1], b[1], w[2], b[2]), &ro, &ao);
    double *extra = NULL;
    bool any_q8 = false;
    for (int i = 0; i < n_proj; i++) any_q8 |= wdts[i] == QVL_Q8_0;
    if (any_q8) { /* bound from the normalised rows, which the reference computes */
        qvl_tensor *xn = mk(QVL_F32, 2, SHAPE(M, D));
        qvl_params np = {.norm = {.eps = 1e-6f}};
        run_on(&ref, norm == QVL_NORM_RMS ? QVL_OP_RMS_NORM : QVL_OP_LAYER_NORM, &np, xn,
               norm == QVL_NORM_RMS ? SRC(x, g) : SRC(x, g, beta));
        double *xd = doubles_of(xn);
        extra = keep(calloc((size_t)(M * total), sizeof *extra));
        int64_t col = 0;
        for (int i = 0; i < n_proj; i++) {
            if (wdts[i] == QVL_Q8_0) {
                double *bi = q8_bound(xd, M, D, w[i], total, col);
                for (int64_t e = 0; e < M * total; e++) extra[e] += bi[e];
            }
            col += widths[i];
        }
    }
    compare(what, ro, ao, 1e-5, f32_rtol(D) + 1e-6, extra);
}

static void norm_linear_case(qvl_dtype wdt, int norm, int64_t M, int64_t D, int n_proj) {
    const qvl_dtype wdts[3] = {wdt, wdt, wdt};
    static const int64_t widths[3] = {13, 7, 29};
    norm_linear_parts_case(wdts, widths, norm, M, D, n_proj);
}

static void test_norm_linear(void **state) {
    (void)state;
    skip_without_avx2();
    for (size_t d = 0; d < 4; d++) {
        int64_t D = wdtypes[d] == QVL_Q8_0 ? 64 : 37;
        norm_linear_case(wdtypes[d], QVL_NORM_RMS, 1, D, 3);
        norm_linear_case(wdtypes[d], QVL_NORM_RMS, 5, D, 2);
        norm_linear_case(wdtypes[d], QVL_NORM_LAYER, 17, D, 1);
        norm_linear_case(wdtypes[d], QVL_NORM_LAYER, 3, wdtypes[d] == QVL_Q8_0 ? 96 : 45, 3);
    }
    norm_linear_case(QVL_BF16, QVL_NORM_RMS, 150, 300, 3); /* GEMM: 2 K blocks, 2 row blocks */
}

/* The projections of one NORM_LINEAR are handed to the threads as one range of rows
 * (avx_linear_parts): wide enough for many chunks, with widths that are not multiples of 16
 * so that chunks span the end of one projection and the start of the next, also with a
 * different weight dtype per projection, on the GEMV (M = 1, 2, 3) and GEMM (M = 7) paths. */
static void test_norm_linear_parts(void **state) {
    (void)state;
    skip_without_avx2();
    static const int64_t widths[3] = {301, 77, 530};
    static const qvl_dtype mixed[3] = {QVL_BF16, QVL_Q8_0, QVL_F16};
    static const qvl_dtype mixed2[3] = {QVL_F32, QVL_BF16, QVL_Q8_0};
    static const int64_t Ms[] = {1, 2, 3, 7};
    for (int mi = 0; mi < 4; mi++) {
        norm_linear_parts_case(mixed, widths, QVL_NORM_RMS, Ms[mi], 96, 3);
        norm_linear_parts_case(mixed2, widths, QVL_NORM_LAYER, Ms[mi], 64, 3);
        for (size_t d = 0; d < 4; d++) {
            const qvl_dtype same[3] = {wdtypes[d], wdtypes[d], wdtypes[d]};
            norm_linear_parts_case(same, widths, QVL_NORM_RMS, Ms[mi], 160, 2);
        }
    }
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
/* 0.5 x (1 + tanh(y)) written as x / (1 + e^(-2y)), the same function without the
 * cancellation of 1 + tanh(y) for very negative y (where double tanh rounds to -1). */
static double gelu_tanh_d(double x) {
    double y = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * y));
}
static double gelu_erf_d(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }

static void mlp_case(qvl_dtype wdt, int act, bool gated, int64_t M, int64_t D, int64_t F) {
    char what[128];
    snprintf(what, sizeof what, "mlp_residual %s act %d%s M=%lld D=%lld F=%lld",
             qvl_dtype_name(wdt), act, gated ? " gated" : "", (long long)M, (long long)D,
             (long long)F);
    qvl_tensor *res = rnd(QVL_F32, 2, SHAPE(M, D), -1, 1);
    /* a and up as the slices of one fused gate|up projection output, as the graphs make them */
    qvl_tensor *gu = rnd(QVL_F32, 2, SHAPE(M, 2 * F), -3, 3);
    qvl_tensor *a = view(gu, 2, SHAPE(M, F), SHAPE(2 * F, 1), 0);
    qvl_tensor *up = gated ? view(gu, 2, SHAPE(M, F), SHAPE(2 * F, 1), F) : NULL;
    qvl_tensor *w = rnd(wdt, 2, SHAPE(D, F), -1, 1);
    qvl_tensor *b = gated ? NULL : rnd(QVL_F16, 1, SHAPE(D), -1, 1);
    qvl_params p = {.mlp = {.act = act}};
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_MLP_RESIDUAL, &p, QVL_F32, 2, SHAPE(M, D), SRC(res, a, w, up, b), &ro, &ao);
    double *extra = NULL;
    if (wdt == QVL_Q8_0) {
        double *h = keep(malloc((size_t)(M * F) * sizeof *h));
        for (int64_t m = 0; m < M; m++)
            for (int64_t f = 0; f < F; f++) {
                double x = get(gu, m * 2 * F + f);
                h[m * F + f] = gated ? silu_d(x) * get(gu, m * 2 * F + F + f)
                             : act == QVL_ACT_GELU_TANH ? gelu_tanh_d(x)
                             : act == QVL_ACT_NONE      ? x
                                                        : gelu_erf_d(x);
            }
        extra = q8_bound(h, M, F, w, D, 0);
    }
    compare(what, ro, ao, 1e-5, f32_rtol(F) + 1e-6, extra);
}

static void test_mlp_residual(void **state) {
    (void)state;
    skip_without_avx2();
    for (size_t d = 0; d < 4; d++) {
        int64_t F = wdtypes[d] == QVL_Q8_0 ? 96 : 37;
        mlp_case(wdtypes[d], QVL_ACT_SILU, true, 1, 13, F);
        mlp_case(wdtypes[d], QVL_ACT_SILU, true, 17, 29, F);
        mlp_case(wdtypes[d], QVL_ACT_GELU_TANH, false, 3, 13, F);
        mlp_case(wdtypes[d], QVL_ACT_GELU_ERF, false, 5, 8, F);
        mlp_case(wdtypes[d], QVL_ACT_NONE, false, 2, 11, F); /* o_proj + residual */
    }
    /* the GEMM path with more than one K block, a bias and the residual added at the end */
    mlp_case(QVL_BF16, QVL_ACT_SILU, true, 150, 150, 520);
    mlp_case(QVL_F16, QVL_ACT_GELU_TANH, false, 20, 40, 300);
    mlp_case(QVL_BF16, QVL_ACT_NONE, false, 40, 64, 300);
}

/* ---- ATTENTION ---------------------------------------------------------------------------- */

static void attention_case_r(int mask, int64_t N, int64_t L, int64_t n_past, int64_t Hq,
                             int64_t Hkv, int64_t D, const int32_t *seg, int64_t n_seg,
                             qvl_dtype kv_dt, float range) {
    char what[160];
    snprintf(what, sizeof what, "attention mask %d N=%lld L=%lld n_past=%lld Hq=%lld Hkv=%lld D=%lld %s",
             mask, (long long)N, (long long)L, (long long)n_past, (long long)Hq, (long long)Hkv,
             (long long)D, qvl_dtype_name(kv_dt));
    /* q is a slice of a fused qkv projection output [N, (Hq + 2 Hkv) D], as in the graphs */
    int64_t W = (Hq + 2 * Hkv) * D;
    qvl_tensor *qkv = rnd(QVL_F32, 2, SHAPE(N, W), -range, range);
    qvl_tensor *q = view(qkv, 3, SHAPE(N, Hq, D), SHAPE(W, D, 1), 0);
    qvl_tensor *k = rnd(kv_dt, 3, SHAPE(L, Hkv, D), -range, range);
    qvl_tensor *v = rnd(kv_dt, 3, SHAPE(L, Hkv, D), -1, 1);
    qvl_tensor *s = seg ? i32_of(1, SHAPE(n_seg), seg) : NULL;
    qvl_params p = {.attention = {.scale = 1.0f / sqrtf((float)D), .mask = mask, .n_past = n_past}};
    qvl_tensor *ro, *ao;
    run_both(QVL_OP_ATTENTION, &p, QVL_F32, 3, SHAPE(N, Hq, D), SRC(q, k, v, s), &ro, &ao);
    compare(what, ro, ao, 1e-6, 1e-5, NULL);
}

static void attention_case(int mask, int64_t N, int64_t L, int64_t n_past, int64_t Hq,
                           int64_t Hkv, int64_t D, const int32_t *seg, int64_t n_seg,
                           qvl_dtype kv_dt) {
    attention_case_r(mask, N, L, n_past, Hq, Hkv, D, seg, n_seg, kv_dt, 1.0f);
}

static void test_attention(void **state) {
    (void)state;
    skip_without_avx2();
    attention_case(QVL_MASK_NONE, 3, 9, 0, 2, 2, 16, NULL, 0, QVL_F32);
    attention_case(QVL_MASK_CAUSAL, 5, 12, 7, 4, 2, 32, NULL, 0, QVL_F32);
    attention_case(QVL_MASK_CAUSAL, 1, 100, 99, 6, 2, 20, NULL, 0, QVL_F32);
    attention_case(QVL_MASK_CAUSAL, 17, 17, 0, 4, 1, 24, NULL, 0, QVL_F16);
    /* n_past beyond the keys given, and negative: rows with no visible key give 0 */
    attention_case(QVL_MASK_CAUSAL, 4, 6, -2, 2, 1, 8, NULL, 0, QVL_F32);
    static const int32_t seg[] = {0, 4, 4, 11, 80};
    attention_case(QVL_MASK_SEGMENTS, 80, 80, 0, 2, 2, 36, seg, 5, QVL_F32);
    attention_case(QVL_MASK_SEGMENTS, 80, 80, 0, 4, 2, 16, seg, 5, QVL_BF16);
    /* large scores (|q.k| * scale in the hundreds, as random-weight models produce): the
     * scores are double dot products like the reference's, so the result still agrees */
    attention_case_r(QVL_MASK_SEGMENTS, 80, 80, 0, 4, 2, 64, seg, 5, QVL_F32, 20.0f);
    attention_case_r(QVL_MASK_CAUSAL, 9, 40, 31, 4, 4, 64, NULL, 0, QVL_F32, 20.0f);
}

/* The blocked path (8 or more queries) past one of its blocks: several key chunks of 256 (the
 * online softmax rescaled between them), more queries than one item holds (65536 / D), query
 * tiles of 6 that end part-way, tiles whose queries see different key ranges (causal, and a
 * segment boundary inside a chunk), grouped heads, and head sizes that are not a multiple of
 * 16. */
static void test_attention_blocked(void **state) {
    (void)state;
    skip_without_avx2();
    attention_case(QVL_MASK_CAUSAL, 301, 600, 299, 4, 2, 40, NULL, 0, QVL_F32);
    attention_case(QVL_MASK_CAUSAL, 100, 90, -20, 2, 1, 16, NULL, 0, QVL_F32);
    static const int32_t seg[] = {0, 300, 301, 1100};
    attention_case(QVL_MASK_SEGMENTS, 1100, 1100, 0, 1, 1, 64, seg, 4, QVL_F32);
    attention_case(QVL_MASK_NONE, 13, 700, 0, 2, 2, 24, NULL, 0, QVL_BF16);
    /* large scores across chunks: the running maximum moves between chunks */
    attention_case_r(QVL_MASK_NONE, 20, 700, 0, 2, 2, 64, NULL, 0, QVL_F32, 20.0f);
    attention_case_r(QVL_MASK_CAUSAL, 40, 600, 560, 2, 1, 128, NULL, 0, QVL_F32, 20.0f);
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

static void test_rope(void **state) {
    (void)state;
    skip_without_avx2();
    rope_case(QVL_ROPE_MROPE_INTERLEAVED, 5, 3, 16);
    rope_case(QVL_ROPE_MROPE_INTERLEAVED, 7, 2, 38);
    rope_case(QVL_ROPE_VISION_2D, 6, 2, 24);
    rope_case(QVL_ROPE_NEOX, 3, 4, 64);
}

static void test_norms(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_params p = {.norm = {.eps = 1e-5f}};
    qvl_tensor *base = rnd(QVL_F32, 2, SHAPE(7, 40), -3, 3);
    qvl_tensor *x = view(base, 2, SHAPE(7, 37), SHAPE(40, 1), 1);
    qvl_tensor *g = rnd(QVL_BF16, 1, SHAPE(37), 0.5f, 1.5f);
    run_both(QVL_OP_RMS_NORM, &p, QVL_F32, 2, SHAPE(7, 37), SRC(x, g), &ro, &ao);
    compare("rms_norm", ro, ao, 1e-7, 1e-6, NULL);
    qvl_tensor *x2 = rnd(QVL_F16, 3, SHAPE(3, 2, 45), -3, 3);
    qvl_tensor *g2 = rnd(QVL_F32, 1, SHAPE(45), 0.5f, 1.5f), *b2 = rnd(QVL_F16, 1, SHAPE(45), -1, 1);
    run_both(QVL_OP_LAYER_NORM, &p, QVL_F32, 3, SHAPE(3, 2, 45), SRC(x2, g2, b2), &ro, &ao);
    compare("layer_norm", ro, ao, 1e-7, 1e-6, NULL);
    run_both(QVL_OP_LAYER_NORM, &p, QVL_F32, 3, SHAPE(3, 2, 45), SRC(x2, g2, NULL), &ro, &ao);
    compare("layer_norm without beta", ro, ao, 1e-7, 1e-6, NULL);
}

static void test_softmax(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *x = rnd(QVL_F32, 2, SHAPE(4, 19), -30, 30);
    float *v = x->data;
    for (int i = 0; i < 19; i++) v[19 + i] = -INFINITY; /* a row with nothing visible */
    for (int i = 5; i < 19; i++) v[2 * 19 + i] = -INFINITY;
    v[3 * 19] = -80.0f; /* a large spread within a row */
    run_both(QVL_OP_SOFTMAX, NULL, QVL_F32, 2, SHAPE(4, 19), SRC(x), &ro, &ao);
    compare("softmax", ro, ao, 1e-7, 1e-5, NULL);
    qvl_tensor *y = rnd(QVL_BF16, 2, SHAPE(3, 300), -5, 5);
    run_both(QVL_OP_SOFTMAX, NULL, QVL_F32, 2, SHAPE(3, 300), SRC(y), &ro, &ao);
    compare("softmax bf16 rows of 300", ro, ao, 1e-7, 1e-5, NULL);
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

/* Activations and SCALE on strided f16 input, against the reference. */
static void test_unary_ops(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *base = rnd(QVL_F16, 3, SHAPE(3, 5, 13), -6, 6);
    qvl_tensor *x = view(base, 3, SHAPE(3, 13, 5), SHAPE(65, 1, 13), 0); /* permuted */
    qvl_tensor *ro, *ao;
    qvl_params sp = {.scale = {.s = 0.37f}};
    run_both(QVL_OP_SCALE, &sp, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare_exact("scale", ro, ao);
    run_both(QVL_OP_SILU, NULL, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare("silu", ro, ao, 1e-30, 1e-6, NULL);
    run_both(QVL_OP_GELU_TANH, NULL, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare("gelu_tanh", ro, ao, 1e-30, 1e-6, NULL);
    run_both(QVL_OP_GELU_ERF, NULL, QVL_F32, 3, SHAPE(3, 13, 5), SRC(x), &ro, &ao);
    compare_exact("gelu_erf", ro, ao);
}

static void test_masks(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *s = rnd(QVL_F32, 3, SHAPE(2, 4, 9), -1, 1);
    qvl_params mp = {.mask = {.n_past = 5}};
    run_both(QVL_OP_MASK_CAUSAL, &mp, QVL_F32, 3, SHAPE(2, 4, 9), SRC(s), &ro, &ao);
    compare_exact("mask_causal", ro, ao);
    qvl_tensor *s2 = rnd(QVL_F32, 3, SHAPE(3, 10, 10), -1, 1);
    qvl_tensor *seg = i32_of(1, SHAPE(3), (const int32_t[]){0, 3, 10});
    run_both(QVL_OP_MASK_SEGMENTS, NULL, QVL_F32, 3, SHAPE(3, 10, 10), SRC(s2, seg), &ro, &ao);
    compare_exact("mask_segments", ro, ao);
    /* bad bounds are data errors, reported by cpu_avx2 itself */
    qvl_tensor *bad = i32_of(1, SHAPE(3), (const int32_t[]){0, 7, 3});
    qvl_node n = node_of(QVL_OP_MASK_SEGMENTS, NULL, ao, SRC(s2, bad));
    qvl_error err = {0};
    assert_int_equal(qvl_backend_kernel(avx.iface, n.op)(avx.be, &n, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "cpu_avx2: mask_segments 't':"));
}

static void test_add_mul(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *base = rnd(QVL_F32, 3, SHAPE(3, 2, 17), -2, 2);
    qvl_tensor *a = view(base, 3, SHAPE(2, 3, 17), SHAPE(17, 34, 1), 0); /* permuted */
    qvl_tensor *b_row = rnd(QVL_BF16, 1, SHAPE(17), -2, 2);
    qvl_tensor *b_col = rnd(QVL_F32, 2, SHAPE(3, 1), -2, 2);
    qvl_tensor *b_same = rnd(QVL_F16, 3, SHAPE(2, 3, 17), -2, 2);
    const qvl_tensor *bs[] = {b_row, b_col, b_same};
    for (int i = 0; i < 3; i++) {
        run_both(QVL_OP_ADD, NULL, QVL_F32, 3, SHAPE(2, 3, 17), SRC(a, bs[i]), &ro, &ao);
        compare_exact("add", ro, ao);
        run_both(QVL_OP_MUL, NULL, QVL_F32, 3, SHAPE(2, 3, 17), SRC(a, bs[i]), &ro, &ao);
        compare_exact("mul", ro, ao);
    }
}

/* ---- data movement ------------------------------------------------------------------------ */

static void test_get_rows_cont_store(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *ids = i32_of(1, SHAPE(6), (const int32_t[]){3, 0, 49, 3, 17, 8});
    static const qvl_dtype tdt[] = {QVL_BF16, QVL_F16, QVL_F32, QVL_Q8_0};
    for (int i = 0; i < 4; i++) {
        int64_t D = tdt[i] == QVL_Q8_0 ? 64 : 37;
        qvl_tensor *table = rnd(tdt[i], 2, SHAPE(50, D), -1, 1);
        run_both(QVL_OP_GET_ROWS, NULL, QVL_F32, 2, SHAPE(6, D), SRC(table, ids), &ro, &ao);
        compare_exact("get_rows", ro, ao);
    }
    qvl_tensor *table = rnd(QVL_BF16, 2, SHAPE(50, 8), -1, 1);
    qvl_tensor *bad = i32_of(1, SHAPE(2), (const int32_t[]){1, 50});
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(2, 8));
    qvl_node n = node_of(QVL_OP_GET_ROWS, NULL, out, SRC(table, bad));
    qvl_error err = {0};
    assert_int_equal(qvl_backend_kernel(avx.iface, n.op)(avx.be, &n, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "cpu_avx2: get_rows"));
    assert_non_null(strstr(err.msg, "outside [0, 50)"));

    qvl_tensor *h = rnd(QVL_F16, 2, SHAPE(7, 5), -1, 1);
    qvl_tensor *ht = view(h, 2, SHAPE(5, 7), SHAPE(1, 5), 0);
    run_both(QVL_OP_CONT, NULL, QVL_F16, 2, SHAPE(5, 7), SRC(ht), &ro, &ao);
    compare_exact("cont f16 transposed", ro, ao);
    qvl_tensor *q = rnd(QVL_Q8_0, 2, SHAPE(6, 64), -1, 1);
    qvl_tensor *qv = view(q, 2, SHAPE(3, 64), SHAPE(128, 1), 64); /* every other row */
    run_both(QVL_OP_CONT, NULL, QVL_Q8_0, 2, SHAPE(3, 64), SRC(qv), &ro, &ao);
    compare_exact("cont q8_0 rows", ro, ao);

    /* STORE_ROWS writes into its destination: two identical caches, one per backend */
    static const qvl_dtype cdt[] = {QVL_F32, QVL_F16, QVL_BF16};
    for (int i = 0; i < 3; i++) {
        qvl_tensor *cr = rnd(cdt[i], 3, SHAPE(10, 2, 9), -1, 1), *ca = mk(cdt[i], 3, SHAPE(10, 2, 9));
        memcpy(ca->data, cr->data, storage_bytes(cdt[i], 180));
        qvl_tensor *sb = rnd(QVL_F32, 3, SHAPE(3, 2, 11), -1, 1);
        qvl_tensor *src = view(sb, 3, SHAPE(3, 2, 9), SHAPE(22, 11, 1), 1);
        qvl_params sp = {.store = {.offset = 4}};
        qvl_tensor *dr = view(cr, 3, SHAPE(7, 2, 9), cr->desc.stride, 0);
        qvl_tensor *da = view(ca, 3, SHAPE(7, 2, 9), ca->desc.stride, 0);
        run_on(&ref, QVL_OP_STORE_ROWS, &sp, dr, SRC(cr, src));
        run_on(&avx, QVL_OP_STORE_ROWS, &sp, da, SRC(ca, src));
        compare_exact("store_rows", cr, ca);
    }
}

static void test_scatter_rows(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *ro, *ao;
    qvl_tensor *base = rnd(QVL_F32, 2, SHAPE(9, 40), -1, 1);
    qvl_tensor *x = view(base, 2, SHAPE(9, 37), SHAPE(40, 1), 3); /* strided rows */
    qvl_tensor *src = rnd(QVL_F32, 2, SHAPE(4, 37), -1, 1);
    qvl_tensor *idx = i32_of(1, SHAPE(4), (const int32_t[]){7, 0, 7, 3}); /* 7 repeated */
    run_both(QVL_OP_SET_ROWS, NULL, QVL_F32, 2, SHAPE(9, 37), SRC(x, idx, src), &ro, &ao);
    compare_exact("set_rows", ro, ao);
    run_both(QVL_OP_ADD_ROWS, NULL, QVL_F32, 2, SHAPE(9, 37), SRC(x, idx, src), &ro, &ao);
    compare_exact("add_rows", ro, ao);
    qvl_tensor *bad = i32_of(1, SHAPE(4), (const int32_t[]){1, 2, 9, 3});
    qvl_node n = node_of(QVL_OP_ADD_ROWS, NULL, ao, SRC(x, bad, src));
    qvl_error err = {0};
    assert_int_equal(qvl_backend_kernel(avx.iface, n.op)(avx.be, &n, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "cpu_avx2: add_rows 't': row index 9 at position 2"));
}

/* ---- supports(), errors, threads, refusal ---------------------------------------------------- */

static void test_supports_agrees(void **state) {
    (void)state;
    skip_without_avx2();
    qvl_tensor *a = rnd(QVL_F32, 2, SHAPE(3, 8), -1, 1), *w = rnd(QVL_F32, 2, SHAPE(4, 9), -1, 1);
    qvl_tensor *out = mk(QVL_F32, 2, SHAPE(3, 4));
    qvl_node n = node_of(QVL_OP_MATMUL, NULL, out, SRC(a, w));
    assert_false(ref.iface->supports(ref.be, &n));
    assert_false(avx.iface->supports(avx.be, &n));
    qvl_error err = {0};
    assert_int_equal(qvl_backend_kernel(avx.iface, n.op)(avx.be, &n, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "cpu_avx2: matmul 't': a has K = 8 but w has K = 9"));
    /* an i32 weight: not readable by either */
    qvl_tensor *wi = mk(QVL_I32, 2, SHAPE(4, 8));
    n = node_of(QVL_OP_MATMUL, NULL, out, SRC(a, wi));
    assert_false(ref.iface->supports(ref.be, &n));
    assert_false(avx.iface->supports(avx.be, &n));
    /* VIEW never has a kernel */
    assert_null(qvl_backend_kernel(avx.iface, QVL_OP_VIEW));
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
        cmocka_unit_test_teardown(test_matmul_2d, free_all),
        cmocka_unit_test_teardown(test_matmul_blocked, free_all),
        cmocka_unit_test_teardown(test_matmul_gemv_chunks, free_all),
        cmocka_unit_test_teardown(test_matmul_gemm_exact_conversion, free_all),
        cmocka_unit_test_teardown(test_matmul_odd_layouts, free_all),
        cmocka_unit_test_teardown(test_matmul_batched, free_all),
        cmocka_unit_test_teardown(test_norm_linear, free_all),
        cmocka_unit_test_teardown(test_norm_linear_parts, free_all),
        cmocka_unit_test_teardown(test_mlp_residual, free_all),
        cmocka_unit_test_teardown(test_attention, free_all),
        cmocka_unit_test_teardown(test_attention_blocked, free_all),
        cmocka_unit_test_teardown(test_rope, free_all),
        cmocka_unit_test_teardown(test_norms, free_all),
        cmocka_unit_test_teardown(test_softmax, free_all),
        cmocka_unit_test_teardown(test_activations_accuracy, free_all),
        cmocka_unit_test_teardown(test_unary_ops, free_all),
        cmocka_unit_test_teardown(test_masks, free_all),
        cmocka_unit_test_teardown(test_add_mul, free_all),
        cmocka_unit_test_teardown(test_get_rows_cont_store, free_all),
        cmocka_unit_test_teardown(test_scatter_rows, free_all),
        cmocka_unit_test_teardown(test_supports_agrees, free_all),
        cmocka_unit_test_teardown(test_threads_same_results, free_all),
        cmocka_unit_test_teardown(test_threads_option_errors, free_all),
        cmocka_unit_test_teardown(test_disable_falls_back, free_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
