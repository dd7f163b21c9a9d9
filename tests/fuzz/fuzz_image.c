/* Fuzz target: picture decoding (JPEG, PNG, GIF, WebP through libjpeg-turbo, libpng, giflib and
 * libwebp; PGM/PPM parsed by qvl; the JPEG structure walk and scan budget, PNG text chunks, EXIF
 * and XMP orientation, the stop callback) and the image processor (smart_resize, antialiased
 * bicubic resampling, normalisation, merge-window patchify).
 *
 * An input starting with '{' is a preprocessor_config.json instead: it is read through a memfd
 * by qvl_preprocess_config_load, and a config that loads preprocesses a small built-in picture.
 * Any other input goes to qvl_image_decode; a picture that decodes is preprocessed with small
 * pixel limits (the last input byte picks one of a few processor settings), so every input stays
 * fast. Checked: the error rule on refusals, decoded sizes inside the documented limits, the
 * grid in multiples of the merge size and equal to smart_resize's answer, and every value finite
 * and inside the normalised range of uint8. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "fuzz_file.h"
#include "qvl/image.h"
#include "qvl/image_preprocess.h"

/* Output pixels of the processor stay at most this many (a 128x128 picture). */
#define FUZZ_MAX_PIXELS (128 * 128)
/* Decoded pictures larger than this are not resampled: the antialiased downscale costs time in
 * proportion to the source, which is expected work, not a finding. */
#define FUZZ_MAX_SOURCE_PIXELS (1 << 22)

/* The decoder's pixel limit while fuzzing, unless QVL_IMAGE_MAX_PIXELS is set already: the
 * model's largest input (16,777,216 pixels). A GIF canvas is allocated whole whatever the file
 * holds, so at the built-in limit a 43-byte input costs half a gigabyte and seconds under ASan:
 * expected work that would only slow the search (the limit itself is asserted in
 * test_image_limits and by regressions/image/gif_huge_canvas). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("QVL_IMAGE_MAX_PIXELS", "16777216", 0);
    return 0;
}

static fuzz_file input_file = FUZZ_FILE_INIT;

/* Preprocess img with pc and check what comes out. */
static void check_preprocess(const qvl_image *img, const qvl_preprocess_config *pc) {
    const int64_t p = pc->patch_size, tp = pc->temporal_patch_size, m = pc->merge_size;
    qvl_error err = {0};
    int64_t rh = 0, rw = 0;
    qvl_status s = qvl_smart_resize(img->height, img->width, p * m, pc->min_pixels,
                                    pc->max_pixels, &rh, &rw, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
    } else {
        FUZZ_CHECK(rh >= p * m && rw >= p * m);
        FUZZ_CHECK(rh % (p * m) == 0 && rw % (p * m) == 0);
        /* The processor would allocate rh*rw*3*tp floats: skip what is not small. */
        if ((double)rh * (double)rw * (double)tp > 4.0 * FUZZ_MAX_PIXELS) return;
    }
    float *pixels = NULL;
    qvl_image_grid g = {0};
    qvl_error err2 = {0};
    qvl_status s2 = qvl_image_preprocess(img, pc, &pixels, &g, &err2);
    if (s2 != QVL_OK) {
        fuzz_check_error(s2, &err2);
        FUZZ_CHECK(pixels == NULL);
        FUZZ_CHECK(s != QVL_OK); /* smart_resize refused, so must the processor */
        return;
    }
    FUZZ_CHECK(s == QVL_OK);
    FUZZ_CHECK(pixels != NULL);
    FUZZ_CHECK(g.t == 1 && g.h * p == rh && g.w * p == rw);
    FUZZ_CHECK(g.h % m == 0 && g.w % m == 0);
    const int64_t rows = qvl_image_grid_patches(&g);
    FUZZ_CHECK(rows == g.t * g.h * g.w);
    FUZZ_CHECK(qvl_image_grid_tokens(&g, m) * m * m == rows);
    const int64_t width = 3 * tp * p * p;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < width; e++) {
            const int c = (int)(e / (tp * p * p));
            const double lo = (0.0 * pc->rescale_factor - pc->image_mean[c]) / pc->image_std[c];
            const double hi = (255.0 * pc->rescale_factor - pc->image_mean[c]) / pc->image_std[c];
            const double tol = 1e-3 * (1.0 + fabs(lo) + fabs(hi));
            const float v = pixels[r * width + e];
            FUZZ_CHECK(isfinite(v));
            FUZZ_CHECK(v >= lo - tol && v <= hi + tol);
        }
    free(pixels);
}

/* A preprocessor_config.json: load it; what loads preprocesses a 37x23 gradient. */
static void fuzz_config(const uint8_t *data, size_t size) {
    const char *path = fuzz_as_file(&input_file, "qvl-fuzz-preprocess-config", data, size);
    if (!path) {
        perror("fuzz_image: memfd");
        abort(); /* the harness itself failed: not a finding */
    }
    qvl_preprocess_config pc;
    qvl_error err = {0};
    qvl_status s = qvl_preprocess_config_load(path, NULL, &pc, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        return;
    }
    FUZZ_CHECK(pc.patch_size >= 1 && pc.temporal_patch_size >= 1 && pc.merge_size >= 1);
    FUZZ_CHECK(pc.min_pixels >= 1 && pc.min_pixels <= pc.max_pixels);
    FUZZ_CHECK(pc.rescale_factor > 0 && isfinite(pc.rescale_factor));
    for (int c = 0; c < 3; c++) FUZZ_CHECK(pc.image_std[c] > 0 && isfinite(pc.image_mean[c]));
    uint8_t rgb[37 * 23 * 3];
    for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7);
    const qvl_image img = {.width = 37, .height = 23, .rgb = rgb};
    check_preprocess(&img, &pc);
}

typedef struct stop_counter {
    int calls, stop_at;
} stop_counter;

static bool stop_at_call(void *arg) {
    stop_counter *c = arg;
    return ++c->calls >= c->stop_at;
}

/* The picture decoded once more with a stop callback that says stop at its k-th call (k from the
 * first input byte): stopped there with QVL_E_LIMIT, one line, no pixels and no further calls,
 * or, when the decode asks fewer than k times, the same pixels as without the callback. */
static void check_stop(const uint8_t *data, size_t size, const qvl_image *want) {
    stop_counter c = {.stop_at = 1 + data[0] % 16};
    const qvl_image_stop stop = {stop_at_call, &c};
    qvl_image img;
    qvl_error err = {0};
    const qvl_status s = qvl_image_decode_stoppable(data, size, "fuzz", &stop, &img, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(s == QVL_E_LIMIT && strstr(err.msg, "decoding stopped") != NULL);
        FUZZ_CHECK(img.rgb == NULL && c.calls == c.stop_at);
        return;
    }
    FUZZ_CHECK(c.calls < c.stop_at);
    FUZZ_CHECK(img.width == want->width && img.height == want->height);
    FUZZ_CHECK(memcmp(img.rgb, want->rgb, (size_t)img.width * (size_t)img.height * 3) == 0);
    qvl_image_free(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 0 && data[0] == '{') {
        fuzz_config(data, size);
        return 0;
    }
    const int o = qvl_jpeg_exif_orientation(data, size);
    FUZZ_CHECK(o >= 1 && o <= 8);

    qvl_image img;
    qvl_error err = {0};
    qvl_status s = qvl_image_decode(data, size, "fuzz", &img, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(img.rgb == NULL && img.width == 0 && img.height == 0);
        return 0;
    }
    FUZZ_CHECK(img.rgb != NULL && img.width > 0 && img.height > 0);
    FUZZ_CHECK((int64_t)img.width * img.height <= qvl_image_max_pixels());
    /* The header-only probe gives the same upright size as the decode. */
    int32_t pw = 0, ph = 0;
    qvl_error perr = {0};
    FUZZ_CHECK(qvl_image_probe(data, size, "fuzz", &pw, &ph, &perr) == QVL_OK);
    FUZZ_CHECK(pw == img.width && ph == img.height);
    const int32_t lo = img.width < img.height ? img.width : img.height;
    const int32_t hi = img.width < img.height ? img.height : img.width;
    FUZZ_CHECK((int64_t)hi <= (int64_t)QVL_IMAGE_MAX_ASPECT * lo);
    unsigned sum = 0; /* touch every pixel byte */
    for (size_t i = 0; i < (size_t)img.width * (size_t)img.height * 3; i++) sum += img.rgb[i];
    check_stop(data, size, &img);

    if ((int64_t)img.width * img.height > FUZZ_MAX_SOURCE_PIXELS) {
        qvl_image_free(&img);
        return 0;
    }
    /* Processor settings: Qwen3-VL's sizes, then ones with odd patch and merge sizes. */
    qvl_preprocess_config pc;
    qvl_preprocess_config_default(NULL, &pc);
    pc.min_pixels = 32 * 32;
    pc.max_pixels = FUZZ_MAX_PIXELS;
    switch (data[size - 1] % 4) {
    case 1:
        pc.patch_size = 14;
        pc.merge_size = 1;
        pc.temporal_patch_size = 1;
        break;
    case 2:
        pc.patch_size = 5;
        pc.merge_size = 3;
        pc.min_pixels = 1;
        pc.image_mean[1] = -2.0;
        pc.image_std[2] = 0.01;
        break;
    case 3:
        pc.patch_size = 16;
        pc.merge_size = 2;
        pc.min_pixels = pc.max_pixels; /* upscale everything to the limit */
        break;
    default:
        break;
    }
    check_preprocess(&img, &pc);
    qvl_image_free(&img);
    FUZZ_CHECK(img.rgb == NULL);
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}
