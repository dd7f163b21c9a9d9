/* What the model takes on its primary backend, counted before anything is allocated
 * (model_place.c decides with it): the weights of each placement group in the dtype they will
 * be bound in, the KV pool of the requested context, slots and KV dtype, and the activations
 * and scratch of the graphs the model will run there, each planned without running:
 *   - the vision graph of the largest picture the image budget allows
 *     (qvl_model_options.image_max_tokens),
 *   - a prompt batch of qvl_model_options.batch tokens at the end of the context (attention
 *     over every cached row), with image rows in it,
 *   - the single-token decode step (and the batched one over the pool when there are slots),
 * each built, fused for the primary and planned as the model will later, with the KV caches
 * out of the arena (they are bound to the pool). The scratch is the backend's own answer
 * (extension QVL_EXT_SCRATCH, qvl_graph_memory). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* A picture no larger than the processor's default max_pixels (16,777,216 pixels: 16384
 * merged tokens of 16-pixel patches merged 2x2) when the caller names no budget. */
#define PROCESSOR_MAX_TOKENS 16384
/* What placement adds to the counts for what it cannot count: the device allocator's rounding
 * of each buffer on a card without a budget (cudaMalloc hands out whole pages; a budget counts
 * the bytes asked) and graphs the counts do not plan (a video's frame groups, a batched decode
 * of fewer rows than the pool). The backend's own context, module images and CUDA graphs are
 * not in it: describe() leaves them out of memory_free (cuda_sm61's CU_UNCOUNTED_RESERVE). */
#define PLACE_MARGIN_BYTES ((uint64_t)16 << 20)

/* A prompt batch when the caller names none (qvl run -b's default). */
#define DEFAULT_BATCH 512

static qvl_status count_weights(const qvl_model *m, place_counts *pc, qvl_error *err) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    if (!(pc->text = calloc(qvl_text_n_groups(L), sizeof *pc->text)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < qvl_weights_count(m->weights); i++) {
        const qvl_st_tensor *t = qvl_weights_at(m->weights, i);
        int64_t n = 1;
        for (int k = 0; k < t->ndim; k++) n *= t->shape[k]; /* checked when the file was read */
        size_t bytes = 0;
        qvl_dtype_row_bytes(model_bind_dtype(m, t), n, &bytes);
        int64_t l = model_layer_of(t->name);
        if (l >= 0 && l < L) pc->text[qvl_text_group_layer(l)] += bytes;
        else if (strcmp(t->name, "model.language_model.embed_tokens.weight") == 0)
            pc->text[m->cfg.tie_word_embeddings ? qvl_text_group_output(L)
                                                : qvl_text_group_input()] += bytes;
        else if (strncmp(t->name, "model.language_model.", 21) == 0 ||
                 strcmp(t->name, "lm_head.weight") == 0)
            pc->text[qvl_text_group_output(L)] += bytes;
        else pc->vision += bytes;
    }
    return QVL_OK;
}

uint64_t model_kv_layer_bytes(const qvl_model *m, qvl_dtype kv_dtype) {
    const qvl_text_config *tc = &m->cfg.text;
    size_t row = 0;
    qvl_dtype_row_bytes(kv_dtype, tc->num_key_value_heads * tc->head_dim, &row);
    return 2 * (uint64_t)row * (uint64_t)m->ctx * (uint64_t)m->kv_slots; /* K and V, the pool */
}

/* The KV caches ("kv.<l>.k", "s<i>.kv.<l>.v", "pool.kv.<l>.k") are bound to the pool: they
 * take no room in an arena. */
static bool is_cache(void *ctx, const char *name) {
    (void)ctx;
    return strncmp(name, "kv.", 3) == 0 || strstr(name, ".kv.") != NULL;
}

/* Fuses g for the primary (unless --no-fuse), counts its arena and scratch, and frees it. */
static qvl_status graph_on_primary(const qvl_model *m, qvl_graph *g, size_t *arena,
                                   size_t *scratch, qvl_error *err) {
    const model_target *tg = &m->tg[0];
    qvl_status st = m->no_fuse ? QVL_OK
                               : qvl_graph_fuse(g, tg->lb->iface, tg->lb->be, NULL, err);
    if (st == QVL_OK)
        st = qvl_graph_memory(g, tg->lb->iface, tg->lb->be, is_cache, NULL, arena, scratch,
                              NULL, err);
    qvl_graph_free(g);
    return st;
}

static qvl_status text_graph(const qvl_model *m, const qvl_text_graph_opts *base, int64_t n,
                             int64_t n_seqs, qvl_dtype kv_dtype, int64_t image_rows,
                             size_t *arena, size_t *scratch, qvl_error *err) {
    qvl_text_graph_opts go = *base;
    go.n_tokens = n;
    go.kv_dtype = kv_dtype;
    if (n_seqs > 1) {
        go.n_seqs = n_seqs;
        go.kv_at_input = true;
        go.kv_pool_slots = m->kv_slots;
        go.all_logits = true;
    } else if (n == 1) {
        go.kv_at_input = true;
    } else {
        go.n_past = m->ctx - n; /* the last batch of a full context reads every row */
        go.n_image_tokens = image_rows;
        go.n_deepstack = image_rows > 0 ? m->cfg.vision.n_deepstack : 0;
    }
    qvl_graph *g = NULL;
    qvl_status st = qvl_qwen3vl_build_text(&m->cfg, &go, &g, err);
    if (st != QVL_OK) return st;
    return graph_on_primary(m, g, arena, scratch, err);
}

/* The image tokens the vision arena is counted for: the caller's budget, else the largest
 * picture the context holds (at most the processor's default); 0 without a vision tower or
 * when the caller says no picture will come. */
static int64_t image_tokens(const qvl_model *m, const qvl_model_options *opts) {
    if (!m->cfg.has_vision || opts->image_max_tokens < 0) return 0;
    if (opts->image_max_tokens > 0) return opts->image_max_tokens;
    return m->ctx < PROCESSOR_MAX_TOKENS ? m->ctx : PROCESSOR_MAX_TOKENS;
}

/* The vision graph of one picture of `tokens` merged tokens: the nearest-to-square grid of at
 * least that many (an arena grows with the patches, not with the picture's shape). */
static qvl_status vision_graph(const qvl_model *m, int64_t tokens, size_t *arena,
                               size_t *scratch, qvl_error *err) {
    const int64_t merge = m->cfg.vision.spatial_merge_size;
    int64_t rows = (int64_t)ceil(sqrt((double)tokens));
    if (rows < 1) rows = 1;
    const int64_t cols = (tokens + rows - 1) / rows;
    const qvl_image_grid grid = {1, rows * merge, cols * merge};
    qvl_vision_graph_opts vo = {.n_images = 1, .grids = &grid, .weight_dtype = m->matrix_dtype,
                                .norm_dtype = m->vector_dtype,
                                .matrix_dtype_of = model_probe_dtype, .matrix_dtype_ctx = m};
    qvl_graph *g = NULL;
    qvl_status st = qvl_qwen3vl_build_vision(&m->cfg, &vo, &g, err);
    if (st != QVL_OK) return st;
    return graph_on_primary(m, g, arena, scratch, err);
}

qvl_status model_count(qvl_model *m, const qvl_model_options *opts, qvl_dtype kv_dtype,
                       place_counts *pc, qvl_error *err) {
    memset(pc, 0, sizeof *pc);
    qvl_status st = count_weights(m, pc, err);
    if (st != QVL_OK) return st;
    pc->kv_dtype = kv_dtype;
    pc->kv_layer = model_kv_layer_bytes(m, kv_dtype);
    pc->image_tokens = image_tokens(m, opts);
    int64_t batch = opts->batch > 0 ? opts->batch : DEFAULT_BATCH;
    if (batch > m->ctx) batch = m->ctx;
    pc->batch = batch;
    const qvl_text_graph_opts base = {
        .kv_capacity = m->ctx, .weight_dtype = m->matrix_dtype, .norm_dtype = m->vector_dtype,
        .matrix_dtype_of = model_probe_dtype, .matrix_dtype_ctx = m,
    };
    /* Scratch slots outlive the graphs that grew them: the text graphs' slots, then the
     * vision graph's on top of them (when the tower runs here too). */
    size_t slots[QVL_SCRATCH_SLOTS] = {0}, arena = 0;
    const int64_t rows = pc->image_tokens < batch ? pc->image_tokens : batch;
    st = text_graph(m, &base, batch, 1, kv_dtype, rows, &pc->prefill_arena, slots, err);
    if (st == QVL_OK && batch > 1)
        st = text_graph(m, &base, 1, 1, kv_dtype, 0, &pc->decode_arena, slots, err);
    if (st == QVL_OK && m->kv_slots > 1) { /* a batched step serves QVL_TEXT_MAX_SEQS at most */
        const int64_t rows_b = m->kv_slots < QVL_TEXT_MAX_SEQS ? m->kv_slots : QVL_TEXT_MAX_SEQS;
        st = text_graph(m, &base, rows_b, rows_b, kv_dtype, 0, &arena, slots, err);
        if (arena > pc->decode_arena) pc->decode_arena = arena;
    }
    for (int i = 0; i < QVL_SCRATCH_SLOTS; i++) pc->scratch_text += slots[i];
    if (st == QVL_OK && pc->image_tokens > 0)
        st = vision_graph(m, pc->image_tokens, &pc->vision_arena, slots, err);
    for (int i = 0; i < QVL_SCRATCH_SLOTS; i++) pc->scratch_all += slots[i];
    if (st != QVL_OK) model_counts_free(pc);
    return st;
}

void model_counts_free(place_counts *pc) {
    free(pc->text);
    pc->text = NULL;
}

/* Weights, KV, activations and scratch the primary holds with the last n layers there (and
 * the vision tower, when vision_here). The vision graph's arena is freed before a prompt runs
 * (model_vision_release), so the larger of the two arenas counts; the decode step's is kept
 * beside either. */
void model_need(const qvl_model *m, const place_counts *pc, int64_t n, bool vision_here,
                qvl_model_fit *out) {
    const int64_t L = m->cfg.text.num_hidden_layers;
    uint64_t w = pc->text[qvl_text_group_output(L)];
    if (n >= L) w += pc->text[qvl_text_group_input()];
    for (int64_t k = 0; k < n && k < L; k++) w += pc->text[qvl_text_group_layer(L - 1 - k)];
    out->gpu_layers = n;
    out->weights_bytes = w + (vision_here ? pc->vision : 0);
    out->kv_bytes = (uint64_t)n * pc->kv_layer;
    out->kv_dtype = pc->kv_dtype;
    out->vision_bytes = vision_here ? pc->vision_arena : 0;
    out->activation_bytes = pc->prefill_arena + pc->decode_arena;
    out->scratch_bytes = vision_here ? pc->scratch_all : pc->scratch_text;
    out->image_tokens = vision_here ? pc->image_tokens : 0;
    out->batch = pc->batch;
    const uint64_t arenas = (out->vision_bytes > pc->prefill_arena ? out->vision_bytes
                                                                   : pc->prefill_arena) +
                            pc->decode_arena;
    out->margin_bytes = PLACE_MARGIN_BYTES;
    out->need_bytes =
        out->weights_bytes + out->kv_bytes + arenas + out->scratch_bytes + out->margin_bytes;
}
