/* Pictures as the engine takes them: decoded RGB in, the vision encoder's input out, said
 * without the model's types so that a front end (the server, the terminal) needs no model
 * header. The rules (patch and merge sizes, pixel bounds, normalisation) come from the
 * loaded model's preprocessor_config.json; qvl_engine_picture_rules gives them.
 *
 * A picture's identity for prefix reuse is the SHA-256 of the preprocessing parameters, its
 * grid and its pixels: two pictures that reach the encoder the same are the same. */
#ifndef QVL_ENGINE_PICTURE_H
#define QVL_ENGINE_PICTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image.h"
#include "qvl/sha256.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque: how the model wants pictures (made by the engine at load; see also
 * qvl_picture_rules_create for tools and tests that have a preprocessing config at hand). */
typedef struct qvl_picture_rules qvl_picture_rules;

/* One picture, or one video (qvl/engine_video.h), ready for the vision encoder. */
typedef struct qvl_picture {
    int64_t grid_t, grid_h, grid_w; /* patch grid (frames, rows, columns) */
    float *pixels;    /* [n_rows, rules' row width] f32; NULL once the prefill consumed them */
    int64_t n_rows;   /* patches */
    int64_t n_tokens; /* merged tokens the picture takes in the prompt (a video: its pads) */
    uint8_t digest[QVL_SHA256_BYTES]; /* stays when the pixels are freed */
    bool is_video;    /* grid_t frame groups, each its own run of video pads */
    char *text;       /* a video's prompt text: its groups' "<t seconds>" and placeholders
                       * (malloc'd; freed with the pixels, which is after tokenizing) */
    /* Memory accounting of the caller's (optional): qvl_picture_free calls give_back(arg,
     * reserved) once, when it frees the pixels. */
    void (*give_back)(void *arg, int64_t bytes);
    void *give_back_arg;
    int64_t reserved;
} qvl_picture;

/* What a w x h picture will cost, known from its size alone (before decoding). */
typedef struct qvl_picture_plan {
    int64_t n_tokens;     /* prompt tokens */
    int64_t decode_bytes; /* a bound on the bytes decoding and preprocessing hold at their peak,
                           * given a decoder's peak of decode_bytes_per_pixel per pixel */
    int64_t held_bytes;   /* the f32 pixels kept until the prefill */
} qvl_picture_plan;

qvl_status qvl_picture_plan_for(const qvl_picture_rules *r, int64_t width, int64_t height,
                                int64_t decode_bytes_per_pixel, qvl_picture_plan *out,
                                qvl_error *err);

/* Decoded picture -> encoder input (img is freed either way; out's accounting fields are
 * left as they were). */
qvl_status qvl_picture_make(const qvl_picture_rules *r, qvl_image *img, qvl_picture *out,
                            qvl_error *err);

/* Free the pixels (and a video's text) and give the reserved bytes back (grid, tokens and
 * digest stay). Idempotent. */
void qvl_picture_free(qvl_picture *p);

/* The size window pictures are resized into, in pixels. */
void qvl_picture_window(const qvl_picture_rules *r, int64_t *min_pixels, int64_t *max_pixels);
/* The pixels that `tokens` merged tokens cover (as the processor counts them); below 1 when
 * that is too large to say. */
int64_t qvl_picture_tokens_to_pixels(const qvl_picture_rules *r, int64_t tokens);
/* r with another size window (a front end's bounds, e.g. qvl chat's --image-max-tokens).
 * NULL when out of memory; free with qvl_picture_rules_free. */
qvl_picture_rules *qvl_picture_rules_with_window(const qvl_picture_rules *r, int64_t min_pixels,
                                                 int64_t max_pixels);

/* out = src with pixels (and a video's text) of its own (src must still hold its pixels;
 * accounting fields zero):
 * a front end that submits the same picture again (a conversation's earlier turns) keeps one
 * copy and hands the engine another, which the engine frees once it is encoded or reused. */
qvl_status qvl_picture_copy(const qvl_picture_rules *r, const qvl_picture *src, qvl_picture *out,
                            qvl_error *err);

/* For callers without an engine (tests, fuzzers): rules from a preprocessing config of the
 * model's (struct qvl_preprocess_config of qvl/image_preprocess.h, copied). NULL when out of
 * memory. */
struct qvl_preprocess_config;
qvl_picture_rules *qvl_picture_rules_create(const struct qvl_preprocess_config *pc);
void qvl_picture_rules_free(qvl_picture_rules *r);

#ifdef __cplusplus
}
#endif
#endif
