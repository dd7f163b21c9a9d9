/* The engine's per-job logits processing (engine/src/slot_constrain.c) on the tiny fixture
 * model, with other jobs decoding in the same batched steps:
 *   - a grammar job's answers (greedy and sampled) are complete strings of its grammar and end
 *     STOP, while plain jobs beside them are unchanged;
 *   - a grammar with a trigger leaves the answer free until the trigger's text appears, then
 *     holds what follows to the grammar (a bias that forces a token loses to the mask);
 *   - logit_bias -100 bans the greedy token, +100 forces one;
 *   - ignore_eos: a forced stop token ends the answer at once, unless the request ignores
 *     stop tokens: then it is kept as a token (no text) until max_tokens;
 *   - logprobs: one entry per generated token, the chosen id's, sorted alternatives with the
 *     most probable first, probabilities summing to at most 1;
 *   - bad grammars, bias ids and top_logprobs counts are refused by qvl_engine_prepare;
 *   - the observer hears the masks' count and time. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/engine.h"
#include "qvl/engine_prompt.h"
#include "qvl/gen_config.h"
#include "qvl/grammar.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"

typedef struct mask_counts {
    int64_t masks;
    double seconds, waited;
} mask_counts;

static void on_mask(void *arg, int64_t masks, double seconds, double waited) {
    mask_counts *c = arg; /* written by the engine thread, read after qvl_engine_free */
    c->masks += masks;
    c->seconds += seconds;
    c->waited += waited;
}

static qvl_engine *start(mask_counts *c) {
    qvl_engine_options o = {.model = FIXTURE, .slots = 3, .queue = 16, .ctx = 256,
                            .backend = "reference", .kv_type = "f32"};
    o.observer = (qvl_engine_observer){.arg = c, .mask = on_mask};
    qvl_error err = {0};
    qvl_engine *e = qvl_engine_start(&o, &err);
    if (!e) fail_msg("%s", err.msg);
    if (qvl_engine_wait_loaded(e) != QVL_ENGINE_READY) fail_msg("%s", qvl_engine_error(e));
    return e;
}

static qvl_engine_request *request(const char *text, float temperature, uint64_t seed,
                                   int64_t max_tokens) {
    qvl_engine_request *r = calloc(1, sizeof *r);
    assert_non_null(r);
    qvl_prompt *p = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_prompt_create(&p, &err), QVL_OK);
    assert_int_equal(qvl_prompt_add(p, QVL_ROLE_USER, text, &err), QVL_OK);
    assert_int_equal(qvl_prompt_render(p, true, &r->prompt, NULL, &err), QVL_OK);
    qvl_prompt_free(p);
    qvl_sampling_params_default(&r->sampling);
    r->sampling.temperature = temperature;
    r->sampling.seed = seed;
    r->max_tokens = max_tokens;
    return r;
}

static qvl_job *submit(qvl_engine *e, qvl_engine_request *r) {
    qvl_job *j = NULL;
    qvl_error err = {0};
    if (qvl_engine_prepare(e, r, &j, &err) != QVL_OK) fail_msg("prepare: %s", err.msg);
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

static bool matches(const char *gbnf, const char *text) {
    qvl_grammar *g = NULL;
    qvl_grammar_matcher *m = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_grammar_parse(gbnf, strlen(gbnf), &g, &err), QVL_OK);
    assert_int_equal(qvl_grammar_matcher_create(g, &m, &err), QVL_OK);
    bool ok = false;
    assert_int_equal(qvl_grammar_matcher_feed(m, text, strlen(text), &ok, &err), QVL_OK);
    ok = ok && qvl_grammar_matcher_accepting(m);
    qvl_grammar_matcher_free(m);
    qvl_grammar_free(g);
    return ok;
}

/* The id of the token spelled `text` (the fixture's byte-level vocabulary). */
static int32_t token_of(qvl_engine *e, const char *text) {
    for (int32_t id = 0; id < qvl_engine_vocab(e); id++) {
        const char *b;
        size_t n;
        if (qvl_engine_token_bytes(e, id, &b, &n) && n == strlen(text) && memcmp(b, text, n) == 0)
            return id;
    }
    fail_msg("no token '%s'", text);
    return -1;
}

static const char GRAMMAR[] = "root ::= \"{\\\"a\\\": \" [0-9]{1,3} (\", \\\"b\\\": \" (\"true\" | \"false\"))? \"}\"\n";

static void test_grammar_beside_plain_jobs(void **state) {
    (void)state;
    mask_counts c = {0};
    qvl_engine *e = start(&c);
    qvl_job *alone = submit(e, request("plain", 0.0f, 1, 10));
    assert_true(wait_done(alone) == QVL_FINISH_LENGTH || alone->finish == QVL_FINISH_STOP);
    for (int round = 0; round < 4; round++) {
        qvl_engine_request *r = request("json please", round == 0 ? 0.0f : 1.0f, (uint64_t)round, 64);
        r->grammar = strdup(GRAMMAR);
        qvl_job *g = submit(e, r);
        qvl_job *plain = submit(e, request("plain", 0.0f, 1, 10)); /* in the same steps */
        assert_int_equal(wait_done(g), QVL_FINISH_STOP);
        assert_true(matches(GRAMMAR, g->text));
        wait_done(plain);
        assert_string_equal(plain->text, alone->text);
        qvl_job_release(g);
        qvl_job_release(plain);
    }
    qvl_job_release(alone);
    qvl_engine_free(e);
    assert_true(c.masks > 0 && c.seconds > 0 && c.waited >= 0 && c.waited <= c.seconds + 1e-3);
}

static void test_trigger_and_bias(void **state) {
    (void)state;
    mask_counts c = {0};
    qvl_engine *e = start(&c);
    const int32_t x = token_of(e, "x");
    qvl_engine_request *r = request("go", 0.0f, 1, 40);
    r->grammar = strdup("root ::= [0-9] [0-9] \"!\"\n");
    r->grammar_trigger = strdup("x");
    r->bias = calloc(1, sizeof *r->bias);
    r->bias[0] = (qvl_logit_bias){.id = x, .bias = 100.0f};
    r->n_bias = 1;
    qvl_job *j = submit(e, r);
    assert_int_equal(wait_done(j), QVL_FINISH_STOP);
    /* forced "x" first; then the grammar, which the bias cannot override */
    assert_int_equal(strlen(j->text), 4);
    assert_int_equal(j->text[0], 'x');
    assert_true(matches("root ::= [0-9] [0-9] \"!\"\n", j->text + 1));
    qvl_job_release(j);

    /* a ban: the greedy first token never comes with -100 on it */
    qvl_job *greedy = submit(e, request("go", 0.0f, 1, 3));
    wait_done(greedy);
    assert_true(greedy->completion_tokens > 0);
    const int32_t first = greedy->tokens[0];
    r = request("go", 0.0f, 1, 3);
    r->bias = calloc(1, sizeof *r->bias);
    r->bias[0] = (qvl_logit_bias){.id = first, .bias = -100.0f};
    r->n_bias = 1;
    qvl_job *banned = submit(e, r);
    wait_done(banned);
    for (int64_t i = 0; i < banned->completion_tokens; i++) assert_int_not_equal(banned->tokens[i], first);
    qvl_job_release(greedy);
    qvl_job_release(banned);
    qvl_engine_free(e);
}

static void test_logprobs(void **state) {
    (void)state;
    mask_counts c = {0};
    qvl_engine *e = start(&c);
    qvl_engine_request *r = request("tell", 0.8f, 5, 16);
    r->logprobs = true;
    r->top_logprobs = 5;
    qvl_job *j = submit(e, r);
    wait_done(j);
    assert_int_equal((int64_t)j->n_logprobs, j->completion_tokens);
    for (size_t i = 0; i < j->n_logprobs; i++) {
        const qvl_token_logprob *t = &j->logprobs[i];
        assert_int_equal(t->id, j->tokens[i]);
        assert_int_equal(t->n_top, 5);
        double sum = 0;
        bool inside = false;
        for (int k = 0; k < t->n_top; k++) {
            if (k > 0) assert_true(t->top_logprob[k] <= t->top_logprob[k - 1]);
            sum += exp(t->top_logprob[k]);
            if (t->top_id[k] == t->id) {
                inside = true;
                assert_true(fabs(t->top_logprob[k] - t->logprob) < 1e-6);
            }
        }
        assert_true(sum <= 1.0 + 1e-5);
        assert_true(t->logprob <= t->top_logprob[0] + 1e-6);
        if (t->logprob > t->top_logprob[4]) assert_true(inside);
        assert_true(i == 0 || t->end >= j->logprobs[i - 1].end);
    }
    assert_true(j->logprobs[j->n_logprobs - 1].end <= j->len + 4);
    qvl_job_release(j);
    qvl_engine_free(e);
}

/* The fixture's stop token forced by a bias: it ends the answer, or is kept with ignore_eos. */
static void test_ignore_eos(void **state) {
    (void)state;
    qvl_gen_config gen;
    qvl_error err = {0};
    assert_int_equal(qvl_gen_config_load(FIXTURE "/generation_config.json", &gen, &err), QVL_OK);
    assert_true(gen.n_eos > 0);
    const int32_t eos = gen.eos_token_ids[0];
    mask_counts c = {0};
    qvl_engine *e = start(&c);
    for (int ignore = 0; ignore < 2; ignore++) {
        qvl_engine_request *r = request("stop", 0.0f, 1, 5);
        r->bias = calloc(1, sizeof *r->bias);
        r->bias[0] = (qvl_logit_bias){.id = eos, .bias = 100.0f};
        r->n_bias = 1;
        r->ignore_eos = ignore;
        qvl_job *j = submit(e, r);
        if (!ignore) {
            assert_int_equal(wait_done(j), QVL_FINISH_STOP);
            assert_int_equal(j->completion_tokens, 0);
        } else {
            assert_int_equal(wait_done(j), QVL_FINISH_LENGTH);
            assert_int_equal(j->completion_tokens, 5);
            for (int i = 0; i < 5; i++) assert_int_equal(j->tokens[i], eos);
            assert_int_equal(j->len, 0); /* a special token has no text */
        }
        qvl_job_release(j);
    }
    qvl_engine_free(e);
}

static void expect_refused(qvl_engine *e, qvl_engine_request *r, const char *words) {
    qvl_job *j = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_engine_prepare(e, r, &j, &err), QVL_E_INVALID);
    assert_null(j);
    if (!strstr(err.msg, words)) fail_msg("'%s' lacks '%s'", err.msg, words);
}

static void test_refused(void **state) {
    (void)state;
    mask_counts c = {0};
    qvl_engine *e = start(&c);
    qvl_engine_request *r = request("x", 0.0f, 1, 4);
    r->grammar = strdup("root ::= \"a\" missing\n");
    expect_refused(e, r, "missing");
    r = request("x", 0.0f, 1, 4);
    r->bias = calloc(1, sizeof *r->bias);
    r->bias[0] = (qvl_logit_bias){.id = qvl_engine_vocab(e), .bias = 1.0f};
    r->n_bias = 1;
    expect_refused(e, r, "logit_bias");
    r = request("x", 0.0f, 1, 4);
    r->logprobs = true;
    r->top_logprobs = QVL_TOP_LOGPROBS_MAX + 1;
    expect_refused(e, r, "top_logprobs");
    qvl_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar_beside_plain_jobs),
        cmocka_unit_test(test_trigger_and_bias),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_ignore_eos),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
