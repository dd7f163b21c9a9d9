/* The engine (qvl/engine.h) on a fixture model, on every parity backend that loads:
 *   - 16 jobs at once (text and picture prompts, 4 slots, the rest queued) give the greedy
 *     answers each gives alone on a 1-slot engine: jobs join the running batch and leave it
 *     without changing anyone's tokens;
 *   - text prompts that arrive together prefill in one batched graph, answering as alone;
 *   - a job cancelled while others decode ends CANCELLED and the others' answers are intact;
 *     a job whose deadline has passed before a slot takes it ends TIMEOUT with nothing
 *     generated;
 *   - prefix reuse: a prompt that extends a cached one reuses it (cached_tokens > 0), goes to
 *     the slot that holds it, and a picture inside the kept prefix is not encoded again;
 *   - partitions: the same prompt under another cache_salt or API key reuses nothing, and
 *     under the same one reuses as much as before;
 *   - shared prefill (n > 1 choices): jobs with one prompt prefill it once, the others copy
 *     the first one's cache and run only the last prompt token, with 3 slots and with fewer
 *     slots than jobs, chunked or not; their greedy answers equal the answer alone; a job of
 *     another partition beside them copies nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parity_backends.h"
#include "support/engine_picture.h"
#include "qvl/engine.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/engine_prompt.h"
#include "qvl/file.h"
#include "qvl/image.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define N_JOBS 16
#define MAX_NEW 12

typedef struct counts {
    int64_t prefills, prefill_tokens, max_rows;
    atomic_llong decode_steps; /* read by the test while the engine runs */
} counts;

static void on_prefill(void *arg, int64_t n, double s) {
    (void)s;
    counts *c = arg;
    c->prefills++;
    c->prefill_tokens += n;
}
static void on_decode(void *arg, int64_t rows, double s) {
    (void)s;
    counts *c = arg;
    atomic_fetch_add(&c->decode_steps, 1);
    if (rows > c->max_rows) c->max_rows = rows;
}

static qvl_engine *start_chunked(const char *backend, int slots, int64_t chunk, counts *c) {
    qvl_engine_options o = {.model = FIXTURE, .slots = slots, .queue = N_JOBS, .ctx = 512,
                            .backend = backend, .kv_type = "f32", .prefill_chunk = chunk};
    /* The counts are written by the engine thread only and read after qvl_engine_stop. */
    o.observer = (qvl_engine_observer){.arg = c, .prefill = on_prefill, .decode = on_decode};
    qvl_error err = {0};
    qvl_engine *e = qvl_engine_start(&o, &err);
    if (!e) fail_msg("%s: %s", backend, err.msg);
    if (qvl_engine_wait_loaded(e) != QVL_ENGINE_READY)
        fail_msg("%s: %s", backend, qvl_engine_error(e));
    return e;
}

static qvl_engine *start(const char *backend, int slots, counts *c) {
    return start_chunked(backend, slots, 0, c);
}

/* A picture file of the fixture's, ready for the engine. */
static void load_picture(qvl_engine *e, const char *name, qvl_picture *out) {
    test_engine_load_picture(e, FIXTURE, name, out);
}

/* Job k's request: a user turn (some with a picture first), greedy. `extra` continues the
 * conversation (an assistant reply and a new user turn) when not NULL. */
static qvl_engine_request *request(qvl_engine *e, int k, const char *extra) {
    qvl_engine_request *r = calloc(1, sizeof *r);
    assert_non_null(r);
    qvl_prompt *p = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_prompt_create(&p, &err), QVL_OK);
    const bool picture = k % 3 == 1;
    char text[96];
    snprintf(text, sizeof text, "question %d: what comes after %d?", k, k * 7);
    if (picture) {
        r->pictures = calloc(1, sizeof *r->pictures);
        assert_non_null(r->pictures);
        load_picture(e, k % 2 ? "small.png" : "wide.png", &r->pictures[0]);
        r->n_pictures = 1;
        assert_int_equal(qvl_prompt_add_picture(p, &err), QVL_OK);
        assert_int_equal(qvl_prompt_add_text(p, text, &err), QVL_OK);
    } else {
        assert_int_equal(qvl_prompt_add(p, QVL_ROLE_USER, text, &err), QVL_OK);
    }
    if (extra) {
        assert_int_equal(qvl_prompt_add(p, QVL_ROLE_ASSISTANT, "fine", &err), QVL_OK);
        assert_int_equal(qvl_prompt_add(p, QVL_ROLE_USER, extra, &err), QVL_OK);
    }
    assert_int_equal(qvl_prompt_render(p, true, &r->prompt, NULL, &err), QVL_OK);
    qvl_prompt_free(p);
    qvl_sampling_params_default(&r->sampling);
    r->sampling.temperature = 0.0f;
    r->max_tokens = MAX_NEW;
    return r;
}

static qvl_job *submit(qvl_engine *e, qvl_engine_request *r, const char *salt) {
    qvl_job *j = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_engine_prepare(e, r, &j, &err), QVL_OK);
    qvl_partition_make(QVL_PARTITION_NO_KEY, salt, &j->partition);
    assert_int_equal(qvl_engine_submit(e, j), QVL_OK);
    return j;
}

static qvl_finish wait_done(qvl_job *j) {
    for (;;) {
        qvl_job_wait(j, QVL_WAIT_FINISH, 0, 1000);
        pthread_mutex_lock(&j->mu);
        qvl_finish f = j->finish;
        pthread_mutex_unlock(&j->mu);
        if (f != QVL_JOB_RUNNING) return f;
    }
}

static void wait_started(qvl_job *j) {
    for (;;) {
        qvl_job_wait(j, QVL_WAIT_START, 0, 1000);
        pthread_mutex_lock(&j->mu);
        bool go = j->started || j->finish != QVL_JOB_RUNNING;
        pthread_mutex_unlock(&j->mu);
        if (go) return;
    }
}

typedef struct answer {
    char text[4096];
    int64_t tokens;
    qvl_finish finish;
} answer;

static void take(qvl_job *j, answer *a) {
    a->finish = wait_done(j);
    pthread_mutex_lock(&j->mu);
    snprintf(a->text, sizeof a->text, "%s", j->text ? j->text : "");
    a->tokens = j->completion_tokens;
    pthread_mutex_unlock(&j->mu);
    qvl_job_release(j);
}

/* Chunks of 16 tokens cut every prompt (and the pictures' rows) into several. */
static const int64_t chunks[] = {0, 16};

static void test_concurrent_equals_alone(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    for (size_t b = 0; b < l.n; b++) for (size_t ch = 0; ch < 2; ch++) {
        if (!parity_backend_loads(&l, b)) continue;
        const char *be = l.names[b];
        const int64_t chunk = chunks[ch];
        static answer alone[N_JOBS], together[N_JOBS];
        counts c1 = {0}, c4 = {0};
        qvl_engine *e = start_chunked(be, 1, chunk, &c1);
        for (int k = 0; k < N_JOBS; k++) take(submit(e, request(e, k, NULL), NULL), &alone[k]);
        qvl_engine_free(e);

        e = start_chunked(be, 4, chunk, &c4);
        qvl_job *jobs[N_JOBS];
        /* One job first, the rest once it runs: they join a batch already decoding. */
        jobs[0] = submit(e, request(e, 0, NULL), NULL);
        wait_started(jobs[0]);
        for (int k = 1; k < N_JOBS; k++) jobs[k] = submit(e, request(e, k, NULL), NULL);
        for (int k = 0; k < N_JOBS; k++) take(jobs[k], &together[k]);
        qvl_engine_free(e);
        for (int k = 0; k < N_JOBS; k++) {
            assert_int_equal(together[k].finish, alone[k].finish);
            assert_int_equal(together[k].tokens, alone[k].tokens);
            if (strcmp(together[k].text, alone[k].text) != 0)
                fail_msg("%s, chunk %lld: job %d: batched \"%s\" != alone \"%s\"", be,
                         (long long)chunk, k, together[k].text, alone[k].text);
        }
        /* The 4-slot engine really batched: steps of more than one row happened. */
        assert_true(c4.max_rows > 1);
        assert_true(c4.max_rows <= 4);
        assert_int_equal(c1.max_rows, 1);
    }
}

/* Text prompts that arrive together prefill as one batch (qvl_model_prefill_batch: the
 * weights read once for all their rows) and still answer as they do alone. The later jobs are
 * submitted from the engine thread at job 0's first decode step, so the next round claims them
 * all at once. Requests are made beforehand: no cmocka assertion runs on the engine thread. */
#define N_TOGETHER 4
static const int together_jobs[N_TOGETHER] = {0, 2, 3, 5}; /* text only (request()) */
typedef struct joiner {
    qvl_engine *e;
    qvl_engine_request *reqs[N_TOGETHER];
    qvl_job *jobs[N_TOGETHER];
    atomic_int fired;
    qvl_status st;
} joiner;

static void submit_at_first_step(void *arg, int64_t rows, double s) {
    (void)rows;
    (void)s;
    joiner *jn = arg;
    if (atomic_exchange(&jn->fired, 1)) return;
    for (int k = 1; k < N_TOGETHER && jn->st == QVL_OK; k++) {
        qvl_error err = {0};
        jn->st = qvl_engine_prepare(jn->e, jn->reqs[k], &jn->jobs[k], &err);
        if (jn->st == QVL_OK) qvl_partition_make(QVL_PARTITION_NO_KEY, NULL, &jn->jobs[k]->partition);
        if (jn->st == QVL_OK) jn->st = qvl_engine_submit(jn->e, jn->jobs[k]);
    }
}

static void test_prompts_prefill_together(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    for (size_t b = 0; b < l.n; b++) {
        if (!parity_backend_loads(&l, b)) continue;
        const char *be = l.names[b];
        counts c1 = {0};
        answer alone[N_TOGETHER], together[N_TOGETHER];
        qvl_engine *e = start(be, 1, &c1);
        for (int k = 0; k < N_TOGETHER; k++)
            take(submit(e, request(e, together_jobs[k], NULL), NULL), &alone[k]);
        qvl_engine_free(e);

        static joiner jn;
        memset(&jn, 0, sizeof jn);
        qvl_engine_options o = {.model = FIXTURE, .slots = N_TOGETHER, .queue = N_JOBS,
                                .ctx = 512, .backend = be, .kv_type = "f32"};
        o.observer = (qvl_engine_observer){.arg = &jn, .decode = submit_at_first_step};
        qvl_error err = {0};
        e = qvl_engine_start(&o, &err);
        if (!e) fail_msg("%s: %s", be, err.msg);
        assert_int_equal(qvl_engine_wait_loaded(e), QVL_ENGINE_READY);
        jn.e = e;
        for (int k = 0; k < N_TOGETHER; k++) jn.reqs[k] = request(e, together_jobs[k], NULL);
        jn.jobs[0] = submit(e, jn.reqs[0], NULL);
        take(jn.jobs[0], &together[0]);
        assert_int_equal(jn.st, QVL_OK);
        for (int k = 1; k < N_TOGETHER; k++) take(jn.jobs[k], &together[k]);
        qvl_engine_stop(e);
        qvl_model_step_stats stats;
        qvl_model_get_step_stats(qvl_engine_model(e), &stats);
        qvl_engine_free(e);
        for (int k = 0; k < N_TOGETHER; k++) {
            assert_int_equal(together[k].finish, alone[k].finish);
            if (strcmp(together[k].text, alone[k].text) != 0)
                fail_msg("%s: job %d: prefilled together \"%s\" != alone \"%s\"", be,
                         together_jobs[k], together[k].text, alone[k].text);
        }
        assert_true(stats.prefill_batches >= 1);
    }
}

static void test_cancel_and_deadline_mid_batch(void **state) {
    (void)state;
    counts c = {0};
    qvl_engine *e = start("reference", 2, &c);
    answer want;
    take(submit(e, request(e, 2, NULL), NULL), &want);

    /* The long job alone runs far past the point where it is cancelled below (greedy: the same
     * tokens every time), so only the cancel can end it early. */
    qvl_engine_request *long_one = request(e, 5, NULL);
    long_one->max_tokens = 400;
    answer full;
    take(submit(e, long_one, "long"), &full);
    assert_true(full.tokens > 100);
    long_one = request(e, 5, NULL);
    long_one->max_tokens = 400;
    qvl_job *victim = submit(e, long_one, NULL);
    qvl_job *other = submit(e, request(e, 2, NULL), "other"); /* another partition: no reuse */
    wait_started(victim);
    atomic_store(&victim->cancel, true);
    answer got, cancelled;
    take(other, &got);
    take(victim, &cancelled);
    assert_int_equal(cancelled.finish, QVL_FINISH_CANCELLED);
    assert_true(cancelled.tokens < full.tokens);
    assert_string_equal(got.text, want.text);

    /* A deadline already past when a slot would take it: nothing generated. */
    qvl_job *late = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_engine_prepare(e, request(e, 3, NULL), &late, &err), QVL_OK);
    late->deadline = qvl_job_now() - 1.0;
    assert_int_equal(qvl_engine_submit(e, late), QVL_OK);
    answer timed_out;
    take(late, &timed_out);
    assert_int_equal(timed_out.finish, QVL_FINISH_TIMEOUT);
    assert_int_equal(timed_out.tokens, 0);
    qvl_engine_free(e);
}

/* A long prompt arriving while a stream decodes runs in chunks between the stream's steps. */
static void test_chunked_prefill_interleaves(void **state) {
    (void)state;
    counts c = {0};
    const int64_t chunk = 16;
    qvl_engine *e = start_chunked("reference", 2, chunk, &c);
    qvl_engine_request *stream = request(e, 2, NULL);
    stream->max_tokens = 400;
    qvl_job *running = submit(e, stream, "a");
    wait_started(running);

    qvl_engine_request *long_one = calloc(1, sizeof *long_one);
    assert_non_null(long_one);
    char text[4096] = "";
    for (int i = 0; i < 60; i++) strcat(text, "count on, ");
    qvl_prompt *p = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_prompt_create(&p, &err), QVL_OK);
    assert_int_equal(qvl_prompt_add(p, QVL_ROLE_USER, text, &err), QVL_OK);
    assert_int_equal(qvl_prompt_render(p, true, &long_one->prompt, NULL, &err), QVL_OK);
    qvl_prompt_free(p);
    qvl_sampling_params_default(&long_one->sampling);
    long_one->sampling.temperature = 0.0f;
    long_one->max_tokens = 4;
    const long long steps_before = atomic_load(&c.decode_steps);
    qvl_job *arriving = submit(e, long_one, "b");
    const int64_t n_chunks = (arriving->n_ids + chunk - 1) / chunk;
    assert_true(n_chunks >= 8);
    wait_started(arriving);
    const long long steps_during = atomic_load(&c.decode_steps) - steps_before;
    /* Every round ran one chunk and one step of the running stream. */
    if (steps_during < n_chunks - 1)
        fail_msg("%lld decode steps while %lld chunks ran", steps_during, (long long)n_chunks);
    atomic_store(&running->cancel, true);
    answer a, b;
    take(arriving, &b);
    take(running, &a);
    assert_int_equal(b.finish, b.tokens == 4 ? QVL_FINISH_LENGTH : QVL_FINISH_STOP);
    qvl_engine_free(e);
}

static int64_t cached_of(qvl_job *j) {
    wait_done(j);
    pthread_mutex_lock(&j->mu);
    int64_t n = j->cached_tokens;
    pthread_mutex_unlock(&j->mu);
    return n;
}

static void test_prefix_reuse_and_partitions(void **state) {
    (void)state;
    counts c = {0};
    qvl_engine *e = start("reference", 2, &c);
    /* Two conversations fill the two slots (the second in a partition of its own, else it
     * would take the first's slot for the template's opening tokens they share). */
    qvl_job *a = submit(e, request(e, 1, NULL), "s1");
    assert_int_equal(cached_of(a), 0);
    qvl_job_release(a);
    qvl_job *b = submit(e, request(e, 4, NULL), "s3");
    assert_int_equal(cached_of(b), 0);
    qvl_job_release(b);

    /* Picture conversation, next turn: its prefix (picture included) comes from the cache. */
    const int64_t before = c.prefill_tokens;
    qvl_job *next = submit(e, request(e, 1, "and then?"), "s1");
    const int64_t reused = cached_of(next);
    const int64_t prompt = next->n_ids;
    assert_true(reused > 0);
    int64_t pads = next->images[0].at + next->images[0].n_tokens;
    assert_true(reused >= pads); /* the whole picture was kept: not encoded again */
    assert_int_equal(c.prefill_tokens - before, prompt - reused);
    qvl_job_release(next);

    /* The same prompt under another salt: nothing reused; under the same salt again: as much. */
    qvl_job *other = submit(e, request(e, 1, "and then?"), "s2");
    assert_int_equal(cached_of(other), 0);
    qvl_job_release(other);
    qvl_job *again = submit(e, request(e, 1, "and then?"), "s1");
    int64_t again_cached = cached_of(again);
    qvl_job_release(again);
    /* The s2 job took the least recently used slot (job 4's), so s1's cache survived. */
    assert_int_equal(again_cached, prompt - 1);

    /* An API key is a partition too. */
    qvl_job *keyed = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_engine_prepare(e, request(e, 1, "and then?"), &keyed, &err), QVL_OK);
    qvl_partition_make(0, "s1", &keyed->partition);
    assert_int_equal(qvl_engine_submit(e, keyed), QVL_OK);
    assert_int_equal(cached_of(keyed), 0);
    qvl_job_release(keyed);

    qvl_engine_slot_info info[4];
    assert_int_equal(qvl_engine_slot_info_get(e, info, 4), 2);
    assert_false(info[0].busy);
    assert_true(info[0].n_cached > 0 && info[1].n_cached > 0);
    qvl_engine_free(e);
}

/* n_jobs jobs with one picture prompt (a picture moves the positions after it: the copy must
 * keep them) on `slots` slots, all queued at once, beside one of another partition. */
static void shared_prefill(const char *be, int slots, int n_jobs, int64_t chunk,
                           const answer *alone) {
    counts c = {0};
    qvl_engine *e = start_chunked(be, slots, chunk, &c);
    qvl_job *jobs[4];
    int64_t cached[4], n_ids = 0;
    for (int k = 0; k < n_jobs; k++) jobs[k] = submit(e, request(e, 1, NULL), "n");
    qvl_job *stranger = submit(e, request(e, 1, NULL), "other");
    for (int k = 0; k < n_jobs; k++) {
        cached[k] = cached_of(jobs[k]);
        n_ids = jobs[k]->n_ids;
        answer a;
        take(jobs[k], &a);
        if (strcmp(a.text, alone->text) != 0 || a.finish != alone->finish)
            fail_msg("%s, %d slots, chunk %lld: job %d: \"%s\" != alone \"%s\"", be, slots,
                     (long long)chunk, k, a.text, alone->text);
    }
    assert_int_equal(cached_of(stranger), 0);
    qvl_job_release(stranger);
    qvl_engine_free(e);
    /* One job prefilled the prompt; each other one ran its last token only. */
    int64_t copies = 0;
    for (int k = 0; k < n_jobs; k++) copies += cached[k] == n_ids - 1;
    assert_int_equal(copies, n_jobs - 1);
    assert_int_equal(c.prefill_tokens, 2 * n_ids + (n_jobs - 1));
    printf("%s, %d slots, chunk %lld: %d jobs of %lld prompt tokens prefilled %lld tokens "
           "(and %lld for another partition's)\n", be, slots, (long long)chunk, n_jobs,
           (long long)n_ids, (long long)(c.prefill_tokens - n_ids), (long long)n_ids);
}

/* A slot counts free from the moment its job ends, before its client hears of it: a client that
 * asks again the moment it has its answer, with every other place taken, is admitted, never
 * refused for a slot its own finished job still seemed to hold (qvl serve's 429 under load).
 * From job 0's completion report (engine thread, before its client wakes) the test fills
 * every place: both slots and the queue of 2. Requests are made beforehand: no cmocka
 * assertion runs on the engine thread. */
#define N_FILL 4
typedef struct filler {
    qvl_engine *e;
    qvl_engine_request *reqs[N_FILL];
    qvl_job *jobs[N_FILL];
    qvl_status st[N_FILL];
    atomic_int fired;
} filler;

static void fill_at_first_completion(void *arg, int64_t prompt, int64_t cached, int64_t generated,
                                     bool cancelled) {
    (void)prompt, (void)cached, (void)generated, (void)cancelled;
    filler *f = arg;
    if (atomic_exchange(&f->fired, 1)) return;
    for (int k = 0; k < N_FILL; k++) {
        qvl_error err = {0};
        f->st[k] = qvl_engine_prepare(f->e, f->reqs[k], &f->jobs[k], &err);
        if (f->st[k] == QVL_OK) f->st[k] = qvl_engine_submit(f->e, f->jobs[k]);
        if (f->st[k] != QVL_OK && f->jobs[k]) {
            qvl_job_release(f->jobs[k]);
            f->jobs[k] = NULL;
        }
    }
}

static void test_finished_slot_admits_at_once(void **state) {
    (void)state;
    static filler f;
    memset(&f, 0, sizeof f);
    qvl_engine_options o = {.model = FIXTURE, .slots = 2, .queue = 2, .ctx = 512,
                            .backend = "reference", .kv_type = "f32"};
    o.observer = (qvl_engine_observer){.arg = &f, .completion = fill_at_first_completion};
    qvl_error err = {0};
    qvl_engine *e = qvl_engine_start(&o, &err);
    if (!e) fail_msg("%s", err.msg);
    assert_int_equal(qvl_engine_wait_loaded(e), QVL_ENGINE_READY);
    f.e = e;
    for (int k = 0; k < N_FILL; k++) f.reqs[k] = request(e, 2 * k, NULL); /* text only */
    answer first, rest[N_FILL];
    take(submit(e, request(e, 0, NULL), NULL), &first);
    for (int k = 0; k < N_FILL; k++) {
        if (f.st[k] != QVL_OK) fail_msg("place %d of %d refused (status %d)", k + 1, N_FILL, f.st[k]);
        take(f.jobs[k], &rest[k]);
        assert_int_equal(rest[k].finish, first.finish);
    }
    qvl_engine_free(e);
}

static void test_shared_prefill(void **state) {
    (void)state;
    for (size_t ch = 0; ch < 2; ch++) {
        counts c = {0};
        qvl_engine *e = start_chunked("reference", 1, chunks[ch], &c);
        answer alone;
        take(submit(e, request(e, 1, NULL), "n"), &alone);
        qvl_engine_free(e);
        shared_prefill("reference", 4, 3, chunks[ch], &alone);
        shared_prefill("reference", 2, 3, chunks[ch], &alone);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_equals_alone),
        cmocka_unit_test(test_prompts_prefill_together),
        cmocka_unit_test(test_cancel_and_deadline_mid_batch),
        cmocka_unit_test(test_chunked_prefill_interleaves),
        cmocka_unit_test(test_prefix_reuse_and_partitions),
        cmocka_unit_test(test_shared_prefill),
        cmocka_unit_test(test_finished_slot_admits_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
