/* Cases of the element-wise and row-wise ops: ADD and MUL (b broadcast on the innermost
 * dims), SCALE, SILU, GELU_TANH, GELU_ERF, SOFTMAX (rows all -inf included), ARGMAX (ties,
 * NaN, +inf and all -inf rows), RMS_NORM and LAYER_NORM (with and without beta). Inputs are
 * f32 (the contract), often strided views. */
#include <math.h>

#include "conf.h"

/* A random shape of 1..4 dims, small outer dims and an inner one up to inner_max. */
static int random_shape(conf_rng *r, int64_t *shape, int64_t inner_max) {
    int nd = (int)conf_irand(r, 1, 4);
    for (int i = 0; i < nd - 1; i++) shape[i] = conf_size(r, 7);
    shape[nd - 1] = conf_size(r, inner_max);
    return nd;
}

/* ---- ADD, MUL ---- */

static void binary(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t shape[QVL_MAX_DIMS], bshape[QVL_MAX_DIMS];
    int nd = random_shape(r, shape, 70);
    if (i == 0) { /* the whole shape large: several vector blocks and a tail in every row */
        nd = 3;
        shape[0] = 3, shape[1] = 17, shape[2] = 131;
    }
    int bnd = (int)conf_irand(r, 1, nd);
    for (int k = 0; k < bnd; k++) bshape[k] = conf_irand(r, 0, 2) ? shape[k + nd - bnd] : 1;
    conf_describe(c, " a %dd b %dd", nd, bnd);
    for (int k = 0; k < bnd; k++) conf_describe(c, "%s%lld", k ? "x" : " [", (long long)bshape[k]);
    conf_describe(c, "]");
    c->src[0] = conf_input(c, nd, shape, -3, 3);
    c->src[1] = conf_input(c, bnd, bshape, -3, 3);
    conf_out(c, QVL_F32, nd, shape);
}

void conf_gen_add(conf_case *c, int i) { binary(c, i); }
void conf_gen_mul(conf_case *c, int i) { binary(c, i); }

/* ---- SCALE and the activations ---- */

/* x in [-8, 8); case 0 is a dense sweep of [-20, 20] (where exp over- and underflows in the
 * sigmoid and the tanh saturates), case 1 a long row. */
static void unary(conf_case *c, int i, float lo, float hi) {
    conf_rng *r = c->rng;
    if (i == 0) {
        const int64_t n = 40001;
        c->src[0] = conf_rand(c, QVL_F32, 1, &n, 0, 1);
        for (int64_t k = 0; k < n; k++) conf_set(c, c->src[0], k, -20.0 + 40.0 * (double)k / (double)(n - 1));
        conf_describe(c, " sweep of [-20, 20]");
        conf_out(c, QVL_F32, 1, &n);
        return;
    }
    int64_t shape[QVL_MAX_DIMS];
    int nd = random_shape(r, shape, 300);
    if (i == 1) nd = 2, shape[0] = 3, shape[1] = 4097;
    conf_describe(c, " %dd inner %lld", nd, (long long)shape[nd - 1]);
    c->src[0] = conf_input(c, nd, shape, lo, hi);
    conf_out(c, QVL_F32, nd, shape);
}

void conf_gen_scale(conf_case *c, int i) {
    c->params.scale.s = conf_frand(c->rng, -2, 2);
    unary(c, i, -8, 8);
}
void conf_gen_silu(conf_case *c, int i) { unary(c, i, -8, 8); }
void conf_gen_gelu_tanh(conf_case *c, int i) { unary(c, i, -8, 8); }
void conf_gen_gelu_erf(conf_case *c, int i) { unary(c, i, -8, 8); }

/* ---- SOFTMAX ---- */

static const int64_t softmax_edges[] = {1, 5, 19, 33, 257, 300, 1000};
#define N_SOFTMAX_EDGES ((int)(sizeof softmax_edges / sizeof softmax_edges[0]))

void conf_gen_softmax(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t R = conf_irand(r, 1, 6), L = i < N_SOFTMAX_EDGES ? softmax_edges[i] : conf_size(r, 300);
    float range = conf_irand(r, 0, 1) ? 30.0f : 5.0f;
    conf_describe(c, " [%lld, %lld] in +-%g", (long long)R, (long long)L, (double)range);
    int x = conf_input(c, 2, CONF_SHAPE(R, L), -range, range);
    c->src[0] = x;
    /* rows with nothing visible give all 0; single hidden keys; a large spread */
    if (R > 1 || i < N_SOFTMAX_EDGES) {
        int64_t hidden_row = conf_irand(r, 0, R - 1);
        for (int64_t j = 0; j < L; j++) conf_set(c, x, hidden_row * L + j, -INFINITY);
        conf_describe(c, ", row %lld all -inf", (long long)hidden_row);
    }
    for (int k = 0; k < 3; k++) conf_set(c, x, conf_irand(r, 0, R * L - 1), -INFINITY);
    conf_set(c, x, conf_irand(r, 0, R * L - 1), -80.0);
    conf_out(c, QVL_F32, 2, CONF_SHAPE(R, L));
}

/* ---- ARGMAX ---- */

/* 16384 and 40003: whole passes of a 1024-thread block's 4 vector loads a thread, then the
 * rest and a tail of V % 4 (cuda_sm61's argmax of aligned f32 rows). */
static const int64_t argmax_edges[] = {1, 7, 8, 9, 300, 1000, 4099, 16384, 40003};
#define N_ARGMAX_EDGES ((int)(sizeof argmax_edges / sizeof argmax_edges[0]))

/* Rows of values in +-5 where the largest sits twice (the first must win), one row with a NaN,
 * one with +inf, one all -inf (each -1) and -inf entries elsewhere; half the cases read the
 * first V of wider rows (a view: logits cut to the vocabulary the sampler may choose). */
void conf_gen_argmax(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t R = conf_irand(r, 1, 8), V = i < N_ARGMAX_EDGES ? argmax_edges[i] : conf_size(r, 2000);
    const bool slice = conf_irand(r, 0, 1);
    const int64_t W = slice ? V + conf_irand(r, 1, 40) : V;
    int x = conf_rand(c, QVL_F32, 2, CONF_SHAPE(R, W), -5, 5);
    c->src[0] = slice ? conf_view(c, x, 2, CONF_SHAPE(R, V), CONF_SHAPE(W, 1), 0) : x;
    conf_describe(c, " [%lld, %lld]%s", (long long)R, (long long)V, slice ? " of wider rows" : "");
    for (int64_t row = 0; row < R; row++) {
        int64_t a = conf_irand(r, 0, V - 1), b = conf_irand(r, 0, V - 1);
        conf_set(c, x, row * W + a, 7.0);
        conf_set(c, x, row * W + b, 7.0);
        conf_set(c, x, row * W + conf_irand(r, 0, V - 1), -INFINITY);
        if (slice) conf_set(c, x, row * W + V, 9.0); /* past the view: never chosen */
    }
    if (R >= 4) {
        int64_t nan_row = conf_irand(r, 0, R - 1), inf_row = (nan_row + 1) % R;
        int64_t ninf_row = (nan_row + 2) % R;
        conf_set(c, x, nan_row * W + conf_irand(r, 0, V - 1), NAN);
        conf_set(c, x, inf_row * W + conf_irand(r, 0, V - 1), INFINITY);
        for (int64_t j = 0; j < V; j++) conf_set(c, x, ninf_row * W + j, -INFINITY);
        conf_describe(c, ", rows %lld NaN, %lld +inf, %lld all -inf", (long long)nan_row,
                      (long long)inf_row, (long long)ninf_row);
    }
    conf_out(c, QVL_I32, 1, &R);
}

/* ---- RMS_NORM, LAYER_NORM ---- */

static const int64_t norm_edges[] = {1, 7, 37, 45, 64, 300, 1025, 2048};
#define N_NORM_EDGES ((int)(sizeof norm_edges / sizeof norm_edges[0]))

static void norm(conf_case *c, int i, bool layer) {
    conf_rng *r = c->rng;
    int64_t D = i < N_NORM_EDGES ? norm_edges[i] : conf_size(r, 300);
    c->params.norm.eps = conf_irand(r, 0, 1) ? 1e-6f : 1e-5f;
    if (i % 5 == 4) { /* a per-head norm: [N, H, D] heads inside wider q/k/v rows */
        int64_t N = conf_size(r, 6), H = conf_irand(r, 1, 4), W = 3 * H * D;
        int qkv = conf_rand(c, QVL_F32, 2, CONF_SHAPE(N, W), -2, 2);
        c->src[0] = conf_view(c, qkv, 3, CONF_SHAPE(N, H, D), CONF_SHAPE(W, D, 1), H * D);
        conf_describe(c, " heads [%lld, %lld, %lld] of qkv rows", (long long)N, (long long)H,
                      (long long)D);
        conf_out(c, QVL_F32, 3, CONF_SHAPE(N, H, D));
    } else {
        int64_t R = conf_size(r, 6);
        c->src[0] = conf_input(c, 2, CONF_SHAPE(R, D), -3, 5); /* mean far from 0 */
        conf_describe(c, " [%lld, %lld]", (long long)R, (long long)D);
        conf_out(c, QVL_F32, 2, CONF_SHAPE(R, D));
    }
    c->src[1] = conf_rand(c, conf_small_dtype(r), 1, &D, 0.5f, 1.5f);
    conf_describe(c, " gamma %s", qvl_dtype_name(c->t[c->src[1]].desc.dtype));
    if (layer && conf_irand(r, 0, 2) > 0) {
        c->src[2] = conf_rand(c, conf_small_dtype(r), 1, &D, -1, 1);
        conf_describe(c, " beta %s", qvl_dtype_name(c->t[c->src[2]].desc.dtype));
    }
}

void conf_gen_rms_norm(conf_case *c, int i) { norm(c, i, false); }
void conf_gen_layer_norm(conf_case *c, int i) { norm(c, i, true); }
