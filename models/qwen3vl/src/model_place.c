/* Where each part of the model runs: --gpu-layers (-ngl), --cpu-backend, --vision-backend.
 *
 * As in llama.cpp, -ngl N puts the last N decoder layers and the output head (final norm and
 * output projection) on the primary backend and the rest, with the token embedding, on the
 * CPU backend: the layers nearest the output share the head's backend, so a step crosses
 * between backends once each way (hidden state out, nothing back but the logits). `all` (the
 * default) is everything on the primary; `auto` fits as many layers as the primary's free
 * memory holds beside the vision tower, the output head and what the graphs take there, all
 * counted before loading (model_place_count.c). A run with everything on a primary that says
 * how much memory is free and too little of it stops before loading, saying what would fit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "qvl/backend_options.h"
#include "qvl/checked.h"
#include "qvl/log.h"
#include "qvl/weight_mix.h"

qvl_dtype model_bind_dtype(const qvl_model *m, const qvl_st_tensor *t) {
    return qvl_qwen3vl_bind_dtype(&m->cfg, t, m->mix_q4_k_m, m->weights_requested, m->matrix_dtype,
                                  m->vector_dtype);
}

int64_t model_layer_of(const char *name) {
    static const char prefix[] = "model.language_model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0) return -1;
    char *end;
    errno = 0;
    long long l = strtoll(name + sizeof prefix - 1, &end, 10);
    return errno == 0 && end != name + sizeof prefix - 1 && *end == '.' && l >= 0 ? l : -1;
}

/* The text groups (and the vision tower, as group -1) that read a weight, as a bit per group
 * kind: the caller maps them to targets. */
uint32_t model_weight_targets(const qvl_model *m, const char *name) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    const int32_t *place = m->text_place;
    int64_t l = model_layer_of(name);
    if (l >= 0 && l < L) return 1u << place[qvl_text_group_layer(l)];
    if (strcmp(name, "model.language_model.embed_tokens.weight") == 0)
        return (1u << place[qvl_text_group_input()]) |
               (m->cfg.tie_word_embeddings ? 1u << place[qvl_text_group_output(L)] : 0u);
    if (strncmp(name, "model.language_model.", 21) == 0 || strcmp(name, "lm_head.weight") == 0)
        return 1u << place[qvl_text_group_output(L)];
    return 1u << m->vision_target; /* model.visual.* */
}

/* --gpu-layers: NULL or "all" -> L (everything), "auto" -> -1, else a count 0..L (more is
 * clamped to L, as llama.cpp's -ngl 99 means all). */
static qvl_status parse_gpu_layers(const char *s, int64_t L, int64_t *out, qvl_error *err) {
    *out = L;
    if (!s || strcmp(s, "all") == 0) return QVL_OK;
    if (strcmp(s, "auto") == 0) {
        *out = -1;
        return QVL_OK;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return qvl_fail(err, QVL_E_INVALID, "--gpu-layers '%s' is not a number of layers, auto "
                        "or all", s);
    *out = v > L ? L : (int64_t)v;
    return QVL_OK;
}

static qvl_status open_named(const qvl_model_options *opts, const char *name,
                             qvl_loaded_backend **out, qvl_error *err) {
    return qvl_backend_open_with_options(opts->plugins_path, name, opts->backend_options, out,
                                         err);
}

/* The target index of a backend by name, opening it when it is not loaded yet. */
static qvl_status target_named(qvl_model *m, const qvl_model_options *opts, const char *name,
                               const char *flag, int32_t *out, qvl_error *err) {
    for (size_t i = 0; i < m->n_tg; i++)
        if (strcmp(m->tg[i].lb->name, name) == 0) {
            *out = (int32_t)i;
            return QVL_OK;
        }
    if (m->n_tg == MODEL_MAX_TARGETS)
        return qvl_fail(err, QVL_E_LIMIT, "%s %s: at most %d backends at once", flag, name,
                        MODEL_MAX_TARGETS);
    qvl_loaded_backend *lb = NULL;
    qvl_status st = open_named(opts, name, &lb, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "%s %s", flag, name);
    model_target *tg = &m->tg[m->n_tg];
    memset(tg, 0, sizeof *tg);
    tg->lb = lb;
    qvl_device_info info = {.host_memory = false};
    if (lb->iface->describe && lb->iface->describe(lb->be, &info) == QVL_OK)
        tg->host_memory = info.host_memory;
    *out = (int32_t)m->n_tg++;
    return QVL_OK;
}

/* --cpu-backend, else cpu_avx2, else the reference. */
static qvl_status cpu_target(qvl_model *m, const qvl_model_options *opts, int32_t *out,
                             qvl_error *err) {
    if (opts->cpu_backend_name)
        return target_named(m, opts, opts->cpu_backend_name, "--cpu-backend", out, err);
    qvl_error why = {0};
    if (target_named(m, opts, "cpu_avx2", "--cpu-backend", out, &why) == QVL_OK) return QVL_OK;
    QVL_LOG_I("cpu_avx2 does not run here (%s): the layers off the GPU run on the reference",
              why.msg);
    return target_named(m, opts, "reference", "--cpu-backend", out, err);
}

static void free_memory(const model_target *tg, uint64_t *free_bytes, bool *known) {
    qvl_device_info info = {.host_memory = false};
    *known = false;
    *free_bytes = 0;
    if (tg->host_memory || !tg->lb->iface->describe ||
        tg->lb->iface->describe(tg->lb->be, &info) != QVL_OK || info.memory_free == 0)
        return;
    *known = true;
    *free_bytes = info.memory_free;
}

qvl_status model_place(qvl_model *m, const qvl_model_options *opts, qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    if (!(m->text_place = calloc(qvl_text_n_groups(L), sizeof *m->text_place)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t ngl;
    qvl_status st = parse_gpu_layers(opts->gpu_layers, L, &ngl, err);
    if (st != QVL_OK) return st;
    const bool is_auto = ngl < 0;
    int32_t vision = 0;
    if (opts->vision_backend_name)
        st = target_named(m, opts, opts->vision_backend_name, "--vision-backend", &vision, err);
    if (st != QVL_OK) return st;
    uint64_t free_bytes;
    bool known;
    free_memory(&m->tg[0], &free_bytes, &known);
    place_counts pc;
    qvl_error why = {0};
    if (known && model_count(m, opts, m->kv_dtype, &pc, &why) != QVL_OK) {
        /* a graph the count cannot plan leaves the run as it was before counting */
        QVL_LOG_I("placement: cannot count what %s would hold (%s)", m->tg[0].lb->name, why.msg);
        known = false;
    }
    if (known) { /* count what the primary would hold: auto chooses by it, all is checked */
        bool vision_here = m->cfg.has_vision && vision == 0;
        if (is_auto) {
            ngl = model_fit_layers(m, &pc, vision_here, free_bytes);
            if (ngl < 0 && vision_here && !opts->vision_backend_name) {
                /* the tower does not fit beside the head: it moves to the CPU with the layers */
                ngl = model_fit_layers(m, &pc, false, free_bytes);
                vision = -1;
                vision_here = false;
            }
            if (ngl < 0) ngl = 0;
        } else if (ngl == L && !model_fits(m, &pc, L, vision_here, free_bytes)) {
            st = model_refuse(m, opts, &pc, vision_here, free_bytes, err);
            model_counts_free(&pc);
            return st;
        }
        model_need(m, &pc, ngl, vision_here, &m->fit);
        m->fit.counted = true;
        m->fit.free_bytes = free_bytes;
        model_counts_free(&pc);
        model_log_fit(m);
    } else if (is_auto) {
        ngl = L; /* a backend that does not say what is free takes everything */
    }
    int32_t cpu = 0;
    if (ngl < L || vision < 0) st = cpu_target(m, opts, &cpu, err);
    if (st != QVL_OK) return st;
    if (vision < 0) vision = cpu;
    m->vision_target = vision;
    qvl_qwen3vl_text_placement(L, ngl, 0, cpu, m->text_place);
    if (ngl < L && cpu == 0)
        QVL_LOG_I("--gpu-layers %lld: the CPU backend is the primary (%s); every layer runs there",
                  (long long)ngl, m->tg[0].lb->name);
    return QVL_OK;
}

/* "layers 0-13 + embedding on cpu_avx2, layers 14-27 + output on cuda_sm61, vision on cuda_sm61"
 * (", nodes the others refuse on reference" for a backend loaded for fallback only) */
size_t qvl_model_placement(const qvl_model *m, char *buf, size_t size) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    size_t n = 0;
    buf[0] = '\0';
    for (size_t ti = 0; ti < m->n_tg; ti++) {
        int64_t first = -1, last = -1, count = 0;
        for (int64_t l = 0; l < L; l++)
            if (m->text_place[qvl_text_group_layer(l)] == (int32_t)ti) {
                if (first < 0) first = l;
                last = l;
                count++;
            }
        const bool in = m->text_place[qvl_text_group_input()] == (int32_t)ti;
        const bool out = m->text_place[qvl_text_group_output(L)] == (int32_t)ti;
        const bool vis = m->cfg.has_vision && m->vision_target == (int32_t)ti;
        if (!count && !in && !out && !vis) {
            /* loaded for per-op fallback only (model_fallback.c) */
            int k = snprintf(buf + n, size > n ? size - n : 0, "%snodes the others refuse on %s",
                             n ? ", " : "", m->tg[ti].lb->name);
            if (k > 0) n += (size_t)k;
            if (n >= size) return size ? size - 1 : 0;
            continue;
        }
        char what[160];
        int w = 0;
        if (count == 1) w = snprintf(what, sizeof what, "layer %lld", (long long)first);
        else if (count > 1 && last - first + 1 == count)
            w = snprintf(what, sizeof what, "layers %lld-%lld", (long long)first, (long long)last);
        else if (count > 1) w = snprintf(what, sizeof what, "%lld layers", (long long)count);
        snprintf(what + w, sizeof what - (size_t)w, "%s%s%s%s%s", w && in ? " + " : "",
                 in ? "embedding" : "", (w || in) && out ? " + " : "", out ? "output" : "",
                 vis ? ((w || in || out) ? " + vision" : "vision") : "");
        int k = snprintf(buf + n, size > n ? size - n : 0, "%s%s on %s", n ? ", " : "", what,
                         m->tg[ti].lb->name);
        if (k > 0) n += (size_t)k;
        if (n >= size) return size ? size - 1 : 0;
    }
    return n;
}
