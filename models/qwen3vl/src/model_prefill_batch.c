/* The prompts of several sequences in one graph (qvl_model_prefill_batch).
 *
 * A server that starts several requests at once would otherwise prefill them one graph each:
 * every graph reads all the weights for a few hundred rows, which on a GPU leaves most of it
 * idle. Here the rows of all the prompts go through every matrix product together, and
 * attention runs per sequence on its own rows over its own cache (the single-sequence
 * prefill's attention, at that sequence's cache length), so a prompt's keys and values are the
 * ones it would get alone up to the matrix kernels' rounding. Only each sequence's last row
 * goes through the output projection. The graph is built for these lengths and freed after
 * the run, as a single prompt's is. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

static qvl_status check_prefill(const qvl_model *m, qvl_seq *const *seqs,
                                const int32_t *const *ids, const int64_t *n_ids, size_t n,
                                qvl_error *err) {
    qvl_status st = model_check_batch_seqs(m, seqs, n, "batched prefill", err);
    if (st != QVL_OK) return st;
    const int64_t vocab = m->cfg.text.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (!ids[i] || n_ids[i] <= 0)
            return qvl_fail(err, QVL_E_INVALID, "sequence %zu has no tokens to evaluate", i);
        if (n_ids[i] > m->ctx - seqs[i]->n_past)
            return qvl_fail(err, QVL_E_LIMIT, "sequence %zu: %lld tokens do not fit in the "
                            "context: %lld already used of --ctx %lld", i, (long long)n_ids[i],
                            (long long)seqs[i]->n_past, (long long)m->ctx);
        for (int64_t t = 0; t < n_ids[i]; t++)
            if (ids[i][t] < 0 || ids[i][t] >= vocab)
                return qvl_fail(err, QVL_E_INVALID, "token id %d at position %lld of sequence "
                                "%zu is outside the vocabulary [0, %lld)", ids[i][t],
                                (long long)t, i, (long long)vocab);
    }
    return QVL_OK;
}

/* The graph's inputs, all rows of all sequences one after the other: ids [T], pos [3, T],
 * rows.<i> (sequence i's row numbers) and last_rows [n]. */
typedef struct prefill_inputs {
    int32_t *ids, *pos, *rows, *last;
    int64_t total;
} prefill_inputs;

static void free_inputs(prefill_inputs *in) {
    free(in->ids);
    free(in->pos);
    free(in->rows);
    free(in->last);
}

static qvl_status fill_inputs(qvl_seq *const *seqs, const int32_t *const *ids,
                              const int32_t *const *pos, const int64_t *n_ids, size_t n,
                              prefill_inputs *in, qvl_error *err) {
    int64_t T = 0;
    for (size_t i = 0; i < n; i++) T += n_ids[i];
    in->total = T;
    in->ids = malloc((size_t)T * sizeof *in->ids);
    in->pos = malloc((size_t)T * 3 * sizeof *in->pos);
    in->rows = malloc((size_t)T * sizeof *in->rows);
    in->last = malloc(n * sizeof *in->last);
    if (!in->ids || !in->pos || !in->rows || !in->last)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t r0 = 0;
    for (size_t i = 0; i < n; i++) {
        const int64_t len = n_ids[i];
        const int32_t *p = pos ? pos[i] : NULL;
        memcpy(in->ids + r0, ids[i], (size_t)len * sizeof *in->ids);
        for (int64_t t = 0; t < len; t++) {
            in->rows[r0 + t] = (int32_t)(r0 + t);
            for (int64_t c = 0; c < 3; c++)
                in->pos[c * T + r0 + t] =
                    p ? p[c * len + t] : (int32_t)(seqs[i]->n_past + seqs[i]->rope_delta + t);
        }
        in->last[i] = (int32_t)(r0 + len - 1);
        r0 += len;
    }
    return QVL_OK;
}

static qvl_status run_prefill_graph(qvl_model *m, qvl_seq *const *seqs, const int64_t *n_ids,
                                    size_t n, const prefill_inputs *in, float *logits,
                                    qvl_error *err) {
    int64_t past[QVL_TEXT_MAX_SEQS];
    for (size_t i = 0; i < n; i++) past[i] = seqs[i]->n_past;
    qvl_text_graph_opts go = {
        .n_tokens = in->total, .n_seqs = (int64_t)n, .seq_rows = n_ids, .seq_past = past,
        .kv_capacity = m->ctx, .kv_dtype = m->kv_dtype,
        .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
        .matrix_dtype_of = model_bound_dtype, .matrix_dtype_ctx = m,
    };
    /* as for a single prompt: its arena takes the memory the kept vision graph's held */
    model_vision_release(m);
    qvl_graph *g = NULL;
    qvl_split *sp = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    m->batch_seqs = seqs; /* the cache inputs "s<i>." are bound to seqs[i] */
    m->n_batch_seqs = n;
    if (st == QVL_OK) st = model_split(m, g, true, &sp, err);
    m->batch_seqs = NULL;
    m->n_batch_seqs = 0;
    qvl_graph_free(g);
    const int64_t T = in->total;
    if (st == QVL_OK) qvl_split_set_profiling(sp, m->inst.profiling);
    if (st == QVL_OK)
        qvl_split_set_progress(sp, m->inst.prefill_progress, m->inst.prefill_progress_arg);
    if (st == QVL_OK) st = qvl_split_set(sp, "ids", in->ids, (size_t)T * sizeof *in->ids, err);
    if (st == QVL_OK) st = qvl_split_set(sp, "pos", in->pos, (size_t)T * 3 * sizeof *in->pos, err);
    int64_t r0 = 0;
    for (size_t i = 0; st == QVL_OK && i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "rows.%zu", i);
        st = qvl_split_set(sp, name, in->rows + r0, (size_t)n_ids[i] * sizeof *in->rows, err);
        r0 += n_ids[i];
    }
    if (st == QVL_OK) st = qvl_split_set(sp, "last_rows", in->last, n * sizeof *in->last, err);
    if (st == QVL_OK) st = qvl_split_run(sp, err);
    if (st == QVL_OK) model_collect_profile(m, sp);
    if (st == QVL_OK)
        st = qvl_split_get(sp, "logits", logits, n * (size_t)m->cfg.text.vocab_size * sizeof(float),
                           err);
    qvl_split_free(sp);
    return st;
}

qvl_status qvl_model_prefill_batch(qvl_model *m, qvl_seq *const *seqs, const int32_t *const *ids,
                                   const int32_t *const *pos, const int64_t *n_ids, size_t n,
                                   float *logits, qvl_error *err) {
    qvl_status st = check_prefill(m, seqs, ids, n_ids, n, err);
    if (st != QVL_OK) return st;
    if (n == 1) { /* one prompt: the single-sequence path, as it always ran */
        qvl_seq *current = m->seq;
        qvl_model_set_seq(m, seqs[0]);
        st = qvl_model_eval(m, ids[0], n_ids[0], pos ? pos[0] : NULL, false, logits, err);
        m->seq = current;
        return st;
    }
    prefill_inputs in = {0};
    st = fill_inputs(seqs, ids, pos, n_ids, n, &in, err);
    if (st == QVL_OK) st = run_prefill_graph(m, seqs, n_ids, n, &in, logits, err);
    int64_t r0 = 0;
    for (size_t i = 0; st == QVL_OK && i < n; i++) {
        model_seq_advance(seqs[i], in.pos + r0, in.total, n_ids[i]);
        r0 += n_ids[i];
    }
    if (st == QVL_OK) m->steps.prefill_batches++;
    free_inputs(&in);
    return st;
}
