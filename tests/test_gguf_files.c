/* What a GGUF model gives besides its weights, against the Hugging Face directory it was
 * converted from (tests/fixtures/gguf, llama.cpp's converter): the config from the qwen3vl.* and
 * clip.vision.* keys equals config.json's, field by field; the tokenizer from tokenizer.ggml.*
 * encodes the test strings to tokenizer.json's ids and decodes every id alike; the generation
 * settings stop at the end-of-turn token; the fixtures carry no chat template (their directories
 * have none), which qvl reports as absent. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/model_files.h"
#include "qvl/qwen3vl_gguf.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"
#define QWEN_TESTS QVL_SHARED_DATA_DIR "/tokenizer-tests/qwen2.inp"
static const char *const models[] = {"tiny-tied", "tiny-untied"};

static void paths(const char *model, char *dir, char *gguf, char *mmproj, size_t n) {
    snprintf(dir, n, "%s/%s", FIXTURES, model);
    snprintf(gguf, n, "%s/gguf/%s-bf16.gguf", FIXTURES, model);
    snprintf(mmproj, n, "%s/gguf/mmproj-%s-f16.gguf", FIXTURES, model);
}

#define SAME(field)                                                                              \
    do {                                                                                         \
        if (a->field != b->field)                                                                \
            fail_msg("%s: %s is %lld from config.json, %lld from the GGUF", model, #field,       \
                     (long long)a->field, (long long)b->field);                                  \
    } while (0)

static void same_config(const char *model, const qvl_qwen3vl_config *a,
                        const qvl_qwen3vl_config *b) {
    SAME(text.vocab_size);
    SAME(text.hidden_size);
    SAME(text.intermediate_size);
    SAME(text.num_hidden_layers);
    SAME(text.num_attention_heads);
    SAME(text.num_key_value_heads);
    SAME(text.head_dim);
    SAME(text.max_position_embeddings);
    SAME(text.mrope_interleaved);
    SAME(text.attention_bias);
    SAME(text.bos_token_id);
    SAME(text.eos_token_id);
    for (int i = 0; i < 3; i++) SAME(text.mrope_section[i]);
    /* The GGUF stores eps and theta as f32. */
    assert_true((float)a->text.rms_norm_eps == (float)b->text.rms_norm_eps);
    assert_true((float)a->text.rope_theta == (float)b->text.rope_theta);
    assert_string_equal(a->text.rope_type, b->text.rope_type);
    assert_string_equal(a->text.hidden_act, b->text.hidden_act);
    SAME(tie_word_embeddings);
    SAME(has_vision);
    SAME(image_token_id);
    SAME(video_token_id);
    SAME(vision_start_token_id);
    SAME(vision_end_token_id);
    SAME(vision.depth);
    SAME(vision.hidden_size);
    SAME(vision.intermediate_size);
    SAME(vision.num_heads);
    SAME(vision.patch_size);
    SAME(vision.temporal_patch_size);
    SAME(vision.spatial_merge_size);
    SAME(vision.in_channels);
    SAME(vision.out_hidden_size);
    SAME(vision.num_position_embeddings);
    SAME(vision.n_deepstack);
    for (int i = 0; i < a->vision.n_deepstack; i++) SAME(vision.deepstack_visual_indexes[i]);
    assert_string_equal(a->vision.hidden_act, b->vision.hidden_act);
}

static void test_config(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char dir[512], gguf[512], mmproj[512];
        paths(models[i], dir, gguf, mmproj, sizeof dir);
        qvl_model_files hf, gg, text_only;
        qvl_qwen3vl_config a, b, c;
        qvl_error err = {0};
        assert_int_equal(qvl_model_files_find(dir, NULL, &hf, &err), QVL_OK);
        assert_int_equal(qvl_model_files_find(gguf, mmproj, &gg, &err), QVL_OK);
        assert_int_equal(qvl_model_files_find(gguf, NULL, &text_only, &err), QVL_OK);
        assert_non_null(hf.dir);
        assert_null(gg.dir);
        if (qvl_model_files_config(&hf, &a, &err) != QVL_OK ||
            qvl_model_files_config(&gg, &b, &err) != QVL_OK ||
            qvl_model_files_config(&text_only, &c, &err) != QVL_OK)
            fail_msg("%s", err.msg);
        same_config(models[i], &a, &b);
        assert_false(c.has_vision);
        /* The image processor: the mmproj's mean and std, the rest the documented defaults. */
        qvl_preprocess_config pc, def;
        const char *source = NULL;
        assert_int_equal(qvl_model_files_preprocess(&gg, &b.vision, &pc, &source, &err), QVL_OK);
        qvl_preprocess_config_default(&b.vision, &def);
        assert_int_equal(pc.min_pixels, def.min_pixels);
        assert_int_equal(pc.max_pixels, def.max_pixels);
        for (int k = 0; k < 3; k++) assert_true(pc.image_mean[k] == 0.5 && pc.image_std[k] == 0.5);
        assert_int_not_equal(qvl_model_files_preprocess(&text_only, &c.vision, &pc, &source, &err),
                             QVL_OK);
        assert_non_null(strstr(err.msg, "--mmproj"));
        qvl_model_files_free(&hf);
        qvl_model_files_free(&gg);
        qvl_model_files_free(&text_only);
    }
}

static const char *const prompts[] = {
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>What is this?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "Hello there, general Kenobi! 123 4567 don't I'LL",
    "  leading spaces, tabs\t\tand\r\nCRLF; ÄÖÜ äöü 你好世界 🦙🦙",
    "<|vision_start|><|video_pad|><|vision_end|>",
};

static void same_ids(const char *model, qvl_tokenizer *a, qvl_tokenizer *b, const char *text,
                     size_t len) {
    qvl_error err = {0};
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(qvl_tokenizer_encode(a, text, len, &ia, &na, &err), QVL_OK);
    assert_int_equal(qvl_tokenizer_encode(b, text, len, &ib, &nb, &err), QVL_OK);
    if (na != nb || memcmp(ia, ib, na * sizeof *ia) != 0)
        fail_msg("%s: the GGUF tokenizer encodes \"%.60s\" to other ids (%zu vs %zu)", model,
                 text, nb, na);
    free(ia);
    free(ib);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (p) p[n] = '\0';
    fclose(f);
    return p;
}

static void test_tokenizer(void **state) {
    (void)state;
    char *inp = access(QWEN_TESTS, R_OK) == 0 ? read_all(QWEN_TESTS) : NULL;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char dir[512], gguf[512], mmproj[512];
        paths(models[i], dir, gguf, mmproj, sizeof dir);
        qvl_model_files hf, gg;
        qvl_tokenizer *a = NULL, *b = NULL;
        qvl_error err = {0};
        assert_int_equal(qvl_model_files_find(dir, NULL, &hf, &err), QVL_OK);
        assert_int_equal(qvl_model_files_find(gguf, NULL, &gg, &err), QVL_OK);
        if (qvl_model_files_tokenizer(&hf, &a, &err) != QVL_OK ||
            qvl_model_files_tokenizer(&gg, &b, &err) != QVL_OK)
            fail_msg("%s", err.msg);
        for (size_t k = 0; k < sizeof prompts / sizeof *prompts; k++)
            same_ids(models[i], a, b, prompts[k], strlen(prompts[k]));
        size_t cases = 0; /* the shared reference strings, "\n__ggml_vocab_test__\n" apart */
        for (char *p = inp; p && *p; cases++) {
            char *end = strstr(p, "\n__ggml_vocab_test__\n");
            same_ids(models[i], a, b, p, end ? (size_t)(end - p) : strlen(p));
            if (!end) break;
            p = end + strlen("\n__ggml_vocab_test__\n");
        }
        assert_int_equal(qvl_tokenizer_vocab_size(a), qvl_tokenizer_vocab_size(b));
        for (int32_t id = 0; id < qvl_tokenizer_vocab_size(a); id++) {
            const char *pa = NULL, *pb = NULL;
            size_t la = 0, lb = 0;
            qvl_status sa = qvl_tokenizer_token_to_piece(a, id, &pa, &la, &err);
            qvl_status sb = qvl_tokenizer_token_to_piece(b, id, &pb, &lb, &err);
            assert_int_equal(sa, sb);
            if (sa == QVL_OK && (la != lb || memcmp(pa, pb, la) != 0))
                fail_msg("%s: id %d decodes differently", models[i], id);
        }
        printf("%s: %zu prompts, %zu reference strings, %d ids alike\n", models[i],
               sizeof prompts / sizeof *prompts, cases, qvl_tokenizer_vocab_size(a));
        /* Stops where the directory's generation_config.json stops. */
        qvl_gen_config ga, gb;
        assert_int_equal(qvl_model_files_gen_config(&hf, &ga, &err), QVL_OK);
        assert_int_equal(qvl_model_files_gen_config(&gg, &gb, &err), QVL_OK);
        for (int32_t k = 0; k < ga.n_eos; k++)
            assert_true(qvl_gen_config_is_eos(&gb, ga.eos_token_ids[k]));
        /* No chat template in these files: qvl renders ChatML itself either way. */
        qvl_gguf *g = NULL;
        char *tmpl = (char *)&err;
        assert_int_equal(qvl_gguf_open(gguf, &g, &err), QVL_OK);
        assert_int_equal(qvl_qwen3vl_gguf_chat_template(g, &tmpl, &err), QVL_OK);
        assert_null(tmpl);
        qvl_gguf_close(g);
        qvl_tokenizer_free(a);
        qvl_tokenizer_free(b);
        qvl_model_files_free(&hf);
        qvl_model_files_free(&gg);
    }
    free(inp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_config),
                                       cmocka_unit_test(test_tokenizer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
