/* What qvl run asks of the engine (one slot, one prompt), on the tiny fixture model:
 *   - a prompt given as ids that hold its pictures' pad tokens gives the job the text prompt
 *     with the same pictures gives (the same ids, the same greedy answer); ids whose pad
 *     count differs from the pictures' are refused by qvl_engine_prepare;
 *   - the observer hears each picture's encoding begin, its share done after each step of the
 *     encoder, and its end, one at a time in prompt order, and the prefill before every chunk
 *     (done / total, the chunk's tokens: chunks of prefill_chunk from the prompt's start, the
 *     last one the rest), then the chunk's share done after each step of the model, and once
 *     at its end;
 *   - prompt_logits: every prompt position's logits, the same when the prompt is in the
 *     slot's cache already (nothing is reused), the last row's greedy choice the first token;
 *   - the context's end: a prompt of n tokens in a context of c gets c - n + 1 tokens at most
 *     (the last sampled from the full cache), a prompt that fills it one, a longer one none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "support/engine_picture.h"
#include "qvl/engine.h"
#include "qvl/engine_prompt.h"
#include "qvl/file.h"
#include "qvl/image.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define CHUNK 8
#define MAX_EVENTS 1024

typedef struct event {
    char kind; /* 'e': encode, 'f': share of an encode done, 'p': prefill step, 'g': share
                  of a prefill chunk done */
    int64_t a, b, c;
    double seconds; /* 'f': the share */
} event;

typedef struct events {
    event ev[MAX_EVENTS];
    int n;
} events;

/* Written by the engine thread, read after qvl_engine_free. */
static void on_encode(void *arg, size_t index, size_t count, int64_t tokens, bool is_video,
                      double seconds) {
    events *l = arg;
    assert_false(is_video);
    if (l->n < MAX_EVENTS)
        l->ev[l->n++] = (event){'e', (int64_t)index, (int64_t)count, tokens, seconds};
}
static void on_encode_progress(void *arg, size_t index, size_t count, double fraction) {
    events *l = arg;
    if (l->n < MAX_EVENTS) l->ev[l->n++] = (event){'f', (int64_t)index, (int64_t)count, 0, fraction};
}
static void on_prefill_step(void *arg, int64_t done, int64_t total, int64_t next) {
    events *l = arg;
    if (l->n < MAX_EVENTS) l->ev[l->n++] = (event){'p', done, total, next, 0};
}
static void on_prefill_progress(void *arg, int64_t done, int64_t total, int64_t next,
                                double fraction) {
    events *l = arg;
    if (l->n < MAX_EVENTS) l->ev[l->n++] = (event){'g', done, total, next, fraction};
}

#define CTX 512

static qvl_engine *start(events *l) {
    qvl_engine_options o = {.model = FIXTURE, .slots = 1, .queue = 1, .ctx = CTX,
                            .backend = "reference", .kv_type = "f32", .prefill_chunk = CHUNK};
    o.observer = (qvl_engine_observer){.arg = l, .encode = on_encode,
                                       .encode_progress = on_encode_progress,
                                       .prefill_step = on_prefill_step,
                                       .prefill_progress = on_prefill_progress};
    qvl_error err = {0};
    qvl_engine *e = qvl_engine_start(&o, &err);
    if (!e) fail_msg("%s", err.msg);
    if (qvl_engine_wait_loaded(e) != QVL_ENGINE_READY) fail_msg("%s", qvl_engine_error(e));
    return e;
}

/* A picture file of the fixture's, ready for the engine. */
static void load_picture(qvl_engine *e, const char *name, qvl_picture *out) {
    test_engine_load_picture(e, FIXTURE, name, out);
}

/* Greedy, two pictures (tall, then small): the rendered text prompt, or (ids not NULL) the
 * given ids instead. */
static qvl_engine_request *request(qvl_engine *e, const int32_t *ids, size_t n_ids) {
    qvl_engine_request *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->pictures = calloc(2, sizeof *r->pictures);
    assert_non_null(r->pictures);
    load_picture(e, "tall.png", &r->pictures[0]);
    load_picture(e, "small.png", &r->pictures[1]);
    r->n_pictures = 2;
    if (ids) {
        r->prompt_ids = malloc(n_ids * sizeof *ids);
        assert_non_null(r->prompt_ids);
        memcpy(r->prompt_ids, ids, n_ids * sizeof *ids);
        r->n_prompt_ids = n_ids;
    } else {
        qvl_prompt *p = NULL;
        qvl_error err = {0};
        assert_int_equal(qvl_prompt_create(&p, &err), QVL_OK);
        assert_int_equal(qvl_prompt_add(p, QVL_ROLE_USER, NULL, &err), QVL_OK);
        assert_int_equal(qvl_prompt_add_picture(p, &err), QVL_OK);
        assert_int_equal(qvl_prompt_add_picture(p, &err), QVL_OK);
        assert_int_equal(qvl_prompt_add_text(p, "what is in them?", &err), QVL_OK);
        assert_int_equal(qvl_prompt_render(p, true, &r->prompt, NULL, &err), QVL_OK);
        qvl_prompt_free(p);
    }
    qvl_sampling_params_default(&r->sampling);
    r->sampling.temperature = 0.0f;
    r->max_tokens = 10;
    return r;
}

static void run_job(qvl_engine *e, qvl_job *j) {
    assert_int_equal(qvl_engine_submit(e, j), QVL_OK);
    for (;;) {
        qvl_job_wait(j, QVL_WAIT_FINISH, 0, 1000);
        pthread_mutex_lock(&j->mu);
        const bool done = j->finish != QVL_JOB_RUNNING;
        pthread_mutex_unlock(&j->mu);
        if (done) break;
    }
    assert_true(j->finish == QVL_FINISH_STOP || j->finish == QVL_FINISH_LENGTH);
}

static void test_ids_with_pictures(void **state) {
    (void)state;
    events l = {0};
    qvl_engine *e = start(&l);
    qvl_error err = {0};
    qvl_job *text = NULL;
    assert_int_equal(qvl_engine_prepare(e, request(e, NULL, 0), &text, &err), QVL_OK);
    run_job(e, text);
    /* A fresh engine: nothing of the first job's cache is reused. */
    int32_t *ids = malloc((size_t)text->n_ids * sizeof *ids);
    assert_non_null(ids);
    memcpy(ids, text->ids, (size_t)text->n_ids * sizeof *ids);
    const size_t n = (size_t)text->n_ids;
    qvl_engine_free(e);
    memset(&l, 0, sizeof l);
    e = start(&l);
    qvl_job *given = NULL;
    assert_int_equal(qvl_engine_prepare(e, request(e, ids, n), &given, &err), QVL_OK);
    assert_int_equal(given->n_ids, text->n_ids);
    assert_memory_equal(given->ids, text->ids, n * sizeof *ids);
    run_job(e, given);
    assert_int_equal(given->completion_tokens, text->completion_tokens);
    assert_memory_equal(given->tokens, text->tokens,
                        (size_t)text->completion_tokens * sizeof *ids);
    /* One pad too few (the second picture's last one dropped): refused. */
    qvl_job *short_one = NULL;
    const size_t at = (size_t)(given->images[1].at + given->images[1].n_tokens - 1);
    assert_true(at < n);
    memmove(ids + at, ids + at + 1, (n - at - 1) * sizeof *ids);
    assert_int_equal(qvl_engine_prepare(e, request(e, ids, n - 1), &short_one, &err), QVL_E_INVALID);
    assert_null(short_one);
    assert_non_null(strstr(err.msg, "pad tokens"));
    free(ids);
    qvl_job_release(text);
    qvl_job_release(given);
    qvl_engine_free(e);
}

static void test_progress_events(void **state) {
    (void)state;
    events l = {0};
    qvl_engine *e = start(&l);
    qvl_error err = {0};
    qvl_job *j = NULL;
    assert_int_equal(qvl_engine_prepare(e, request(e, NULL, 0), &j, &err), QVL_OK);
    const int64_t n = j->n_ids, tokens[2] = {j->req->pictures[0].n_tokens,
                                             j->req->pictures[1].n_tokens};
    run_job(e, j);
    qvl_job_release(j);
    qvl_engine_free(e);
    /* Each picture: begin (seconds < 0), its share done rising to 1 (once per step of the
     * encoder, never back), then end (seconds >= 0), in order, before the first prefill step. */
    int k = 0;
    for (int pic = 0; pic < 2; pic++) {
        assert_true(k < l.n);
        assert_int_equal(l.ev[k].kind, 'e');
        assert_int_equal(l.ev[k].a, pic);
        assert_int_equal(l.ev[k].b, 2);
        assert_int_equal(l.ev[k].c, tokens[pic]);
        assert_true(l.ev[k].seconds < 0);
        double share = 0.0;
        int steps = 0;
        for (k++; k < l.n && l.ev[k].kind == 'f'; k++, steps++) {
            assert_int_equal(l.ev[k].a, pic);
            assert_int_equal(l.ev[k].b, 2);
            assert_true(l.ev[k].seconds >= share && l.ev[k].seconds <= 1.0);
            share = l.ev[k].seconds;
        }
        assert_true(steps > 10); /* the encoder's layers, not one report at its end */
        assert_true(share == 1.0);
        assert_true(k < l.n);
        assert_int_equal(l.ev[k].kind, 'e');
        assert_int_equal(l.ev[k].a, pic);
        assert_int_equal(l.ev[k].c, tokens[pic]);
        assert_true(l.ev[k].seconds >= 0);
        k++;
    }
    /* Each chunk: its step, then its share done rising to 1 (the same done / total / next). */
    int64_t done = 0;
    while (done < n) {
        assert_true(k < l.n);
        const event *v = &l.ev[k++];
        assert_int_equal(v->kind, 'p');
        assert_int_equal(v->a, done);
        assert_int_equal(v->b, n);
        assert_int_equal(v->c, n - done < CHUNK ? n - done : CHUNK);
        double share = 0.0;
        int steps = 0;
        for (; k < l.n && l.ev[k].kind == 'g'; k++, steps++) {
            assert_int_equal(l.ev[k].a, v->a);
            assert_int_equal(l.ev[k].b, v->b);
            assert_int_equal(l.ev[k].c, v->c);
            assert_true(l.ev[k].seconds >= share && l.ev[k].seconds <= 1.0);
            share = l.ev[k].seconds;
        }
        assert_true(steps > 2);
        assert_true(share == 1.0);
        done += v->c;
    }
    assert_int_equal(l.n, k + 1);
    assert_int_equal(l.ev[k].kind, 'p');
    assert_int_equal(l.ev[k].a, n);
    assert_int_equal(l.ev[k].b, n);
    assert_int_equal(l.ev[k].c, 0);
    assert_true(n > 2 * CHUNK); /* several chunks were seen */
}

static void test_prompt_logits(void **state) {
    (void)state;
    events l = {0};
    qvl_engine *e = start(&l);
    qvl_error err = {0};
    qvl_job *j[2];
    for (int k = 0; k < 2; k++) { /* the second finds the first's prompt in the slot */
        qvl_engine_request *r = request(e, NULL, 0);
        r->prompt_logits = true;
        assert_int_equal(qvl_engine_prepare(e, r, &j[k], &err), QVL_OK);
        assert_non_null(j[k]->prompt_logits);
        run_job(e, j[k]);
        assert_int_equal(j[k]->cached_tokens, 0);
    }
    const int64_t n = j[0]->n_ids, vocab = j[0]->logits_width;
    assert_true(vocab >= qvl_engine_vocab(e));
    assert_memory_equal(j[0]->prompt_logits, j[1]->prompt_logits,
                        (size_t)n * (size_t)vocab * sizeof(float));
    if (j[0]->completion_tokens > 0) {
        const float *last = j[0]->prompt_logits + (n - 1) * vocab;
        int32_t best = 0; /* among the ids the sampler draws from */
        for (int32_t i = 1; i < qvl_engine_vocab(e); i++) if (last[i] > last[best]) best = i;
        assert_int_equal(best, j[0]->tokens[0]);
    }
    qvl_job_release(j[0]);
    qvl_job_release(j[1]);
    qvl_engine_free(e);
}

/* Text ids only (no pictures): n copies of one id, ignoring stop tokens, up to max tokens. */
static qvl_job *plain(qvl_engine *e, int64_t n, int64_t max, qvl_status *st) {
    qvl_engine_request *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->prompt_ids = malloc((size_t)n * sizeof *r->prompt_ids);
    assert_non_null(r->prompt_ids);
    for (int64_t i = 0; i < n; i++) r->prompt_ids[i] = 5 + (int32_t)(i % 7);
    r->n_prompt_ids = (size_t)n;
    qvl_sampling_params_default(&r->sampling);
    r->sampling.temperature = 0.0f;
    r->max_tokens = max;
    r->ignore_eos = true;
    qvl_job *j = NULL;
    qvl_error err = {0};
    *st = qvl_engine_prepare(e, r, &j, &err);
    return j;
}

static void test_context_end(void **state) {
    (void)state;
    events l = {0};
    qvl_engine *e = start(&l);
    const int64_t cases[][3] = {{CTX - 6, -1, 7}, {CTX - 6, 7, 7}, {CTX, 10, 1}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        qvl_status st;
        qvl_job *j = plain(e, cases[k][0], cases[k][1], &st);
        assert_int_equal(st, QVL_OK);
        run_job(e, j);
        assert_int_equal(j->finish, QVL_FINISH_LENGTH);
        assert_int_equal(j->completion_tokens, cases[k][2]);
        qvl_job_release(j);
    }
    qvl_status st;
    assert_null(plain(e, CTX + 1, 10, &st));
    assert_int_equal(st, QVL_E_LIMIT);
    qvl_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_with_pictures),
        cmocka_unit_test(test_progress_events),
        cmocka_unit_test(test_prompt_logits),
        cmocka_unit_test(test_context_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
