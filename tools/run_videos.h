/* Videos for qvl run, as frames (--video-frames DIR|F1,F2,... with --video-fps R) or as a file
 * (--video FILE, decoded by qvl/video_decode.h): the frame list, which frames the processor
 * keeps, their size, the token budget that decides the grid, decoding and the prompt text
 * (timestamps) of each video. A file's kept frames are decoded while planning (its true frame
 * count is known only then) and held until run_video_decode preprocesses them. The items live in run_images
 * (a video is one media item among the pictures, in command-line order). */
#ifndef QVL_TOOLS_RUN_VIDEOS_H
#define QVL_TOOLS_RUN_VIDEOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"
#include "qvl/video_decode.h"

typedef struct run_video {
    double fps;       /* the frames' rate (--video-fps; transformers' 24 when not given; a file's) */
    bool fps_set;
    bool is_file;     /* --video FILE */
    qvl_video_frames decoded; /* a file's kept frames, until run_video_decode */
    char **files;     /* every given frame, in order (none for a file) */
    size_t n_files;   /* frames in the video (a file's: the stream's count) */
    int64_t *kept;    /* indices of the frames the processor keeps */
    int64_t n_kept;
    int64_t n_groups; /* temporal patches */
    char *text;       /* "<t seconds><|vision_start|><|video_pad|><|vision_end|>" per group */
    int64_t min_pixels, max_pixels; /* the processor's bounds within the token budget */
} run_video;

/* --video-max-frames, --video-min-frames, --video-max-tokens, --video-max-pixels as given, and
 * the caps of decoding a --video FILE (0: qvl/video_decode.h's built-in ones). */
typedef struct run_video_bounds {
    int64_t max_frames, min_frames, max_tokens, max_pixels;
    bool max_frames_set, min_frames_set, max_tokens_set, max_pixels_set;
    double max_duration, max_seconds; /* --video-max-duration, --video-max-seconds */
    int64_t max_mib;                  /* --video-max-mib */
} run_video_bounds;

struct run_images;

void run_video_free(run_video *v);

/* Item i's frame list (a directory's picture files in name order, else a comma-separated
 * list), the frames kept, their common size (each kept frame's header is read) and the
 * timestamp text. */
qvl_status run_video_plan(struct run_images *im, size_t i, qvl_error *err);

/* After the prompt is tokenized with one pad per frame group: each video's grid within its
 * token budget (--video-max-tokens, else an even share of what the context has left after the
 * rest of the prompt), refused when even its smallest size does not fit. Prints a line per
 * video unless quiet. */
qvl_status run_videos_fit(struct run_images *im, const int32_t *ids, int64_t n, int64_t ctx,
                          qvl_error *err);

/* Each video pad of ids (one per frame group) to the group's token count. */
qvl_status run_videos_expand(const struct run_images *im, int32_t **ids, int64_t *n,
                             qvl_error *err);

/* Decode the kept frames of item i (a file's: take those decoded while planning, and free them)
 * and preprocess them into px (rows of the planned grid). */
qvl_status run_video_decode(struct run_images *im, size_t i, float **px, qvl_error *err);

#endif
