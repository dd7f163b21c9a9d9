/* The vision graph a model keeps between encodes (models/qwen3vl/src/model_vision.c) gives the
 * same features, bit for bit, as a graph built for one encode in a fresh model: for the same
 * grids with other pixels, after other grids, for several images at once, after a prompt has
 * freed the kept arena, and after a failed encode. On every parity backend that loads here
 * (parity_backends.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_model.h"
#include "parity_backends.h"

#define MODEL_DIR QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define WIDTH (3 * 2 * 16 * 16) /* in_channels x temporal_patch_size x patch_size^2 */

/* Pixels of n patches, different for each seed. */
static float *pixels(int64_t n, uint32_t seed) {
    float *p = malloc((size_t)(n * WIDTH) * sizeof *p);
    uint32_t x = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n * WIDTH; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (float)(x >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
    return p;
}

static qvl_model *open_model(const char *backend) {
    qvl_model_options mo = {.backend_name = backend, .ctx = 32};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(MODEL_DIR, &mo, &m, &err) != QVL_OK) fail_msg("%s: %s", backend, err.msg);
    return m;
}

static void encode(qvl_model *m, const float *px, size_t n, const qvl_image_grid *grids,
                   qvl_image_features *f) {
    qvl_error err = {0};
    if (qvl_model_encode_images(m, px, n, grids, f, &err) != QVL_OK) fail_msg("%s", err.msg);
}

/* The features of a fresh model's only encode must equal got's, bit for bit. */
static void check_same_as_fresh(const char *backend, const char *what, const float *px, size_t n,
                                const qvl_image_grid *grids, const qvl_image_features *got) {
    qvl_model *fresh = open_model(backend);
    qvl_image_features want;
    encode(fresh, px, n, grids, &want);
    assert_int_equal(got->n_tokens, want.n_tokens);
    assert_int_equal(got->n_deepstack, want.n_deepstack);
    const size_t block = (size_t)(want.n_tokens * want.hidden) * sizeof(float);
    if (memcmp(got->embeds, want.embeds, block) != 0 ||
        memcmp(got->deepstack, want.deepstack, block * (size_t)want.n_deepstack) != 0)
        fail_msg("%s, %s: the kept graph's features differ from a fresh graph's", backend, what);
    qvl_image_features_free(&want);
    qvl_model_close(fresh);
}

static void check_backend(const char *backend) {
    const qvl_image_grid g1 = {1, 4, 6}, g2 = {1, 6, 4}, both[2] = {g1, g2};
    const int64_t n1 = qvl_image_grid_patches(&g1), n2 = qvl_image_grid_patches(&g2);
    float *a = pixels(n1, 1), *b = pixels(n1, 2), *c = pixels(n2, 3);
    float *ac = malloc((size_t)((n1 + n2) * WIDTH) * sizeof *ac);
    memcpy(ac, a, (size_t)(n1 * WIDTH) * sizeof *ac);
    memcpy(ac + n1 * WIDTH, c, (size_t)(n2 * WIDTH) * sizeof *ac);

    qvl_model *m = open_model(backend);
    qvl_image_features f;
    encode(m, a, 1, &g1, &f);
    check_same_as_fresh(backend, "first encode", a, 1, &g1, &f);
    qvl_image_features_free(&f);
    encode(m, b, 1, &g1, &f); /* the kept graph, other pixels */
    check_same_as_fresh(backend, "same grid again", b, 1, &g1, &f);
    qvl_image_features_free(&f);
    encode(m, c, 1, &g2, &f); /* other grids: a new graph */
    check_same_as_fresh(backend, "other grid", c, 1, &g2, &f);
    qvl_image_features_free(&f);
    encode(m, ac, 2, both, &f);
    check_same_as_fresh(backend, "two images", ac, 2, both, &f);
    qvl_image_features_free(&f);

    /* A prompt frees the kept arena; the next encode allocates it again. */
    const int32_t ids[3] = {20, 21, 22};
    float *logits = malloc(512 * sizeof *logits);
    qvl_error err = {0};
    if (qvl_model_eval(m, ids, 3, NULL, false, logits, &err) != QVL_OK)
        fail_msg("%s: %s", backend, err.msg);
    free(logits);
    encode(m, ac, 2, both, &f);
    check_same_as_fresh(backend, "after a prompt", ac, 2, both, &f);
    qvl_image_features_free(&f);

    /* A refused encode drops the kept graph; the next one builds it again. */
    const qvl_image_grid odd = {1, 3, 4};
    assert_int_not_equal(qvl_model_encode_images(m, a, 1, &odd, &f, &err), QVL_OK);
    encode(m, a, 1, &g1, &f);
    check_same_as_fresh(backend, "after a failed encode", a, 1, &g1, &f);
    qvl_image_features_free(&f);

    qvl_model_close(m);
    free(a);
    free(b);
    free(c);
    free(ac);
}

static void test_kept_graph_is_exact(void **state) {
    (void)state;
    parity_backends list;
    parity_backends_get(&list);
    for (size_t i = 0; i < list.n; i++) {
        if (!parity_backend_loads(&list, i)) continue;
        check_backend(list.names[i]);
        printf("%s: kept vision graph matches fresh graphs bit for bit\n", list.names[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_graph_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
