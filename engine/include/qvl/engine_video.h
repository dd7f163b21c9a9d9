/* Videos as the engine takes them: a video is one media item of a request (a qvl_picture with
 * is_video set, qvl/engine_picture.h) made from its kept frames, decoded RGB, and their times.
 * The rules are the model's video processor (video_preprocessor_config.json, else Qwen3-VL's
 * defaults; docs/MODEL.md, "Video preprocessing"), said without the model's types.
 *
 * A front end works in three steps so that nothing is decoded for a video that cannot be used:
 * qvl_video_keep picks the frames the processor keeps (from the count and the rate alone),
 * qvl_video_plan_for sizes them from the frames' common size within a token budget, and
 * qvl_video_make preprocesses the decoded kept frames into the item.
 *
 * In the prompt a video is its frame groups, each "<t seconds>" text followed by
 * <|vision_start|>, the group's video pads and <|vision_end|>: the front end adds one video
 * placeholder (qvl_prompt_add_video) and the engine writes the groups (the item's text).
 * Its identity for prefix reuse is the SHA-256 of every preprocessing parameter, the frame
 * times, the grid and the pixels; its span in the prompt runs from its first pad to its last,
 * so a next turn reuses it only whole. */
#ifndef QVL_ENGINE_VIDEO_H
#define QVL_ENGINE_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_picture.h"
#include "qvl/image.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The frame rate a video's frames are assumed to have when the client gives none (as
 * transformers assumes). */
#define QVL_VIDEO_FPS_DEFAULT 24.0

typedef struct qvl_video_rules qvl_video_rules;

/* Which of n_frames frames at fps frames per second the processor keeps: *n_kept indices in
 * increasing order into idx (n_frames entries). Fewer than a temporal patch's frames kept is
 * an error (QVL_E_INVALID) saying how many a video needs. */
qvl_status qvl_video_keep(const qvl_video_rules *r, int64_t n_frames, double fps, int64_t *idx,
                          int64_t *n_kept, qvl_error *err);

/* What n_kept frames of width x height will cost. */
typedef struct qvl_video_plan {
    int64_t n_kept;
    int64_t width, height;
    int64_t grid_t, grid_h, grid_w;
    int64_t n_tokens;     /* video pads: the encoder's rows for it */
    int64_t n_groups;     /* frame groups (grid_t): each adds its timestamp text and 2 tokens */
    int64_t min_pixels, max_pixels; /* the processor's bounds the budget settled on */
    int64_t decode_bytes; /* a bound on the bytes decoding (at decode_bytes_per_pixel per pixel
                           * of one frame at a time) and preprocessing hold at their peak */
    int64_t held_bytes;   /* the f32 pixels kept until the prefill */
} qvl_video_plan;

/* The largest grid within token_budget video pads: the processor's pixel bound shrinks until
 * the plan fits (the lower bound following it down). QVL_E_LIMIT, one line, when even the
 * smallest frames do not fit. */
qvl_status qvl_video_plan_for(const qvl_video_rules *r, int64_t n_kept, int64_t width,
                              int64_t height, int64_t token_budget,
                              int64_t decode_bytes_per_pixel, qvl_video_plan *out,
                              qvl_error *err);

/* The prompt text of a video whose n_kept kept frames lie at `times` seconds (what
 * qvl_video_make writes into the item's text; known before any frame is decoded). *out is
 * malloc'd. */
qvl_status qvl_video_text(const qvl_video_rules *r, const double *times, int64_t n_kept,
                          char **out, qvl_error *err);

/* The kept frames (plan->n_kept of them, plan->width x plan->height; each freed either way)
 * and their times in seconds (index / fps for a frame list) -> the engine's video item (its
 * accounting fields left as they were). */
qvl_status qvl_video_make(const qvl_video_rules *r, const qvl_video_plan *plan, qvl_image *frames,
                          const double *times, qvl_picture *out, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
