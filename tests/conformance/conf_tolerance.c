/* How close a backend's output must be to the oracle's: one table, one comparison.
 *
 * For every element i of the output:   |got - want| <= atol + rtol * scale + q8[i]
 * where scale = max |want| over the node's finite outputs, and q8[i] (only for matmul-like
 * ops with q8_0, q4_k or q6_k weights) is the activation-rounding bound explained below.
 * Infinities and NaN must be reproduced exactly (-inf from masks, all -inf rows, NaN where
 * the oracle gives NaN).
 *
 * The values are the ones the per-backend harnesses this suite replaces asserted
 * (test_cpu_avx2_ops.c, test_cuda_ops.c, test_reference_ops.c), taking for each op the
 * tightest one that holds for any correct implementation; checks of properties particular to
 * one backend's design (cpu_avx2's bit-identical ROPE, GELU_ERF and exact GEMM weight
 * conversion) live in that backend's own test file. Why each is what it is:
 *
 *  exact (0): GET_ROWS, CONT, STORE_ROWS, STORE_ROWS_AT, SET_ROWS, ADD_ROWS, the masks, ADD,
 *     MUL, SCALE. Each output element is a copy, an exact dtype conversion (dtype.h: f16/bf16/
 *     q8_0 to f32 is exact, f32 to f16/bf16 rounds to nearest even), -inf, or ONE correctly
 *     rounded f32 operation (repeated ADD_ROWS indices add in k order, as ops.h says). Any
 *     IEEE implementation gives the same bits. q4_k and q6_k decode the same way: d*sc*q
 *     (f16 d: 11 significant bits, times integers below 2^10 for q4_k's 6-bit sc and 4-bit q,
 *     below 2^12 for q6_k's |sc * (q - 32)|) and dmin*m are exact in f32 in any order, so
 *     q4_k's d*sc*q - dmin*m is one correctly rounded subtraction and q6_k's value is exact.
 *  matmul (atol 1e-6, rtol 1e-6 sqrt(K)): the oracle sums K products in double, a backend in
 *     f32 in any order. A sum of K f32 roundings grows like sqrt(K) * 6e-8 relative to the
 *     magnitude of the terms; 1e-6 sqrt(K) leaves a margin of ~16x over what cpu_avx2
 *     measured (~1e-7 sqrt(K)). Both sides read the same stored weights (decoding is exact,
 *     see above, for q4_k and q6_k too), so the weight dtype does not enter, except:
 *  q8_0, q4_k, q6_k weights: a backend may round the activations to int8 blocks too (scale
 *     max|a|/127 per 32 values, as llama.cpp and cuda_sm61's __dp4a path do for q8_0, and as
 *     int8 kernels for q4_k / q6_k on cpu_avx2 and cuda_sm61 may), moving each a_k by at most
 *     max|a_block|/254. q8[i] is that rigorous bound: sum over 32-element blocks of
 *     max|a_block|/254 * sum_k |w_k| (w decoded from the stored blocks), +1% because the
 *     kernel's a is f32, computed from the host inputs (for NORM_LINEAR from the normalised
 *     rows, for MLP_RESIDUAL from act(a) (* up), in double). It does not cover activations
 *     rounded over blocks longer than 32 (one int8 scale per 256 values): such a kernel
 *     needs this bound stated for its block first.
 *  norm_linear, mlp_residual (atol 1e-5, rtol 1e-6 sqrt(K) + 1e-6): the matmul bound, plus
 *     the norm's or the activation's own f32 rounding (1e-6 relative, see norms) carried
 *     through the projection.
 *  norm_linear with an output activation (params.act gelu_tanh or gelu_erf): that bound for
 *     the projection, relative to max |pre-activation output| (in double from the host
 *     inputs: the activation shrinks the large negative outputs, not the rounding of the sums
 *     behind them), times ACT_SLOPE (|gelu'| <= 1.129 for both forms, so an error in the
 *     projection grows at most that much through the activation), plus the activation's own
 *     rounding as for GELU_TANH / GELU_ERF (1e-6 of the output scale).
 *  norms (RMS_NORM, LAYER_NORM: atol 1e-7, rtol 1e-6): statistics in f32 instead of double.
 *  softmax (atol 1e-7, rtol 1e-5): a few roundings of exp (vector exp good to 1.2e-7) plus
 *     an f32 sum over up to 1000 keys, relative to the row scale.
 *  silu, gelu_tanh, gelu_erf (atol 1e-30, rtol 1e-6): exp / tanh / erf within a few ulp
 *     (CUDA's expf, tanhf, erff: 2 ulp), a division and a product: 1e-6 of the output scale.
 *  rope, norm_rope (atol 1e-6, rtol 1e-5): the device's sinf/cosf of angles up to ~4000
 *     radians (cuda_sm61's bound; the oracle and cpu_avx2 share the same angle code and
 *     agree exactly, which test_cpu_avx2_backend.c checks); norm_rope adds the norm's 1e-6.
 *  attention (atol 1e-6, rtol 1e-5, + the score bound): softmax's exp and sums, then a
 *     weighted mean of v, relative to the output scale; plus what rounding the scores costs.
 *     A score s = scale q.k rounded in f32 in another order than the oracle's moves by about
 *     a few ulps of T = |scale| sum_d |q_d k_d| (4 u T is allowed, u = 2^-24), and the
 *     output moves by at most 2 max|v| times the largest score error (d out / d s_j =
 *     p_j (v_j - out)). With scores of a few units this adds almost nothing; with scores in
 *     the hundreds (the range-20 cases) it is what separates a GPU's split/flash order from
 *     the oracle's (cuda_sm61: up to 8e-5 of the output scale there).
 *     q8_0 k and v add nothing: d * q (an f16 d of 11 significant bits times an int8) is
 *     exact in f32, so the oracle and the backends attend over identical values, and the
 *     bound above is about the order of the arithmetic only. (A kernel that rounded q to int8
 *     blocks for integer dot products would move each score by up to |scale| sum over
 *     blocks of max|q_block| / 254 * sum |k_block|, and would need that added first.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

typedef struct conf_tol {
    double atol;
    double rtol;       /* times scale */
    double rtol_sqrtk; /* times sqrt(K) * scale, K = the op's dot-product length */
    bool q8;           /* add the int8 activation-rounding bound (block-dtype weights) */
    const char *text;
} conf_tol;

#define EXACT {0, 0, 0, false, "exact"}
static const conf_tol tols[QVL_OP_COUNT] = {
    [QVL_OP_GET_ROWS] = EXACT,
    [QVL_OP_MATMUL] = {1e-6, 0, 1e-6, true, "1e-6 + 1e-6 sqrt(K) max|ref| (+ int8 bound: q8_0/q4_k/q6_k w)"},
    [QVL_OP_ADD] = EXACT,
    [QVL_OP_MUL] = EXACT,
    [QVL_OP_SCALE] = EXACT,
    [QVL_OP_RMS_NORM] = {1e-7, 1e-6, 0, false, "1e-7 + 1e-6 max|ref|"},
    [QVL_OP_LAYER_NORM] = {1e-7, 1e-6, 0, false, "1e-7 + 1e-6 max|ref|"},
    [QVL_OP_ROPE] = {1e-6, 1e-5, 0, false, "1e-6 + 1e-5 max|ref|"},
    [QVL_OP_SOFTMAX] = {1e-7, 1e-5, 0, false, "1e-7 + 1e-5 max|ref|"},
    [QVL_OP_SILU] = {1e-30, 1e-6, 0, false, "1e-6 max|ref|"},
    [QVL_OP_GELU_TANH] = {1e-30, 1e-6, 0, false, "1e-6 max|ref|"},
    [QVL_OP_GELU_ERF] = {1e-30, 1e-6, 0, false, "1e-6 max|ref|"},
    [QVL_OP_MASK_CAUSAL] = EXACT,
    [QVL_OP_MASK_SEGMENTS] = EXACT,
    [QVL_OP_CONT] = EXACT,
    [QVL_OP_STORE_ROWS] = EXACT,
    [QVL_OP_NORM_LINEAR] = {1e-5, 1e-6, 1e-6, true, "1e-5 + (1e-6 + 1e-6 sqrt(K)) max|ref| (+ int8 bound)"},
    [QVL_OP_ATTENTION] = {1e-6, 1e-5, 0, false, "1e-6 + 1e-5 max|ref| + 8u max|v| T (T = max |scale| sum|q k|)"},
    [QVL_OP_MLP_RESIDUAL] = {1e-5, 1e-6, 1e-6, true, "1e-5 + (1e-6 + 1e-6 sqrt(F)) max|ref| (+ int8 bound)"},
    [QVL_OP_SET_ROWS] = EXACT,
    [QVL_OP_ADD_ROWS] = EXACT,
    [QVL_OP_STORE_ROWS_AT] = EXACT,
    [QVL_OP_MASK_CAUSAL_AT] = EXACT,
    [QVL_OP_NORM_ROPE] = {1e-6, 1e-5, 0, false, "1e-6 + 1e-5 max|ref|"},
    [QVL_OP_STORE_SLOT_ROWS] = EXACT,
    [QVL_OP_ATTENTION_SLOTS] = {1e-6, 1e-5, 0, false, "as attention (T over every slot's keys)"},
    [QVL_OP_ARGMAX] = EXACT,
};

const char *conf_tolerance_text(qvl_op op) {
    return (int)op >= 0 && op < QVL_OP_COUNT && tols[op].text ? tols[op].text : "?";
}

/* ---- the int8 activation-rounding bound (q8_0, q4_k, q6_k weights) ---- */

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double gelu_tanh_d(double x) {
    /* 0.5 x (1 + tanh(y)) as x / (1 + e^(-2y)): no cancellation for very negative x */
    double y = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * y));
}
static double gelu_erf_d(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }

#define ACT_BLOCK 32 /* the activation block the bound assumes */

/* Row n of slice `slice` of a weight whose rows have inner stride 1 (every matmul-like weight
 * the generators build; for block dtypes tensor.h requires it), decoded as the backends
 * decode it into row [K]. */
static void weight_row(const conf_tensor *wt, const unsigned char *host, int64_t slice,
                       int64_t n, int64_t K, float *row) {
    const qvl_tensor_desc *d = &wt->desc;
    int64_t off = n * d->stride[d->ndim - 2] + (d->ndim == 3 ? slice * d->stride[0] : 0);
    qvl_to_f32(d->dtype, host + wt->byte_off + qvl_dtype_offset_bytes(d->dtype, off), row, K);
}

/* sums[n * nb + b] = sum |w| over block b of row n of slice `slice` of a block-dtype weight. */
static void weight_block_sums(const conf_tensor *wt, const unsigned char *host, int64_t slice,
                              int64_t K, double *sums, float *row) {
    const qvl_tensor_desc *d = &wt->desc;
    int64_t N = d->shape[d->ndim - 2], nb = (K + ACT_BLOCK - 1) / ACT_BLOCK;
    for (int64_t n = 0; n < N; n++) {
        weight_row(wt, host, slice, n, K, row);
        double *s = sums + n * nb;
        for (int64_t b = 0; b < nb; b++) s[b] = 0;
        for (int64_t k = 0; k < K; k++) s[k / ACT_BLOCK] += fabs(row[k]);
    }
}

/* Adds, for activation rows x [rows, K] against weight w ([N, K] slice of a 2-D or 3-D
 * weight; row r uses slice (r / rows_per_slice) / group), the bound to
 * extra[r * width + col + n]. False when out of memory. */
static bool q8_rows(const conf_case *c, const double *x, int64_t rows, int64_t K, int w,
                    int64_t rows_per_slice, int64_t group, int64_t col, int64_t width,
                    double *extra) {
    const conf_tensor *wt = &c->t[w];
    const unsigned char *wb = c->st[wt->storage].host;
    int64_t N = wt->desc.shape[wt->desc.ndim - 2], nb = (K + ACT_BLOCK - 1) / ACT_BLOCK;
    double *sums = malloc((size_t)(N * nb) * sizeof *sums);
    double *amax = malloc((size_t)nb * sizeof *amax);
    float *row = malloc((size_t)K * sizeof *row);
    bool ok = sums && amax && row;
    int64_t have = -1; /* the slice in sums */
    for (int64_t r = 0; ok && r < rows; r++) {
        int64_t slice = wt->desc.ndim == 3 ? (r / rows_per_slice) / group : 0;
        if (slice != have) weight_block_sums(wt, wb, have = slice, K, sums, row);
        const double *xr = x + r * K;
        for (int64_t b = 0; b < nb; b++) amax[b] = 0;
        for (int64_t k = 0; k < K; k++)
            amax[k / ACT_BLOCK] = fmax(amax[k / ACT_BLOCK], fabs(xr[k]));
        for (int64_t n = 0; n < N; n++) {
            double sum = 0;
            for (int64_t b = 0; b < nb; b++) sum += amax[b] / 254.0 * sums[n * nb + b];
            extra[r * width + col + n] += sum * 1.01;
        }
    }
    free(sums);
    free(amax);
    free(row);
    return ok;
}

/* The activation rows a kernel would quantise, in double, for a matmul-like op. */
static double *activation_rows(const conf_case *c, int64_t *rows_out, int64_t *k_out) {
    const conf_tensor *x = &c->t[c->src[c->op == QVL_OP_MLP_RESIDUAL ? 1 : 0]];
    const unsigned char *xb = c->st[x->storage].host;
    int64_t K = x->desc.shape[x->desc.ndim - 1], rows = conf_nelem(&x->desc) / K;
    double *v = malloc((size_t)(rows * K) * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < rows * K; i++) v[i] = conf_get(x, xb, i);
    if (c->op == QVL_OP_NORM_LINEAR) {
        const qvl_norm_linear_params *p = &c->params.norm_linear;
        bool layer = p->norm == QVL_NORM_LAYER;
        const conf_tensor *g = &c->t[c->src[1]];
        const conf_tensor *b = c->src[2] >= 0 ? &c->t[c->src[2]] : NULL;
        for (int64_t r = 0; r < rows; r++) {
            double *xr = v + r * K, mean = 0, sq = 0;
            if (layer) {
                for (int64_t k = 0; k < K; k++) mean += xr[k];
                mean /= (double)K;
            }
            for (int64_t k = 0; k < K; k++) sq += (xr[k] - mean) * (xr[k] - mean);
            double inv = 1.0 / sqrt(sq / (double)K + p->eps);
            for (int64_t k = 0; k < K; k++) {
                xr[k] = (xr[k] - mean) * inv * conf_get(g, c->st[g->storage].host, k);
                if (b) xr[k] += conf_get(b, c->st[b->storage].host, k);
            }
        }
    } else if (c->op == QVL_OP_MLP_RESIDUAL) {
        const conf_tensor *up = c->src[3] >= 0 ? &c->t[c->src[3]] : NULL;
        for (int64_t i = 0; i < rows * K; i++) {
            int act = c->params.mlp.act;
            v[i] = up ? silu_d(v[i]) * conf_get(up, c->st[up->storage].host, i)
                 : act == QVL_ACT_GELU_TANH ? gelu_tanh_d(v[i])
                 : act == QVL_ACT_GELU_ERF  ? gelu_erf_d(v[i])
                                            : v[i];
        }
    }
    *rows_out = rows;
    *k_out = K;
    return v;
}

/* Per-element int8 allowance, or NULL when the node has no block-dtype weight (caller frees);
 * *nomem set when it could not be computed. */
static double *q8_bound(const conf_case *c, bool *nomem) {
    int ws[3] = {-1, -1, -1};
    if (c->op == QVL_OP_MATMUL) ws[0] = c->src[1];
    else if (c->op == QVL_OP_MLP_RESIDUAL) ws[0] = c->src[2];
    else if (c->op == QVL_OP_NORM_LINEAR)
        for (int j = 0; j < 3; j++) ws[j] = c->src[3 + 2 * j];
    bool any = false;
    for (int j = 0; j < 3; j++) any |= ws[j] >= 0 && qvl_dtype_is_quant(c->t[ws[j]].desc.dtype);
    *nomem = false;
    if (!any) return NULL;
    const qvl_tensor_desc *od = &c->t[c->dst].desc;
    int64_t width = od->shape[od->ndim - 1], rows, K;
    double *extra = calloc((size_t)conf_nelem(od), sizeof *extra);
    double *x = extra ? activation_rows(c, &rows, &K) : NULL;
    if (!x) {
        free(extra);
        *nomem = true;
        return NULL;
    }
    /* 3-D weights: rows of batch b = r / M use weight slice b / (B / Bw) */
    int64_t rows_per_slice = rows, group = 1;
    if (c->op == QVL_OP_MATMUL && c->t[ws[0]].desc.ndim == 3) {
        const qvl_tensor_desc *a = &c->t[c->src[0]].desc;
        rows_per_slice = a->shape[1];
        group = a->shape[0] / c->t[ws[0]].desc.shape[0];
    }
    int64_t col = 0;
    for (int j = 0; j < 3 && ws[j] >= 0; j++) {
        const qvl_tensor_desc *wd = &c->t[ws[j]].desc;
        if (qvl_dtype_is_quant(wd->dtype) &&
            !q8_rows(c, x, rows, K, ws[j], rows_per_slice, group, col, width, extra)) {
            free(x);
            free(extra);
            *nomem = true;
            return NULL;
        }
        col += wd->shape[wd->ndim - 2];
    }
    free(x);
    return extra;
}

/* ---- NORM_LINEAR's output activation ---- */

/* The most an error in a projection output grows through gelu_tanh or gelu_erf: their
 * slopes stay within [-0.13, 1.129]. */
#define ACT_SLOPE 1.13

/* max |pre-activation output| of a NORM_LINEAR: the normalised rows (activation_rows) times
 * every projection's weights plus its bias, in double; -1 when out of memory. */
static double pre_activation_scale(const conf_case *c) {
    int64_t rows, K;
    double *x = activation_rows(c, &rows, &K);
    float *w = x ? malloc((size_t)K * sizeof *w) : NULL;
    if (!w) {
        free(x);
        return -1;
    }
    double scale = 0;
    for (int j = 0; j < 3 && c->src[3 + 2 * j] >= 0; j++) {
        const conf_tensor *wt = &c->t[c->src[3 + 2 * j]];
        const conf_tensor *bt = c->src[4 + 2 * j] >= 0 ? &c->t[c->src[4 + 2 * j]] : NULL;
        for (int64_t n = 0; n < wt->desc.shape[0]; n++) {
            weight_row(wt, c->st[wt->storage].host, 0, n, K, w);
            double b = bt ? conf_get(bt, c->st[bt->storage].host, n) : 0;
            for (int64_t r = 0; r < rows; r++) {
                double y = b;
                for (int64_t k = 0; k < K; k++) y += x[r * K + k] * w[k];
                scale = fmax(scale, fabs(y));
            }
        }
    }
    free(x);
    free(w);
    return scale;
}

/* ---- the attention score bound ---- */

/* 2 max|v| * 4 u * T, T the largest |scale| sum_d |q_d k_d| over every query, head and key
 * (masked keys included: an overestimate is safe). */
static double attention_score_bound(const conf_case *c) {
    const conf_tensor *q = &c->t[c->src[0]], *k = &c->t[c->src[1]], *v = &c->t[c->src[2]];
    const unsigned char *qb = c->st[q->storage].host, *kb = c->st[k->storage].host;
    const unsigned char *vb = c->st[v->storage].host;
    int64_t N = q->desc.shape[0], Hq = q->desc.shape[1], D = q->desc.shape[2];
    /* ATTENTION_SLOTS: every slot's keys, [S * L, Hkv, D] (a bound over more keys holds) */
    const bool pooled = c->op == QVL_OP_ATTENTION_SLOTS;
    int64_t L = pooled ? k->desc.shape[0] * k->desc.shape[1] : k->desc.shape[0];
    int64_t Hkv = k->desc.shape[pooled ? 2 : 1], group = Hq / Hkv;
    double vmax = 0, T = 0;
    for (int64_t i = 0; i < conf_nelem(&v->desc); i++) vmax = fmax(vmax, fabs(conf_get(v, vb, i)));
    /* |q| and |k| once, contiguous, so the N x Hq x L x D loop stays cheap */
    double *aq = malloc((size_t)(N * Hq * D) * sizeof *aq);
    double *ak = malloc((size_t)(L * Hkv * D) * sizeof *ak);
    if (!aq || !ak) {
        free(aq);
        free(ak);
        return INFINITY; /* no memory for the bound: fail loudly rather than pass quietly */
    }
    for (int64_t i = 0; i < N * Hq * D; i++) aq[i] = fabs(conf_get(q, qb, i));
    for (int64_t i = 0; i < L * Hkv * D; i++) ak[i] = fabs(conf_get(k, kb, i));
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < Hq; h++) {
            const double *qr = aq + (n * Hq + h) * D;
            for (int64_t j = 0; j < L; j++) {
                const double *kr = ak + (j * Hkv + h / group) * D;
                double sum = 0;
                for (int64_t d = 0; d < D; d++) sum += qr[d] * kr[d];
                T = fmax(T, sum);
            }
        }
    free(aq);
    free(ak);
    T *= fabs((double)c->params.attention.scale);
    return 2.0 * vmax * 4.0 * ldexp(T, -24);
}

/* ---- the comparison ---- */

static int64_t dot_length(const conf_case *c) {
    const qvl_tensor_desc *x = &c->t[c->src[c->op == QVL_OP_MLP_RESIDUAL ? 1 : 0]].desc;
    return x->shape[x->ndim - 1];
}

bool conf_compare(const conf_case *c, const unsigned char *want, const unsigned char *got,
                  char *msg, size_t msg_size, double *closeness) {
    const conf_tol *tol = &tols[c->op];
    const conf_tensor *t = &c->t[c->check];
    int64_t n = conf_nelem(&t->desc);
    double scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = conf_get(t, want, i);
        if (isfinite(w)) scale = fmax(scale, fabs(w));
    }
    /* the projection's bound is relative to its own outputs: before the activation, if any */
    double pre = scale, slope = 1, act_round = 0;
    bool nomem = false;
    if (c->op == QVL_OP_NORM_LINEAR && c->params.norm_linear.act != QVL_ACT_NONE) {
        pre = pre_activation_scale(c);
        nomem = pre < 0;
        slope = ACT_SLOPE;
        act_round = tols[QVL_OP_GELU_TANH].rtol * scale;
    }
    double base = tol->atol + tol->rtol * pre;
    if (tol->rtol_sqrtk > 0) base += tol->rtol_sqrtk * sqrt((double)dot_length(c)) * pre;
    if (c->op == QVL_OP_ATTENTION || c->op == QVL_OP_ATTENTION_SLOTS)
        base += attention_score_bound(c);
    double *extra = tol->q8 && !nomem ? q8_bound(c, &nomem) : NULL;
    if (nomem) { /* fail loudly rather than compare without the allowance */
        snprintf(msg, msg_size, "out of memory for the int8 activation bound");
        *closeness = INFINITY;
        return false;
    }
    double worst_excess = 0;
    int64_t worst = -1;
    *closeness = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = conf_get(t, want, i), g = conf_get(t, got, i);
        double bound = slope * (base + (extra ? extra[i] : 0)) + act_round, d;
        if (isnan(w) || isnan(g)) d = isnan(w) && isnan(g) ? 0 : INFINITY;
        else if (isinf(w) || isinf(g)) d = w == g ? 0 : INFINITY;
        else d = fabs(g - w);
        if (d > 0) *closeness = fmax(*closeness, bound > 0 ? d / bound : INFINITY);
        if (d > bound && (worst < 0 || d - bound > worst_excess)) {
            worst_excess = d - bound;
            worst = i;
        }
    }
    if (worst >= 0) {
        double w = conf_get(t, want, worst), g = conf_get(t, got, worst);
        double bound = slope * (base + (extra ? extra[worst] : 0)) + act_round;
        snprintf(msg, msg_size, "element %lld of %lld: got %.9g, oracle %.9g (|diff| %.3g > %.3g)",
                 (long long)worst, (long long)n, g, w, fabs(g - w), bound);
    }
    free(extra);
    return worst < 0;
}
