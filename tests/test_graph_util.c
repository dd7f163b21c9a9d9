/* Helpers for the graph tests: see test_graph_util.h. */
#define _POSIX_C_SOURCE 200809L /* access() */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_graph_util.h"

tg_text_dims tg_text_default(void) {
    tg_text_dims d = {64, 4, 2, 16, 96, 5, 3, 12, 2, true};
    return d;
}

tg_vision_dims tg_vision_default(void) {
    tg_vision_dims d = {32, 2, 16, 64, 8, 2};
    return d;
}

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

static void assert_built(qvl_graph *g) {
    qvl_error err = {0};
    qvl_status s = qvl_graph_error(g, &err);
    if (s != QVL_OK) print_error("graph did not build: %s\n", err.msg);
    assert_int_equal(s, QVL_OK);
}

/* One Qwen3-style decoder layer from primitive ops; returns the new residual stream. */
static qvl_tid text_layer(qvl_graph *g, const tg_text_dims *d, int l, qvl_tid x, qvl_tid pos) {
    const int64_t H = d->hidden, hq = d->n_q_heads, hkv = d->n_kv_heads, hd = d->head_dim;
    const int64_t N = d->n_tokens, F = d->inter;
    char n[96];
#define W(name, ...) (snprintf(n, sizeof n, "blk.%d." name, l), qvl_g_weight(g, n, QVL_F32, SHAPE(__VA_ARGS__)))
    qvl_tid h = qvl_g_rms_norm(g, x, W("attn_norm", H), 1e-6f);
    qvl_g_name(g, h, "blk.%d.attn_norm_out", l);
    qvl_tid q = qvl_g_matmul(g, h, W("wq", hq * hd, H), -1);
    qvl_tid k = qvl_g_matmul(g, h, W("wk", hkv * hd, H), -1);
    qvl_tid v = qvl_g_matmul(g, h, W("wv", hkv * hd, H), -1);
    q = qvl_g_reshape(g, q, SHAPE(N, hq, hd));
    k = qvl_g_reshape(g, k, SHAPE(N, hkv, hd));
    v = qvl_g_reshape(g, v, SHAPE(N, hkv, hd));
    q = qvl_g_rms_norm(g, q, W("q_norm", hd), 1e-6f);
    k = qvl_g_rms_norm(g, k, W("k_norm", hd), 1e-6f);
    qvl_rope_params rp = {QVL_ROPE_MROPE_INTERLEAVED, 10000.0f, {2, 3, 3, 0}};
    q = qvl_g_rope(g, q, pos, &rp);
    k = qvl_g_rope(g, k, pos, &rp);
    snprintf(n, sizeof n, "kv.%d.k", l);
    qvl_tid kc = qvl_g_input(g, n, QVL_F32, SHAPE(d->kv_capacity, hkv, hd));
    snprintf(n, sizeof n, "kv.%d.v", l);
    qvl_tid vc = qvl_g_input(g, n, QVL_F32, SHAPE(d->kv_capacity, hkv, hd));
    qvl_tid ka = qvl_g_store_rows(g, kc, k, d->n_past);
    qvl_tid va = qvl_g_store_rows(g, vc, v, d->n_past);
    qvl_tid qp = qvl_g_permute(g, q, (const int[]){1, 0, 2});
    qvl_tid kp = qvl_g_permute(g, ka, (const int[]){1, 0, 2});
    qvl_tid s = qvl_g_matmul(g, qp, kp, -1);
    s = qvl_g_scale(g, s, 1.0f / sqrtf((float)hd));
    s = qvl_g_mask_causal(g, s, d->n_past);
    s = qvl_g_softmax(g, s);
    qvl_tid vt = qvl_g_permute(g, va, (const int[]){1, 2, 0});
    qvl_tid o = qvl_g_matmul(g, s, vt, -1);
    o = qvl_g_permute(g, o, (const int[]){1, 0, 2});
    o = qvl_g_cont(g, o);
    qvl_g_name(g, o, "blk.%d.attn_out", l);
    o = qvl_g_reshape(g, o, SHAPE(N, hq * hd));
    o = qvl_g_matmul(g, o, W("wo", H, hq * hd), -1);
    x = qvl_g_add(g, x, o);
    qvl_g_name(g, x, "blk.%d.attn_res", l);
    h = qvl_g_rms_norm(g, x, W("ffn_norm", H), 1e-6f);
    qvl_tid gate = qvl_g_matmul(g, h, W("w_gate", F, H), -1);
    qvl_tid up = qvl_g_matmul(g, h, W("w_up", F, H), -1);
    qvl_tid m = qvl_g_mul(g, qvl_g_unary(g, QVL_OP_SILU, gate), up);
    qvl_tid down = qvl_g_matmul(g, m, W("w_down", H, F), -1);
    x = qvl_g_add(g, x, down);
    qvl_g_name(g, x, "blk.%d.ffn_res", l);
#undef W
    return x;
}

qvl_graph *tg_build_text(const tg_text_dims *d) {
    qvl_graph *g = qvl_graph_new();
    assert_non_null(g);
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(d->n_tokens, d->hidden));
    qvl_tid pos = qvl_g_input(g, "pos", QVL_I32, SHAPE(3, d->n_tokens));
    for (int l = 0; l < d->n_layers; l++) x = text_layer(g, d, l, x, pos);
    if (d->lm_head) {
        qvl_tid h = qvl_g_rms_norm(g, x, qvl_g_weight(g, "norm", QVL_F32, SHAPE(d->hidden)), 1e-6f);
        qvl_tid logits = qvl_g_matmul(g, h, qvl_g_weight(g, "lm_head", QVL_F32, SHAPE(40, d->hidden)), -1);
        qvl_g_output(g, logits, "logits");
    } else {
        qvl_g_output(g, x, "out");
    }
    assert_built(g);
    return g;
}

qvl_graph *tg_build_vision(const tg_vision_dims *d) {
    const int64_t H = d->hidden, nh = d->n_heads, hd = d->head_dim, S = d->n_patches, F = d->inter;
    qvl_graph *g = qvl_graph_new();
    assert_non_null(g);
    qvl_tid x = qvl_g_input(g, "x", QVL_F32, SHAPE(S, H));
    qvl_tid pos = qvl_g_input(g, "rope_pos", QVL_I32, SHAPE(2, S));
    qvl_tid seg = qvl_g_input(g, "segments", QVL_I32, SHAPE(d->n_segments + 1));
#define W(name, ...) qvl_g_weight(g, "v." name, QVL_F32, SHAPE(__VA_ARGS__))
    qvl_tid h = qvl_g_layer_norm(g, x, W("norm1.w", H), W("norm1.b", H), 1e-6f);
    qvl_tid qkv = qvl_g_matmul(g, h, W("qkv.w", 3 * nh * hd, H), W("qkv.b", 3 * nh * hd));
    qkv = qvl_g_reshape(g, qkv, SHAPE(S, 3 * nh, hd));
    qvl_tid q = qvl_g_slice(g, qkv, 1, 0, nh);
    qvl_tid k = qvl_g_slice(g, qkv, 1, nh, nh);
    qvl_tid v = qvl_g_slice(g, qkv, 1, 2 * nh, nh);
    qvl_rope_params rp = {QVL_ROPE_VISION_2D, 10000.0f, {0, 0, 0, 0}};
    q = qvl_g_rope(g, q, pos, &rp);
    k = qvl_g_rope(g, k, pos, &rp);
    qvl_tid s = qvl_g_matmul(g, qvl_g_permute(g, q, (const int[]){1, 0, 2}),
                             qvl_g_permute(g, k, (const int[]){1, 0, 2}), -1);
    s = qvl_g_scale(g, s, 1.0f / sqrtf((float)hd));
    s = qvl_g_mask_segments(g, s, seg);
    s = qvl_g_softmax(g, s);
    qvl_tid o = qvl_g_matmul(g, s, qvl_g_permute(g, v, (const int[]){1, 2, 0}), -1);
    o = qvl_g_cont(g, qvl_g_permute(g, o, (const int[]){1, 0, 2}));
    o = qvl_g_reshape(g, o, SHAPE(S, nh * hd));
    o = qvl_g_matmul(g, o, W("proj.w", H, nh * hd), W("proj.b", H));
    x = qvl_g_add(g, x, o);
    h = qvl_g_layer_norm(g, x, W("norm2.w", H), W("norm2.b", H), 1e-6f);
    qvl_tid f = qvl_g_matmul(g, h, W("fc1.w", F, H), W("fc1.b", F));
    f = qvl_g_unary(g, QVL_OP_GELU_TANH, f);
    f = qvl_g_matmul(g, f, W("fc2.w", H, F), W("fc2.b", H));
    x = qvl_g_add(g, f, x); /* the other operand order */
#undef W
    qvl_g_output(g, x, "out");
    assert_built(g);
    return g;
}

void tg_fill_i32(qvl_tid t, const char *name, int32_t *data, int64_t n, void *user) {
    (void)t;
    if (name && strcmp(name, "segments") == 0) {
        int64_t patches = user ? *(const int64_t *)user : 0, g = n - 1;
        for (int64_t i = 0; i < n; i++) data[i] = (int32_t)(g > 0 ? patches * i / g : 0);
        return;
    }
    bool positions = name && (strcmp(name, "pos") == 0 || strcmp(name, "rope_pos") == 0);
    for (int64_t i = 0; i < n; i++) data[i] = positions ? (int32_t)((i * 7 + 3) % 11) : 0;
}

void tg_fill_f32(uint64_t seed, const char *name, float *out, int64_t n, float scale) {
    uint64_t s = seed;
    for (const char *c = name; *c; c++) s = (s ^ (unsigned char)*c) * 0x100000001b3ull;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; /* xorshift64 */
        s ^= s >> 7;
        s ^= s << 17;
        out[i] = scale * (float)((double)(s >> 40) * 0x1p-23 - 1.0);
    }
}

bool tg_open_reference(qvl_test_backend *tb) {
#ifdef QVL_REFERENCE_SO
    const char *path = QVL_REFERENCE_SO;
#else
    const char *path = "";
#endif
    if (!*path || access(path, R_OK) != 0) {
        printf("skipped: the reference backend is not built (%s)\n", *path ? path : "no target");
        return false;
    }
    return qvl_test_backend_open(path, NULL, tb) == 0;
}

static void ok(qvl_status s, const qvl_error *err) {
    if (s != QVL_OK) print_error("%s\n", err->msg);
    assert_int_equal(s, QVL_OK);
}

void tg_run(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be, uint64_t seed,
            void *i32_user, float **outs) {
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    ok(qvl_exec_create(g, iface, be, &ex, &err), &err);
    size_t n = qvl_graph_n_tensors(g);
    qvl_buffer *bufs = calloc(n, sizeof *bufs);
    assert_non_null(bufs);
    for (qvl_tid t = 0; t < (qvl_tid)n; t++) {
        if (!qvl_graph_is_live(g, t) || qvl_graph_kind(g, t) == QVL_TENSOR_NODE) continue;
        const qvl_tensor_desc *d = qvl_graph_desc(g, t);
        int64_t ne = qvl_desc_nelem(d);
        size_t bytes = (size_t)ne * 4;
        void *host = malloc(bytes);
        assert_non_null(host);
        if (d->dtype == QVL_I32) {
            tg_fill_i32(t, qvl_graph_tensor_name(g, t), host, ne, i32_user);
        } else {
            assert_int_equal(d->dtype, QVL_F32);
            bool weight = qvl_graph_kind(g, t) == QVL_TENSOR_WEIGHT;
            tg_fill_f32(seed, qvl_graph_tensor_name(g, t), host, ne, weight ? 0.25f : 1.0f);
        }
        if (qvl_graph_kind(g, t) == QVL_TENSOR_WEIGHT) {
            ok(iface->buffer_alloc(be, bytes, &bufs[t], &err), &err);
            ok(iface->upload(be, bufs[t].data, host, bytes, &err), &err);
            ok(qvl_exec_bind(ex, t, bufs[t].data, &err), &err);
        } else {
            ok(qvl_exec_set(ex, t, host, bytes, &err), &err);
        }
        free(host);
    }
    ok(qvl_exec_run(ex, &err), &err);
    for (size_t i = 0; i < qvl_graph_n_outputs(g); i++) {
        qvl_tid t = qvl_graph_output(g, i, NULL);
        int64_t ne = qvl_desc_nelem(qvl_graph_desc(g, t));
        outs[i] = malloc((size_t)ne * sizeof(float));
        assert_non_null(outs[i]);
        ok(qvl_exec_get(ex, t, outs[i], (size_t)ne * sizeof(float), &err), &err);
    }
    qvl_exec_free(ex);
    for (size_t t = 0; t < n; t++)
        if (bufs[t].data) iface->buffer_free(be, &bufs[t]);
    free(bufs);
}

bool tg_close(const float *a, const float *b, int64_t n, double rtol, double atol) {
    double max_abs = 0, max_ref = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > max_abs) {
            max_abs = d;
            worst = i;
        }
        if (fabs(a[i]) > max_ref) max_ref = fabs(a[i]);
    }
    if (max_abs <= rtol * max_ref + atol) return true;
    print_error("max |a-b| %g at %lld (%g vs %g), max|a| %g\n", max_abs, (long long)worst,
                (double)a[worst], (double)b[worst], max_ref);
    return false;
}

size_t tg_count(const qvl_graph *g, qvl_op op) {
    size_t c = 0;
    for (qvl_tid t = 0; t < (qvl_tid)qvl_graph_n_tensors(g); t++)
        c += qvl_graph_is_live(g, t) && qvl_graph_kind(g, t) == QVL_TENSOR_NODE &&
             qvl_graph_op(g, t) == op;
    return c;
}
