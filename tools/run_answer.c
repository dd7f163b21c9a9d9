/* qvl run's one answer on the engine (run_answer.h): the prompt's ids and pictures as one job,
 * its progress drawn from the engine's observer, the answer streamed as qvl chat streams it. */
#define _POSIX_C_SOURCE 200809L
#include "run_answer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_answer.h"
#include "progress_eta.h"
#include "qvl/file_write.h"
#include "qvl/sha256.h"
#include "run_interrupt.h"
#include "run_sampling.h"

/* ---- progress (called on the engine thread; run_progress locks) ----------------------------- */

/* done/total counts vision tokens, so a large picture weighs what it costs */
static void on_encode(void *arg, size_t index, size_t count, int64_t tokens, bool is_video,
                      double seconds) {
    run_session *s = arg;
    if (seconds < 0) {
        s->vision_item_start = run_now_seconds();
        s->vision_item_tokens = tokens;
        s->vision_item_video = is_video;
        run_progress_begin(s->progress, "vision %lld/%lld tokens: encoding %s %zu/%zu (%lld tokens)",
                           (long long)s->vision_done, (long long)s->vision_total,
                           is_video ? "video" : "image", index + 1, count, (long long)tokens);
        return;
    }
    if (index < s->timings.n_images) s->timings.image_seconds[index] += seconds;
    s->vision_seconds += seconds;
    s->vision_done += tokens;
    if (index + 1 == count)
        run_progress_update(s->progress, "vision %lld/%lld tokens", (long long)s->vision_done,
                            (long long)s->vision_total);
    run_progress_end(s->progress);
}

/* Within an item: its share done and the time it has left (a phone photo takes minutes on a
 * laptop's CPU). */
static void on_encode_progress(void *arg, size_t index, size_t count, double fraction) {
    run_session *s = arg;
    if (!run_progress_on(s->progress)) return;
    char eta[64];
    progress_eta_text(run_now_seconds() - s->vision_item_start, fraction, eta, sizeof eta);
    run_progress_note(s->progress, "vision %lld/%lld tokens: encoding %s %zu/%zu (%lld tokens): %s",
                      (long long)s->vision_done, (long long)s->vision_total,
                      s->vision_item_video ? "video" : "image", index + 1, count,
                      (long long)s->vision_item_tokens, eta);
}

/* The label says what is done and what the step running now adds: a prompt of one batch is
 * one step, and nothing is done before it ends. The line stays until the first token. */
static void on_prefill_step(void *arg, int64_t done, int64_t total, int64_t next) {
    run_session *s = arg;
    s->prefill_step_start = run_now_seconds();
    if (done == 0)
        run_progress_begin(s->progress, "prefill 0/%lld tokens, %lld in this step",
                           (long long)total, (long long)next);
    else if (next > 0)
        run_progress_update(s->progress, "prefill %lld/%lld tokens, %lld in this step",
                            (long long)done, (long long)total, (long long)next);
    else
        run_progress_update(s->progress, "prefill %lld/%lld tokens", (long long)done,
                            (long long)total);
}

/* Within a chunk: its share done and the time it has left (a long prompt in one batch takes
 * seconds to minutes on a CPU). */
static void on_prefill_progress(void *arg, int64_t done, int64_t total, int64_t next,
                                double fraction) {
    run_session *s = arg;
    if (!run_progress_on(s->progress)) return;
    char eta[64];
    progress_eta_text(run_now_seconds() - s->prefill_step_start, fraction, eta, sizeof eta);
    run_progress_note(s->progress, "prefill %lld/%lld tokens, %lld in this step: %s",
                      (long long)done, (long long)total, (long long)next, eta);
}

/* A grammar answer ended: its masks' cost, summed over the answers of the command. */
static void on_mask(void *arg, int64_t masks, double seconds, double waited) {
    run_session *s = arg;
    s->timings.mask_sets += masks;
    s->timings.mask_seconds += seconds;
    s->timings.mask_waited += waited;
}

void run_answer_observer(run_session *s, qvl_engine_observer *o) {
    o->arg = s;
    o->encode = on_encode;
    o->encode_progress = on_encode_progress;
    o->mask = on_mask;
    o->prefill_step = on_prefill_step;
    o->prefill_progress = on_prefill_progress;
}

/* ---- the request ----------------------------------------------------------------------------- */

/* im's items as the engine takes them: each its own copy of its pixel rows (the engine frees
 * them once encoded), named by their digest. */
static qvl_status make_pictures(const run_images *im, qvl_engine_request *r, qvl_error *err) {
    if (im->n == 0) return QVL_OK;
    if (!(r->pictures = calloc(im->n, sizeof *r->pictures)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    const qvl_preprocess_config *pc = &im->pc;
    const int64_t width = 3 * pc->temporal_patch_size * pc->patch_size * pc->patch_size;
    int64_t row = 0;
    for (size_t i = 0; i < im->n; i++) {
        qvl_picture *p = &r->pictures[r->n_pictures++];
        p->grid_t = im->grids[i].t;
        p->grid_h = im->grids[i].h;
        p->grid_w = im->grids[i].w;
        p->n_rows = qvl_image_grid_patches(&im->grids[i]);
        p->n_tokens = im->tokens[i];
        p->is_video = im->is_video[i];
        const size_t bytes = (size_t)(p->n_rows * width) * sizeof *p->pixels;
        if (!(p->pixels = malloc(bytes))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        memcpy(p->pixels, im->pixels + row * width, bytes);
        qvl_sha256_ctx h;
        qvl_sha256_init(&h);
        qvl_sha256_update(&h, &im->grids[i], sizeof im->grids[i]);
        qvl_sha256_update(&h, p->pixels, bytes);
        qvl_sha256_final(&h, p->digest);
        row += p->n_rows;
    }
    return QVL_OK;
}

static qvl_status make_request(run_session *s, const int32_t *ids, int64_t n,
                               qvl_engine_request **out, qvl_error *err) {
    const run_args *a = s->a;
    qvl_engine_request *r = calloc(1, sizeof *r);
    if (!r) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = QVL_OK;
    if (!(r->prompt_ids = malloc((size_t)(n + 1) * sizeof *ids)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) {
        memcpy(r->prompt_ids, ids, (size_t)n * sizeof *ids);
        r->n_prompt_ids = (size_t)n;
        st = make_pictures(s->im, r, err);
    }
    if (st == QVL_OK && s->grammar && !(r->grammar = strdup(s->grammar)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st != QVL_OK) {
        qvl_engine_request_free(r);
        return st;
    }
    r->max_tokens = a->n_predict;
    r->sampling = *qvl_engine_sampling_defaults(s->engine);
    run_sampling_apply(a, s->seen, &r->sampling);
    r->frequency_penalty = r->sampling.frequency_penalty; /* the engine's field for it */
    r->sampling.seed = s->seed;
    r->ignore_eos = a->ignore_eos;
    r->prompt_logits = a->dump_logits != NULL;
    *out = r;
    return QVL_OK;
}

/* ---- the answer ------------------------------------------------------------------------------ */

/* Through qvl_new_file like every file qvl writes: a FIFO or device is written as it is, a
 * regular file replaced whole (qvl/file_write.h). */
static qvl_status write_logits(const char *path, const float *logits, size_t count,
                               qvl_error *err) {
    qvl_new_file f;
    qvl_status s = qvl_new_file_open(path, &f, err);
    if (s != QVL_OK) return s;
    /* x86/ARM hosts: little-endian */
    if ((s = qvl_new_file_write(&f, logits, count * sizeof *logits, err)) == QVL_OK)
        return qvl_new_file_commit(&f, err);
    qvl_new_file_abandon(&f);
    return s;
}

static bool cancel_asked(void) {
    return run_interrupted(NULL);
}

qvl_status run_answer(run_session *s, const int32_t *ids, int64_t n, qvl_error *err) {
    const run_args *a = s->a;
    for (size_t i = 0; i < s->im->n; i++) s->vision_total += s->im->tokens[i];
    qvl_engine_request *r = NULL;
    qvl_job *j = NULL;
    qvl_status st = make_request(s, ids, n, &r, err);
    if (st == QVL_OK) st = qvl_engine_prepare(s->engine, r, &j, err);
    if (st != QVL_OK) return st;
    const engine_stream how = {.print_text = !a->print_ids, .progress = s->progress,
                               .timings = &s->timings, .interrupted = cancel_asked};
    st = engine_answer_stream(s->engine, j, &how, err);
    /* the job counts the vision encoder as prefill; the summary has a line of its own for it */
    s->timings.prefill_seconds -= s->vision_seconds;
    if (st == QVL_OK && j->prompt_logits && j->started)
        st = write_logits(a->dump_logits, j->prompt_logits,
                          (size_t)n * (size_t)j->logits_width, err);
    const int64_t ctx = qvl_engine_ctx(s->engine);
    /* the last token came from a full cache (the engine stops there, as at max_tokens) */
    const bool full = j->finish == QVL_FINISH_LENGTH && n + j->completion_tokens - 1 >= ctx;
    if (st == QVL_OK) {
        if (!a->print_ids) fputc('\n', stdout); /* after a Ctrl-C too: the answer's end */
        if (a->print_ids) {
            for (int64_t i = 0; i < j->completion_tokens; i++)
                printf(i ? " %d" : "%d", j->tokens[i]);
            printf("\n");
        }
        fflush(stdout);
        s->interrupted = j->finish == QVL_FINISH_CANCELLED;
    }
    qvl_job_release(j);
    if (st != QVL_OK) return st;
    if (full && a->until_context) {
        if (!a->quiet)
            fprintf(stderr, "qvl: the answer ended where the context of %lld tokens is full\n",
                    (long long)ctx);
        return QVL_OK;
    }
    if (full)
        return qvl_fail(err, QVL_E_LIMIT, "the context of %lld tokens is full (raise --ctx)",
                        (long long)ctx);
    return QVL_OK;
}
