/* Decoding video files to the RGB frames a video processor keeps: MP4/MOV, Matroska/WebM, AVI,
 * animated GIF (FFmpeg's libavformat, libavcodec, libswscale) and animated WebP (libwebp's
 * animation decoder, with or without FFmpeg).
 *
 * The stream's frame count and average frame rate are read from the container; the caller's
 * `pick` (for Qwen3-VL: qvl_video_sample_frames) chooses which frame indices to keep, and only
 * those are converted to RGB and kept: the decoder seeks over long gaps (to the key frame
 * before a kept frame, when the container has an index) and drops the frames in between
 * undecoded-to-RGB. A frame's index is its position counted from the stream's start; with
 * timestamps it is round((pts - start) * fps), as a constant-rate stream counts.
 *
 * RGB is what swscale gives from the decoded picture with bilinear flags, the frame's own
 * colour matrix (BT.601 when untagged) and range, as PyAV's to_ndarray(format="rgb24") does for
 * transformers' video loader. The display matrix's rotation (90, 180, 270 degrees) is applied;
 * flips are not.
 *
 * Everything a stranger's file could inflate is bounded before the work is done (qvl_video_caps):
 * the duration and frame count the container declares, the frame size, the bytes of the kept
 * frames and the wall time of the whole decode. A container whose index promises more frames
 * than it holds is decoded a second time with the true count (never more than twice). Only the
 * demuxers and decoders named in docs/MODEL.md are enabled; nothing but the given file (or
 * buffer) is ever read.
 *
 * Without FFmpeg at build time (qvl_video_decoder_available() false) every format but WebP fails
 * with one line saying how to get it. */
#ifndef QVL_VIDEO_DECODE_H
#define QVL_VIDEO_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Built-in caps (qvl_video_caps_default). A 3-hour film passes; a 10-hour one does not. */
#define QVL_VIDEO_MAX_DURATION_S 10800.0
/* Frames the container may declare: 3 hours at 96 fps. */
#define QVL_VIDEO_MAX_STREAM_FRAMES 1048576LL
/* RGB bytes of all kept frames together (768 frames of 1080p need 4.8 GB). */
#define QVL_VIDEO_MAX_BYTES (4LL << 30)
/* Wall time of one decode, seconds. */
#define QVL_VIDEO_MAX_SECONDS 120.0

/* One unset field (0) takes its built-in value. */
typedef struct qvl_video_caps {
    double max_duration_s;  /* declared duration, seconds */
    int64_t max_frames;     /* declared frames in the stream */
    int64_t max_pixels;     /* width * height of a frame (default: qvl_image_max_pixels()) */
    int64_t max_bytes;      /* RGB bytes of the kept frames, all together */
    double max_seconds;     /* wall time of the decode */
    qvl_image_stop stop;    /* asked between packets and frames (NULL function: never stop) */
    /* The caller's option that raises the duration, bytes and wall-time caps, named in their
     * error lines (NULL: the line names none). The runtime knows no command line. */
    const char *duration_flag, *bytes_flag, *seconds_flag;
} qvl_video_caps;

void qvl_video_caps_default(qvl_video_caps *caps);

/* Which of n_total frames at fps frames per second to keep: *n_kept indices, increasing, each
 * in [0, n_total); idx holds n_total entries. */
typedef qvl_status (*qvl_video_pick_fn)(void *arg, int64_t n_total, double fps, int64_t *idx,
                                        int64_t *n_kept, qvl_error *err);

typedef struct qvl_video_frames {
    qvl_image *frames;   /* n upright RGB frames, all width x height */
    int64_t *indices;    /* each kept frame's index in the stream */
    double *seconds;     /* each kept frame's presentation time from the stream's start */
    int64_t n;
    int64_t n_total;     /* frames in the stream, as sampling saw them */
    double fps;          /* the stream's average frame rate */
    int32_t width, height; /* upright (rotation applied) */
    int rotation;        /* clockwise degrees applied: 0, 90, 180 or 270 */
    char container[32], codec[32];
} qvl_video_frames;

/* Decode the frames `pick` keeps (NULL: every frame) from the regular file at path, or from
 * memory (`what` names it in messages). caps may be NULL (the built-in caps). On failure: one
 * line naming the file, *out empty. */
qvl_status qvl_video_decode_file(const char *path, const qvl_video_caps *caps,
                                 qvl_video_pick_fn pick, void *pick_arg, qvl_video_frames *out,
                                 qvl_error *err);
qvl_status qvl_video_decode_memory(const void *data, size_t size, const char *what,
                                   const qvl_video_caps *caps, qvl_video_pick_fn pick,
                                   void *pick_arg, qvl_video_frames *out, qvl_error *err);
void qvl_video_frames_free(qvl_video_frames *v);

/* Whether qvl was built with FFmpeg's libraries (else only animated WebP decodes). */
bool qvl_video_decoder_available(void);

/* The line a build without FFmpeg answers with (how to get the libraries). */
#define QVL_VIDEO_NO_FFMPEG                                                                        \
    "video files need FFmpeg's libraries, absent when qvl was built: apt-get install "             \
    "libavformat-dev libavcodec-dev libswscale-dev (or scripts/install-deps.sh), then rebuild"

#ifdef __cplusplus
}
#endif
#endif
