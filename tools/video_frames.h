/* A video given as its frames, for qvl run (--video-frames) and qvl chat (/video): a directory
 * of picture files (taken in name order) or a comma-separated list of files, and the check that
 * the kept frames are readable pictures of one size. Errors are one line without the source's
 * name (the callers prefix "video SOURCE"). */
#ifndef QVL_TOOLS_VIDEO_FRAMES_H
#define QVL_TOOLS_VIDEO_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

/* At most this many frame files in one video: a mistaken directory costs one line. */
#define VIDEO_FRAMES_MAX_FILES 100000

/* Whether a file name ends in a picture extension (png, jpg, jpeg, webp, gif, ppm, pgm; any
 * case) and is not hidden: what a frame directory's listing keeps. */
bool video_frames_is_picture(const char *name);

/* source's frame files appended to *files (*n of them, each malloc'd "DIR/NAME" or the list's
 * own name). On error what was listed stays in *files for the caller to free. */
qvl_status video_frames_list(const char *source, char ***files, size_t *n, qvl_error *err);

/* The headers of files[kept[0..n_kept)]: all readable pictures of one size, *w x *h. */
qvl_status video_frames_probe(char *const *files, const int64_t *kept, int64_t n_kept, int32_t *w,
                              int32_t *h, qvl_error *err);

#endif
