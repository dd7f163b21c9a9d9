/* Videos of a request: a {"type": "video"} part's frames (each a data: URL or a file under
 * --image-dir, as image_url takes them) at its frame rate, made into the engine's video item
 * (qvl/engine_video.h); and video_url parts (a whole file), which need the file decoder
 * (video_files.h). Frames are checked from their headers (one size, the limits, the token
 * budget) before any is decoded, and only the frames the processor keeps are decoded. */
#ifndef QVL_SERVE_VIDEO_H
#define QVL_SERVE_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_video.h"
#include "serve_image.h"

typedef struct serve_video_limits {
    const qvl_video_rules *rules;
    serve_image_guard *guard;  /* NULL: no budget, deadline or client check */
    const char *image_dir;     /* real path of --image-dir, or NULL: no local files */
    size_t max_file_bytes;     /* largest local file read */
    int64_t token_budget;      /* video pads the video may take at most */
    int64_t max_frames;        /* --max-video-frames: frames given */
    double max_seconds;        /* --max-video-seconds: frames given / fps */
} serve_video_limits;

/* n frame URLs at fps frames per second -> *out. Returns 0, or the HTTP status (400 for the
 * client's mistakes, 500 out of memory, 503 stopped) with a one-line reason in msg. */
int serve_video_from_frames(const char *const *urls, size_t n, double fps,
                            const serve_video_limits *lim, serve_image *out, char *msg,
                            size_t msg_len);

/* A video_url's file (data: URL or under --image-dir) -> *out, through the file decoder;
 * without one, 400 saying the build cannot read video files. */
int serve_video_from_url(const char *url, const serve_video_limits *lim, serve_image *out,
                         char *msg, size_t msg_len);

#endif
