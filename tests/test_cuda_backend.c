/* What the cuda_sm61 backend promises beyond agreeing with the reference op by op (which
 * qvl-backend-ops checks for every op, tests/conformance/: conformance_cuda_sm61):
 *  - describe(): device memory (not host), sizes; uploads and downloads at odd offsets;
 *  - small uploads are queued in a pinned ring without waiting, and stay ordered with kernels;
 *  - the int8 (__dp4a) path of q8_0 decode GEMVs is exact for activations int8 blocks hold;
 *  - every tile shape of the prefill GEMM (forced through QVL_CUDA_GEMM_TILE), split K;
 *  - the element-wise kernels' grid-stride loop past one grid; the attention head-size limit
 *    is refused by supports();
 *  - run_graph: a decode step captured once and replayed with new ids / positions / at,
 *    neighbouring launches grouped only when independent, and the graphs option.
 * Cases compare with the reference as the suite does (host tensors mirrored into device
 * buffers), with the tolerances this backend's tests always used:
 *     |cuda - ref| <= tol * max(1, max|ref|)
 *   exact for data movement; 1e-5 for element-wise ops, norms and rotations (the device's
 *   expf/sinf/cosf within 2 ulp, f32 sums); 1e-4 for dot products (matmul, norm_linear,
 *   mlp_residual, attention), plus for q8_0 weights the bound of the activation quantisation
 *   the decode path does (q8_bound: each activation rounded to its 32-block's scale
 *   d = max|x|/127, moving output (m, n) by at most sum_k |w[n,k]| d(m,k)/2).
 *
 * Without a usable CUDA device (CI) the whole test skips (exit 77) with one line saying why.
 *
 * One file over ~800 lines: scripts/gpu-check.sh runs this program by name (and again under
 * compute-sanitizer), and every case, the run_graph ones included, shares the mirrored-storage
 * harness at the top; the host tensor helpers themselves are in support/test_tensors.c. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <dlfcn.h>
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
#include "test_backend.h"
#include "test_tensors.h"

static qvl_test_backend ref, cu;

#define TOL_EXACT 0.0
#define TOL_EW 1e-5
#define TOL_NORM 1e-5
#define TOL_DOT 1e-4

/* ---- storages: host memory mirrored into device buffers ---------------------------------- */

#define MAX_STORES 1024
typedef struct store {
    unsigned char *host;
    size_t bytes;
    qvl_buffer dev;
    bool on_device;
} store;
static store stores[MAX_STORES];
static int n_stores;

/* A tensor of the test: the host tensor (what the reference sees) and its storage. */
typedef struct tt {
    qvl_tensor h;
    int store;
} tt;
#define MAX_TTS 2048
static tt tts[MAX_TTS];
static int n_tts;

static int free_all(void **state) {
    (void)state;
    for (int i = 0; i < n_stores; i++) {
        if (stores[i].on_device) cu.iface->buffer_free(cu.be, &stores[i].dev);
        free(stores[i].host);
    }
    n_stores = 0;
    n_tts = 0;
    return 0;
}

static tt *new_tt(qvl_dtype dt, int ndim, const int64_t *shape, const int64_t *stride, int st,
                  int64_t offset) {
    assert_true(n_tts < MAX_TTS);
    tt *t = &tts[n_tts++];
    memset(t, 0, sizeof *t);
    t->store = st;
    tt_set_desc(&t->h, dt, ndim, shape, stride);
    t->h.data = stores[st].host + tt_offset_bytes(dt, offset);
    return t;
}

/* A zeroed contiguous tensor with its own storage. */
static tt *mk(qvl_dtype dt, int ndim, const int64_t *shape) {
    assert_true(n_stores < MAX_STORES);
    int64_t stride[QVL_MAX_DIMS], n = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = n;
        n *= shape[i];
    }
    store *s = &stores[n_stores];
    memset(s, 0, sizeof *s);
    s->bytes = tt_storage_bytes(dt, n);
    s->host = calloc(1, s->bytes);
    assert_non_null(s->host);
    return new_tt(dt, ndim, shape, stride, n_stores++, 0);
}

/* A view of base's storage with its own shape and strides, element 0 at offset. */
static tt *view(const tt *base, int ndim, const int64_t *shape, const int64_t *stride,
                int64_t offset) {
    return new_tt(base->h.desc.dtype, ndim, shape, stride, base->store, offset);
}

static int irand(int lo, int hi) { /* [lo, hi] */
    return lo + (int)(tt_frand(0.0f, 1.0f) * (float)(hi - lo + 1)) % (hi - lo + 1);
}

/* A contiguous tensor of random values in [lo, hi) (tt_fill_random) with its own storage. */
static tt *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    tt *t = mk(dt, ndim, shape);
    tt_fill_random(dt, t->h.data, tt_nelem(&t->h.desc), lo, hi);
    return t;
}

static tt *i32_of(int64_t n, const int32_t *values) {
    tt *t = mk(QVL_I32, 1, (const int64_t[]){n});
    memcpy(t->h.data, values, (size_t)n * sizeof(int32_t));
    return t;
}

/* ---- running one node on both backends ---------------------------------------------------- */

static void to_device(int st) {
    store *s = &stores[st];
    qvl_error err = {0};
    if (!s->on_device) {
        if (cu.iface->buffer_alloc(cu.be, s->bytes, &s->dev, &err) != QVL_OK)
            fail_msg("buffer_alloc %zu: %s", s->bytes, err.msg);
        s->on_device = true;
    }
    if (cu.iface->upload(cu.be, s->dev.data, s->host, s->bytes, &err) != QVL_OK)
        fail_msg("upload: %s", err.msg);
}

/* The device twin of t: same descriptor, address at the same byte offset in the buffer. */
static qvl_tensor dev_of(const tt *t) {
    qvl_tensor d = t->h;
    const store *s = &stores[t->store];
    d.data = (char *)s->dev.data + ((const unsigned char *)t->h.data - s->host);
    return d;
}

/* Sources here are tt pairs (host tensor and storage), not test_tensors.h's qvl_tensors. */
#undef SRC
#define SRC(...) ((tt *[QVL_MAX_SRC]){__VA_ARGS__})

/* Per-element allowance added to the op's tolerance (q8_bound), or NULL. */
static const double *g_extra_bound;

/* Download the device copy of storage st and compare it, read through the host tensor
 * want's descriptor (which lies in the same storage), with want's values within tol. */
static void compare_store(const char *what, int st, const qvl_tensor *want, double tol) {
    store *s = &stores[st];
    qvl_error err = {0};
    unsigned char *got_store = malloc(s->bytes);
    assert_non_null(got_store);
    if (cu.iface->download(cu.be, got_store, s->dev.data, s->bytes, &err) != QVL_OK) {
        free(got_store);
        fail_msg("download: %s", err.msg);
    }
    qvl_tensor got = *want;
    got.data = got_store + ((unsigned char *)want->data - s->host);

    int64_t n = tt_nelem(&want->desc);
    double max_ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double w = tt_at_flat(want, i);
        if (isfinite(w) && fabs(w) > max_ref) max_ref = fabs(w);
    }
    double bound = tol * fmax(1.0, max_ref), worst = 0.0, worst_bound = bound;
    int64_t worst_i = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = tt_at_flat(want, i), g = tt_at_flat(&got, i);
        double d = (isinf(w) || isinf(g)) ? (g == w ? 0.0 : INFINITY) : fabs(g - w);
        if (isnan(w) && isnan(g)) d = 0.0;
        if (isnan(d)) d = INFINITY; /* one side NaN */
        double b = bound + (g_extra_bound ? g_extra_bound[i] : 0.0);
        if (d - b > worst - worst_bound) {
            worst = d;
            worst_bound = b;
            worst_i = i;
        }
    }
    bound = worst_bound;
    if (worst > bound) {
        double w = tt_at_flat(want, worst_i), g = tt_at_flat(&got, worst_i);
        free(got_store);
        fail_msg("%s: element %lld of %lld: cuda %.9g, reference %.9g (|diff| %.3g > bound %.3g)",
                 what, (long long)worst_i, (long long)n, g, w, worst, bound);
    }
    free(got_store);
}

/* Run op on both backends: dst is the reference's output tensor (its storage is mirrored
 * too, so STORE_ROWS sees the same initial cache); compare within tol. */
/* The activation quantisation allowance for q8_0 weights (see the top): activation rows x
 * [M, K] (recomputed in double from the host inputs), weight w [N, K] writing output columns
 * [col, col + N) of rows of width width. */
static void q8_allow(const double *x, int64_t M, int64_t K, const qvl_tensor *w, int64_t col,
                     int64_t width, bool exact_x, double *allow) {
    int64_t N = w->desc.shape[0];
    double *err = malloc((size_t)K * sizeof *err);
    assert_non_null(err);
    for (int64_t m = 0; m < M; m++) {
        const double *xr = x + m * K;
        /* Each activation's rounding error: exactly as the kernel rounds when x is exactly
         * what the kernel reads (matmul), else the worst case d/2 (x recomputed in double). */
        for (int64_t k0 = 0; k0 < K; k0 += 32) {
            float amax = 0.0f;
            for (int64_t k = k0; k < k0 + 32 && k < K; k++) amax = fmaxf(amax, fabsf((float)xr[k]));
            float d = amax / 127.0f;
            for (int64_t k = k0; k < k0 + 32 && k < K; k++) {
                float q = d > 0.0f ? fminf(fmaxf(rintf((float)xr[k] / d), -127.0f), 127.0f) : 0.0f;
                err[k] = exact_x ? fabs(xr[k] - (double)d * q) : (double)d / 2.0 * (1.0 + 1e-3);
            }
        }
        for (int64_t n = 0; n < N; n++) {
            double sum = 0.0;
            for (int64_t k = 0; k < K; k++) sum += fabs(tt_at_flat(w, n * K + k)) * err[k];
            allow[m * width + col + n] += sum;
        }
    }
    free(err);
}

static double silu_d(double v) { return v / (1.0 + exp(-v)); }
static double gelu_d(double v, int act) {
    if (act == QVL_ACT_NONE) return v;
    if (act == QVL_ACT_GELU_ERF) return 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
}

/* Allowance for every output element of a matmul-like node with q8_0 weights; NULL when the
 * node has none (caller frees). */
static double *q8_bound(qvl_op op, const qvl_params *p, const tt *dst, tt *const *src) {
    const qvl_tensor *w[3] = {NULL, NULL, NULL}, *xin;
    int64_t n_out = tt_nelem(&dst->h.desc), width = dst->h.desc.shape[dst->h.desc.ndim - 1];
    int64_t M = n_out / width, K;
    if (op == QVL_OP_MATMUL && src[1]->h.desc.ndim == 2) {
        w[0] = &src[1]->h;
        xin = &src[0]->h;
    } else if (op == QVL_OP_NORM_LINEAR) {
        for (int j = 0; j < 3; j++) w[j] = src[3 + 2 * j] ? &src[3 + 2 * j]->h : NULL;
        xin = &src[0]->h;
    } else if (op == QVL_OP_MLP_RESIDUAL) {
        w[0] = &src[2]->h;
        xin = &src[1]->h;
    } else {
        return NULL;
    }
    bool any_q8 = false; /* norm_linear may mix weight dtypes across its projections */
    for (int j = 0; j < 3; j++) any_q8 |= w[j] && w[j]->desc.dtype == QVL_Q8_0;
    if (!any_q8) return NULL;
    K = w[0]->desc.shape[1];
    double *x = malloc((size_t)(M * K) * sizeof *x), *allow = calloc((size_t)n_out, sizeof *allow);
    assert_true(x && allow);
    for (int64_t m = 0; m < M; m++) {
        double *xr = x + m * K;
        for (int64_t k = 0; k < K; k++) xr[k] = tt_at_flat(xin, m * K + k);
        if (op == QVL_OP_NORM_LINEAR) { /* the normalised row, as the kernel quantises it */
            double mean = 0.0, sq = 0.0;
            for (int64_t k = 0; k < K; k++) mean += xr[k] / (double)K;
            int layer = p->norm_linear.norm == QVL_NORM_LAYER;
            for (int64_t k = 0; k < K; k++) sq += (xr[k] - (layer ? mean : 0)) * (xr[k] - (layer ? mean : 0));
            double inv = 1.0 / sqrt(sq / (double)K + p->norm_linear.eps);
            for (int64_t k = 0; k < K; k++) {
                xr[k] = (xr[k] - (layer ? mean : 0)) * inv * tt_at_flat(&src[1]->h, k);
                if (layer && src[2]) xr[k] += tt_at_flat(&src[2]->h, k);
            }
        } else if (op == QVL_OP_MLP_RESIDUAL) {
            for (int64_t k = 0; k < K; k++)
                xr[k] = src[3] ? silu_d(xr[k]) * tt_at_flat(&src[3]->h, m * K + k)
                               : gelu_d(xr[k], p->mlp.act);
        }
    }
    int64_t col = 0;
    for (int j = 0; j < 3 && w[j]; j++) {
        if (w[j]->desc.dtype == QVL_Q8_0)
            q8_allow(x, M, K, w[j], col, width, op == QVL_OP_MATMUL, allow);
        col += w[j]->desc.shape[0];
    }
    free(x);
    return allow;
}

static void check_op(qvl_op op, const qvl_params *p, tt *dst, tt *const *src, double tol) {
    const qvl_tensor *hsrc[QVL_MAX_SRC] = {0};
    qvl_tensor dsrc[QVL_MAX_SRC];
    const qvl_tensor *dsrcp[QVL_MAX_SRC] = {0};
    for (int i = 0; i < QVL_MAX_SRC; i++)
        if (src[i]) to_device(src[i]->store);
    to_device(dst->store); /* before the reference writes into it */
    for (int i = 0; i < QVL_MAX_SRC; i++) {
        if (!src[i]) continue;
        hsrc[i] = &src[i]->h;
        dsrc[i] = dev_of(src[i]);
        dsrcp[i] = &dsrc[i];
    }
    qvl_tensor ddst = dev_of(dst);
    qvl_node hn = tt_node(op, p, &dst->h, hsrc), dn = tt_node(op, p, &ddst, dsrcp);

    qvl_error err = {0};
    if (!(qvl_test_supports(&ref, &hn, NULL) == QVL_OK))
        fail_msg("%s: the reference refuses the node", qvl_op_name(op));
    if (!(qvl_test_supports(&cu, &dn, NULL) == QVL_OK))
        fail_msg("%s: cuda_sm61 refuses the node", qvl_op_name(op));
    if (qvl_test_kernel(&ref, op)(ref.be, &hn, &err) != QVL_OK)
        fail_msg("reference %s: %s", qvl_op_name(op), err.msg);
    if (qvl_test_kernel(&cu, op)(cu.be, &dn, &err) != QVL_OK)
        fail_msg("cuda_sm61 %s: %s", qvl_op_name(op), err.msg);
    if (cu.iface->synchronize(cu.be, &err) != QVL_OK)
        fail_msg("cuda_sm61 %s: synchronize: %s", qvl_op_name(op), err.msg);

    /* STORE_ROWS: compare the whole cache (rows it must not touch too). */
    double *allow = q8_bound(op, p, dst, src);
    g_extra_bound = allow;
    compare_store(qvl_op_name(op), dst->store, op == QVL_OP_STORE_ROWS ? &src[0]->h : &dst->h,
                  tol);
    g_extra_bound = NULL;
    free(allow);
}

static const qvl_dtype w_dtypes[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};

static void test_describe(void **state) {
    (void)state;
    qvl_device_info info;
    assert_int_equal(cu.iface->describe(cu.be, &info), QVL_OK);
    assert_true(strlen(info.name) > 0);
    assert_false(info.host_memory);
    assert_true(info.memory_total > 0);
    assert_true(info.memory_free <= info.memory_total);
    printf("cuda_sm61 device: %s, %.1f GiB (%.1f GiB free)\n", info.name,
           (double)info.memory_total / (1 << 30), (double)info.memory_free / (1 << 30));
    /* up/download round trip at an odd offset and size */
    qvl_buffer b;
    qvl_error err = {0};
    assert_int_equal(cu.iface->buffer_alloc(cu.be, 1001, &b, &err), QVL_OK);
    unsigned char in[999], out[999];
    for (int i = 0; i < 999; i++) in[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(cu.iface->upload(cu.be, (char *)b.data + 1, in, sizeof in, &err), QVL_OK);
    assert_int_equal(cu.iface->download(cu.be, out, (char *)b.data + 1, sizeof out, &err), QVL_OK);
    assert_memory_equal(in, out, sizeof in);
    cu.iface->buffer_free(cu.be, &b);
}

/* Small uploads are queued without waiting (a pinned ring, reused once the stream has been
 * waited for): many of them, more than the ring holds between two waits, each from the same
 * host variable changed right after the call, several to the same place; a kernel run between
 * them (GET_ROWS reading the ids as uploaded so far); then one download must show the last
 * value written to every element. */
static void test_small_uploads(void **state) {
    (void)state;
    enum { N = 1000, WRITES = 20000 }; /* 20000 slices of 16 bytes: the ring (64 KiB) wraps */
    qvl_buffer b;
    qvl_error err = {0};
    assert_int_equal(cu.iface->buffer_alloc(cu.be, N * sizeof(int32_t), &b, &err), QVL_OK);
    static int32_t want[N];
    int32_t v = 0;
    for (int i = 0; i < WRITES; i++) {
        int e = (int)(((unsigned)i * 7919u) % N);
        v = i * 3 + 1;
        want[e] = v;
        assert_int_equal(cu.iface->upload(cu.be, (int32_t *)b.data + e, &v, sizeof v, &err),
                         QVL_OK);
        v = -1; /* the caller may reuse its memory at once */
    }
    static int32_t got[N];
    assert_int_equal(cu.iface->download(cu.be, got, b.data, sizeof got, &err), QVL_OK);
    for (int e = 0; e < N; e++)
        if (want[e] != 0 && got[e] != want[e])
            fail_msg("element %d: %d after the queued uploads, want %d", e, got[e], want[e]);
    cu.iface->buffer_free(cu.be, &b);

    /* a kernel between queued uploads sees exactly the uploads made before it (the ids are
     * uploaded one by one here, not through check_op's whole-tensor upload) */
    int64_t V = 16, D = 8;
    tt *table = rnd(QVL_F32, 2, SHAPE(V, D), -1, 1);
    tt *ids = i32_of(3, (const int32_t[]){0, 0, 0});
    tt *out = mk(QVL_F32, 2, SHAPE(3, D));
    to_device(table->store);
    to_device(out->store);
    to_device(ids->store);
    qvl_tensor dt = dev_of(table), di = dev_of(ids), dout = dev_of(out);
    const qvl_tensor *hs[QVL_MAX_SRC] = {&table->h, &ids->h}, *ds[QVL_MAX_SRC] = {&dt, &di};
    qvl_node hn = tt_node(QVL_OP_GET_ROWS, NULL, &out->h, hs);
    qvl_node dn = tt_node(QVL_OP_GET_ROWS, NULL, &dout, ds);
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k < 3; k++) {
            int32_t id = (int32_t)((step * 5 + k * 3) % V);
            ((int32_t *)ids->h.data)[k] = id;
            assert_int_equal(cu.iface->upload(cu.be, (int32_t *)di.data + k, &id, sizeof id, &err),
                             QVL_OK);
        }
        assert_int_equal(qvl_test_kernel(&ref, QVL_OP_GET_ROWS)(ref.be, &hn, &err), QVL_OK);
        assert_int_equal(qvl_test_kernel(&cu, QVL_OP_GET_ROWS)(cu.be, &dn, &err), QVL_OK);
        compare_store("get_rows after queued uploads", out->store, &out->h, TOL_EXACT);
    }
}

/* The int8 path of q8_0 decode GEMVs (activations quantised to int8 blocks, __dp4a): with
 * activations that int8 blocks hold exactly (integers in [-127, 127], 127 in every block, so
 * the block scale is 1) it must give the f32 dot product (q8_bound adds nothing: no activation
 * is rounded); with random activations it stays within the rounding q8_bound computes.
 * Weights also as a view of every other row. */
static void test_matmul_q8_dp4a(void **state) {
    (void)state;
    const int64_t Ms[] = {1, 3, 8};
    for (size_t mi = 0; mi < 3; mi++) {
        int64_t M = Ms[mi], K = 2048, N = 97;
        tt *a = mk(QVL_F32, 2, SHAPE(M, K));
        float *av = a->h.data;
        for (int64_t i = 0; i < M * K; i++)
            av[i] = i % 32 == 5 ? (i % 64 == 5 ? 127.0f : -127.0f) : (float)irand(-127, 127);
        tt *wbig = rnd(QVL_Q8_0, 2, SHAPE(2 * N, K), 0, 0);
        tt *w = view(wbig, 2, SHAPE(N, K), SHAPE(2 * K, 1), K); /* odd rows */
        tt *bias = rnd(QVL_F32, 1, SHAPE(N), -1, 1);
        tt *out = mk(QVL_F32, 2, SHAPE(M, N));
        check_op(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias), TOL_DOT);
        tt *ar = rnd(QVL_F32, 2, SHAPE(M, K), -3, 3);
        tt *out2 = mk(QVL_F32, 2, SHAPE(M, N));
        check_op(QVL_OP_MATMUL, NULL, out2, SRC(ar, w, NULL), TOL_DOT);
    }
}

/* Prefill-sized matmuls on the register-tiled GEMM (cu_gemm.cu): every weight dtype on every
 * tile shape (forced through QVL_CUDA_GEMM_TILE, then chosen by the backend), partial tiles
 * at both edges, K not a multiple of the 16-wide step (q8_0: whole blocks) and K of about
 * 1000 (few tiles, long K: split across blocks and summed), weights as every other row of a
 * bigger matrix, bias; a as padded rows, as a 3-D view (the fast path), shifted by one
 * element (misaligned: the generic kernel); MLP_RESIDUAL (residual in the epilogue) and
 * NORM_LINEAR (projections into column ranges) on many rows, also with K split. */
static void test_matmul_gemm(void **state) {
    (void)state;
    static const char *tiles[] = {"128x128", "128x64", "64x64", NULL};
    const char *env = getenv("QVL_CUDA_GEMM_TILE");
    char saved[32] = "";
    if (env) snprintf(saved, sizeof saved, "%s", env);
    for (size_t ti = 0; ti < 4; ti++) {
        if (tiles[ti]) assert_int_equal(setenv("QVL_CUDA_GEMM_TILE", tiles[ti], 1), 0);
        else unsetenv("QVL_CUDA_GEMM_TILE");
        for (size_t wi = 0; wi < 4; wi++) {
            qvl_dtype wd = w_dtypes[wi];
            int64_t M = 150 + 7 * (int64_t)ti, N = 133 + (int64_t)wi;
            int64_t K = wd == QVL_Q8_0 ? 96 : 40, K2 = wd == QVL_Q8_0 ? 1024 : 1000;
            tt *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1);
            tt *wbig = rnd(wd, 2, SHAPE(2 * N, K), -1, 1);
            tt *w = view(wbig, 2, SHAPE(N, K), SHAPE(2 * K, 1), K); /* odd rows */
            tt *bias = rnd(wi % 2 ? QVL_BF16 : QVL_F32, 1, SHAPE(N), -1, 1);
            tt *out = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias), TOL_DOT);

            tt *abig = rnd(QVL_F32, 2, SHAPE(M, K2 + 4), -1, 1);
            tt *w2 = rnd(wd, 2, SHAPE(N, K2), -1, 1);
            tt *pad = view(abig, 2, SHAPE(M, K2), SHAPE(K2 + 4, 1), 0);
            tt *out2 = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out2, SRC(pad, w2, NULL), TOL_DOT);
            int64_t M2 = M / 2;
            tt *a3 = view(abig, 3, SHAPE(2, M2, K2), SHAPE(M2 * (K2 + 4), K2 + 4, 1), 4);
            tt *out3 = mk(QVL_F32, 3, SHAPE(2, M2, N));
            check_op(QVL_OP_MATMUL, NULL, out3, SRC(a3, w2, bias), TOL_DOT);
            tt *odd = view(abig, 2, SHAPE(M, K2), SHAPE(K2 + 4, 1), 1);
            tt *out4 = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out4, SRC(odd, w2, NULL), TOL_DOT);
        }
        int64_t M = 140, F = 1024, Dm = 136, D = 512, Ns[3] = {72, 40, 40};
        qvl_params pm = {.mlp = {.act = QVL_ACT_SILU}};
        tt *res = rnd(QVL_F32, 2, SHAPE(M, Dm), -2, 2);
        tt *ga = rnd(QVL_F32, 2, SHAPE(M, F), -3, 3), *up = rnd(QVL_F32, 2, SHAPE(M, F), -1, 1);
        tt *wdown = rnd(w_dtypes[ti], 2, SHAPE(Dm, F), -0.1f, 0.1f);
        tt *bd = rnd(QVL_F32, 1, SHAPE(Dm), -1, 1), *o = mk(QVL_F32, 2, SHAPE(M, Dm));
        check_op(QVL_OP_MLP_RESIDUAL, &pm, o, SRC(res, ga, wdown, up, bd), TOL_DOT);
        qvl_params pn = {.norm_linear = {.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 3}};
        tt *x = rnd(QVL_F32, 2, SHAPE(M, D), -2, 3);
        tt *g = rnd(QVL_BF16, 1, SHAPE(D), 0.5, 1.5);
        tt *src[QVL_MAX_SRC] = {x, g, NULL};
        for (int i = 0; i < 3; i++) {
            src[3 + 2 * i] = rnd(w_dtypes[(ti + (size_t)i) % 4], 2, SHAPE(Ns[i], D), -1, 1);
            src[4 + 2 * i] = i == 1 ? rnd(QVL_F32, 1, SHAPE(Ns[i]), -1, 1) : NULL;
        }
        tt *on = mk(QVL_F32, 2, SHAPE(M, 152));
        check_op(QVL_OP_NORM_LINEAR, &pn, on, src, TOL_DOT);
    }
    if (env) setenv("QVL_CUDA_GEMM_TILE", saved, 1);
    else unsetenv("QVL_CUDA_GEMM_TILE");
}

/* More elements than one grid covers (65535 blocks x 256 threads): the grid-stride loop of
 * the element-wise kernels. */
static void test_grid_stride(void **state) {
    (void)state;
    tt *x = rnd(QVL_F32, 2, SHAPE(4100, 4100), -4, 4);
    tt *out = mk(QVL_F32, 2, SHAPE(4100, 4100));
    check_op(QVL_OP_SILU, NULL, out, SRC(x), TOL_EW);
}

/* A head size above the attention kernels' limit is refused honestly by supports(). */
static void test_head_size_limit(void **state) {
    (void)state;
    qvl_params p = {.attention = {.scale = 0.5f, .mask = QVL_MASK_NONE}};
    tt *qb = mk(QVL_F32, 3, SHAPE(1, 1, 1024)), *ob = mk(QVL_F32, 3, SHAPE(1, 1, 1024));
    qvl_tensor dq = qb->h, dout = ob->h;
    qvl_node n = {.op = QVL_OP_ATTENTION, .params = p, .n_src = 4, .src = {&dq, &dq, &dq},
                  .dst = &dout};
    assert_int_not_equal(qvl_test_supports(&cu, &n, NULL), QVL_OK);
}

/* ---- run_graph: capture and replay of a decode step ---------------------------------------- */

/* Cache rows [from, L) of a k/v cache filled with NaN: rows not written yet, which attention
 * with CAUSAL_AT must never read (one NaN read would poison the output). */
static void poison_rows(tt *t, int64_t from) {
    const qvl_tensor_desc *d = &t->h.desc;
    int64_t row = d->shape[1] * d->shape[2];
    for (int64_t e = from * row; e < d->shape[0] * row; e++) {
        if (d->dtype == QVL_F32) ((float *)t->h.data)[e] = NAN;
        else if (d->dtype == QVL_F16) ((uint16_t *)t->h.data)[e] = qvl_f32_to_f16(NAN);
        else ((uint16_t *)t->h.data)[e] = qvl_f32_to_bf16(NAN);
    }
}

/* What the executor does: run_graph, or the nodes one by one when it declines. Returns
 * run_graph's answer. */
static qvl_status run_seq(const qvl_node *const *nodes, size_t n) {
    qvl_error err = {0};
    qvl_status s = cu.iface->run_graph(cu.be, nodes, n, &err);
    if (s == QVL_E_UNSUPPORTED) {
        for (size_t k = 0; k < n; k++)
            if (qvl_test_kernel(&cu, nodes[k]->op)(cu.be, nodes[k], &err) != QVL_OK)
                fail_msg("cuda_sm61 %s: %s", qvl_op_name(nodes[k]->op), err.msg);
    } else if (s != QVL_OK) {
        fail_msg("run_graph: %s", err.msg);
    }
    if (cu.iface->synchronize(cu.be, &err) != QVL_OK) fail_msg("synchronize: %s", err.msg);
    return s;
}

/* Captured graphs the backend holds, as describe() reports them ("..., N CUDA graphs"). */
static size_t graphs_held(void) {
    qvl_device_info info;
    assert_int_equal(cu.iface->describe(cu.be, &info), QVL_OK);
    const char *p = strstr(info.name, "scratch, ");
    size_t g = 0;
    assert_non_null(p);
    assert_int_equal(sscanf(p + strlen("scratch, "), "%zu", &g), 1);
    return g;
}

#define SEQ 8
typedef struct seq {
    qvl_node h[SEQ], d[SEQ];
    const qvl_node *dp[SEQ];
    qvl_tensor dsrc[SEQ][QVL_MAX_SRC], ddst[SEQ];
    int n;
} seq;

static void seq_add(seq *q, qvl_op op, const qvl_params *p, tt *dst, tt *const *src) {
    const qvl_tensor *hs[QVL_MAX_SRC] = {0}, *ds[QVL_MAX_SRC] = {0};
    int k = q->n++;
    for (int i = 0; i < QVL_MAX_SRC; i++) {
        if (!src[i]) continue;
        hs[i] = &src[i]->h;
        q->dsrc[k][i] = dev_of(src[i]);
        ds[i] = &q->dsrc[k][i];
    }
    q->ddst[k] = dev_of(dst);
    q->h[k] = tt_node(op, p, &dst->h, hs);
    q->d[k] = tt_node(op, p, &q->ddst[k], ds);
    q->dp[k] = &q->d[k];
}

/* A decode step as the model builds it (embedding lookup, qkv projection, q and k normalised
 * and rotated, two KV-cache writes at `at`, attention over the cache up to `at`), run for
 * several tokens with only the data of ids, pos and at changing: the first run goes node by
 * node, the second is captured, the rest replay; a different output address is a new
 * signature and is captured anew. Every step matches the reference. */
static void graph_replay_case(int64_t D, int64_t R, int at0) {
    int64_t V = 40, Dm = 48, H = 4, Hkv = 2, QKV = (H + 2 * Hkv) * D;
    tt *table = rnd(QVL_F16, 2, SHAPE(V, Dm), -1, 1);
    tt *ids = i32_of(1, (const int32_t[]){0});
    tt *x = mk(QVL_F32, 2, SHAPE(1, Dm));
    tt *w = rnd(QVL_BF16, 2, SHAPE(QKV, Dm), -0.5, 0.5);
    tt *qkv = mk(QVL_F32, 2, SHAPE(1, QKV));
    tt *q = view(qkv, 3, SHAPE(1, H, D), SHAPE(QKV, D, 1), 0);
    tt *kn = view(qkv, 3, SHAPE(1, Hkv, D), SHAPE(QKV, D, 1), H * D);
    tt *vn = view(qkv, 3, SHAPE(1, Hkv, D), SHAPE(QKV, D, 1), (H + Hkv) * D);
    tt *ck = rnd(QVL_F32, 3, SHAPE(R, Hkv, D), -1, 1), *cv = rnd(QVL_F32, 3, SHAPE(R, Hkv, D), -1, 1);
    poison_rows(ck, at0); /* not written yet: reading an unwritten row would show */
    poison_rows(cv, at0);
    tt *ck_all = view(ck, 3, SHAPE(R, Hkv, D), SHAPE(Hkv * D, D, 1), 0);
    tt *cv_all = view(cv, 3, SHAPE(R, Hkv, D), SHAPE(Hkv * D, D, 1), 0);
    tt *at = i32_of(1, (const int32_t[]){0});
    tt *outs[2] = {mk(QVL_F32, 3, SHAPE(1, H, D)), mk(QVL_F32, 3, SHAPE(1, H, D))};
    qvl_params pa = {.attention = {.scale = 0.25f, .mask = QVL_MASK_CAUSAL_AT}};
    /* q and k normalised and rotated (NORM_ROPE), as the fused text graph does: the two
     * NORM_ROPE nodes and the two cache writes are neighbours, which run_graph launches as
     * pairs. */
    tt *pos = mk(QVL_I32, 2, SHAPE(3, 1));
    tt *gq = rnd(QVL_BF16, 1, SHAPE(D), 0.5, 1.5), *gk = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *qr = mk(QVL_F32, 3, SHAPE(1, H, D)), *kr = mk(QVL_F32, 3, SHAPE(1, Hkv, D));
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 1e4f,
                                   .sections = {(int32_t)D / 8, (int32_t)D * 3 / 16,
                                                (int32_t)D * 3 / 16},
                                   .eps = 1e-6f}};

    const tt *all[] = {table, ids, x, w, qkv, ck, cv, at, outs[0], outs[1], pos, gq, gk, qr, kr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq seqs[2];
    for (int v = 0; v < 2; v++) {
        memset(&seqs[v], 0, sizeof seqs[v]);
        seq_add(&seqs[v], QVL_OP_GET_ROWS, NULL, x, SRC(table, ids));
        seq_add(&seqs[v], QVL_OP_MATMUL, NULL, qkv, SRC(x, w));
        seq_add(&seqs[v], QVL_OP_NORM_ROPE, &pr, qr, SRC(q, pos, gq));
        seq_add(&seqs[v], QVL_OP_NORM_ROPE, &pr, kr, SRC(kn, pos, gk));
        seq_add(&seqs[v], QVL_OP_STORE_ROWS_AT, NULL, ck_all, SRC(ck, kr, at));
        seq_add(&seqs[v], QVL_OP_STORE_ROWS_AT, NULL, cv_all, SRC(cv, vn, at));
        seq_add(&seqs[v], QVL_OP_ATTENTION, &pa, outs[v], SRC(qr, ck_all, cv_all, at));
    }

    const char *env = getenv("QVL_CUDA_GRAPHS");
    bool graphs_on = !(env && strcmp(env, "0") == 0);
    size_t held0 = graphs_held();
    for (int step = 0; step < 10; step++) {
        int v = step < 5 ? 0 : 1; /* the second sequence from step 5 on */
        seq *sq = &seqs[v];
        ((int32_t *)ids->h.data)[0] = irand(0, (int)V - 1);
        ((int32_t *)at->h.data)[0] = at0 + step;
        for (int c = 0; c < 3; c++) ((int32_t *)pos->h.data)[c] = at0 + step + 3 * c;
        to_device(ids->store);
        to_device(at->store);
        to_device(pos->store);
        qvl_error err = {0};
        for (int k = 0; k < sq->n; k++)
            if (qvl_test_kernel(&ref, sq->h[k].op)(ref.be, &sq->h[k], &err) != QVL_OK)
                fail_msg("reference %s: %s", qvl_op_name(sq->h[k].op), err.msg);
        qvl_status s = run_seq(sq->dp, (size_t)sq->n);
        bool first = step == 0 || step == 5; /* a new signature: run node by node */
        if (graphs_on) assert_int_equal(s, first ? QVL_E_UNSUPPORTED : QVL_OK);
        else assert_int_equal(s, QVL_E_UNSUPPORTED);
        char what[64];
        snprintf(what, sizeof what, "graph step %d output", step);
        compare_store(what, outs[v]->store, &outs[v]->h, TOL_DOT);
        snprintf(what, sizeof what, "graph step %d k cache", step);
        compare_store(what, ck->store, &ck->h, TOL_DOT);
        snprintf(what, sizeof what, "graph step %d v cache", step);
        compare_store(what, cv->store, &cv->h, TOL_DOT);
        if (graphs_on && step == 2) assert_int_equal(graphs_held(), held0 + 1);
        if (graphs_on && step == 7) assert_int_equal(graphs_held(), held0 + 2);
    }
}

/* Heads of 16, and heads of 128 after 100 cached tokens (split-KV attention reading the
 * cache rows 4 elements per load). */
static void test_graph_replay(void **state) {
    (void)state;
    graph_replay_case(16, 24, 0);
    graph_replay_case(128, 160, 100);
}

/* Neighbouring NORM_ROPE / STORE_ROWS_AT nodes share a launch in run_graph only when neither
 * touches what the other writes: here the second rotation reads the first's output and the
 * two cache writes hit the same rows (the second must win), so nothing may be paired. */
static void test_graph_pairs_dependent(void **state) {
    (void)state;
    int64_t H = 2, D = 16, R = 6;
    tt *x = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *pos = mk(QVL_I32, 2, SHAPE(1, 1));
    tt *g = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *y1 = mk(QVL_F32, 3, SHAPE(1, H, D)), *y2 = mk(QVL_F32, 3, SHAPE(1, H, D));
    tt *c = mk(QVL_F32, 3, SHAPE(R, H, D)), *at = i32_of(1, (const int32_t[]){0});
    tt *c_all = view(c, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_NEOX, .theta = 1e4f, .eps = 1e-6f}};
    const tt *all[] = {x, pos, g, y1, y2, c, at};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq sq;
    memset(&sq, 0, sizeof sq);
    seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y1, SRC(x, pos, g));
    seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y2, SRC(y1, pos, g));
    seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, c_all, SRC(c, y1, at));
    seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, c_all, SRC(c, y2, at));
    for (int step = 0; step < 4; step++) { /* plain, captured, replayed twice */
        ((int32_t *)at->h.data)[0] = step;
        ((int32_t *)pos->h.data)[0] = 5 + 7 * step;
        to_device(at->store);
        to_device(pos->store);
        qvl_error err = {0};
        for (int k = 0; k < sq.n; k++)
            if (qvl_test_kernel(&ref, sq.h[k].op)(ref.be, &sq.h[k], &err) != QVL_OK)
                fail_msg("reference %s: %s", qvl_op_name(sq.h[k].op), err.msg);
        run_seq(sq.dp, (size_t)sq.n);
        compare_store("dependent rotations", y2->store, &y2->h, TOL_NORM);
        compare_store("cache rows written twice", c->store, &c->h, TOL_NORM);
    }
}

/* A decode step's two rotations and two cache writes run as one launch in run_graph when the
 * first write copies one rotation's output and the second touches nothing else; here (a) the
 * first write copies the first rotation (not the second, as in the model), and (b) both writes
 * hit the same rows of one cache (the second must win), which must not be grouped. */
static void test_graph_rope_store_group(void **state) {
    (void)state;
    int64_t H = 2, D = 16, R = 6;
    tt *x = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *x2 = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2);
    tt *v = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *pos = mk(QVL_I32, 2, SHAPE(1, 1));
    tt *g = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *y1 = mk(QVL_F32, 3, SHAPE(1, H, D)), *y2 = mk(QVL_F32, 3, SHAPE(1, H, D));
    tt *c1 = mk(QVL_F32, 3, SHAPE(R, H, D)), *c2 = mk(QVL_F32, 3, SHAPE(R, H, D));
    tt *at = i32_of(1, (const int32_t[]){0});
    tt *c1_all = view(c1, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    tt *c2_all = view(c2, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_NEOX, .theta = 1e4f, .eps = 1e-6f}};
    const tt *all[] = {x, x2, v, pos, g, y1, y2, c1, c2, at};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq sq[2];
    for (int variant = 0; variant < 2; variant++) {
        memset(&sq[variant], 0, sizeof sq[variant]);
        seq_add(&sq[variant], QVL_OP_NORM_ROPE, &pr, y1, SRC(x, pos, g));
        seq_add(&sq[variant], QVL_OP_NORM_ROPE, &pr, y2, SRC(x2, pos, g));
        if (variant == 0) {
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, y1, at));
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c2_all, SRC(c2, v, at));
        } else {
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, y2, at));
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, v, at));
        }
    }
    for (int variant = 0; variant < 2; variant++)
        for (int step = 0; step < 4; step++) { /* plain, captured, replayed twice */
            ((int32_t *)at->h.data)[0] = step + variant;
            ((int32_t *)pos->h.data)[0] = 3 + 11 * step;
            to_device(at->store);
            to_device(pos->store);
            qvl_error err = {0};
            for (int k = 0; k < sq[variant].n; k++)
                if (qvl_test_kernel(&ref, sq[variant].h[k].op)(ref.be, &sq[variant].h[k],
                                                                        &err) != QVL_OK)
                    fail_msg("reference %s: %s", qvl_op_name(sq[variant].h[k].op), err.msg);
            run_seq(sq[variant].dp, (size_t)sq[variant].n);
            compare_store("rotation 1", y1->store, &y1->h, TOL_NORM);
            compare_store("rotation 2", y2->store, &y2->h, TOL_NORM);
            compare_store("cache 1", c1->store, &c1->h, TOL_NORM);
            compare_store("cache 2", c2->store, &c2->h, TOL_NORM);
        }
}

/* Option graphs: 0 turns capture off (run_graph declines, the executor launches node by
 * node); anything but 0 or 1 is refused at init. */
static void test_graph_option(void **state) {
    (void)state;
    const char *keys[] = {"graphs"}, *off[] = {"0"}, *bad[] = {"2"};
    qvl_options o_off = {1, keys, off}, o_bad = {1, keys, bad};
    qvl_backend *be = NULL;
    qvl_error err = {0};
    assert_int_equal(cu.iface->init(&o_bad, &be, &err), QVL_E_INVALID);
    assert_null(be);
    assert_non_null(strstr(err.msg, "graphs"));
    if (getenv("QVL_CUDA_GRAPHS")) return; /* the environment overrides the option */
    assert_int_equal(cu.iface->init(&o_off, &be, &err), QVL_OK);
    qvl_node nodes[1];
    const qvl_node *np[1] = {&nodes[0]};
    memset(nodes, 0, sizeof nodes);
    nodes[0].op = QVL_OP_SILU;
    for (int i = 0; i < 3; i++)
        assert_int_equal(cu.iface->run_graph(be, np, 1, &err), QVL_E_UNSUPPORTED);
    cu.iface->release(be);
}

static int open_backends(void **state) {
    (void)state;
    return qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &ref) == 0 ? 0 : -1;
}

static int close_backends(void **state) {
    (void)state;
    qvl_test_backend_close(&cu);
    qvl_test_backend_close(&ref);
    return 0;
}

/* Load cuda_sm61 and init it; on failure return the reason (no GPU in CI). */
static bool cuda_available(char *why, size_t size) {
    void *dl = dlopen(QVL_CUDA_SO, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        snprintf(why, size, "cannot load %s: %s", QVL_CUDA_SO, dlerror());
        return false;
    }
    qvl_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(dl, QVL_BACKEND_ENTRY_SYMBOL);
    const qvl_backend_iface *iface = entry ? entry() : NULL;
    if (!iface || iface->abi != QVL_BACKEND_ABI) {
        snprintf(why, size, "%s is not a qvl backend", QVL_CUDA_SO);
        dlclose(dl);
        return false;
    }
    qvl_error err = {0};
    qvl_backend *be = NULL;
    if (iface->init(NULL, &be, &err) != QVL_OK) {
        snprintf(why, size, "%s", err.msg);
        dlclose(dl);
        return false;
    }
    cu.dl = dl;
    cu.iface = iface;
    cu.be = be;
    return true;
}

#define T(fn) cmocka_unit_test_teardown(fn, free_all)

int main(void) {
    char why[sizeof(((qvl_error *)0)->msg) + 64];
    if (!cuda_available(why, sizeof why)) {
        printf("test_cuda_backend: skipped, cuda_sm61 is unavailable here: %s\n", why);
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    tt_seed(2024u);
    const struct CMUnitTest tests[] = {
        T(test_describe),
        T(test_small_uploads),
        T(test_matmul_q8_dp4a),
        T(test_matmul_gemm),
        T(test_grid_stride),
        T(test_head_size_limit),
        T(test_graph_replay),
        T(test_graph_pairs_dependent),
        T(test_graph_rope_store_group),
        T(test_graph_option),
    };
    return cmocka_run_group_tests(tests, open_backends, close_backends);
}
