/* The Qwen3-VL video processor for a video given as frames (docs/MODEL.md, "Video
 * preprocessing"; Hugging Face's Qwen3VLVideoProcessor and Qwen3VLProcessor): which frames are
 * kept, the size they are resampled to, pairing into temporal patches, the pixel matrix, the
 * "<t seconds>" text before each frame group and the grids of the pad runs the prompt holds.
 *
 * A video of grid (t, h, w) is t frame groups of temporal_patch_size frames each; in the prompt
 * each group is its own run of h*w/merge^2 video pads, preceded by its timestamp text. */
#ifndef QVL_VIDEO_PREPROCESS_H
#define QVL_VIDEO_PREPROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The frame rate transformers assumes when a video's rate is unknown. */
#define QVL_VIDEO_DEFAULT_FPS 24.0

typedef struct qvl_video_config {
    /* patch, temporal and merge sizes; min_pixels / max_pixels are size.shortest_edge /
     * size.longest_edge and bound t_bar * h * w, all frames together; mean, std, rescale. */
    qvl_preprocess_config pc;
    double fps;                /* frames kept per second of video */
    int64_t min_frames, max_frames;
    bool do_sample_frames;     /* false: every given frame is kept */
    /* transformers' cap_pixels_per_frame: each frame's pixels are limited to
     * max(min(max_video_tokens * factor^2, longest_edge / frames), 1.05 * shortest_edge). */
    bool cap_pixels_per_frame;
    int64_t max_video_tokens;
} qvl_video_config;

/* Qwen3VLVideoProcessor's class defaults (fps 2, frames 4..768, shortest_edge 131072,
 * longest_edge 786432, mean = std = 0.5, no per-frame cap) with the patch sizes of the
 * vision config. */
void qvl_video_config_default(const qvl_vision_config *v, qvl_video_config *out);
/* video_preprocessor_config.json over the defaults. A missing file is QVL_E_NOT_FOUND (out
 * keeps the defaults). */
qvl_status qvl_video_config_load(const char *path, const qvl_vision_config *v,
                                 qvl_video_config *out, qvl_error *err);

/* Which of n_total frames (taken at video_fps frames per second) the processor keeps: *n_out
 * indices in increasing order (numpy's linspace over [0, n_total - 1], rounded half to even).
 * idx holds at least n_total entries (never more are kept). */
qvl_status qvl_video_sample_frames(int64_t n_total, double video_fps, const qvl_video_config *vc,
                                   int64_t *idx, int64_t *n_out, qvl_error *err);

/* The resampled size of n_frames frames of width x height (the video smart_resize: sides
 * below the factor are first scaled up, the pixel bounds count all frames) and the grid:
 * t = ceil(n_frames / temporal_patch_size) (an odd last frame is repeated). */
qvl_status qvl_video_plan_grid(int64_t n_frames, int64_t width, int64_t height,
                               const qvl_video_config *vc, qvl_image_grid *grid, qvl_error *err);

/* The largest grid of n_frames frames of width x height within budget video tokens: the pixel
 * bound (max_pixels) shrinks by budget / tokens each round, the lower bound following it down
 * (the budget wins over the config's minimum), until the plan fits or cannot shrink further. */
typedef struct qvl_video_fit {
    bool fits;            /* false: even the smallest grid tried needs more than budget */
    qvl_image_grid grid;  /* the last grid tried (the fitting one when fits) */
    int64_t tokens;       /* its merged tokens */
    int64_t min_pixels, max_pixels; /* the bounds that give it (for qvl_video_preprocess) */
} qvl_video_fit;
/* Errors are qvl_video_plan_grid's; not fitting is QVL_OK with fits false, for the caller to
 * word (its budget has its own source: a flag, a slot's context). */
qvl_status qvl_video_fit_grid(int64_t n_frames, int64_t width, int64_t height,
                              const qvl_video_config *vc, int64_t budget, qvl_video_fit *out,
                              qvl_error *err);

/* The kept frames (all width x height) to the vision encoder's input: *pixels (malloc'd) is
 * [t*h*w, 3*temporal*patch*patch] f32, temporal group after group, each in merge-window order
 * with the group's frames along the temporal axis of a row. */
qvl_status qvl_video_preprocess(const qvl_image *frames, size_t n_frames,
                                const qvl_video_config *vc, float **pixels, qvl_image_grid *grid,
                                qvl_error *err);

/* The seconds of each frame group: the mean of the times (index / video_fps) of its first and
 * last frame, the kept indices padded with the last one to whole groups. out holds
 * ceil(n / group) values. */
qvl_status qvl_video_timestamps(const int64_t *idx, int64_t n, double video_fps, int64_t group,
                                double *out, qvl_error *err);

/* The prompt text that stands for one video: for each group "<%.1f seconds>" followed by
 * "<|vision_start|><|video_pad|><|vision_end|>" (one pad per group, expanded to the group's
 * tokens after tokenizing). *out is malloc'd. */
qvl_status qvl_video_prompt_text(const double *seconds, int64_t n_groups, char **out,
                                 qvl_error *err);

/* Each "<|video_pad|>" of a rendered prompt (the chat template writes one per video, inside
 * "<|vision_start|>...<|vision_end|>", which stay) replaced in order by texts[k]
 * (qvl_video_prompt_text), as transformers 5's processor does. The text must hold exactly n
 * pads. */
qvl_status qvl_video_expand_text(const char *text, const char *const *texts, size_t n, char **out,
                                 qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
