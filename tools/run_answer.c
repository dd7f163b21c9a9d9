/* Vision encoder per picture and batched prefill for qvl run (run_answer.h). */
#include "run_answer.h"

#include <stdlib.h>
#include <string.h>

/* ---- pictures ------------------------------------------------------------------------------ */

qvl_status run_encode_images(qvl_model *m, run_images *im, run_progress *p, run_timings *t,
                             qvl_error *err) {
    const qvl_preprocess_config *pc = &im->pc;
    const int64_t width = 3 * pc->temporal_patch_size * pc->patch_size * pc->patch_size;
    int64_t row = 0, done = 0, total = 0;
    qvl_image_features_free(&im->feats);
    memset(&im->feats, 0, sizeof im->feats);
    for (size_t i = 0; i < im->n; i++) total += im->tokens[i];
    /* done/total counts vision tokens, so a large picture weighs what it costs */
    for (size_t i = 0; i < im->n; i++) {
        run_progress_begin(p, "vision %lld/%lld tokens: encoding %s %zu/%zu (%lld tokens)",
                           (long long)done, (long long)total, im->is_video[i] ? "video" : "image",
                           i + 1, im->n, (long long)im->tokens[i]);
        qvl_image_features one = {0};
        double t0 = run_now_seconds();
        qvl_status st = qvl_model_encode_images(m, im->pixels + row * width, 1, &im->grids[i],
                                                &one, err);
        if (st != QVL_OK) qvl_image_features_free(&one);
        if (st == QVL_OK) {
            t->image_seconds[i] += run_now_seconds() - t0;
            st = qvl_image_features_append(&im->feats, &one, err);
        }
        done += im->tokens[i];
        if (st == QVL_OK && i + 1 == im->n)
            run_progress_update(p, "vision %lld/%lld tokens", (long long)done, (long long)total);
        run_progress_end(p);
        if (st != QVL_OK) return qvl_error_prefix(err, "%s", im->paths[i]);
        row += qvl_image_grid_patches(&im->grids[i]);
    }
    return QVL_OK;
}

/* ---- batched prefill ----------------------------------------------------------------------- */

typedef struct first_token_hook {
    void (*inner)(int32_t id, void *user);
    bool (*cancel)(void *user);
    void *user;
    run_progress *p;
    run_timings *t;
    int64_t n_prompt;
    bool seen;
} first_token_hook;

static void on_first_token(int32_t id, void *user) {
    first_token_hook *h = user;
    if (!h->seen) {
        h->seen = true;
        run_progress_update(h->p, "prefill %lld/%lld tokens", (long long)h->n_prompt,
                            (long long)h->n_prompt);
        run_progress_end(h->p);
        if (h->t->first_token_at == 0) h->t->first_token_at = run_now_seconds();
    }
    if (h->inner) h->inner(id, h->user);
}

static bool hook_cancel(void *user) {
    const first_token_hook *h = user;
    return h->cancel && h->cancel(h->user);
}

qvl_status run_generate(qvl_model *m, const run_prompt *pr, const qvl_generation *g,
                        run_progress *p, run_timings *t, qvl_generation_result *r,
                        qvl_error *err) {
    const run_images *im = pr->images && pr->images->n > 0 ? pr->images : NULL;
    const int64_t n = pr->n, vocab = qvl_model_config(m)->text.vocab_size;
    const int32_t pad = im ? im->pad_id : -1, vpad = im && im->n_videos ? im->video_pad_id : -1;
    int32_t *pos = NULL, *pos_part = NULL;
    float *scratch = NULL;
    qvl_status st = QVL_OK;
    memset(r, 0, sizeof *r);
    if (im) { /* 3-D positions: images change them (qvl_model_positions) */
        pos = malloc((size_t)n * 3 * sizeof *pos);
        pos_part = malloc((size_t)n * 3 * sizeof *pos_part);
        if (!pos || !pos_part) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        if (st == QVL_OK)
            st = qvl_model_positions_media(m, pr->ids, n, im->grids, im->is_video, im->n, pos, err);
    }
    /* The last batch (1..batch tokens) goes to qvl_generate, which samples after it. */
    const int64_t head = ((n - 1) / pr->batch) * pr->batch;
    if (st == QVL_OK && head > 0 && !pr->prompt_logits) {
        scratch = malloc((size_t)vocab * sizeof *scratch);
        if (!scratch) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    double t0 = run_now_seconds();
    int64_t k0 = 0; /* image rows the earlier batches took */
    /* The label says what is done and what the step running now adds: a prompt of one batch
     * is one step, and nothing is done before it ends. */
    if (st == QVL_OK)
        run_progress_begin(p, "prefill 0/%lld tokens, %lld in this step", (long long)n,
                           (long long)(head > 0 ? pr->batch : n));
    bool cancelled = false; /* between batches: the cache then holds whole batches only */
    for (int64_t c0 = 0; st == QVL_OK && c0 < head; c0 += pr->batch) {
        if (g->cancel && g->cancel(g->user)) {
            cancelled = true;
            break;
        }
        const int64_t len = pr->batch;
        int64_t cnt = 0;
        for (int64_t i = 0; im && i < len; i++)
            cnt += pr->ids[c0 + i] == pad || (vpad >= 0 && pr->ids[c0 + i] == vpad);
        qvl_image_features part = {0};
        if (im) {
            st = qvl_image_features_slice(&im->feats, k0, cnt, &part, err);
            qvl_positions_slice(pos, n, c0, len, pos_part);
        }
        float *out = pr->prompt_logits ? pr->prompt_logits + c0 * vocab : scratch;
        if (st == QVL_OK)
            st = qvl_model_eval_images(m, pr->ids + c0, len, im ? pos_part : NULL,
                                       im ? &part : NULL, pr->prompt_logits != NULL, out, err);
        free(part.deepstack);
        if (st == QVL_OK) st = qvl_sampler_accept_prompt(g->sampler, pr->ids + c0, (size_t)len, err);
        k0 += cnt;
        const int64_t next = c0 + len < head ? pr->batch : n - head;
        run_progress_update(p, "prefill %lld/%lld tokens, %lld in this step", (long long)(c0 + len),
                            (long long)n, (long long)next);
    }
    double head_seconds = run_now_seconds() - t0;
    qvl_image_features rest = {0};
    if (st == QVL_OK && cancelled) r->stop = QVL_STOP_CANCELLED;
    if (st == QVL_OK && !cancelled && im) {
        st = qvl_image_features_slice(&im->feats, k0, im->feats.n_tokens - k0, &rest, err);
        qvl_positions_slice(pos, n, head, n - head, pos_part);
    }
    if (st == QVL_OK && !cancelled) {
        qvl_generation last = *g;
        last.prompt_logits = pr->prompt_logits ? pr->prompt_logits + head * vocab : NULL;
        last.prompt_pos = im ? pos_part : NULL;
        last.images = im ? &rest : NULL;
        /* The progress line stays until the first token (the last batch is prefilled in
         * there), then goes before the answer is printed. */
        first_token_hook hook = {.inner = g->on_token, .cancel = g->cancel, .user = g->user,
                                 .p = p, .t = t, .n_prompt = n};
        last.on_token = on_first_token;
        last.cancel = hook_cancel;
        last.user = &hook;
        st = qvl_generate(m, pr->ids + head, n - head, &last, r, err);
    }
    run_progress_end(p);
    free(rest.deepstack);
    r->prefill_seconds += head_seconds;
    t->prefill_tokens += n;
    t->prefill_seconds += r->prefill_seconds;
    t->decode_tokens += r->n_generated;
    t->decode_seconds += r->decode_seconds;
    free(scratch);
    free(pos_part);
    free(pos);
    return st;
}

void run_output_token(run_output *o, int32_t id) {
    if (o->n_ids == o->cap_ids) {
        size_t cap = o->cap_ids ? 2 * o->cap_ids : 64;
        int32_t *grown = realloc(o->ids, cap * sizeof *grown);
        if (!grown) {
            o->oom = true;
            return;
        }
        o->ids = grown;
        o->cap_ids = cap;
    }
    o->ids[o->n_ids++] = id;
    if (o->print_text && o->tok && !qvl_tokenizer_is_special(o->tok, id)) {
        const char *bytes;
        size_t len;
        if (qvl_tokenizer_token_to_piece(o->tok, id, &bytes, &len, NULL) == QVL_OK)
            qvl_text_stream_feed(&o->stream, bytes, len);
    }
}
