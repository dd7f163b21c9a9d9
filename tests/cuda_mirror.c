/* The mirrored-storage harness of test_cuda_backend.c: see cuda_mirror.h. */
#include "cuda_mirror.h"

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

qvl_test_backend ref, cu;

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

#define MAX_TTS 2048
static tt tts[MAX_TTS];
static int n_tts;

int free_all(void **state) {
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
tt *mk(qvl_dtype dt, int ndim, const int64_t *shape) {
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
tt *view(const tt *base, int ndim, const int64_t *shape, const int64_t *stride,
                int64_t offset) {
    return new_tt(base->h.desc.dtype, ndim, shape, stride, base->store, offset);
}

int irand(int lo, int hi) { /* [lo, hi] */
    return lo + (int)(tt_frand(0.0f, 1.0f) * (float)(hi - lo + 1)) % (hi - lo + 1);
}

/* A contiguous tensor of random values in [lo, hi) (tt_fill_random) with its own storage. */
tt *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi) {
    tt *t = mk(dt, ndim, shape);
    tt_fill_random(dt, t->h.data, tt_nelem(&t->h.desc), lo, hi);
    return t;
}

tt *i32_of(int64_t n, const int32_t *values) {
    tt *t = mk(QVL_I32, 1, (const int64_t[]){n});
    memcpy(t->h.data, values, (size_t)n * sizeof(int32_t));
    return t;
}

/* ---- running one node on both backends ---------------------------------------------------- */

void to_device(int st) {
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
qvl_tensor dev_of(const tt *t) {
    qvl_tensor d = t->h;
    const store *s = &stores[t->store];
    d.data = (char *)s->dev.data + ((const unsigned char *)t->h.data - s->host);
    return d;
}

/* Per-element allowance added to the op's tolerance (q8_bound), or NULL. */
static const double *g_extra_bound;

/* Download the device copy of storage st and compare it, read through the host tensor
 * want's descriptor (which lies in the same storage), with want's values within tol. */
void compare_store(const char *what, int st, const qvl_tensor *want, double tol) {
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

void check_op(qvl_op op, const qvl_params *p, tt *dst, tt *const *src, double tol) {
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

/* ---- the two backends ------------------------------------------------------------------------ */

int open_backends(void **state) {
    (void)state;
    return qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &ref) == 0 ? 0 : -1;
}

int close_backends(void **state) {
    (void)state;
    qvl_test_backend_close(&cu);
    qvl_test_backend_close(&ref);
    return 0;
}

/* Load cuda_sm61 and init it; on failure return the reason (no GPU in CI). */
bool cuda_available(char *why, size_t size) {
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
