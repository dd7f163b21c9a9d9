/* One decode step for several sequences at once (qvl_model_decode_batch), and the host
 * memory its logits are best downloaded into (qvl_model_host_alloc).
 *
 * The batched graph runs every matrix product on all rows together (weights are read once per
 * step, not once per sequence: decode is bound by reading weights) and attention per sequence
 * over its own cache. When every sequence's cache is a slot of the model's KV pool, one
 * store and one attention node per layer serve all rows, each reading its slot and cache
 * length from data: the graph then serves any pooled sequences of that count unchanged.
 * Otherwise the graph has nodes per sequence, bound to their caches: the same sequences only
 * set their inputs, as many other ones rebind its cache inputs. A batch of another size builds
 * a new graph. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "qvl/log.h"

void model_batch_forget(qvl_model *m) {
    batch_step *b = &m->batch;
    qvl_split_free(b->sp);
    free(b->seqs);
    free(b->host_logits);
    b->sp = NULL;
    b->seqs = NULL;
    b->host_logits = NULL;
    b->n = 0;
}

static bool all_pooled(qvl_seq *const *seqs, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (seqs[i]->pool_slot < 0) return false;
    return true;
}

static bool same_seqs(const batch_step *b, qvl_seq *const *seqs, size_t n) {
    if (!b->sp || b->n != n) return false;
    if (b->pooled) return all_pooled(seqs, n);
    return memcmp(b->seqs, seqs, n * sizeof *seqs) == 0;
}

/* Builds, splits and binds the batched graph for these sequences. QVL_E_UNSUPPORTED when the
 * graph fixes a position (it could not serve the next step) or a backend refuses a node; fused
 * or unfused attention both qualify (see decode_ready in model.c). */
static qvl_status batch_ready(qvl_model *m, qvl_seq *const *seqs, size_t n, qvl_error *err) {
    batch_step *b = &m->batch;
    if (same_seqs(b, seqs, n)) {
        m->steps.batch_reuses++;
        return QVL_OK;
    }
    const bool pooled = all_pooled(seqs, n);
    if (b->sp && b->n == n && !b->pooled && !pooled) {
        /* As many sequences as the kept graph has rows, other ones: point its cache inputs at
         * theirs (a server's slots come and go every few steps; rebuilding, fusing and
         * planning the graph each time would cost more than the step). */
        m->batch_seqs = seqs;
        m->n_batch_seqs = n;
        qvl_status st = model_bind_split(m, b->sp, err);
        m->batch_seqs = NULL;
        m->n_batch_seqs = 0;
        if (st == QVL_OK) {
            memcpy(b->seqs, seqs, n * sizeof *seqs);
            m->steps.batch_reuses++;
            return QVL_OK;
        }
    }
    model_batch_forget(m);
    qvl_text_graph_opts go = {
        .n_tokens = (int64_t)n, .n_seqs = (int64_t)n, .kv_at_input = true,
        .kv_pool_slots = pooled ? m->kv_slots : 0,
        .kv_capacity = m->ctx, .kv_dtype = m->kv_dtype, .all_logits = true,
        .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
        .matrix_dtype_of = model_bound_dtype, .matrix_dtype_ctx = m,
        .greedy_vocab = m->greedy_vocab,
    };
    qvl_graph *g = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    qvl_tid fixed = -1;
    if (st == QVL_OK && !qvl_graph_position_free(g, &fixed))
        st = qvl_fail(err, QVL_E_UNSUPPORTED, "node %s fixes the position",
                      qvl_graph_tensor_name(g, fixed) ? qvl_graph_tensor_name(g, fixed) : "?");
    m->batch_seqs = seqs;
    m->n_batch_seqs = n;
    if (st == QVL_OK) st = model_split(m, g, true, &b->sp, err);
    m->batch_seqs = NULL;
    m->n_batch_seqs = 0;
    qvl_graph_free(g);
    if (st == QVL_OK && !(b->seqs = malloc(n * sizeof *b->seqs)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st != QVL_OK) {
        model_batch_forget(m);
        return st;
    }
    memcpy(b->seqs, seqs, n * sizeof *seqs);
    b->n = n;
    b->pooled = pooled;
    m->steps.batch_builds++;
    model_log_split(m, b->sp, "batched decode step");
    return QVL_OK;
}

/* One batched step; its logits into `logits`, or (logits NULL) its greedy ids into next. */
static qvl_status run_batched(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids, size_t n,
                              float *logits, int32_t *next, qvl_error *err) {
    qvl_split *sp = m->batch.sp;
    int32_t *pos = malloc(3 * n * sizeof *pos);
    if (!pos) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            pos[(size_t)c * n + i] = (int32_t)(seqs[i]->n_past + seqs[i]->rope_delta);
    qvl_split_set_profiling(sp, m->inst.profiling);
    qvl_status st = qvl_split_set(sp, "ids", ids, n * sizeof *ids, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "pos", pos, 3 * n * sizeof *pos, err);
    if (m->batch.pooled) {
        int32_t *rows = malloc(2 * n * sizeof *rows); /* slot[n], then at[n] */
        if (!rows && st == QVL_OK) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        for (size_t i = 0; st == QVL_OK && i < n; i++) {
            rows[i] = seqs[i]->pool_slot;
            rows[n + i] = (int32_t)seqs[i]->n_past;
        }
        if (st == QVL_OK) st = qvl_split_set(sp, "slot", rows, n * sizeof *rows, err);
        if (st == QVL_OK) st = qvl_split_set(sp, "kv_at", rows + n, n * sizeof *rows, err);
        free(rows);
    }
    for (size_t i = 0; st == QVL_OK && !m->batch.pooled && i < n; i++) {
        char name[32];
        const int32_t at = (int32_t)seqs[i]->n_past, row = (int32_t)i;
        snprintf(name, sizeof name, "s%zu.kv_at", i);
        st = qvl_split_set(sp, name, &at, sizeof at, err);
        snprintf(name, sizeof name, "row.%zu", i);
        if (st == QVL_OK) st = qvl_split_set(sp, name, &row, sizeof row, err);
    }
    free(pos);
    if (st == QVL_OK) st = qvl_split_run(sp, err);
    if (st == QVL_OK) model_collect_profile(m, sp);
    if (st == QVL_OK && logits)
        st = qvl_split_get(sp, "logits", logits,
                           n * (size_t)m->cfg.text.vocab_size * sizeof(float), err);
    if (st == QVL_OK && !logits) st = qvl_split_get(sp, "argmax", next, n * sizeof *next, err);
    return st;
}

qvl_status model_check_batch_seqs(const qvl_model *m, qvl_seq *const *seqs, size_t n,
                                  const char *what, qvl_error *err) {
    if (n == 0 || n > QVL_TEXT_MAX_SEQS)
        return qvl_fail(err, QVL_E_INVALID, "a %s holds 1 to %d sequences, not %zu", what,
                        QVL_TEXT_MAX_SEQS, n);
    for (size_t i = 0; i < n; i++) {
        if (!seqs[i] || seqs[i]->m != m)
            return qvl_fail(err, QVL_E_INVALID, "sequence %zu of the batch is not this model's", i);
        for (size_t j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return qvl_fail(err, QVL_E_INVALID, "sequence %zu appears twice in the batch", i);
    }
    return QVL_OK;
}

static qvl_status check_batch(const qvl_model *m, qvl_seq *const *seqs, const int32_t *ids,
                              size_t n, qvl_error *err) {
    qvl_status st = model_check_batch_seqs(m, seqs, n, "decode batch", err);
    if (st != QVL_OK) return st;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i]->n_past >= m->ctx)
            return qvl_fail(err, QVL_E_LIMIT, "sequence %zu is full: %lld tokens of --ctx %lld", i,
                            (long long)seqs[i]->n_past, (long long)m->ctx);
        if (ids[i] < 0 || ids[i] >= m->cfg.text.vocab_size)
            return qvl_fail(err, QVL_E_INVALID, "token id %d of sequence %zu is outside the "
                            "vocabulary [0, %lld)", ids[i], i, (long long)m->cfg.text.vocab_size);
    }
    return QVL_OK;
}

/* One step of n sequences: its logits into `logits`, or (logits NULL) its greedy ids into
 * next. Without a kept batched graph (one sequence, or batching unavailable) the sequences
 * step one by one, and greedy ids come from logits kept on the host (for
 * qvl_model_batch_logits) by the device's rule. */
static qvl_status step(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids, size_t n,
                       float *logits, int32_t *next, qvl_error *err) {
    qvl_status st = check_batch(m, seqs, ids, n, err);
    if (st != QVL_OK) return st;
    qvl_seq *current = m->seq;
    const size_t vocab = (size_t)m->cfg.text.vocab_size;
    batch_step *b = &m->batch;
    bool batched = n > 1 && !b->unavailable;
    if (batched) {
        qvl_error why = {0};
        st = batch_ready(m, seqs, n, &why);
        if (st == QVL_E_UNSUPPORTED) {
            QVL_LOG_I("batched decode is off (%s): sequences decode one by one", why.msg);
            b->unavailable = true;
            batched = false;
            st = QVL_OK;
        } else if (st != QVL_OK) {
            if (err) *err = why;
            return st;
        }
    }
    if (batched) {
        if (!logits) { /* the step's own logits are the ones qvl_model_batch_logits reads */
            free(b->host_logits);
            b->host_logits = NULL;
        }
        st = run_batched(m, seqs, ids, n, logits, next, err);
        if (st == QVL_OK && b->pooled) m->steps.batch_pooled++;
        for (size_t i = 0; st == QVL_OK && i < n; i++) seqs[i]->n_past++; /* rope_delta holds */
        return st;
    }
    if (!logits) {
        float *host = realloc(b->host_logits, n * vocab * sizeof *host);
        if (!host) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        logits = b->host_logits = host;
    }
    for (size_t i = 0; st == QVL_OK && i < n; i++) {
        qvl_model_set_seq(m, seqs[i]);
        st = qvl_model_eval(m, &ids[i], 1, NULL, false, logits + i * vocab, err);
    }
    m->seq = current;
    for (size_t i = 0; st == QVL_OK && next && i < n; i++)
        next[i] = qvl_argmax_row(logits + i * vocab, m->greedy_vocab);
    return st;
}

qvl_status qvl_model_decode_batch(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids,
                                  size_t n, float *logits, qvl_error *err) {
    return step(m, seqs, ids, n, logits, NULL, err);
}

qvl_status qvl_model_set_greedy_vocab(qvl_model *m, int32_t n_valid, qvl_error *err) {
    if (n_valid < 0 || n_valid > m->cfg.text.vocab_size)
        return qvl_fail(err, QVL_E_INVALID, "greedy vocabulary %d is outside [0, %lld]",
                        (int)n_valid, (long long)m->cfg.text.vocab_size);
    /* The backend that computes the logits must take ARGMAX itself: a graph built later than
     * the load's placement does not load another backend for a node (model_fallback.c), and
     * another backend would need the logits copied to it, the cost this saves. */
    const int32_t head = m->text_place[qvl_text_group_output(m->cfg.text.num_hidden_layers)];
    const qvl_backend_iface *iface = m->tg[head].lb->iface;
    if (n_valid > 0 && !qvl_backend_kernel(iface, QVL_OP_ARGMAX))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s has no argmax kernel: greedy tokens are "
                        "chosen on the host", iface->name ? iface->name : "the output's backend");
    if (n_valid != m->greedy_vocab) model_batch_forget(m); /* its graph has the old output */
    m->greedy_vocab = n_valid;
    return QVL_OK;
}

qvl_status qvl_model_decode_batch_greedy(qvl_model *m, qvl_seq *const *seqs, const int32_t *ids,
                                         size_t n, int32_t *next, qvl_error *err) {
    if (m->greedy_vocab <= 0)
        return qvl_fail(err, QVL_E_INVALID, "greedy decoding on the device is off "
                        "(qvl_model_set_greedy_vocab)");
    return step(m, seqs, ids, n, NULL, next, err);
}

qvl_status qvl_model_batch_logits(qvl_model *m, size_t n, float *logits, qvl_error *err) {
    const size_t bytes = n * (size_t)m->cfg.text.vocab_size * sizeof *logits;
    if (m->batch.host_logits) {
        memcpy(logits, m->batch.host_logits, bytes);
        return QVL_OK;
    }
    if (!m->batch.sp || m->batch.n != n)
        return qvl_fail(err, QVL_E_INVALID, "no greedy batched step of %zu rows to read", n);
    return qvl_split_get(m->batch.sp, "logits", logits, bytes, err);
}

/* The backend that computes the logits: its host memory (extensions QVL_EXT_HOST_ALLOC and
 * QVL_EXT_HOST_FREE, taken only when it offers both) is what its downloads fill directly. */
static qvl_loaded_backend *output_backend(const qvl_model *m) {
    return m->tg[m->text_place[qvl_text_group_output(m->cfg.text.num_hidden_layers)]].lb;
}

void *qvl_model_host_alloc(qvl_model *m, size_t bytes) {
    const qvl_loaded_backend *lb = output_backend(m);
    qvl_backend_host_alloc_fn alloc =
        (qvl_backend_host_alloc_fn)qvl_backend_proc(lb->iface, QVL_EXT_HOST_ALLOC);
    const bool freeable = qvl_backend_proc(lb->iface, QVL_EXT_HOST_FREE) != NULL;
    for (int i = 0; alloc && freeable && i < MODEL_HOST_BLOCKS; i++) {
        if (m->host_blocks[i]) continue;
        m->host_blocks[i] = alloc(lb->be, bytes);
        if (m->host_blocks[i]) return m->host_blocks[i];
        break;
    }
    return malloc(bytes ? bytes : 1);
}

void qvl_model_host_free(qvl_model *m, void *ptr) {
    if (!ptr) return;
    for (int i = 0; i < MODEL_HOST_BLOCKS; i++) {
        if (m->host_blocks[i] != ptr) continue;
        const qvl_loaded_backend *lb = output_backend(m);
        ((qvl_backend_host_free_fn)qvl_backend_proc(lb->iface, QVL_EXT_HOST_FREE))(lb->be, ptr);
        m->host_blocks[i] = NULL;
        return;
    }
    free(ptr);
}
