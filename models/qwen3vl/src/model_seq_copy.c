/* One sequence's cached prefix into another (qvl_seq_copy_prefix): n sampled answers to one
 * prompt prefill it once and copy its cache.
 *
 * The copy is a graph over the two caches, run where each layer's cache lives: per layer and
 * per K/V, GET_ROWS reads the source's first n_past rows (as f32) and STORE_ROWS writes them
 * into the destination's rows from 0. Both are primitive ops every backend has (the backend
 * ABI has no buffer-to-buffer copy, and a GPU cache never goes through the host this way).
 * Each cache is seen as rows of Hkv * D elements, so the lookup table is 2-D as GET_ROWS wants.
 *
 * Exactness: f32, f16 and bf16 values survive the trip through f32 unchanged. A q8_0 block is
 * re-quantised from its dequantised values: with the largest |q| = 127 (what quantising gives
 * whenever the block's scale is a normal f16) the scale and every q come back the same; only a
 * block whose values are all below about 2^-7 (a subnormal f16 scale) may come back rounded
 * differently, within q8_0's own error. */
#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"

/* The copy graph: inputs s0.kv.<l>.<k|v> (source rows [n_past, W]), s1.kv.<l>.<k|v> (the
 * destination's whole cache [ctx, W]) and copy.ids (0 .. n_past - 1). */
static qvl_status build_copy(const qvl_model *m, int64_t n_past, qvl_graph **out,
                             qvl_error *err) {
    const qvl_text_config *t = &m->cfg.text;
    const int64_t width = t->num_key_value_heads * t->head_dim;
    qvl_graph *g = qvl_graph_new();
    if (!g) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    const int64_t n_ids[1] = {n_past};
    const qvl_tid ids = qvl_g_input(g, "copy.ids", QVL_I32, 1, n_ids);
    for (int64_t l = 0; l < t->num_hidden_layers; l++) {
        qvl_g_set_group(g, qvl_text_group_layer(l));
        for (int kv = 0; kv < 2; kv++) {
            const char which = kv ? 'v' : 'k';
            char name[64];
            const int64_t src_shape[2] = {n_past, width}, dst_shape[2] = {m->ctx, width};
            snprintf(name, sizeof name, "s0.kv.%lld.%c", (long long)l, which);
            const qvl_tid src = qvl_g_input(g, name, m->kv_dtype, 2, src_shape);
            snprintf(name, sizeof name, "s1.kv.%lld.%c", (long long)l, which);
            const qvl_tid dst = qvl_g_input(g, name, m->kv_dtype, 2, dst_shape);
            const qvl_tid rows = qvl_g_get_rows(g, src, ids);
            qvl_g_store_rows(g, dst, rows, 0);
        }
    }
    qvl_status st = qvl_graph_error(g, err);
    if (st != QVL_OK) {
        qvl_graph_free(g);
        return st;
    }
    *out = g;
    return QVL_OK;
}

qvl_status qvl_seq_copy_prefix(qvl_model *m, qvl_seq *dst, const qvl_seq *src, int64_t n_past,
                               qvl_error *err) {
    if (!dst || !src || dst->m != m || src->m != m)
        return qvl_fail(err, QVL_E_INVALID, "copy prefix: both sequences must be this model's");
    if (dst == src)
        return qvl_fail(err, QVL_E_INVALID, "copy prefix: a sequence cannot copy from itself");
    if (n_past < 0 || n_past > src->n_past)
        return qvl_fail(err, QVL_E_INVALID, "copy prefix: %lld tokens asked, the source holds "
                        "%lld", (long long)n_past, (long long)src->n_past);
    if (n_past == 0) {
        dst->n_past = 0;
        dst->rope_delta = 0;
        return QVL_OK;
    }
    int32_t *ids = malloc((size_t)n_past * sizeof *ids);
    if (!ids) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n_past; i++) ids[i] = (int32_t)i;
    qvl_graph *g = NULL;
    qvl_split *sp = NULL;
    qvl_status st = build_copy(m, n_past, &g, err);
    /* model_split binds "s<i>.kv.*" inputs to the caches of batch_seqs[i]. */
    qvl_seq *const pair[2] = {(qvl_seq *)src, dst};
    m->batch_seqs = pair;
    m->n_batch_seqs = 2;
    if (st == QVL_OK) st = model_split(m, g, true, &sp, err);
    m->batch_seqs = NULL;
    m->n_batch_seqs = 0;
    qvl_graph_free(g);
    if (st == QVL_OK) st = qvl_split_set(sp, "copy.ids", ids, (size_t)n_past * sizeof *ids, err);
    if (st == QVL_OK) st = qvl_split_run(sp, err);
    if (st == QVL_OK) model_note_arenas(m, sp);
    qvl_split_free(sp);
    free(ids);
    if (st != QVL_OK) {
        /* What the destination's cache holds now is unknown: it holds nothing. */
        dst->n_past = 0;
        dst->rope_delta = 0;
        return qvl_error_prefix(err, "copy prefix");
    }
    dst->n_past = n_past;
    dst->rope_delta = src->rope_delta;
    return QVL_OK;
}
