/* qvl chat's pictures through the engine's picture type: sized from the file's header when
 * attached (so a picture that cannot fit costs one line and no decoding), decoded and
 * preprocessed when its message is sent, and kept (pixels and digest) while the conversation
 * holds it: each turn submits the whole conversation, and the engine encodes a picture again
 * only when its slot's cache lost it (after the oldest turns were dropped). */
#ifndef QVL_TOOLS_CHAT_PICTURES_H
#define QVL_TOOLS_CHAT_PICTURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_picture.h"
#include "qvl/engine_video.h"
#include "qvl/status.h"
#include "run_args.h"

typedef struct chat_picture {
    char *path;
    char *file;         /* the file's bytes until decoded */
    size_t file_size;
    int32_t width, height; /* upright (EXIF applied) */
    int64_t n_tokens;   /* prompt tokens */
    qvl_picture pic;    /* once made: what the engine takes (a copy of it each turn) */
    bool made;
    /* A video (/video, chat_videos.h): its frame files, the ones kept and their plan; pic's
     * is_video, grid and n_tokens are set from the plan before it is made. */
    bool is_video;
    char **frames;
    size_t n_frames;
    double fps;
    int64_t *kept;
    qvl_video_plan plan;
    char *text;         /* its prompt text (timestamps), known from the plan */
} chat_picture;

/* The engine's rules with the size window of the flags (flags replace the model's bounds;
 * with no flag for the largest size the window is capped at the default token budget).
 * *cap_what names the upper bound for the per-picture line. */
qvl_status chat_picture_rules(const qvl_picture_rules *base, const run_image_bounds *b,
                              qvl_picture_rules **out, char *cap_what, size_t cap_size,
                              qvl_error *err);

/* Read path and plan its size; prints "image N: WxH -> T tokens" unless quiet. */
qvl_status chat_picture_plan(const qvl_picture_rules *r, const char *path, size_t number,
                             bool quiet, const char *cap_what, chat_picture *out,
                             qvl_error *err);

/* Decode and preprocess (no-op once made); a video through vr (chat_video_make). */
qvl_status chat_picture_make(const qvl_picture_rules *r, const qvl_video_rules *vr,
                             chat_picture *p, qvl_error *err);

void chat_picture_free(chat_picture *p);

#endif
