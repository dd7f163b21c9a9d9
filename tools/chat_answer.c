/* qvl chat's side of the engine: loading, the conversation as one request, and the answer
 * streamed from the job (chat_state.h). */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_input.h"
#include "chat_state.h"
#include "engine_answer.h"
#include "progress_eta.h"
#include "run_sampling.h"
#include "qvl/engine_prompt.h"

static const char image_marker[] = "<image>";

/* ---- a job's progress line (the engine thread calls these; run_progress locks) ------------- */

static void on_encode(void *arg, size_t index, size_t count, int64_t tokens, bool is_video,
                      double seconds) {
    chat_state *cs = arg;
    if (seconds >= 0) return;
    cs->step_start = run_now_seconds();
    cs->step_video = is_video;
    run_progress_update(cs->progress, "prefill %lld tokens: encoding %s %zu/%zu (%lld tokens)",
                        (long long)cs->job_tokens, is_video ? "video" : "image", index + 1, count,
                        (long long)tokens);
}

static void on_encode_progress(void *arg, size_t index, size_t count, double fraction) {
    chat_state *cs = arg;
    char eta[64];
    progress_eta_text(run_now_seconds() - cs->step_start, fraction, eta, sizeof eta);
    run_progress_note(cs->progress, "prefill %lld tokens: encoding %s %zu/%zu: %s",
                      (long long)cs->job_tokens, cs->step_video ? "video" : "image", index + 1,
                      count, eta);
}

static void on_prefill_step(void *arg, int64_t done, int64_t total, int64_t next) {
    chat_state *cs = arg;
    cs->step_start = run_now_seconds();
    run_progress_update(cs->progress, "prefill %lld/%lld tokens", (long long)done,
                        (long long)total);
    (void)next;
}

static void on_prefill_progress(void *arg, int64_t done, int64_t total, int64_t next,
                                double fraction) {
    chat_state *cs = arg;
    char eta[64];
    progress_eta_text(run_now_seconds() - cs->step_start, fraction, eta, sizeof eta);
    run_progress_note(cs->progress, "prefill %lld/%lld tokens, %lld in this step: %s",
                      (long long)done, (long long)total, (long long)next, eta);
}

qvl_status chat_engine_open(chat_state *cs, qvl_error *err) {
    const run_args *a = cs->a;
    cs->be = a->be;
    cs->be.threads_seen = cs->seen->threads;
    qvl_engine_options progress = {0};
    progress.observer = (qvl_engine_observer){.arg = cs, .encode = on_encode,
                                              .encode_progress = on_encode_progress,
                                              .prefill_step = on_prefill_step,
                                              .prefill_progress = on_prefill_progress};
    qvl_status st =
        engine_answer_open(a, &cs->be, &progress, cs->progress, &cs->timings, &cs->engine, err);
    if (st != QVL_OK) return st;
    const qvl_picture_rules *base = qvl_engine_picture_rules(cs->engine);
    cs->video_rules = qvl_engine_video_rules(cs->engine);
    if (!base) return QVL_OK;
    return chat_picture_rules(base, &a->bounds, &cs->rules, cs->cap_what, sizeof cs->cap_what,
                              err);
}

/* ---- the conversation as one request --------------------------------------------------------- */

static qvl_status add_media(qvl_prompt *p, const chat_picture *pic, qvl_error *err) {
    return pic->is_video ? qvl_prompt_add_video(p, err) : qvl_prompt_add_picture(p, err);
}

/* The user's message: the pictures and videos at "<image>" markers in the text when it has as
 * many, else all of them first and then the text (without any "<image>" is just text). */
static qvl_status add_user(qvl_prompt *p, const chat_turn *t, qvl_error *err) {
    size_t n_markers = 0;
    if (t->n_pics > 0)
        for (const char *q = strstr(t->user, image_marker); q; q = strstr(q + 1, image_marker))
            n_markers++;
    qvl_status st = qvl_prompt_add(p, QVL_ROLE_USER, NULL, err);
    if (st == QVL_OK && n_markers != t->n_pics) {
        for (size_t i = 0; st == QVL_OK && i < t->n_pics; i++) st = add_media(p, &t->pics[i], err);
        return st == QVL_OK ? qvl_prompt_add_text(p, t->user, err) : st;
    }
    const char *at = t->user;
    size_t k = 0;
    for (const char *q = strstr(at, image_marker); st == QVL_OK && q; q = strstr(at, image_marker)) {
        if (q > at) {
            char *part = strndup(at, (size_t)(q - at));
            if (!part) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
            st = qvl_prompt_add_text(p, part, err);
            free(part);
        }
        if (st == QVL_OK) st = add_media(p, &t->pics[k++], err);
        at = q + strlen(image_marker);
    }
    if (st == QVL_OK && *at) st = qvl_prompt_add_text(p, at, err);
    return st;
}

/* System message, turns [from, n_turns) and the assistant's turn opened, followed by the
 * answer so far when with_reply. */
static qvl_status render(const chat_state *cs, size_t from, bool with_reply, char **out,
                         qvl_error *err) {
    qvl_prompt *p = NULL;
    char *text = NULL;
    size_t len = 0;
    qvl_status st = qvl_prompt_create(&p, err);
    if (st == QVL_OK && cs->a->system) st = qvl_prompt_add(p, QVL_ROLE_SYSTEM, cs->a->system, err);
    for (size_t i = from; st == QVL_OK && i < cs->n_turns; i++) {
        st = add_user(p, &cs->turns[i], err);
        if (st == QVL_OK && cs->turns[i].reply)
            st = qvl_prompt_add(p, QVL_ROLE_ASSISTANT, cs->turns[i].reply, err);
    }
    if (st == QVL_OK) st = qvl_prompt_render(p, true, &text, &len, err);
    qvl_prompt_free(p);
    if (st != QVL_OK) return st;
    if (with_reply && cs->text_len > 0) {
        char *all = realloc(text, len + cs->text_len + 1);
        if (!all) {
            free(text);
            return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        }
        memcpy(all + len, cs->text, cs->text_len);
        all[len + cs->text_len] = '\0';
        text = all;
    }
    *out = text;
    return QVL_OK;
}

/* Turns [from, ...) as a prepared job. Its pictures carry grid, tokens and digest but no
 * pixels yet (counting a candidate prompt needs none): add_pixels gives them before submit. */
static qvl_status prepare(chat_state *cs, size_t from, bool with_reply, qvl_job **out,
                          qvl_error *err) {
    qvl_engine_request *r = calloc(1, sizeof *r);
    if (!r) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = from; i < cs->n_turns; i++) n += cs->turns[i].n_pics;
    qvl_status st = render(cs, from, with_reply, &r->prompt, err);
    if (st == QVL_OK && n > 0 && !(r->pictures = calloc(n, sizeof *r->pictures)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = from; st == QVL_OK && i < cs->n_turns; i++)
        for (size_t k = 0; st == QVL_OK && k < cs->turns[i].n_pics; k++) {
            const chat_picture *c = &cs->turns[i].pics[k];
            qvl_picture *p = &r->pictures[r->n_pictures++];
            *p = c->pic;
            p->pixels = NULL;
            p->text = NULL;
            p->n_tokens = c->n_tokens; /* planned: also before it is made */
            p->give_back = NULL;
            p->reserved = 0;
            if (c->is_video && !(p->text = strdup(c->text)))
                st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        }
    if (st != QVL_OK) {
        qvl_engine_request_free(r);
        return st;
    }
    const uint64_t k = cs->n_jobs;
    const run_args *a = cs->a;
    const chat_flags *f = cs->seen;
    r->max_tokens = a->n_predict - (int64_t)cs->n_ids;
    r->sampling = *qvl_engine_sampling_defaults(cs->engine);
    run_sampling_apply(a, f, &r->sampling);
    r->frequency_penalty = r->sampling.frequency_penalty; /* the engine's field for it */
    /* One seed per job: a conversation given --seed replays, and no two answers draw the same
     * numbers. */
    r->sampling.seed = cs->seed + k;
    if (cs->grammar && !(r->grammar = strdup(cs->grammar))) {
        qvl_engine_request_free(r);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    return qvl_engine_prepare(cs->engine, r, out, err);
}

/* The pixels of the job's pictures (copies: the engine frees them once used). */
static qvl_status add_pixels(chat_state *cs, size_t from, qvl_job *j, qvl_error *err) {
    size_t at = 0;
    for (size_t i = from; i < cs->n_turns; i++)
        for (size_t k = 0; k < cs->turns[i].n_pics; k++) {
            qvl_picture *dst = &j->req->pictures[at++];
            qvl_picture copy;
            qvl_status st = qvl_picture_copy(cs->rules, &cs->turns[i].pics[k].pic, &copy, err);
            if (st != QVL_OK) return st;
            dst->pixels = copy.pixels;
            free(copy.text); /* the job has its own (prepare) */
        }
    return QVL_OK;
}

/* Which turns the answer's prompt keeps: all when it fits (and nothing has to go), else the
 * oldest go until the rest takes at most half the context (or only the current turn is left).
 * *job NULL: even the current turn alone does not fit (*why says how it does not). */
static qvl_status choose(chat_state *cs, bool must_drop, size_t *from, qvl_job **job,
                         char *why, size_t why_size, qvl_error *err) {
    const int64_t ctx = qvl_engine_ctx(cs->engine);
    const size_t cur = cs->n_turns - 1;
    *job = NULL;
    why[0] = '\0';
    for (size_t d = must_drop ? 1 : 0; d <= cur; d++) {
        qvl_job *j = NULL;
        qvl_error e = {0};
        qvl_status st = prepare(cs, d, must_drop, &j, &e);
        if (st == QVL_E_LIMIT) { /* over the context: try with fewer turns */
            snprintf(why, why_size, "%s", e.msg);
            continue;
        }
        if (st != QVL_OK) {
            *err = e;
            return st;
        }
        const bool shifting = d > 0;
        if (!shifting || j->n_ids <= ctx / 2 || d == cur) {
            *from = d;
            *job = j;
            return QVL_OK;
        }
        qvl_job_release(j);
    }
    return QVL_OK;
}

/* ---- the answer ------------------------------------------------------------------------------- */

static qvl_status append_answer(chat_state *cs, const qvl_job *j, qvl_error *err) {
    const size_t n = (size_t)j->completion_tokens;
    if (cs->n_ids + n > cs->cap_ids) {
        size_t cap = cs->cap_ids ? cs->cap_ids : 64;
        while (cap < cs->n_ids + n) cap *= 2;
        int32_t *grown = realloc(cs->ids, cap * sizeof *grown);
        if (!grown) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        cs->ids = grown;
        cs->cap_ids = cap;
    }
    if (n > 0) memcpy(cs->ids + cs->n_ids, j->tokens, n * sizeof *cs->ids);
    cs->n_ids += n;
    if (cs->text_len + j->len + 1 > cs->text_cap) {
        size_t cap = cs->text_cap ? cs->text_cap : 256;
        while (cap < cs->text_len + j->len + 1) cap *= 2;
        char *grown = realloc(cs->text, cap);
        if (!grown) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        cs->text = grown;
        cs->text_cap = cap;
    }
    if (j->len > 0) memcpy(cs->text + cs->text_len, j->text, j->len);
    cs->text_len += j->len;
    cs->text[cs->text_len] = '\0';
    return QVL_OK;
}

/* -v: what the engine reused (the test of prefix reuse reads this line). */
static void report_job(const chat_state *cs, const qvl_job *j) {
    size_t encoded = 0;
    for (size_t i = 0; i < j->req->n_pictures; i++) encoded += j->images[i].at >= j->cached_tokens;
    fprintf(stderr, "qvl chat: job %llu: %lld prompt tokens, %lld cached, %zu of %zu picture(s) "
            "encoded; prefill %.3f s, %lld tokens generated in %.3f s\n",
            (unsigned long long)cs->n_jobs, (long long)j->n_ids, (long long)j->cached_tokens,
            encoded, j->req->n_pictures, j->prefill_seconds, (long long)j->completion_tokens,
            j->decode_seconds);
}

/* Submit j and stream its answer; on return j is finished and cs holds its tokens and text. */
static qvl_status run_job(chat_state *cs, qvl_job *j, qvl_error *err) {
    const engine_stream how = {.print_text = !cs->a->print_ids, .progress = cs->progress,
                               .timings = &cs->timings, .interrupted = chat_interrupted};
    cs->job_tokens = j->n_ids;
    run_progress_begin(cs->progress, "prefill %lld tokens", (long long)j->n_ids);
    qvl_status st = engine_answer_stream(cs->engine, j, &how, err);
    if (st != QVL_OK) return st;
    cs->n_jobs++;
    if (cs->a->verbose) report_job(cs, j);
    return append_answer(cs, j, err);
}

/* The answer to the last turn, starting with job j (turns [from, ...)). */
static qvl_status answer(chat_state *cs, qvl_job *j, size_t from, qvl_error *err) {
    const int64_t ctx = qvl_engine_ctx(cs->engine);
    qvl_status st = QVL_OK;
    for (;;) {
        chat_drop_oldest(cs, from);
        st = add_pixels(cs, 0, j, err);
        if (st == QVL_OK) st = run_job(cs, j, err);
        const bool full = st == QVL_OK && j->finish == QVL_FINISH_LENGTH &&
                          j->n_ids + j->completion_tokens >= ctx;
        qvl_job_release(j);
        j = NULL;
        if (!full || (int64_t)cs->n_ids >= cs->a->n_predict) break;
        /* The context is full in the middle of the answer: older turns go, the rest is
         * submitted again with the answer so far, and the answer goes on. */
        char why[sizeof err->msg];
        st = choose(cs, true, &from, &j, why, sizeof why, err);
        if (st != QVL_OK) break;
        if (!j) {
            fflush(stdout);
            fprintf(stderr, "\nqvl chat: the context of %lld tokens is full: the answer stops "
                    "here (raise --ctx)\n", (long long)ctx);
            break;
        }
        fflush(stdout);
        fputc('\n', stderr); /* the answer's line is open */
    }
    return st;
}

static qvl_status not_sent(const chat_turn *t, const char *why, qvl_error *err) {
    return qvl_fail(err, QVL_E_LIMIT, "%s: it is not sent (raise --ctx (-c)%s)", why,
                    t->n_pics ? " or lower --image-max-tokens" : "");
}

qvl_status chat_send(chat_state *cs, bool *sent, qvl_error *err) {
    *sent = false;
    cs->n_ids = 0;
    cs->text_len = 0;
    chat_turn *t = &cs->turns[cs->n_turns - 1];
    qvl_error e = {0};
    qvl_status st = QVL_OK;
    size_t from = 0;
    qvl_job *j = NULL;
    char why[sizeof err->msg];
    /* The vision special tokens are the template's to write: typed into a message they would
     * stand for pictures that are not there. */
    for (const char *const *v = qvl_prompt_vision_tokens; st == QVL_OK && *v; v++)
        if (strstr(t->user, *v))
            st = qvl_fail(&e, QVL_E_INVALID, "the message holds %s typed as text: it is not sent "
                          "(attach pictures with /image, videos with /video; <image> places "
                          "them)", *v);
    /* Whether it fits is known from the pictures' planned sizes: nothing is decoded for a
     * message that is not sent. (Counted without the pictures' digests, so counted again.) */
    bool unmade = false;
    for (size_t i = 0; i < t->n_pics; i++) unmade |= !t->pics[i].made;
    if (st == QVL_OK && unmade) {
        st = choose(cs, false, &from, &j, why, sizeof why, &e);
        if (st == QVL_OK && !j) st = not_sent(t, why, &e);
        qvl_job_release(j);
        j = NULL;
    }
    for (size_t i = 0; st == QVL_OK && i < t->n_pics; i++) {
        run_progress_begin(cs->progress, "decoding %s %zu/%zu",
                           t->pics[i].is_video ? "video" : "image", i + 1, t->n_pics);
        st = chat_picture_make(cs->rules, cs->video_rules, &t->pics[i], &e);
        run_progress_end(cs->progress);
    }
    if (st == QVL_OK) st = choose(cs, false, &from, &j, why, sizeof why, &e);
    if (st == QVL_OK && !j) st = not_sent(t, why, &e);
    if (st != QVL_OK) {
        if (st != QVL_E_NOMEM) {
            fprintf(stderr, "qvl chat: %s\n", e.msg);
            return QVL_OK;
        }
        *err = e;
        return st;
    }
    *sent = true;
    st = answer(cs, j, from, err);
    if (st != QVL_OK) return st;
    if (!cs->a->print_ids) fputc('\n', stdout);
    if (cs->a->print_ids) {
        for (size_t i = 0; i < cs->n_ids; i++) printf(i ? " %d" : "%d", cs->ids[i]);
        printf("\n");
    }
    fflush(stdout);
    clearerr(stdout);
    t = &cs->turns[cs->n_turns - 1]; /* turns may have been dropped */
    if (!(t->reply = strndup(cs->text ? cs->text : "", cs->text_len)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    return QVL_OK;
}
