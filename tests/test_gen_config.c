/* generation_config.json: the model's file (docs/MODEL.md), inline documents, and the errors. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, access, write */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/gen_config.h"

#define MODEL_DIR QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct"

static qvl_status parse(const char *json, qvl_gen_config *cfg, qvl_error *err) {
    return qvl_gen_config_parse(json, strlen(json), "test.json", cfg, err);
}

static void test_model_file(void **state) {
    (void)state;
    const char *path = MODEL_DIR "/generation_config.json";
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s not found\n", path);
        skip();
    }
    qvl_gen_config cfg;
    qvl_error err = {0};
    qvl_status st = qvl_gen_config_load(path, &cfg, &err);
    if (st != QVL_OK) fail_msg("%s", err.msg);
    /* docs/MODEL.md, "Generation defaults" */
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_token_ids[0], 151645);
    assert_int_equal(cfg.eos_token_ids[1], 151643);
    assert_true(qvl_gen_config_is_eos(&cfg, 151645));
    assert_true(qvl_gen_config_is_eos(&cfg, 151643));
    assert_false(qvl_gen_config_is_eos(&cfg, 151644));
    assert_int_equal(cfg.bos_token_id, 151643);
    assert_int_equal(cfg.pad_token_id, 151643);
    assert_true(cfg.do_sample);
    assert_int_equal(cfg.top_k, 20);
    assert_float_equal(cfg.top_p, 0.8, 1e-12);
    assert_float_equal(cfg.temperature, 0.7, 1e-12);
    assert_float_equal(cfg.repetition_penalty, 1.0, 1e-12);
    assert_float_equal(cfg.min_p, 0.0, 0.0);
    assert_float_equal(cfg.presence_penalty, 0.0, 0.0);
    assert_int_equal(cfg.max_new_tokens, -1);

    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.seed = 9;
    qvl_gen_config_sampling_params(&cfg, &p);
    assert_float_equal(p.temperature, 0.7, 1e-6);
    assert_int_equal(p.top_k, 20);
    assert_float_equal(p.top_p, 0.8, 1e-6);
    assert_int_equal(p.seed, 9); /* left alone */
}

/* Absent keys take transformers' GenerationConfig defaults; null counts as absent. */
static void test_defaults_and_null(void **state) {
    (void)state;
    qvl_gen_config cfg;
    qvl_error err = {0};
    assert_int_equal(parse("{}", &cfg, &err), QVL_OK);
    assert_int_equal(cfg.n_eos, 0);
    assert_int_equal(cfg.bos_token_id, -1);
    assert_int_equal(cfg.pad_token_id, -1);
    assert_false(cfg.do_sample);
    assert_float_equal(cfg.temperature, 1.0, 0.0);
    assert_int_equal(cfg.top_k, 50);
    assert_float_equal(cfg.top_p, 1.0, 0.0);
    assert_float_equal(cfg.repetition_penalty, 1.0, 0.0);

    assert_int_equal(parse("{\"top_k\": null, \"eos_token_id\": null, \"temperature\": null,"
                           " \"unrelated\": [1, {\"x\": 2}]}",
                           &cfg, &err),
                     QVL_OK);
    assert_int_equal(cfg.top_k, 50);
    assert_int_equal(cfg.n_eos, 0);
}

static void test_inline_values(void **state) {
    (void)state;
    qvl_gen_config cfg;
    qvl_error err = {0};
    /* a single eos id */
    assert_int_equal(parse("{\"eos_token_id\": 7, \"do_sample\": false, \"temperature\": 0.3}", &cfg, &err),
                     QVL_OK);
    assert_int_equal(cfg.n_eos, 1);
    assert_int_equal(cfg.eos_token_ids[0], 7);
    /* do_sample false means greedy whatever the temperature */
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    qvl_gen_config_sampling_params(&cfg, &p);
    assert_true(p.temperature <= 0.0f);

    /* a list, duplicates dropped, every sampling key */
    assert_int_equal(parse("{\"eos_token_id\": [3, 5, 3], \"do_sample\": true, \"top_k\": 0,"
                           " \"top_p\": 0.5, \"min_p\": 0.05, \"repetition_penalty\": 1.1,"
                           " \"presence_penalty\": 1.5, \"max_new_tokens\": 128, \"bos_token_id\": 1,"
                           " \"pad_token_id\": 0}",
                           &cfg, &err),
                     QVL_OK);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_token_ids[0], 3);
    assert_int_equal(cfg.eos_token_ids[1], 5);
    assert_int_equal(cfg.top_k, 0);
    assert_int_equal(cfg.max_new_tokens, 128);
    assert_int_equal(cfg.bos_token_id, 1);
    assert_int_equal(cfg.pad_token_id, 0);
    qvl_gen_config_sampling_params(&cfg, &p);
    assert_float_equal(p.temperature, 1.0, 0.0);
    assert_int_equal(p.top_k, 0);
    assert_float_equal(p.top_p, 0.5, 1e-6);
    assert_float_equal(p.min_p, 0.05, 1e-6);
    assert_float_equal(p.repetition_penalty, 1.1, 1e-6);
    assert_float_equal(p.presence_penalty, 1.5, 1e-6);
    /* the converted parameters are accepted by the sampler */
    qvl_sampler *s = NULL;
    assert_int_equal(qvl_sampler_create(&p, 16, &s, &err), QVL_OK);
    qvl_sampler_free(s);

    assert_int_equal(parse("{\"eos_token_id\": []}", &cfg, &err), QVL_OK);
    assert_int_equal(cfg.n_eos, 0);
}

/* Each bad document fails with the expected status and a message naming file and key. */
static void test_errors(void **state) {
    (void)state;
    const struct {
        const char *json;
        qvl_status status;
        const char *key;
    } cases[] = {
        {"{\"temperature\": \"0.7\"}", QVL_E_INVALID, "temperature"},
        {"{\"temperature\": -1}", QVL_E_INVALID, "temperature"},
        {"{\"top_k\": 2.5}", QVL_E_INVALID, "top_k"},
        {"{\"top_k\": -1}", QVL_E_INVALID, "top_k"},
        {"{\"top_p\": 1.5}", QVL_E_INVALID, "top_p"},
        {"{\"min_p\": true}", QVL_E_INVALID, "min_p"},
        {"{\"repetition_penalty\": 0}", QVL_E_INVALID, "repetition_penalty"},
        {"{\"do_sample\": 1}", QVL_E_INVALID, "do_sample"},
        {"{\"eos_token_id\": \"</s>\"}", QVL_E_INVALID, "eos_token_id"},
        {"{\"eos_token_id\": [1, -2]}", QVL_E_INVALID, "eos_token_id"},
        {"{\"eos_token_id\": [1, [2]]}", QVL_E_INVALID, "eos_token_id"},
        {"{\"eos_token_id\": 4294967296}", QVL_E_INVALID, "eos_token_id"},
        {"{\"bos_token_id\": {}}", QVL_E_INVALID, "bos_token_id"},
        {"{\"max_new_tokens\": 0}", QVL_E_INVALID, "max_new_tokens"},
        {"[1, 2]", QVL_E_INVALID, "object"},
        {"{\"top_k\": 20,", QVL_E_PARSE, "JSON"},
        {"", QVL_E_PARSE, "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qvl_gen_config cfg;
        qvl_gen_config_defaults(&cfg);
        cfg.top_k = 1234; /* must be left alone on failure */
        qvl_error err = {0};
        qvl_status st = parse(cases[i].json, &cfg, &err);
        if (st != cases[i].status)
            fail_msg("%s: status %s, expected %s (%s)", cases[i].json, qvl_status_str(st),
                     qvl_status_str(cases[i].status), err.msg);
        assert_non_null(strstr(err.msg, "test.json"));
        if (!strstr(err.msg, cases[i].key)) fail_msg("%s: message '%s' does not name '%s'", cases[i].json, err.msg, cases[i].key);
        assert_int_equal(cfg.top_k, 1234);
    }
    /* too many stop tokens */
    char big[2048] = "{\"eos_token_id\": [";
    for (int i = 0; i <= QVL_GEN_MAX_EOS; i++) {
        char num[16];
        snprintf(num, sizeof num, "%s%d", i ? "," : "", i);
        strcat(big, num);
    }
    strcat(big, "]}");
    qvl_gen_config cfg;
    qvl_error err = {0};
    assert_int_equal(parse(big, &cfg, &err), QVL_E_LIMIT);
}

/* A missing file is reported distinctly (the caller decides); a directory is an I/O error;
 * a real file round-trips through load. */
static void test_load(void **state) {
    (void)state;
    qvl_gen_config cfg;
    qvl_error err = {0};
    const char *missing = QVL_BINARY_DIR "/no-such-dir/generation_config.json";
    assert_int_equal(qvl_gen_config_load(missing, &cfg, &err), QVL_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, missing));
    assert_int_equal(cfg.top_k, 50); /* defaults */

    assert_int_equal(qvl_gen_config_load(QVL_SOURCE_DIR, &cfg, &err), QVL_E_IO);

    char path[] = "/tmp/qvl-gen-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *doc = "{\"eos_token_id\": [9, 8], \"do_sample\": true, \"top_k\": 3}";
    assert_int_equal(write(fd, doc, strlen(doc)), (ssize_t)strlen(doc));
    close(fd);
    qvl_status st = qvl_gen_config_load(path, &cfg, &err);
    unlink(path);
    if (st != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(cfg.n_eos, 2);
    assert_int_equal(cfg.eos_token_ids[1], 8);
    assert_int_equal(cfg.top_k, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_file),
        cmocka_unit_test(test_defaults_and_null),
        cmocka_unit_test(test_inline_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
