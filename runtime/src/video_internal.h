/* What the video decoders share (qvl/video_decode.h): the source (a file descriptor or a
 * buffer), the caps in force with the deadline, the plan (which indices are kept) and the kept
 * frames' storage under the byte cap. */
#ifndef QVL_VIDEO_INTERNAL_H
#define QVL_VIDEO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/video_decode.h"

/* Either a regular file read with pread (fd >= 0) or a buffer. */
typedef struct video_source {
    int fd;
    const uint8_t *data;
    int64_t size;
    const char *what; /* the path or the caller's name for the buffer */
} video_source;

typedef struct video_job {
    qvl_video_caps caps;  /* every field set */
    double deadline;      /* CLOCK_MONOTONIC seconds */
    qvl_video_pick_fn pick;
    void *pick_arg;
    const char *what;
} video_job;

/* Seconds on the monotonic clock. */
double video_now(void);

/* "the cap", or "the cap; FLAG raises it" when the caller named its option: buf. */
const char *video_cap_hint(const char *flag, char *buf, size_t size);

/* QVL_E_LIMIT once the deadline passed or the stop callback says so. */
qvl_status video_check_time(const video_job *job, qvl_error *err);

/* The declared stream (n_total frames at fps, width x height before rotation) checked against the
 * caps, then the kept indices (job->pick, or all): *idx malloc'd, *n_kept >= 1. The kept frames'
 * bytes are checked against the byte cap here, before anything is decoded. */
qvl_status video_plan(const video_job *job, int64_t n_total, double fps, int64_t width,
                      int64_t height, int64_t **idx, int64_t *n_kept, qvl_error *err);

/* The frame size checked against the pixel cap and qvl's aspect limit. */
qvl_status video_check_size(const video_job *job, int64_t width, int64_t height, qvl_error *err);

/* out's arrays for n kept frames (zeroed). */
qvl_status video_frames_alloc(qvl_video_frames *out, int64_t n, qvl_error *err);

/* The EXIF orientation (qvl_image_apply_orientation) that turns a frame `rotation` degrees
 * clockwise: 90 -> 6, 180 -> 3, 270 -> 8, else 1. */
int video_rotation_orientation(int rotation);

/* FFmpeg's side (ffmpeg/video_ffmpeg.c, or the line saying it is absent). */
qvl_status video_ffmpeg_decode(const video_source *src, const video_job *job,
                               qvl_video_frames *out, qvl_error *err);
bool video_ffmpeg_available(void);

/* Animated (or still) WebP through libwebp's animation decoder (video_webp.c). */
qvl_status video_webp_decode(const uint8_t *data, size_t size, const video_job *job,
                             qvl_video_frames *out, qvl_error *err);
bool video_is_webp(const uint8_t *head, size_t n);

#endif
