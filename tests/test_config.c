#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen */
/* config.json parsing: the shared 2B file, both rope spellings, defaults, and the errors a user
 * sees for broken files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/qwen3vl_config.h"

#define SHARED_2B QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct/config.json"

/* A small valid config; tests derive variants by replacing exact substrings. */
static const char BASE[] =
    "{\n"
    "  \"image_token_id\": 90, \"video_token_id\": 91,\n"
    "  \"vision_start_token_id\": 92, \"vision_end_token_id\": 93,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"text_config\": {\n"
    "    \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 96,\n"
    "    \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    "    \"head_dim\": 16, \"rms_norm_eps\": 1e-06, \"max_position_embeddings\": 4096,\n"
    "    \"hidden_act\": \"silu\", \"attention_bias\": false,\n"
    "    \"bos_token_id\": 1, \"eos_token_id\": 2, \"dtype\": \"bfloat16\",\n"
    "    \"rope_theta\": 5000000,\n"
    "    \"rope_scaling\": {\"rope_type\": \"default\", \"mrope_section\": [4, 2, 2],\n"
    "                     \"mrope_interleaved\": true}\n"
    "  },\n"
    "  \"vision_config\": {\n"
    "    \"depth\": 4, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_heads\": 2,\n"
    "    \"patch_size\": 2, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2,\n"
    "    \"in_channels\": 3, \"out_hidden_size\": 64, \"num_position_embeddings\": 16,\n"
    "    \"deepstack_visual_indexes\": [1, 2], \"hidden_act\": \"gelu_pytorch_tanh\"\n"
    "  }\n"
    "}\n";

/* s with the one occurrence of `from` replaced by `to` (malloc'd). */
static char *replaced(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    assert_non_null(at);
    assert_null(strstr(at + 1, from));
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    assert_non_null(out);
    size_t pre = (size_t)(at - s);
    memcpy(out, s, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    return out;
}

static qvl_status parse(const char *json, qvl_qwen3vl_config *c, qvl_error *err) {
    return qvl_qwen3vl_config_parse(json, strlen(json), "config.json", c, err);
}

/* Parse `BASE` with one substitution and expect failure with all the given fragments. */
static void expect_error(const char *from, const char *to, qvl_status want, const char *frag1,
                         const char *frag2) {
    char *json = replaced(BASE, from, to);
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    qvl_status st = parse(json, &c, &err);
    if (st != want || !strstr(err.msg, frag1) || (frag2 && !strstr(err.msg, frag2)))
        fail_msg("replacing '%s' by '%s': status %d, message '%s'", from, to, (int)st, err.msg);
    assert_null(strchr(err.msg, '\n'));
    assert_true(strncmp(err.msg, "config.json: ", 13) == 0);
    free(json);
}

static void test_shared_2b(void **state) {
    (void)state;
    if (access(SHARED_2B, R_OK) != 0) {
        print_message("skipped: %s is absent\n", SHARED_2B);
        skip();
    }
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_config_load(SHARED_2B, &c, &err), QVL_OK);
    /* The values docs/MODEL.md, "Configuration", lists for the 2B checkpoint. */
    assert_int_equal(c.text.vocab_size, 151936);
    assert_int_equal(c.text.hidden_size, 2048);
    assert_int_equal(c.text.intermediate_size, 6144);
    assert_int_equal(c.text.num_hidden_layers, 28);
    assert_int_equal(c.text.num_attention_heads, 16);
    assert_int_equal(c.text.num_key_value_heads, 8);
    assert_int_equal(c.text.head_dim, 128);
    assert_true(c.text.rms_norm_eps == 1e-6);
    assert_true(c.text.rope_theta == 5000000.0);
    assert_int_equal(c.text.mrope_section[0], 24);
    assert_int_equal(c.text.mrope_section[1], 20);
    assert_int_equal(c.text.mrope_section[2], 20);
    assert_true(c.text.mrope_interleaved);
    assert_string_equal(c.text.rope_type, "default");
    assert_int_equal(c.text.max_position_embeddings, 262144);
    assert_false(c.text.attention_bias);
    assert_string_equal(c.text.hidden_act, "silu");
    assert_int_equal(c.text.bos_token_id, 151643);
    assert_int_equal(c.text.eos_token_id, 151645);
    assert_string_equal(c.text.dtype, "bfloat16");
    assert_true(c.tie_word_embeddings);
    assert_true(c.has_vision);
    assert_int_equal(c.vision.depth, 24);
    assert_int_equal(c.vision.hidden_size, 1024);
    assert_int_equal(c.vision.intermediate_size, 4096);
    assert_int_equal(c.vision.num_heads, 16);
    assert_int_equal(c.vision.patch_size, 16);
    assert_int_equal(c.vision.temporal_patch_size, 2);
    assert_int_equal(c.vision.spatial_merge_size, 2);
    assert_int_equal(c.vision.in_channels, 3);
    assert_int_equal(c.vision.out_hidden_size, 2048);
    assert_int_equal(c.vision.num_position_embeddings, 2304);
    assert_int_equal(c.vision.n_deepstack, 3);
    assert_int_equal(c.vision.deepstack_visual_indexes[0], 5);
    assert_int_equal(c.vision.deepstack_visual_indexes[1], 11);
    assert_int_equal(c.vision.deepstack_visual_indexes[2], 17);
    assert_string_equal(c.vision.hidden_act, "gelu_pytorch_tanh");
    assert_int_equal(c.image_token_id, 151655);
    assert_int_equal(c.video_token_id, 151656);
    assert_int_equal(c.vision_start_token_id, 151652);
    assert_int_equal(c.vision_end_token_id, 151653);
}

static void test_rope_scaling_and_rope_parameters_agree(void **state) {
    (void)state;
    qvl_qwen3vl_config a, b;
    qvl_error err = {0};
    assert_int_equal(parse(BASE, &a, &err), QVL_OK);
    /* The newer spelling: theta moves inside rope_parameters. */
    char *tmp = replaced(BASE, "\"rope_theta\": 5000000,\n", "");
    char *json = replaced(tmp, "\"rope_scaling\": {\"rope_type\"",
                          "\"rope_parameters\": {\"rope_theta\": 5000000, \"rope_type\"");
    assert_int_equal(parse(json, &b, &err), QVL_OK);
    assert_true(a.text.rope_theta == 5000000.0);
    assert_true(b.text.rope_theta == 5000000.0);
    for (int i = 0; i < 3; i++) assert_int_equal(a.text.mrope_section[i], b.text.mrope_section[i]);
    assert_int_equal(a.text.mrope_section[0], 4);
    assert_int_equal(a.text.mrope_section[1], 2);
    assert_int_equal(a.text.mrope_section[2], 2);
    assert_true(a.text.mrope_interleaved && b.text.mrope_interleaved);
    assert_memory_equal(&a, &b, sizeof a);
    free(tmp);
    free(json);

    /* Theta beside rope_parameters also counts. */
    json = replaced(BASE, "\"rope_scaling\"", "\"rope_parameters\"");
    assert_int_equal(parse(json, &b, &err), QVL_OK);
    assert_memory_equal(&a, &b, sizeof a);
    free(json);
}

static void test_defaults(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    /* No rope_scaling: plain rope, every pair owned by the temporal section. */
    char *json =
        replaced(BASE,
                 "\"rope_scaling\": {\"rope_type\": \"default\", \"mrope_section\": [4, 2, 2],\n"
                 "                     \"mrope_interleaved\": true}\n",
                 "\"use_cache\": true\n");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.text.mrope_section[0], 8);
    assert_int_equal(c.text.mrope_section[1], 0);
    assert_int_equal(c.text.mrope_section[2], 0);
    assert_false(c.text.mrope_interleaved);
    assert_string_equal(c.text.rope_type, "default");
    free(json);

    /* head_dim absent: hidden / heads. */
    json = replaced(BASE, "\"head_dim\": 16, ", "");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.text.head_dim, 16);
    free(json);

    /* An explicit head_dim that differs from hidden/heads is kept (sections follow it). */
    char *tmp = replaced(BASE, "\"head_dim\": 16", "\"head_dim\": 32");
    json = replaced(tmp, "[4, 2, 2]", "[6, 5, 5]");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.text.head_dim, 32);
    free(tmp);
    free(json);

    /* eos as a list takes the first entry; absent ids are -1; dtype may be torch_dtype. */
    tmp = replaced(BASE, "\"eos_token_id\": 2", "\"eos_token_id\": [7, 2]");
    char *tmp2 = replaced(tmp, "\"bos_token_id\": 1, ", "");
    json = replaced(tmp2, "\"dtype\": \"bfloat16\"", "\"torch_dtype\": \"float16\"");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.text.eos_token_id, 7);
    assert_int_equal(c.text.bos_token_id, -1);
    assert_string_equal(c.text.dtype, "float16");
    free(tmp);
    free(tmp2);
    free(json);

    /* bos/eos at the top level when text_config has none. */
    tmp = replaced(BASE, "\"bos_token_id\": 1, \"eos_token_id\": 2, ", "");
    json = replaced(tmp, "\"image_token_id\": 90,", "\"eos_token_id\": 5, \"image_token_id\": 90,");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.text.eos_token_id, 5);
    assert_int_equal(c.text.bos_token_id, -1);
    free(tmp);
    free(json);

    /* Token ids of the vision markers; absent ones are -1. */
    assert_int_equal(parse(BASE, &c, &err), QVL_OK);
    assert_int_equal(c.image_token_id, 90);
    assert_int_equal(c.video_token_id, 91);
    assert_int_equal(c.vision_start_token_id, 92);
    assert_int_equal(c.vision_end_token_id, 93);
    json = replaced(BASE, "\"video_token_id\": 91,", "");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_int_equal(c.video_token_id, -1);
    free(json);
}

static void test_tie_word_embeddings(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    /* Top level wins over text_config. */
    char *json = replaced(BASE, "\"hidden_act\": \"silu\",",
                          "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false,");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_true(c.tie_word_embeddings);
    free(json);
    json = replaced(BASE, "\"tie_word_embeddings\": true,", "\"tie_word_embeddings\": false,");
    char *json2 = replaced(json, "\"hidden_act\": \"silu\",",
                           "\"hidden_act\": \"silu\", \"tie_word_embeddings\": true,");
    assert_int_equal(parse(json2, &c, &err), QVL_OK);
    assert_false(c.tie_word_embeddings);
    free(json);
    free(json2);
    /* Only in text_config. */
    json = replaced(BASE, "\"tie_word_embeddings\": true,", "");
    json2 = replaced(json, "\"hidden_act\": \"silu\",",
                     "\"hidden_act\": \"silu\", \"tie_word_embeddings\": true,");
    assert_int_equal(parse(json2, &c, &err), QVL_OK);
    assert_true(c.tie_word_embeddings);
    free(json2);
    /* Nowhere: untied. */
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_false(c.tie_word_embeddings);
    free(json);
}

static void test_vision_optional(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    const char *vstart = strstr(BASE, ",\n  \"vision_config\"");
    assert_non_null(vstart);
    char *json = malloc(strlen(BASE) + 8);
    assert_non_null(json);
    memcpy(json, BASE, (size_t)(vstart - BASE));
    strcpy(json + (vstart - BASE), "\n}\n");
    assert_int_equal(parse(json, &c, &err), QVL_OK);
    assert_false(c.has_vision);
    assert_int_equal(c.text.num_hidden_layers, 2);
    free(json);

    assert_int_equal(parse(BASE, &c, &err), QVL_OK);
    assert_true(c.has_vision);
    assert_int_equal(c.vision.n_deepstack, 2);
    assert_int_equal(c.vision.deepstack_visual_indexes[0], 1);
    assert_int_equal(c.vision.deepstack_visual_indexes[1], 2);
}

static void test_errors(void **state) {
    (void)state;
    /* The message the brief spells out, exactly. */
    {
        char *json = replaced(BASE, "\"num_attention_heads\": 4, \"num_key_value_heads\": 2",
                              "\"num_attention_heads\": 16, \"num_key_value_heads\": 5");
        qvl_qwen3vl_config c;
        qvl_error err = {0};
        assert_int_equal(parse(json, &c, &err), QVL_E_INVALID);
        assert_string_equal(err.msg, "config.json: text_config.num_key_value_heads: must divide "
                                     "num_attention_heads (16 % 5)");
        free(json);
    }
    expect_error("\"hidden_size\": 64, ", "", QVL_E_INVALID, "text_config.hidden_size", "missing");
    expect_error("\"hidden_size\": 64", "\"hidden_size\": \"64\"", QVL_E_INVALID,
                 "text_config.hidden_size", "integer");
    expect_error("\"hidden_size\": 64", "\"hidden_size\": 64.5", QVL_E_INVALID,
                 "text_config.hidden_size", "integer");
    expect_error("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 0", QVL_E_INVALID,
                 "text_config.num_hidden_layers", NULL);
    expect_error("\"vocab_size\": 100", "\"vocab_size\": -3", QVL_E_INVALID,
                 "text_config.vocab_size", NULL);
    expect_error("[4, 2, 2]", "[4, 2, 3]", QVL_E_INVALID, "mrope_section", "head_dim/2");
    expect_error("[4, 2, 2]", "[4, 4]", QVL_E_INVALID, "mrope_section", "3 integers");
    expect_error("[4, 2, 2]", "\"4,2,2\"", QVL_E_INVALID, "mrope_section", NULL);
    expect_error("\"head_dim\": 16", "\"head_dim\": 15", QVL_E_INVALID, "text_config.head_dim",
                 "even");
    expect_error("\"rope_theta\": 5000000,\n", "", QVL_E_INVALID, "rope_theta", "missing");
    expect_error("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", QVL_E_UNSUPPORTED,
                 "rope_scaling.rope_type", "yarn");
    expect_error("\"attention_bias\": false", "\"attention_bias\": true", QVL_E_UNSUPPORTED,
                 "text_config.attention_bias", NULL);
    expect_error("\"attention_bias\": false", "\"attention_bias\": 0", QVL_E_INVALID,
                 "text_config.attention_bias", "boolean");
    expect_error("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", QVL_E_UNSUPPORTED,
                 "text_config.hidden_act", "silu");
    expect_error("\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": -1", QVL_E_INVALID,
                 "text_config.rms_norm_eps", NULL);
    /* patches are built from RGB: any other channel count would feed rows of the wrong width */
    expect_error("\"in_channels\": 3", "\"in_channels\": 4", QVL_E_UNSUPPORTED,
                 "vision_config.in_channels", "only 3");
    expect_error("\"in_channels\": 3", "\"in_channels\": 1", QVL_E_UNSUPPORTED,
                 "vision_config.in_channels", "only 3");
    expect_error("\"text_config\": {", "\"text_cfg\": {", QVL_E_INVALID, "text_config", "missing");
    expect_error("\"image_token_id\": 90", "\"image_token_id\": 100", QVL_E_INVALID,
                 "image_token_id", "vocab_size");
    expect_error("\"tie_word_embeddings\": true", "\"tie_word_embeddings\": \"yes\"", QVL_E_INVALID,
                 "tie_word_embeddings", "boolean");
    /* Vision. */
    expect_error("\"deepstack_visual_indexes\": [1, 2]", "\"deepstack_visual_indexes\": [1, 4]",
                 QVL_E_INVALID, "deepstack_visual_indexes[1]", "depth");
    expect_error("\"num_position_embeddings\": 16", "\"num_position_embeddings\": 15",
                 QVL_E_INVALID, "num_position_embeddings", "square");
    expect_error("\"num_heads\": 2", "\"num_heads\": 3", QVL_E_INVALID, "vision_config.num_heads",
                 "32 % 3");
    expect_error("\"num_heads\": 2", "\"num_heads\": 16", QVL_E_INVALID, "vision_config",
                 "multiple of 4");
    expect_error("\"depth\": 4, ", "", QVL_E_INVALID, "vision_config.depth", "missing");
    expect_error("\"out_hidden_size\": 64", "\"out_hidden_size\": 32", QVL_E_INVALID,
                 "vision_config.out_hidden_size", "text_config.hidden_size");
    expect_error("\"hidden_act\": \"gelu_pytorch_tanh\"", "\"hidden_act\": \"relu\"",
                 QVL_E_UNSUPPORTED, "vision_config.hidden_act", "relu");
    /* Syntax. */
    expect_error("\"depth\": 4,", "\"depth\": 4,,", QVL_E_PARSE, "invalid JSON", NULL);

    qvl_qwen3vl_config c;
    qvl_error err = {0};
    assert_int_equal(parse("[1, 2]", &c, &err), QVL_E_PARSE);
    assert_non_null(strstr(err.msg, "top level"));
}

static void test_load_errors(void **state) {
    (void)state;
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_config_load("/nonexistent/config.json", &c, &err), QVL_E_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/config.json"));

    /* Round trip through a file, then a file over the 16 MiB limit. */
    char path[] = "/tmp/qvl_test_config_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(BASE, 1, strlen(BASE), f), strlen(BASE));
    assert_int_equal(fclose(f), 0);
    assert_int_equal(qvl_qwen3vl_config_load(path, &c, &err), QVL_OK);
    assert_int_equal(c.text.hidden_size, 64);

    f = fopen(path, "ab");
    assert_non_null(f);
    static char spaces[1 << 16];
    memset(spaces, ' ', sizeof spaces);
    for (int i = 0; i < 257; i++)
        assert_int_equal(fwrite(spaces, 1, sizeof spaces, f), sizeof spaces);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(qvl_qwen3vl_config_load(path, &c, &err), QVL_E_LIMIT);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_2b),
        cmocka_unit_test(test_rope_scaling_and_rope_parameters_agree),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_tie_word_embeddings),
        cmocka_unit_test(test_vision_optional),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
