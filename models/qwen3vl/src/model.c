/* Loading a Qwen3-VL model onto a backend and evaluating token batches. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/qwen3vl_model.h"
#include "model_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qvl/backend_helpers.h"
#include "qvl/backend_options.h"
#include "qvl/checked.h"
#include "qvl/dtype_mix.h"
#include "qvl/graph.h"
#include "qvl/image_preprocess.h"
#include "qvl/log.h"
#include "qvl/mm_prompt.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/model_files.h"
#include "qvl/qwen3vl_gguf.h"
#include "qvl/weight_convert.h"
#include "qvl/weight_mix.h"
#include "qvl/weights.h"

static double now_seconds(void);

/* The config and weights: from DIR/config.json and its safetensors, or from GGUF files
 * (qvl/model_files.h decides which). */
static qvl_status model_open_source(const char *dir, const char *mmproj, qvl_qwen3vl_config *cfg,
                                    qvl_weights **w, qvl_model_load_stats *ls, qvl_error *err) {
    double t0 = now_seconds();
    qvl_model_files files;
    qvl_status st = qvl_model_files_find(dir, mmproj, &files, err);
    if (st != QVL_OK) return st;
    if (files.dir) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = qvl_qwen3vl_config_load(path, cfg, err);
        ls->config_seconds = now_seconds() - t0;
        t0 = now_seconds();
        if (st == QVL_OK) st = qvl_weights_open(dir, cfg, w, err);
        ls->map_seconds = now_seconds() - t0;
        qvl_model_files_free(&files);
        return st;
    }
    qvl_gguf *text = NULL, *vision = NULL;
    st = qvl_gguf_open(files.gguf, &text, err);
    if (st == QVL_OK && files.mmproj) st = qvl_gguf_open(files.mmproj, &vision, err);
    if (st == QVL_OK) st = qvl_qwen3vl_gguf_config(text, vision, cfg, err);
    ls->config_seconds = now_seconds() - t0;
    t0 = now_seconds();
    qvl_model_files_free(&files);
    if (st != QVL_OK) {
        qvl_gguf_close(text);
        qvl_gguf_close(vision);
        return st;
    }
    st = qvl_qwen3vl_gguf_weights(text, vision, cfg, w, err);
    ls->map_seconds = now_seconds() - t0;
    return st;
}

static qvl_status choose_matrix_dtype(qvl_model *m, const char *name, qvl_error *err);
static qvl_status choose_kv_dtype(qvl_model *m, const qvl_model_options *opts, qvl_error *err);
static qvl_status check_kv_attention(const qvl_model *m, qvl_error *err);

/* The graphs read each matrix in the dtype it was bound in (one dtype, or a mixture). */
qvl_dtype model_bound_dtype(const void *ctx, const char *name, qvl_dtype dflt) {
    const qvl_model *m = ctx;
    for (int32_t ti = 0; ti < (int32_t)m->n_tg; ti++) {
        const bound_weight *w = model_find_bound(m, name, ti);
        if (w) return w->dtype;
    }
    return dflt;
}

/* The matrices' dtypes as bound, most used first ("q4_k_m: q4_k + q6_k + q8_0 (vision)"): a
 * mixture read from a file is named by what it holds, never by its first tensor's dtype. */
static void weights_label(const qvl_model *m, char *buf, size_t cap) {
    qvl_model_load_stats ls;
    qvl_model_get_load_stats(m, &ls);
    char text[96], vision[96];
    qvl_dtype_mix(ls.text_matrices, false, " + ", text, sizeof text);
    qvl_dtype_mix(ls.vision_matrices, false, " + ", vision, sizeof vision);
    snprintf(buf, cap, "%s%s%s%s%s", m->mix_q4_k_m ? "q4_k_m: " : "", text,
             vision[0] && strcmp(vision, text) != 0 ? " + " : "",
             vision[0] && strcmp(vision, text) != 0 ? vision : "",
             vision[0] && strcmp(vision, text) != 0 ? " (vision)" : "");
}

qvl_status qvl_model_open(const char *dir, const qvl_model_options *opts, qvl_model **out,
                          qvl_error *err) {
    *out = NULL;
    if (!opts || opts->ctx <= 0)
        return qvl_fail(err, QVL_E_INVALID, "--ctx must be a positive number of tokens");
    if (opts->kv_slots < 0 || opts->kv_slots > 4096)
        return qvl_fail(err, QVL_E_INVALID, "kv_slots must be 0..4096 (got %d)", opts->kv_slots);
    qvl_model *m = calloc(1, sizeof *m);
    if (!m) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    m->ctx = opts->ctx;
    m->kv_slots = opts->kv_slots > 1 ? opts->kv_slots : 1;
    m->no_fuse = opts->no_fuse;
    m->no_mmap = opts->no_mmap;
    m->on_convert = opts->on_convert;
    m->convert_user = opts->convert_user;

    qvl_model_load_stats *ls = &m->inst.load;
    double t0 = 0;
    qvl_status st = model_open_source(dir, opts->mmproj, &m->cfg, &m->weights, ls, err);
    if (st == QVL_OK) {
        /* The graphs read matrices in the embedding's dtype and vectors in the first norm's. */
        const qvl_st_tensor *emb =
            qvl_weights_get(m->weights, "model.language_model.embed_tokens.weight");
        const qvl_st_tensor *norm =
            qvl_weights_get(m->weights, "model.language_model.norm.weight");
        m->matrix_dtype = emb ? emb->dtype : QVL_BF16;
        m->vector_dtype = norm ? norm->dtype : m->matrix_dtype;
        t0 = now_seconds();
        st = qvl_backend_open_with_options(opts->plugins_path, opts->backend_name,
                                           opts->backend_options, &m->tg[0].lb, err);
        if (st == QVL_OK) m->n_tg = 1;
        ls->backend_seconds = now_seconds() - t0;
        /* --weights wins over the backend's `weights:` option in plugins.yaml. */
        if (st == QVL_OK && opts->weight_dtype) {
            st = choose_matrix_dtype(m, opts->weight_dtype, err);
        } else if (st == QVL_OK && m->tg[0].lb->weights) {
            st = choose_matrix_dtype(m, m->tg[0].lb->weights, err);
            if (st != QVL_OK)
                qvl_error_prefix(err, "plugins.yaml: backend %s, option weights",
                                 m->tg[0].lb->name);
        }
        if (st == QVL_OK) st = choose_kv_dtype(m, opts, err);
    }
    if (st == QVL_OK) {
        qvl_device_info info = {.host_memory = false};
        const qvl_loaded_backend *lb = m->tg[0].lb;
        if (lb->iface->describe && lb->iface->describe(lb->be, &info) == QVL_OK)
            m->tg[0].host_memory = info.host_memory;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        m->convert_threads = cpus < 1 ? 1 : (int)cpus;
        t0 = now_seconds();
        st = model_place(m, opts, err);
        if (st == QVL_OK) st = model_place_ops(m, opts, err);
        if (st == QVL_OK) st = check_kv_attention(m, err);
        ls->backend_seconds += now_seconds() - t0;
    }
    t0 = now_seconds();
    if (st == QVL_OK) st = model_bind_all_weights(m, err);
    ls->bind_seconds = now_seconds() - t0;
    t0 = now_seconds();
    if (st == QVL_OK) st = qvl_seq_create(m, &m->own, err);
    m->seq = m->own;
    ls->cache_seconds = now_seconds() - t0;
    if (st != QVL_OK) {
        qvl_model_close(m);
        return st;
    }
    char place[256], weights[256];
    qvl_model_placement(m, place, sizeof place);
    weights_label(m, weights, sizeof weights);
    QVL_LOG_I("model %s: %lld layers, hidden %lld, vocab %lld, weights %s; %s", dir,
              (long long)m->cfg.text.num_hidden_layers, (long long)m->cfg.text.hidden_size,
              (long long)m->cfg.text.vocab_size, weights, place);
    *out = m;
    return QVL_OK;
}

void qvl_model_close(qvl_model *m) {
    if (!m) return;
    model_batch_forget(m);
    model_vision_forget(m);
    for (int i = 0; i < MODEL_HOST_BLOCKS; i++) /* a caller that did not free them: no leak */
        qvl_model_host_free(m, m->host_blocks[i]);
    qvl_seq_free(m->own);
    model_free_pool(m);
    model_free_bindings(m);
    for (size_t i = 0; i < m->n_tg; i++) qvl_backend_unload(m->tg[i].lb);
    free(m->text_place);
    free(m->kv_home);
    free(m->weight_targets);
    qvl_weights_close(m->weights);
    free(m);
}

const qvl_qwen3vl_config *qvl_model_config(const qvl_model *m) { return &m->cfg; }
const qvl_loaded_backend *qvl_model_backend(const qvl_model *m) { return m->tg[0].lb; }
int64_t qvl_model_ctx(const qvl_model *m) { return m->ctx; }
int64_t qvl_model_n_past(const qvl_model *m) { return m->seq->n_past; }

void qvl_model_truncate(qvl_model *m, int64_t n_past) {
    qvl_seq *q = m->seq;
    if (n_past >= 0 && n_past <= q->n_past) q->n_past = n_past;
    if (q->n_past == 0) q->rope_delta = 0;
}

qvl_status qvl_seq_create(qvl_model *m, qvl_seq **out, qvl_error *err) {
    *out = NULL;
    qvl_seq *q = calloc(1, sizeof *q);
    if (!q) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    q->m = m;
    q->pool_slot = -1;
    qvl_status st = model_alloc_kv(m, q, err);
    if (st != QVL_OK) {
        qvl_seq_free(q);
        return st;
    }
    *out = q;
    return QVL_OK;
}

void qvl_seq_free(qvl_seq *q) {
    if (!q) return;
    qvl_model *m = q->m;
    if (m->seq == q) m->seq = m->own == q ? NULL : m->own;
    for (size_t i = 0; i < m->batch.n; i++)
        if (m->batch.seqs[i] == q) {
            model_batch_forget(m);
            break;
        }
    qvl_split_free(q->decode.sp);
    model_free_kv(m, q);
    free(q);
}

void qvl_model_set_seq(qvl_model *m, qvl_seq *q) { m->seq = q ? q : m->own; }
qvl_seq *qvl_model_own_seq(qvl_model *m) { return m->own; }

static qvl_status set_image_inputs(qvl_model *m, qvl_split *sp, const int32_t *ids, int64_t n,
                                   const qvl_image_features *img, qvl_error *err);
static qvl_status decode_ready(qvl_model *m, qvl_error *err);
static qvl_status run_decode_step(qvl_model *m, const int32_t *ids, const int32_t *pos,
                                  float *logits, qvl_error *err);
static qvl_status run_batch(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos_buf,
                            const qvl_image_features *img, bool all_logits, float *logits,
                            qvl_error *err);

qvl_status qvl_model_eval(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                          bool all_logits, float *logits, qvl_error *err) {
    return qvl_model_eval_images(m, ids, n, pos, NULL, all_logits, logits, err);
}

qvl_status qvl_model_eval_images(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                                 const qvl_image_features *img, bool all_logits, float *logits,
                                 qvl_error *err) {
    if (img && img->n_tokens == 0) img = NULL;
    /* Text positions would be wrong for the image tokens (docs/MODEL.md, "Multimodal
     * positions"). */
    if (img && !pos)
        return qvl_fail(err, QVL_E_INVALID, "image features need their positions "
                        "(qvl_model_positions)");
    const int64_t vocab = m->cfg.text.vocab_size;
    if (n <= 0) return qvl_fail(err, QVL_E_INVALID, "no tokens to evaluate");
    qvl_seq *q = m->seq;
    if (n > m->ctx - q->n_past)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%lld tokens do not fit in the context: %lld already used of --ctx %lld",
                        (long long)n, (long long)q->n_past, (long long)m->ctx);
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
                pos_buf[c * n + i] = (int32_t)(q->n_past + q->rope_delta + i);
    }

    qvl_status st;
    if (n == 1 && !img && (st = decode_ready(m, err)) != QVL_OK) {
        free(pos_buf);
        return st;
    }
    if (n == 1 && !img && q->decode.sp) {
        st = run_decode_step(m, ids, pos_buf, logits, err);
    } else {
        if (n == 1 && !img) m->steps.decode_unkept++;
        st = run_batch(m, ids, n, pos_buf, img, all_logits, logits, err);
    }
    if (st == QVL_OK) model_seq_advance(q, pos_buf, n, n);
    free(pos_buf);
    return st;
}

void model_seq_advance(qvl_seq *q, const int32_t *pos, int64_t stride, int64_t n) {
    /* The next text position continues after the largest position used so far. */
    int32_t max_pos = 0;
    for (int64_t c = 0; c < 3; c++)
        for (int64_t i = 0; i < n; i++)
            if (pos[c * stride + i] > max_pos) max_pos = pos[c * stride + i];
    q->n_past += n;
    q->rope_delta = (int64_t)max_pos + 1 - q->n_past;
}

/* Adds what the parts timed in their last run to the model's totals (profiling on). */
void model_collect_profile(qvl_model *m, qvl_split *sp) {
    model_note_arenas(m, sp);
    if (!m->inst.profiling) return;
    qvl_op_profile p;
    qvl_split_profile(sp, &p);
    qvl_op_profile_add(&m->inst.profile, &p);
    qvl_split_profile_reset(sp);
}

/* Builds the reusable single-token graph once. It is kept when it takes every position from
 * its inputs (qvl_graph_position_free) and the backends take every node; a backend that does
 * not (an older plugin without STORE_ROWS_AT) is not an error: steps then build their own
 * graph. Unfused attention qualifies as fused attention does: its chain reads every cache
 * row, and the caches are zero-filled (model_alloc_kv), so rows not yet written add exact
 * zeros (ops.h, MASK_CAUSAL_AT). */
static qvl_status decode_ready(qvl_model *m, qvl_error *err) {
    decode_step *d = &m->seq->decode;
    if (d->sp || d->unavailable) return QVL_OK;
    qvl_text_graph_opts go = {
        .n_tokens = 1, .kv_at_input = true, .kv_capacity = m->ctx, .kv_dtype = m->kv_dtype,
        .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
        .matrix_dtype_of = model_bound_dtype, .matrix_dtype_ctx = m,
    };
    qvl_graph *g = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    qvl_error why = {0};
    qvl_tid fixed = -1;
    if (st == QVL_OK && !qvl_graph_position_free(g, &fixed))
        st = qvl_fail(&why, QVL_E_UNSUPPORTED, "node %s fixes the position",
                      qvl_graph_tensor_name(g, fixed) ? qvl_graph_tensor_name(g, fixed) : "?");
    if (st == QVL_OK) st = model_split(m, g, true, &d->sp, &why);
    qvl_graph_free(g);
    if (st == QVL_E_UNSUPPORTED) {
        QVL_LOG_I("decode graph reuse is off (%s); building a graph per token", why.msg);
        qvl_split_free(d->sp);
        d->sp = NULL;
        d->unavailable = true;
        return QVL_OK;
    }
    if (st != QVL_OK) {
        if (err) *err = why;
        return st;
    }
    m->steps.decode_builds++;
    model_log_split(m, d->sp, "decode step");
    return QVL_OK;
}

static qvl_status run_decode_step(qvl_model *m, const int32_t *ids, const int32_t *pos,
                                  float *logits, qvl_error *err) {
    qvl_split *sp = m->seq->decode.sp;
    const int32_t at = (int32_t)m->seq->n_past;
    if (m->seq->decode.runs++ > 0) m->steps.decode_reuses++;
    qvl_split_set_profiling(sp, m->inst.profiling);
    qvl_status st = qvl_split_set(sp, "ids", ids, sizeof *ids, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "pos", pos, 3 * sizeof *pos, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "kv_at", &at, sizeof at, err);
    if (st == QVL_OK) st = qvl_split_run(sp, err);
    if (st == QVL_OK) model_collect_profile(m, sp);
    if (st == QVL_OK)
        st = qvl_split_get(sp, "logits", logits, (size_t)m->cfg.text.vocab_size * sizeof(float),
                           err);
    return st;
}

/* Any batch: a graph built, split, fused and planned for exactly these tokens. */
static qvl_status run_batch(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos_buf,
                            const qvl_image_features *img, bool all_logits, float *logits,
                            qvl_error *err) {
    const int64_t vocab = m->cfg.text.vocab_size;
    qvl_text_graph_opts go = {
        .n_tokens = n, .n_past = m->seq->n_past, .kv_capacity = m->ctx, .kv_dtype = m->kv_dtype,
        .all_logits = all_logits,
        .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
        .matrix_dtype_of = model_bound_dtype, .matrix_dtype_ctx = m,
        .n_image_tokens = img ? img->n_tokens : 0, .n_deepstack = img ? img->n_deepstack : 0,
    };
    /* The prompt's arena takes the memory the kept vision graph's arena held (two large
     * arenas never coexist; --gpu-layers auto leaves room for one). */
    model_vision_release(m);
    qvl_graph *g = NULL;
    qvl_split *sp = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    if (st == QVL_OK) st = model_split(m, g, true, &sp, err);
    qvl_graph_free(g);
    if (st == QVL_OK) qvl_split_set_profiling(sp, m->inst.profiling);
    if (st == QVL_OK)
        qvl_split_set_progress(sp, m->inst.prefill_progress, m->inst.prefill_progress_arg);
    if (st == QVL_OK) st = qvl_split_set(sp, "ids", ids, (size_t)n * sizeof *ids, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "pos", pos_buf, (size_t)n * 3 * sizeof *pos_buf, err);
    if (st == QVL_OK && img) st = set_image_inputs(m, sp, ids, n, img, err);
    if (st == QVL_OK) st = qvl_split_run(sp, err);
    if (st == QVL_OK) model_collect_profile(m, sp);
    if (st == QVL_OK) {
        size_t rows = all_logits ? (size_t)n : 1;
        st = qvl_split_get(sp, "logits", logits, rows * (size_t)vocab * sizeof(float), err);
    }
    qvl_split_free(sp);
    return st;
}

/* ---- images ------------------------------------------------------------------------------ */

void qvl_image_features_free(qvl_image_features *f) {
    if (!f) return;
    free(f->embeds);
    free(f->deepstack);
    memset(f, 0, sizeof *f);
}

qvl_status qvl_image_features_slice(const qvl_image_features *all, int64_t k0, int64_t count,
                                    qvl_image_features *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (k0 < 0 || count < 0 || k0 + count > all->n_tokens)
        return qvl_fail(err, QVL_E_INVALID, "image feature rows [%lld, %lld) outside the %lld "
                        "there are", (long long)k0, (long long)(k0 + count),
                        (long long)all->n_tokens);
    out->n_tokens = count;
    out->hidden = all->hidden;
    out->n_deepstack = all->n_deepstack;
    if (count == 0) return QVL_OK;
    const int64_t h = all->hidden;
    out->embeds = all->embeds + k0 * h;
    if (all->n_deepstack == 0) return QVL_OK;
    out->deepstack = malloc((size_t)(all->n_deepstack * count * h) * sizeof *out->deepstack);
    if (!out->deepstack) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int32_t k = 0; k < all->n_deepstack; k++)
        memcpy(out->deepstack + k * count * h, all->deepstack + (k * all->n_tokens + k0) * h,
               (size_t)(count * h) * sizeof *out->deepstack);
    return QVL_OK;
}

/* The layout of qvl_image_features: deepstack sets are consecutive blocks, so each set of
 * dst's grows by src's rows of the same set. */
qvl_status qvl_image_features_append(qvl_image_features *dst, qvl_image_features *src,
                                     qvl_error *err) {
    if (dst->n_tokens == 0) {
        qvl_image_features_free(dst);
        *dst = *src;
        memset(src, 0, sizeof *src);
        return QVL_OK;
    }
    if (src->hidden != dst->hidden || src->n_deepstack != dst->n_deepstack) {
        qvl_image_features_free(src);
        return qvl_fail(err, QVL_E_SHAPE, "vision encoder: feature shapes differ between pictures");
    }
    const int64_t n = dst->n_tokens + src->n_tokens, h = dst->hidden;
    float *e = malloc((size_t)(n * h) * sizeof *e);
    float *d = dst->n_deepstack ? malloc((size_t)(dst->n_deepstack * n * h) * sizeof *d) : NULL;
    if (!e || (dst->n_deepstack && !d)) {
        free(e);
        free(d);
        qvl_image_features_free(src);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for the image features");
    }
    memcpy(e, dst->embeds, (size_t)(dst->n_tokens * h) * sizeof *e);
    memcpy(e + dst->n_tokens * h, src->embeds, (size_t)(src->n_tokens * h) * sizeof *e);
    for (int32_t k = 0; k < dst->n_deepstack; k++) {
        memcpy(d + k * n * h, dst->deepstack + k * dst->n_tokens * h,
               (size_t)(dst->n_tokens * h) * sizeof *d);
        memcpy(d + k * n * h + dst->n_tokens * h, src->deepstack + k * src->n_tokens * h,
               (size_t)(src->n_tokens * h) * sizeof *d);
    }
    free(dst->embeds);
    free(dst->deepstack);
    dst->embeds = e;
    dst->deepstack = d;
    dst->n_tokens = n;
    dst->seconds += src->seconds;
    qvl_image_features_free(src);
    return QVL_OK;
}

void qvl_positions_slice(const int32_t *pos, int64_t n, int64_t c0, int64_t len, int32_t *out) {
    for (int r = 0; r < 3; r++) memcpy(out + r * len, pos + r * n + c0, (size_t)len * sizeof *out);
}

/* The image rows of a text batch: where its image pads are, and the features to put there. */
static qvl_status set_image_inputs(qvl_model *m, qvl_split *sp, const int32_t *ids, int64_t n,
                                   const qvl_image_features *img, qvl_error *err) {
    const int64_t K = img->n_tokens, D = m->cfg.text.hidden_size;
    if (img->hidden != D || !img->embeds || (img->n_deepstack > 0 && !img->deepstack))
        return qvl_fail(err, QVL_E_SHAPE, "image features are %lld wide, the text model %lld",
                        (long long)img->hidden, (long long)D);
    int32_t *rows = malloc((size_t)K * sizeof *rows);
    if (!rows) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    /* Image and video pads alike take the next row: the features are in prompt order. */
    const int64_t vpad = m->cfg.video_token_id;
    int64_t k = 0, videos = 0;
    for (int64_t i = 0; i < n; i++) {
        const bool video = vpad >= 0 && ids[i] == vpad;
        if (ids[i] != m->cfg.image_token_id && !video) continue;
        if (k < K) rows[k] = (int32_t)i;
        k++;
        videos += video;
    }
    qvl_status st = QVL_OK;
    if (k != K)
        st = qvl_fail(err, QVL_E_INVALID, "the prompt has %lld image pad tokens%s, the features %lld",
                      (long long)k, videos ? " (video pads included)" : "", (long long)K);
    const size_t feat_bytes = (size_t)K * (size_t)D * sizeof(float);
    if (st == QVL_OK)
        st = qvl_split_set(sp, "image_rows", rows, (size_t)K * sizeof *rows, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "image_embeds", img->embeds, feat_bytes, err);
    for (int32_t d = 0; st == QVL_OK && d < img->n_deepstack; d++) {
        char name[32];
        snprintf(name, sizeof name, "deepstack.%d", (int)d);
        st = qvl_split_set(sp, name, img->deepstack + (size_t)d * K * D, feat_bytes, err);
    }
    free(rows);
    return st;
}

qvl_status qvl_model_positions(const qvl_model *m, const int32_t *ids, int64_t n,
                               const qvl_image_grid *grids, size_t n_images, int32_t *pos,
                               qvl_error *err) {
    return qvl_mrope_positions(ids, n, (int32_t)m->cfg.image_token_id, grids, n_images,
                               m->cfg.vision.spatial_merge_size, m->seq->n_past + m->seq->rope_delta, pos,
                               NULL, err);
}

qvl_status qvl_model_positions_media(const qvl_model *m, const int32_t *ids, int64_t n,
                                     const qvl_image_grid *grids, const bool *is_video,
                                     size_t n_media, int32_t *pos, qvl_error *err) {
    return qvl_mrope_positions_media(ids, n, (int32_t)m->cfg.image_token_id,
                                     (int32_t)m->cfg.video_token_id, grids, is_video, n_media,
                                     m->cfg.vision.spatial_merge_size,
                                     m->seq->n_past + m->seq->rope_delta, pos, NULL, err);
}

qvl_status qvl_model_encode_images(qvl_model *m, const float *pixels, size_t n_images,
                                   const qvl_image_grid *grids, qvl_image_features *out,
                                   qvl_error *err) {
    memset(out, 0, sizeof *out);
    const qvl_vision_config *v = &m->cfg.vision;
    if (!m->cfg.has_vision || m->cfg.image_token_id < 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "the model has no vision encoder");
    if (!pixels || n_images == 0 || !grids)
        return qvl_fail(err, QVL_E_INVALID, "no images to encode");
    if (v->out_hidden_size != m->cfg.text.hidden_size || v->n_deepstack > m->cfg.text.num_hidden_layers)
        return qvl_fail(err, QVL_E_INVALID, "vision out_hidden_size %lld / %d deepstack taps do not "
                        "fit the text model", (long long)v->out_hidden_size, (int)v->n_deepstack);
    const double t0 = now_seconds();
    qvl_status st = model_vision_encode(m, pixels, n_images, grids, out, err);
    if (st != QVL_OK) {
        qvl_image_features_free(out);
        return qvl_error_prefix(err, "vision encoder");
    }
    out->seconds = now_seconds() - t0;
    return QVL_OK;
}

/* ---- measuring (qvl-bench) and the load options it uses ------------------------------------ */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --weights: matrices in another dtype, or the q4_k_m mixture. Blocks run along rows, so for a
 * block dtype every matrix's row (all elements after the first dimension) must hold whole
 * blocks (the mixture falls back per tensor instead). */
static qvl_status choose_matrix_dtype(qvl_model *m, const char *name, qvl_error *err) {
    qvl_dtype d;
    m->mix_q4_k_m = strcmp(name, "q4_k_m") == 0;
    if (m->mix_q4_k_m) d = QVL_Q4_K;
    else if (!qvl_dtype_parse(name, &d) || !qvl_dtype_valid((int)d) || d == QVL_I32)
        return qvl_fail(err, QVL_E_INVALID,
                        "weight dtype '%s' is not one of f32, f16, bf16, q8_0, q4_k, q6_k, "
                        "q4_k_m", name);
    const int64_t block = (int64_t)qvl_dtype_block_elems(d);
    for (size_t i = 0; block > 1 && !m->mix_q4_k_m && i < qvl_weights_count(m->weights); i++) {
        const qvl_st_tensor *t = qvl_weights_at(m->weights, i);
        int64_t row = 1;
        for (int k = 1; k < t->ndim; k++) row *= t->shape[k];
        if (t->ndim >= 2 && row % block != 0)
            return qvl_fail(err, QVL_E_SHAPE,
                            "%s: rows of %lld elements cannot be stored as %s (blocks of %lld; "
                            "--weights q4_k_m falls back per tensor)",
                            t->name, (long long)row, qvl_dtype_name(d), (long long)block);
    }
    m->matrix_dtype = d;
    m->weights_requested = true;
    return QVL_OK;
}

/* --kv-type, else the backend's `kv_type:` option, else f16: half the bytes of f32 for every
 * step's cache reads, with the logit error stated in docs/QUANT.md. q8_0 (34 bytes per 32
 * values) quantises each head's row of D values in blocks of 32, so D must be whole blocks. */
static qvl_status choose_kv_dtype(qvl_model *m, const qvl_model_options *opts, qvl_error *err) {
    const char *name = opts->kv_type ? opts->kv_type : m->tg[0].lb->kv_type;
    const char *where = opts->kv_type ? "--kv-type" : "plugins.yaml option kv_type";
    m->kv_dtype = QVL_F16;
    if (!name) return QVL_OK;
    if (strcmp(name, "f32") == 0) {
        m->kv_dtype = QVL_F32;
    } else if (strcmp(name, "q8_0") == 0) {
        int64_t D = m->cfg.text.head_dim;
        if (D % QVL_Q8_0_BLOCK != 0)
            return qvl_fail(err, QVL_E_UNSUPPORTED,
                            "%s q8_0: the model's head_dim %lld is not a multiple of %d (q8_0 "
                            "blocks); use f16 or f32", where, (long long)D, QVL_Q8_0_BLOCK);
        m->kv_dtype = QVL_Q8_0;
    } else if (strcmp(name, "f16") != 0) {
        return qvl_fail(err, QVL_E_INVALID, "%s '%s' is not one of f32, f16, q8_0", where, name);
    }
    return QVL_OK;
}

/* Attention over a q8_0 cache exists only as the fused ATTENTION node (ops.h: the primitive
 * chain cannot read a q8_0 V transposed), so every backend that runs a decoder layer must take
 * that node, for prefill (CAUSAL) and for the reused decode graph (CAUSAL_AT): asked once
 * here, so that a backend without it is one line at load, not a refused graph later. */
static qvl_status check_kv_attention(const qvl_model *m, qvl_error *err) {
    if (m->kv_dtype != QVL_Q8_0) return QVL_OK;
    const qvl_text_config *t = &m->cfg.text;
    const int64_t D = t->head_dim;
    qvl_tensor q = {0}, kv = {0}, at = {0}, out = {0};
    int64_t one[1] = {1}, qs[3] = {1, t->num_attention_heads, D};
    int64_t ks[3] = {m->ctx, t->num_key_value_heads, D};
    if (!qvl_desc_init(&q.desc, QVL_F32, 3, qs) || !qvl_desc_init(&kv.desc, QVL_Q8_0, 3, ks) ||
        !qvl_desc_init(&at.desc, QVL_I32, 1, one) || !qvl_desc_init(&out.desc, QVL_F32, 3, qs))
        return qvl_fail(err, QVL_E_LIMIT, "--kv-type q8_0: the KV cache shape overflows");
    for (size_t ti = 0; ti < m->n_tg; ti++) {
        bool runs_layer = false;
        for (int64_t l = 0; l < t->num_hidden_layers; l++)
            runs_layer |= m->kv_home[l] == (int32_t)ti;
        if (!runs_layer) continue;
        const qvl_loaded_backend *lb = m->tg[ti].lb;
        for (int k = 0; k < 2; k++) {
            qvl_node n = {.op = QVL_OP_ATTENTION, .n_src = 4, .src = {&q, &kv, &kv}, .dst = &out,
                          .name = "q8_0 KV attention"};
            n.params.attention.scale = 1.0f;
            n.params.attention.mask = k ? QVL_MASK_CAUSAL_AT : QVL_MASK_CAUSAL;
            if (k) n.src[3] = &at;
            qvl_error why = {0};
            if (qvl_backend_check(lb->iface, lb->be, &n, &why) != QVL_OK)
                return qvl_fail(err, QVL_E_UNSUPPORTED,
                                "--kv-type q8_0: backend %s does not run fused attention over a "
                                "q8_0 cache (%s); use --kv-type f16", lb->name, why.msg);
        }
    }
    return QVL_OK;
}

static bool read_by_decode(const qvl_model *m, const char *name) {
    if (strcmp(name, "lm_head.weight") == 0) return true;
    if (strcmp(name, "model.language_model.embed_tokens.weight") == 0)
        return m->cfg.tie_word_embeddings; /* otherwise one row per step */
    return strncmp(name, "model.language_model.", 21) == 0;
}

void qvl_model_get_load_stats(const qvl_model *m, qvl_model_load_stats *out) {
    *out = m->inst.load;
    out->weights_in_place_bytes = out->weights_copied_bytes = out->decode_weight_bytes = 0;
    memset(out->text_matrices, 0, sizeof out->text_matrices);
    memset(out->vision_matrices, 0, sizeof out->vision_matrices);
    const int32_t head = m->text_place[qvl_text_group_output(m->cfg.text.num_hidden_layers)];
    for (size_t i = 0; i < m->n_bound; i++) {
        const bound_weight *w = &m->bound[i];
        const qvl_st_tensor *t = qvl_weights_get(m->weights, w->name);
        if (t && w->buf.data == t->data) out->weights_in_place_bytes += w->buf.size;
        else out->weights_copied_bytes += w->buf.size;
        /* a tied embedding bound twice is read whole only where it is the output head */
        const bool embed = strcmp(w->name, "model.language_model.embed_tokens.weight") == 0;
        if (read_by_decode(m, w->name) && (!embed || w->target == head))
            out->decode_weight_bytes += w->buf.size;
        if (t && t->ndim >= 2 && (!embed || !m->cfg.tie_word_embeddings || w->target == head)) {
            if (strncmp(w->name, "model.visual.", 13) == 0) out->vision_matrices[w->dtype]++;
            else out->text_matrices[w->dtype]++;
        }
    }
    out->kv_bytes = 0;
    for (size_t i = 0; i < m->n_tg; i++) out->kv_bytes += m->kv_pool[i].size;
    out->kv_dtype = m->kv_dtype;
    out->matrix_dtype = m->matrix_dtype;
}

void qvl_model_get_step_stats(const qvl_model *m, qvl_model_step_stats *out) { *out = m->steps; }

void qvl_model_set_profiling(qvl_model *m, bool on) { m->inst.profiling = on; }
void qvl_model_profile(const qvl_model *m, qvl_op_profile *out) { *out = m->inst.profile; }
void qvl_model_profile_reset(qvl_model *m) { memset(&m->inst.profile, 0, sizeof m->inst.profile); }

size_t qvl_model_memory(const qvl_model *m, qvl_model_backend_memory *out, size_t max) {
    size_t n = 0;
    for (size_t ti = 0; ti < m->n_tg && n < max; ti++, n++) {
        const model_target *tg = &m->tg[ti];
        qvl_model_backend_memory *r = &out[n];
        memset(r, 0, sizeof *r);
        r->name = tg->lb->name;
        for (size_t i = 0; i < m->n_bound; i++) {
            const bound_weight *w = &m->bound[i];
            if (w->target != (int32_t)ti) continue;
            const qvl_st_tensor *t = qvl_weights_get(m->weights, w->name);
            if (t && w->buf.data == t->data) r->weights_mapped_bytes += w->buf.size;
            else r->weights_bytes += w->buf.size;
        }
        r->kv_bytes = tg->kv_bytes;
        r->activation_bytes = tg->activation_bytes;
        r->host_memory = tg->host_memory;
        qvl_device_info info = {.host_memory = false};
        if (tg->lb->iface->describe && tg->lb->iface->describe(tg->lb->be, &info) == QVL_OK &&
            info.memory_total > 0) {
            r->device_total = info.memory_total;
            r->device_free = info.memory_free;
        }
    }
    return n;
}

void qvl_model_set_prefill_progress(qvl_model *m, qvl_exec_progress_fn fn, void *arg) {
    m->inst.prefill_progress = fn;
    m->inst.prefill_progress_arg = fn ? arg : NULL;
}
