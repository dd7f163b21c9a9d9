/* Per-op placement with fallback (qvl/split.h): which backends the model needs besides the
 * ones its groups are placed on, where each layer's KV cache lives and where each weight is
 * bound.
 *
 * At load, the model builds the graphs it will run (the reusable decode step and, with a
 * vision tower, one small image) and places them without running them. A node that no loaded
 * backend takes makes the next backend of plugins.yaml (by priority) load, and the placement
 * is tried again: backends are loaded only when a node needs them. The placement then says
 * where each layer's cache is written (its KV cache lives there) and which backends read each
 * weight (it is bound on each of them, once). Graphs built later (a prompt, other image
 * sizes) are placed the same way; a weight one of them reads on a backend that has no copy
 * yet is bound then (model_bind.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "qvl/backend_options.h"
#include "qvl/log.h"
#include "qvl/registry.h"

/* The graphs of the probe read each matrix in the dtype it will be bound in. */
qvl_dtype model_probe_dtype(const void *ctx, const char *name, qvl_dtype dflt) {
    const qvl_model *m = ctx;
    const qvl_st_tensor *t = qvl_weights_get(m->weights, name);
    return t ? model_bind_dtype(m, t) : dflt;
}

/* Layer l of a cache input "kv.<l>.k" or "s<i>.kv.<l>.v", else -1. */
static int64_t cache_layer(const char *name) {
    const char *kv = strncmp(name, "kv.", 3) == 0 ? name : strstr(name, ".kv.");
    if (!kv) return -1;
    if (kv != name) kv++;
    long long l;
    char which;
    int used = 0;
    if (sscanf(kv, "kv.%lld.%c%n", &l, &which, &used) != 2 || kv[used] != '\0' || l < 0)
        return -1;
    return which == 'k' || which == 'v' ? l : -1;
}

int32_t model_input_home(void *ctx, const char *name) {
    const qvl_model *m = ctx;
    int64_t l = cache_layer(name);
    if (l < 0 || l >= m->cfg.text.num_hidden_layers || !m->kv_home) return -1;
    return m->kv_home[l];
}

/* Targets in plugins.yaml order (the order fallback asks them in). */
static void fallback_order(const qvl_model *m, int32_t *order) {
    for (size_t i = 0; i < m->n_tg; i++) order[i] = (int32_t)i;
    for (size_t i = 1; i < m->n_tg; i++)
        for (size_t j = i; j > 0 && m->tg[order[j - 1]].rank > m->tg[order[j]].rank; j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
}

void model_split_setup(const qvl_model *m, bool text, qvl_split_target *targets, int32_t *order,
                       int32_t *vision_place, qvl_split_options *so) {
    for (size_t i = 0; i < m->n_tg; i++)
        targets[i] = (qvl_split_target){m->tg[i].lb->iface, m->tg[i].lb->be,
                                        m->tg[i].host_memory, m->tg[i].lb->no_fallback};
    fallback_order(m, order);
    vision_place[0] = m->vision_target;
    *so = (qvl_split_options){
        .target_of_group = text ? m->text_place : vision_place,
        .n_groups = text ? qvl_text_n_groups(m->cfg.text.num_hidden_layers) : 1,
        .no_fuse = m->no_fuse,
        .fallback_order = order,
        .n_fallback = m->n_tg,
        .input_home = model_input_home,
        .input_home_ctx = (void *)m,
    };
}

/* The rank of each loaded target in plugins.yaml (backends it does not list come last). */
static void rank_targets(qvl_model *m, const qvl_plugin_config *cfg) {
    for (size_t i = 0; i < m->n_tg; i++) {
        m->tg[i].rank = (int)(cfg ? cfg->n : 0);
        for (size_t k = 0; cfg && k < cfg->n; k++)
            if (strcmp(cfg->specs[k].name, m->tg[i].lb->name) == 0) m->tg[i].rank = (int)k;
    }
}

/* Loads the highest-priority backend of plugins.yaml not loaded or tried yet. *loaded false:
 * none is left (those that fail to load are skipped, as qvl_backend_select skips them). */
static qvl_status load_next(qvl_model *m, const qvl_model_options *opts,
                            const qvl_plugin_config *cfg, bool *tried, bool *loaded,
                            qvl_error *err) {
    *loaded = false;
    for (size_t k = 0; k < cfg->n && m->n_tg < MODEL_MAX_TARGETS; k++) {
        bool have = tried[k];
        for (size_t i = 0; i < m->n_tg && !have; i++)
            have = strcmp(m->tg[i].lb->name, cfg->specs[k].name) == 0;
        if (have) continue;
        tried[k] = true;
        qvl_loaded_backend *lb = NULL;
        qvl_error why = {0};
        if (qvl_backend_open_with_options(opts->plugins_path, cfg->specs[k].name,
                                          opts->backend_options, &lb, &why) != QVL_OK) {
            QVL_LOG_I("fallback backend %s skipped: %s", cfg->specs[k].name, why.msg);
            continue;
        }
        model_target *tg = &m->tg[m->n_tg++];
        memset(tg, 0, sizeof *tg);
        tg->lb = lb;
        tg->rank = (int)k;
        qvl_device_info info = {.host_memory = false};
        if (lb->iface->describe && lb->iface->describe(lb->be, &info) == QVL_OK)
            tg->host_memory = info.host_memory;
        QVL_LOG_I("backend %s loaded for the nodes the others refuse", lb->name);
        *loaded = true;
        return QVL_OK;
    }
    (void)err;
    return QVL_OK;
}

/* The probe graphs: the decode step and, with a vision tower, one image of one merge window. */
static qvl_status build_probe(const qvl_model *m, bool text, qvl_graph **g, qvl_error *err) {
    if (text) {
        qvl_text_graph_opts go = {
            .n_tokens = 1, .kv_at_input = true, .kv_capacity = m->ctx, .kv_dtype = m->kv_dtype,
            .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
            .matrix_dtype_of = model_probe_dtype, .matrix_dtype_ctx = m,
        };
        return qvl_qwen3vl_build_text(&m->cfg, &go, g, err);
    }
    const int64_t w = m->cfg.vision.spatial_merge_size;
    const qvl_image_grid grid = {1, w, w};
    qvl_vision_graph_opts vo = {.n_images = 1, .grids = &grid, .weight_dtype = m->matrix_dtype,
                                .norm_dtype = m->vector_dtype, .matrix_dtype_of = model_probe_dtype,
                                .matrix_dtype_ctx = m};
    return qvl_qwen3vl_build_vision(&m->cfg, &vo, g, err);
}

/* Places g, loading backends from plugins.yaml while a node has none that takes it. */
static qvl_status place_probe(qvl_model *m, const qvl_model_options *opts,
                              const qvl_plugin_config *cfg, bool *tried, const qvl_graph *g,
                              bool text, int32_t *placed, qvl_error *err) {
    for (;;) {
        qvl_split_target targets[MODEL_MAX_TARGETS];
        int32_t order[MODEL_MAX_TARGETS], vision_place[1];
        qvl_split_options so;
        model_split_setup(m, text, targets, order, vision_place, &so);
        if (text) so.input_home = NULL; /* the caches' homes are what this finds out */
        qvl_status st = qvl_split_place(g, targets, m->n_tg, &so, placed, err);
        if (st != QVL_E_UNSUPPORTED || !cfg) return st;
        bool any_fallback = false;
        for (size_t i = 0; i < m->n_tg; i++) any_fallback |= !m->tg[i].lb->no_fallback;
        bool loaded = false;
        if (any_fallback) {
            qvl_error keep = *err;
            if (load_next(m, opts, cfg, tried, &loaded, err) != QVL_OK) return err->status;
            *err = keep;
        }
        if (!loaded) return st;
    }
}

static qvl_tid under_views(const qvl_graph *g, qvl_tid t) {
    while (t >= 0 && qvl_graph_kind(g, t) == QVL_TENSOR_NODE && qvl_op_is_view(qvl_graph_op(g, t)))
        t = qvl_graph_srcs(g, t)[0];
    return t;
}

/* What a placed probe says: the backends reading each weight, and each layer's cache home. */
static qvl_status read_probe(qvl_model *m, const qvl_graph *g, const int32_t *placed,
                             qvl_error *err) {
    const size_t n = qvl_graph_n_tensors(g);
    uint32_t *reads = calloc(n ? n : 1, sizeof *reads);
    if (!reads) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t t = 0; t < n; t++) {
        if (placed[t] < 0) continue;
        const qvl_tid *src = qvl_graph_srcs(g, (qvl_tid)t);
        for (int i = 0; i < QVL_MAX_SRC; i++) {
            qvl_tid s = src[i] >= 0 ? under_views(g, src[i]) : -1;
            if (s >= 0) reads[s] |= 1u << placed[t];
        }
        qvl_op op = qvl_graph_op(g, (qvl_tid)t);
        if (op != QVL_OP_STORE_ROWS && op != QVL_OP_STORE_ROWS_AT) continue;
        const char *cache = qvl_graph_tensor_name(g, under_views(g, src[0]));
        int64_t l = cache ? cache_layer(cache) : -1;
        if (l >= 0 && l < m->cfg.text.num_hidden_layers) m->kv_home[l] = placed[t];
    }
    for (size_t i = 0; i < qvl_weights_count(m->weights); i++) {
        qvl_tid w = qvl_graph_find(g, qvl_weights_at(m->weights, i)->name);
        if (w >= 0 && qvl_graph_kind(g, w) == QVL_TENSOR_WEIGHT) m->weight_targets[i] |= reads[w];
    }
    free(reads);
    return QVL_OK;
}

/* "12 nodes on linear, 40 on reference" */
static void count_nodes(const qvl_model *m, const int32_t *placed, size_t n, char *buf,
                        size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t ti = 0; ti < m->n_tg; ti++) {
        size_t c = 0;
        for (size_t t = 0; t < n; t++) c += placed[t] == (int32_t)ti;
        if (!c) continue;
        int w = snprintf(buf + used, size > used ? size - used : 0, "%s%zu nodes on %s",
                         used ? ", " : "", c, m->tg[ti].lb->name);
        if (w > 0) used += (size_t)w;
        if (used >= size) return;
    }
}

qvl_status model_place_ops(qvl_model *m, const qvl_model_options *opts, qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    const size_t n_weights = qvl_weights_count(m->weights);
    m->kv_home = malloc((size_t)L * sizeof *m->kv_home);
    m->weight_targets = calloc(n_weights ? n_weights : 1, sizeof *m->weight_targets);
    if (!m->kv_home || !m->weight_targets) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int64_t l = 0; l < L; l++) m->kv_home[l] = m->text_place[qvl_text_group_layer(l)];
    qvl_plugin_config *cfg = NULL;
    qvl_error why = {0};
    if (qvl_plugins_locate(opts->plugins_path, &cfg, &why) != QVL_OK) cfg = NULL;
    rank_targets(m, cfg);
    bool *tried = calloc(cfg && cfg->n ? cfg->n : 1, sizeof *tried);
    qvl_status st = tried ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int pass = 0; st == QVL_OK && pass < 2; pass++) {
        const bool text = pass == 0;
        if (!text && !m->cfg.has_vision) break;
        qvl_graph *g = NULL;
        int32_t *placed = NULL;
        st = build_probe(m, text, &g, err);
        if (st == QVL_OK && !(placed = malloc((qvl_graph_n_tensors(g) + 1) * sizeof *placed)))
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        qvl_error why_not = {0};
        bool placed_ok = false;
        if (st == QVL_OK) {
            /* A graph no backend can run is refused when it runs (with the same message),
             * not at load: a model may be opened for what needs no graph (its memory plan,
             * a backend's options). */
            qvl_status ps = place_probe(m, opts, cfg, tried, g, text, placed, &why_not);
            if (ps == QVL_E_UNSUPPORTED) QVL_LOG_I("placement at load: %s", why_not.msg);
            else if (ps != QVL_OK) st = qvl_fail(err, ps, "%s", why_not.msg);
            placed_ok = ps == QVL_OK;
        }
        if (st == QVL_OK && placed_ok) st = read_probe(m, g, placed, err);
        if (st == QVL_OK && placed_ok && m->n_tg > 1) {
            char counts[256];
            count_nodes(m, placed, qvl_graph_n_tensors(g), counts, sizeof counts);
            QVL_LOG_I("%s graph placed: %s", text ? "decode" : "vision", counts);
        }
        free(placed);
        qvl_graph_free(g);
    }
    free(tried);
    qvl_plugins_free(cfg);
    return st;
}
