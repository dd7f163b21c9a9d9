/* qvl_image_decode_stoppable asks its stop callback while the picture decodes (between rows,
 * scans, passes or pieces of input), not only before and after: counted on every fixture format
 * and on large pictures, and a callback that says stop at its k-th call stops the decode there
 * with QVL_E_LIMIT, one line, no pixels, and no further calls. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/image.h"
#include "test_image_write.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures/images"

typedef struct counter {
    int calls, stop_at; /* stop_at 0: never stop */
} counter;

static bool count_and_maybe_stop(void *arg) {
    counter *c = arg;
    c->calls++;
    return c->stop_at > 0 && c->calls >= c->stop_at;
}

/* Calls made by a whole decode that is never stopped. */
static int calls_without_stopping(const uint8_t *p, size_t n, const char *name) {
    counter c = {0};
    const qvl_image_stop stop = {count_and_maybe_stop, &c};
    qvl_image img;
    qvl_error err = {0};
    if (qvl_image_decode_stoppable(p, n, name, &stop, &img, &err) != QVL_OK)
        fail_msg("%s: %s", name, err.msg);
    qvl_image_free(&img);
    return c.calls;
}

static void assert_stops_at(const uint8_t *p, size_t n, const char *name, int k) {
    counter c = {.stop_at = k};
    const qvl_image_stop stop = {count_and_maybe_stop, &c};
    qvl_image img;
    qvl_error err = {0};
    const qvl_status st = qvl_image_decode_stoppable(p, n, name, &stop, &img, &err);
    if (st != QVL_E_LIMIT) fail_msg("%s: stop at call %d gave status %d", name, k, (int)st);
    assert_null(img.rgb);
    if (c.calls != k) fail_msg("%s: asked %d times after saying stop at call %d", name, c.calls, k);
    if (strncmp(err.msg, name, strlen(name)) != 0 || !strstr(err.msg, "decoding stopped") ||
        strchr(err.msg, '\n'))
        fail_msg("%s: message \"%s\"", name, err.msg);
}

/* Stopped before, early in, in the middle of and at the end of the decode. */
static void assert_stoppable_throughout(const uint8_t *p, size_t n, const char *name, int calls) {
    const int ks[] = {1, 2, calls / 2, calls - 1, calls};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if (ks[i] >= 1) assert_stops_at(p, n, name, ks[i]);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Every format the fixtures hold: more than the two checks around the decode. */
static void test_every_fixture_is_asked_during_decoding(void **state) {
    (void)state;
    FILE *list = fopen(FIXTURES "/expected.txt", "r");
    assert_non_null(list);
    char line[512], name[256];
    int count = 0;
    while (fgets(line, sizeof line, list)) {
        int w, h;
        if (line[0] == '#' || sscanf(line, "%255s %d %d", name, &w, &h) != 3) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
        size_t n;
        uint8_t *p = read_all(path, &n);
        const int calls = calls_without_stopping(p, n, name);
        if (calls <= 2) fail_msg("%s: the stop callback was asked %d times", name, calls);
        assert_stoppable_throughout(p, n, name, calls);
        free(p);
        count++;
    }
    fclose(list);
    assert_true(count >= 50);
}

static uint8_t *pattern(int w, int h, int channels) {
    uint8_t *px = malloc((size_t)w * (size_t)h * (size_t)channels);
    assert_non_null(px);
    for (size_t i = 0; i < (size_t)w * (size_t)h * (size_t)channels; i++)
        px[i] = (uint8_t)(i * 7 + i / 4099);
    return px;
}

/* Large pictures: PNG is asked once a row, JPEG at least once a row of output. */
static void test_large_pictures_are_asked_every_row(void **state) {
    (void)state;
    const int w = 1024, h = 768;
    uint8_t *px = pattern(w, h, 3);
    size_t n;
    uint8_t *png = test_png_encode(px, w, h, 3, &n);
    assert_non_null(png);
    int calls = calls_without_stopping(png, n, "large.png");
    if (calls < h) fail_msg("large.png: asked %d times for %d rows", calls, h);
    assert_stoppable_throughout(png, n, "large.png", calls);
    free(png);
    uint8_t *jpg = test_jpeg_encode(px, w, h, 90, &n);
    assert_non_null(jpg);
    calls = calls_without_stopping(jpg, n, "large.jpg");
    if (calls < h) fail_msg("large.jpg: asked %d times for %d rows", calls, h);
    assert_stoppable_throughout(jpg, n, "large.jpg", calls);
    free(jpg);
    /* PGM: one byte a sample, asked once a row. */
    const size_t head = (size_t)snprintf(NULL, 0, "P5 %d %d 255\n", w, h);
    uint8_t *pgm = malloc(head + (size_t)w * h + 1);
    assert_non_null(pgm);
    snprintf((char *)pgm, head + 1, "P5 %d %d 255\n", w, h);
    memcpy(pgm + head, px, (size_t)w * h);
    calls = calls_without_stopping(pgm, head + (size_t)w * h, "large.pgm");
    if (calls < h) fail_msg("large.pgm: asked %d times for %d rows", calls, h);
    assert_stoppable_throughout(pgm, head + (size_t)w * h, "large.pgm", calls);
    free(pgm);
    free(px);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_fixture_is_asked_during_decoding),
        cmocka_unit_test(test_large_pictures_are_asked_every_row),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
