#define _POSIX_C_SOURCE 200809L /* strdup */
/* What the Qwen3-VL graph tests share: see test_model_graphs_util.h. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/graph.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "test_model_graphs_util.h"

/* 2 layers, hidden 64, 4/2 heads of 16, mrope [4,2,2]; vision depth 4, hidden 32, 2 heads,
 * deepstack after blocks 1 and 2, a 4x4 position table. */
const char SMALL[] =
    "{ \"tie_word_embeddings\": true, \"image_token_id\": 90,\n"
    "  \"text_config\": { \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,\n"
    "    \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    "    \"head_dim\": 16, \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096,\n"
    "    \"hidden_act\": \"silu\", \"rope_theta\": 10000,\n"
    "    \"rope_scaling\": {\"rope_type\": \"default\", \"mrope_section\": [4, 2, 2],\n"
    "                     \"mrope_interleaved\": true} },\n"
    "  \"vision_config\": { \"depth\": 4, \"hidden_size\": 32, \"intermediate_size\": 64,\n"
    "    \"num_heads\": 2, \"patch_size\": 2, \"temporal_patch_size\": 2,\n"
    "    \"spatial_merge_size\": 2, \"in_channels\": 3, \"out_hidden_size\": 64,\n"
    "    \"num_position_embeddings\": 16, \"deepstack_visual_indexes\": [1, 2] } }\n";

void load_cfg(const char *json, qvl_qwen3vl_config *c) {
    qvl_error err = {0};
    if (qvl_qwen3vl_config_parse(json, strlen(json), "test-config.json", c, &err) != QVL_OK)
        fail_msg("config: %s", err.msg);
}

void fuse(qvl_graph *g, qvl_fusion_report *rep) {
    qvl_error err = {0};
    memset(rep, 0, sizeof *rep);
    if (qvl_graph_fuse(g, NULL, NULL, rep, &err) != QVL_OK) fail_msg("fuse: %s", err.msg);
    if (qvl_graph_validate(g, &err) != QVL_OK) fail_msg("validate after fusion: %s", err.msg);
}

size_t fired(const qvl_fusion_report *rep, const char *part) {
    for (size_t i = 0; i < rep->n_rules; i++)
        if (strstr(rep->rule[i], part)) return rep->fired[i];
    fail_msg("no fusion rule named like '%s'", part);
    return 0;
}

void expect_shape(const qvl_graph *g, const char *name, qvl_dtype dt, int ndim, int64_t d0,
                         int64_t d1, int64_t d2) {
    qvl_tid t = qvl_graph_find(g, name);
    if (t < 0) fail_msg("%s: not in the graph", name);
    const qvl_tensor_desc *d = qvl_graph_desc(g, t);
    const int64_t want[3] = {d0, d1, d2};
    bool ok = d->dtype == dt && d->ndim == ndim;
    for (int i = 0; i < ndim && ok; i++) ok = d->shape[i] == want[i];
    if (!ok) {
        char buf[96];
        fail_msg("%s: %s, expected %d dims [%lld, %lld, %lld] %s", name,
                 qvl_desc_str(d, buf, sizeof buf), ndim, (long long)d0, (long long)d1,
                 (long long)d2, qvl_dtype_name(dt));
    }
}

qvl_tid output(const qvl_graph *g, const char *name) {
    for (size_t i = 0; i < qvl_graph_n_outputs(g); i++) {
        const char *n = NULL;
        qvl_tid t = qvl_graph_output(g, i, &n);
        if (n && strcmp(n, name) == 0) return t;
    }
    fail_msg("no output %s", name);
    return -1;
}

#ifdef QVL_REFERENCE_SO

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

float next_uniform(uint64_t *s) { /* [-1, 1) */
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

float *gen_weight(const char *name, const qvl_tensor_desc *d) {
    int64_t n = qvl_desc_nelem(d);
    float *host = malloc((size_t)n * sizeof *host);
    assert_non_null(host);
    uint64_t s = hash_str(name);
    /* Norm weights near 1, biases small, matrices scaled by fan-in, tables O(1). */
    float scale = 1.0f, offset = 0.0f;
    if (ends_with(name, "norm.weight"))
        scale = 0.2f, offset = 1.0f;
    else if (ends_with(name, ".bias"))
        scale = 0.2f;
    else if (d->ndim == 2 && !strstr(name, "embed"))
        scale = 1.5f / sqrtf((float)d->shape[1]);
    for (int64_t i = 0; i < n; i++) host[i] = offset + scale * next_uniform(&s);
    return host;
}

static void *wstore_get(wstore *ws, const char *name, const qvl_tensor_desc *d) {
    for (size_t i = 0; i < ws->n; i++)
        if (strcmp(ws->names[i], name) == 0) return ws->bufs[i].data;
    assert_true(ws->n < 512);
    assert_int_equal(d->dtype, QVL_F32);
    float *host = gen_weight(name, d);
    int64_t n = qvl_desc_nelem(d);
    qvl_error err = {0};
    qvl_buffer *b = &ws->bufs[ws->n];
    size_t bytes = (size_t)n * sizeof *host;
    if (ws->tb->iface->buffer_alloc(ws->tb->be, bytes, b, &err) != QVL_OK ||
        ws->tb->iface->upload(ws->tb->be, b->data, host, bytes, &err) != QVL_OK)
        fail_msg("weight %s: %s", name, err.msg);
    free(host);
    ws->names[ws->n] = strdup(name);
    return ws->bufs[ws->n++].data;
}

void wstore_free(wstore *ws) {
    for (size_t i = 0; i < ws->n; i++) {
        ws->tb->iface->buffer_free(ws->tb->be, &ws->bufs[i]);
        free(ws->names[i]);
    }
    ws->n = 0;
}

qvl_exec *run_kv(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in,
                        kv_buffers *kv) {
    qvl_error err = {0};
    qvl_exec *ex = NULL;
    if (qvl_exec_create(g, ws->tb->iface, ws->tb->be, &ex, &err) != QVL_OK)
        fail_msg("exec_create: %s", err.msg);
    for (size_t i = 0; i < qvl_graph_n_tensors(g); i++) {
        qvl_tid t = (qvl_tid)i;
        if (qvl_graph_kind(g, t) != QVL_TENSOR_WEIGHT) continue;
        void *addr = wstore_get(ws, qvl_graph_tensor_name(g, t), qvl_graph_desc(g, t));
        if (qvl_exec_bind(ex, t, addr, &err) != QVL_OK) fail_msg("bind: %s", err.msg);
    }
    for (size_t i = 0; kv && i < kv->n; i++) {
        qvl_tid t = qvl_graph_find(g, kv->names[i]);
        if (t < 0) fail_msg("no input %s", kv->names[i]);
        if (qvl_exec_bind(ex, t, kv->buf[i].data, &err) != QVL_OK)
            fail_msg("bind %s: %s", kv->names[i], err.msg);
    }
    for (size_t i = 0; i < n_in; i++) {
        qvl_tid t = qvl_graph_find(g, in[i].name);
        if (t < 0) fail_msg("no input %s", in[i].name);
        if (qvl_exec_set(ex, t, in[i].data, in[i].bytes, &err) != QVL_OK)
            fail_msg("set %s: %s", in[i].name, err.msg);
    }
    if (qvl_exec_run(ex, &err) != QVL_OK) fail_msg("run: %s", err.msg);
    return ex;
}

qvl_exec *run(qvl_graph *g, wstore *ws, const input_data *in, size_t n_in) {
    return run_kv(g, ws, in, n_in, NULL);
}

float *get(qvl_exec *ex, qvl_tid t, const qvl_graph *g, int64_t *n_out) {
    int64_t n = qvl_desc_nelem(qvl_graph_desc(g, t));
    float *out = malloc((size_t)n * sizeof *out);
    assert_non_null(out);
    qvl_error err = {0};
    if (qvl_exec_get(ex, t, out, (size_t)n * sizeof *out, &err) != QVL_OK)
        fail_msg("get: %s", err.msg);
    if (n_out) *n_out = n;
    return out;
}

double max_abs(const float *a, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}

void expect_close(const char *what, const float *a, const float *b, int64_t n, double rtol) {
    double scale = fmax(1.0, max_abs(a, n)), worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        assert_false(isnan(a[i]) || isnan(b[i]));
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > worst) worst = d, at = i;
    }
    if (worst > rtol * scale)
        fail_msg("%s: differ by %g at %lld (%g vs %g; scale %g)", what, worst, (long long)at,
                 (double)a[at], (double)b[at], scale);
}

int setup_backend(void **state) {
    static qvl_test_backend tb;
    if (qvl_test_backend_open(QVL_REFERENCE_SO, NULL, &tb) != 0) return -1;
    *state = &tb;
    return 0;
}

int teardown_backend(void **state) {
    qvl_test_backend_close(*state);
    return 0;
}

#endif /* QVL_REFERENCE_SO */
