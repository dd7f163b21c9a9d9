/* Loading a Qwen3-VL model onto a backend and evaluating token batches. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/qwen3vl_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"
#include "qvl/graph.h"
#include "qvl/log.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/weights.h"

/* One weight as the backend holds it, in the dtype the graphs read. */
typedef struct bound_weight {
    const char *name; /* owned by the weight store */
    qvl_dtype dtype;
    qvl_buffer buf;
} bound_weight;

struct qvl_model {
    qvl_qwen3vl_config cfg;
    qvl_weights *weights;
    qvl_loaded_backend *lb;
    qvl_dtype matrix_dtype; /* dtype of 2-D+ weights in the graphs */
    qvl_dtype vector_dtype; /* dtype of norm weights and biases in the graphs */
    bound_weight *bound;    /* sorted by name */
    size_t n_bound;
    int64_t ctx;
    bool no_fuse;
    qvl_buffer kv;      /* all layers' K and V caches, f32 [ctx, n_kv_heads, head_dim] each */
    size_t kv_layer_bytes;
    int64_t n_past;
    int64_t rope_delta; /* next position = n_past + rope_delta (0 for text-only prompts) */
};

static int cmp_bound(const void *a, const void *b) {
    return strcmp(((const bound_weight *)a)->name, ((const bound_weight *)b)->name);
}

static const bound_weight *find_bound(const qvl_model *m, const char *name) {
    bound_weight key = {.name = name};
    return bsearch(&key, m->bound, m->n_bound, sizeof key, cmp_bound);
}

static bool is_aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Put one stored tensor on the backend as `want`: in place when the backend reads host memory,
 * the dtype already fits and the data is aligned; otherwise converted and uploaded once. */
static qvl_status bind_weight(qvl_model *m, const qvl_st_tensor *t, qvl_dtype want,
                              bound_weight *out, qvl_error *err) {
    const qvl_backend_iface *be = m->lb->iface;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (!qvl_mul_i64(n, t->shape[i], &n))
            return qvl_fail(err, QVL_E_LIMIT, "%s: element count overflows", t->name);
    size_t want_bytes;
    if (!qvl_dtype_row_bytes(want, n, &want_bytes))
        return qvl_fail(err, QVL_E_LIMIT, "%s: size overflows", t->name);
    out->name = t->name;
    out->dtype = want;
    if (t->dtype == want && be->buffer_wrap_host && is_aligned(t->data, want == QVL_F32 ? 4 : 2)) {
        return be->buffer_wrap_host(m->lb->be, (void *)t->data, t->nbytes, &out->buf, err);
    }
    qvl_status st = be->buffer_alloc(m->lb->be, want_bytes ? want_bytes : 1, &out->buf, err);
    if (st != QVL_OK) return st;
    void *host = malloc(want_bytes ? want_bytes : 1);
    float *tmp = t->dtype == want ? NULL : malloc((size_t)n * sizeof(float));
    if (!host || (t->dtype != want && !tmp)) {
        free(host);
        free(tmp);
        be->buffer_free(m->lb->be, &out->buf);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory converting to %s", t->name,
                        qvl_dtype_name(want));
    }
    if (t->dtype == want) {
        memcpy(host, t->data, t->nbytes);
    } else {
        /* The mapping may be unaligned for the source dtype: copy out before converting. */
        size_t src_bytes = t->nbytes;
        void *src = malloc(src_bytes ? src_bytes : 1);
        if (!src) {
            free(host);
            free(tmp);
            be->buffer_free(m->lb->be, &out->buf);
            return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", t->name);
        }
        memcpy(src, t->data, src_bytes);
        qvl_to_f32(t->dtype, src, tmp, n);
        qvl_from_f32(want, tmp, host, n);
        free(src);
    }
    st = be->upload(m->lb->be, out->buf.data, host, want_bytes, err);
    free(host);
    free(tmp);
    if (st != QVL_OK) be->buffer_free(m->lb->be, &out->buf);
    return st;
}

static qvl_status bind_all_weights(qvl_model *m, qvl_error *err) {
    size_t n = qvl_weights_count(m->weights);
    m->bound = calloc(n ? n : 1, sizeof *m->bound);
    if (!m->bound) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const qvl_st_tensor *t = qvl_weights_at(m->weights, i);
        qvl_dtype want = t->ndim >= 2 ? m->matrix_dtype : m->vector_dtype;
        qvl_status st = bind_weight(m, t, want, &m->bound[m->n_bound], err);
        if (st != QVL_OK) return st;
        m->n_bound++;
    }
    qsort(m->bound, m->n_bound, sizeof *m->bound, cmp_bound);
    return QVL_OK;
}

static qvl_status alloc_kv(qvl_model *m, qvl_error *err) {
    const qvl_text_config *t = &m->cfg.text;
    size_t row, layer, total;
    if (!qvl_mul_size((size_t)t->num_key_value_heads, (size_t)t->head_dim, &row) ||
        !qvl_mul_size(row, sizeof(float), &row) ||
        !qvl_mul_size(row, (size_t)m->ctx, &layer) ||
        !qvl_mul_size(layer, 2 * (size_t)t->num_hidden_layers, &total))
        return qvl_fail(err, QVL_E_LIMIT, "KV cache for --ctx %lld overflows", (long long)m->ctx);
    m->kv_layer_bytes = layer;
    qvl_status st = m->lb->iface->buffer_alloc(m->lb->be, total, &m->kv, err);
    if (st != QVL_OK)
        return qvl_error_prefix(err, "KV cache of %.1f MiB for --ctx %lld", total / 1048576.0,
                                (long long)m->ctx);
    return QVL_OK;
}

qvl_status qvl_model_open(const char *dir, const qvl_model_options *opts, qvl_model **out,
                          qvl_error *err) {
    *out = NULL;
    if (!opts || opts->ctx <= 0)
        return qvl_fail(err, QVL_E_INVALID, "--ctx must be a positive number of tokens");
    qvl_model *m = calloc(1, sizeof *m);
    if (!m) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    m->ctx = opts->ctx;
    m->no_fuse = opts->no_fuse;

    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qvl_status st = qvl_qwen3vl_config_load(path, &m->cfg, err);
    if (st == QVL_OK) st = qvl_weights_open(dir, &m->cfg, &m->weights, err);
    if (st == QVL_OK) {
        /* The graphs read matrices in the embedding's dtype and vectors in the first norm's. */
        const qvl_st_tensor *emb =
            qvl_weights_get(m->weights, "model.language_model.embed_tokens.weight");
        const qvl_st_tensor *norm =
            qvl_weights_get(m->weights, "model.language_model.norm.weight");
        m->matrix_dtype = emb ? emb->dtype : QVL_BF16;
        m->vector_dtype = norm ? norm->dtype : m->matrix_dtype;
        st = qvl_backend_open(opts->plugins_path, opts->backend_name, &m->lb, err);
    }
    if (st == QVL_OK) st = bind_all_weights(m, err);
    if (st == QVL_OK) st = alloc_kv(m, err);
    if (st != QVL_OK) {
        qvl_model_close(m);
        return st;
    }
    QVL_LOG_I("model %s: %lld layers, hidden %lld, vocab %lld, weights %s, backend %s", dir,
              (long long)m->cfg.text.num_hidden_layers, (long long)m->cfg.text.hidden_size,
              (long long)m->cfg.text.vocab_size, qvl_dtype_name(m->matrix_dtype),
              m->lb->name);
    *out = m;
    return QVL_OK;
}

void qvl_model_close(qvl_model *m) {
    if (!m) return;
    if (m->lb) {
        for (size_t i = 0; i < m->n_bound; i++)
            m->lb->iface->buffer_free(m->lb->be, &m->bound[i].buf);
        if (m->kv.data || m->kv.handle) m->lb->iface->buffer_free(m->lb->be, &m->kv);
        qvl_backend_unload(m->lb);
    }
    free(m->bound);
    qvl_weights_close(m->weights);
    free(m);
}

const qvl_qwen3vl_config *qvl_model_config(const qvl_model *m) { return &m->cfg; }
const qvl_loaded_backend *qvl_model_backend(const qvl_model *m) { return m->lb; }
int64_t qvl_model_ctx(const qvl_model *m) { return m->ctx; }
int64_t qvl_model_n_past(const qvl_model *m) { return m->n_past; }

void qvl_model_truncate(qvl_model *m, int64_t n_past) {
    if (n_past >= 0 && n_past <= m->n_past) m->n_past = n_past;
    if (m->n_past == 0) m->rope_delta = 0;
}

/* Bind every WEIGHT of g to the model's backend copy and the KV inputs to the cache. */
static qvl_status bind_graph(qvl_model *m, qvl_graph *g, qvl_exec *ex, qvl_error *err) {
    for (size_t t = 0; t < qvl_graph_n_tensors(g); t++) {
        qvl_tid id = (qvl_tid)t;
        if (qvl_graph_kind(g, id) != QVL_TENSOR_WEIGHT) continue;
        const char *name = qvl_graph_tensor_name(g, id);
        const bound_weight *w = find_bound(m, name);
        if (!w) return qvl_fail(err, QVL_E_NOT_FOUND, "weight %s is not loaded", name);
        if (w->dtype != qvl_graph_desc(g, id)->dtype)
            return qvl_fail(err, QVL_E_DTYPE, "weight %s is %s, the graph reads %s", name,
                            qvl_dtype_name(w->dtype),
                            qvl_dtype_name(qvl_graph_desc(g, id)->dtype));
        qvl_status st = qvl_exec_bind(ex, id, w->buf.data, err);
        if (st != QVL_OK) return st;
    }
    for (int64_t l = 0; l < m->cfg.text.num_hidden_layers; l++) {
        char name[64];
        for (int kv = 0; kv < 2; kv++) {
            snprintf(name, sizeof name, "kv.%lld.%c", (long long)l, kv ? 'v' : 'k');
            qvl_tid id = qvl_graph_find(g, name);
            if (id < 0) return qvl_fail(err, QVL_E_NOT_FOUND, "graph has no input %s", name);
            char *addr = (char *)m->kv.data + (size_t)(2 * l + kv) * m->kv_layer_bytes;
            qvl_status st = qvl_exec_bind(ex, id, addr, err);
            if (st != QVL_OK) return st;
        }
    }
    return QVL_OK;
}

qvl_status qvl_model_eval(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                          bool all_logits, float *logits, qvl_error *err) {
    const int64_t vocab = m->cfg.text.vocab_size;
    if (n <= 0) return qvl_fail(err, QVL_E_INVALID, "no tokens to evaluate");
    if (n > m->ctx - m->n_past)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%lld tokens do not fit in the context: %lld already used of --ctx %lld",
                        (long long)n, (long long)m->n_past, (long long)m->ctx);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return qvl_fail(err, QVL_E_INVALID, "token id %d at position %lld is outside the "
                            "vocabulary [0, %lld)", ids[i], (long long)i, (long long)vocab);

    int32_t *pos_buf = malloc((size_t)n * 3 * sizeof *pos_buf);
    if (!pos_buf) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (pos) {
        memcpy(pos_buf, pos, (size_t)n * 3 * sizeof *pos_buf);
    } else {
        for (int64_t c = 0; c < 3; c++)
            for (int64_t i = 0; i < n; i++)
                pos_buf[c * n + i] = (int32_t)(m->n_past + m->rope_delta + i);
    }

    qvl_text_graph_opts go = {
        .n_tokens = n, .n_past = m->n_past, .kv_capacity = m->ctx, .all_logits = all_logits,
        .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
    };
    qvl_graph *g = NULL;
    qvl_exec *ex = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    if (st == QVL_OK && !m->no_fuse) st = qvl_graph_fuse(g, NULL, err);
    if (st == QVL_OK) st = qvl_exec_create(g, m->lb->iface, m->lb->be, &ex, err);
    if (st == QVL_OK) st = bind_graph(m, g, ex, err);
    if (st == QVL_OK)
        st = qvl_exec_set(ex, qvl_graph_find(g, "ids"), ids, (size_t)n * sizeof *ids, err);
    if (st == QVL_OK)
        st = qvl_exec_set(ex, qvl_graph_find(g, "pos"), pos_buf, (size_t)n * 3 * sizeof *pos_buf,
                          err);
    if (st == QVL_OK) st = qvl_exec_run(ex, err);
    if (st == QVL_OK) {
        size_t rows = all_logits ? (size_t)n : 1;
        st = qvl_exec_get(ex, qvl_graph_find(g, "logits"), logits,
                          rows * (size_t)vocab * sizeof(float), err);
    }
    if (st == QVL_OK) {
        /* The next text position continues after the largest position used so far. */
        int32_t max_pos = 0;
        for (int64_t i = 0; i < 3 * n; i++)
            if (pos_buf[i] > max_pos) max_pos = pos_buf[i];
        m->n_past += n;
        m->rope_delta = (int64_t)max_pos + 1 - m->n_past;
    }
    free(pos_buf);
    qvl_exec_free(ex);
    qvl_graph_free(g);
    return st;
}
