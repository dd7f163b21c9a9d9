/* qvl chat's videos (/video PATH[@FPS]): a directory of frames (its picture files in name
 * order) or a comma-separated list of frame files, at FPS frames per second (default 24, as
 * transformers assumes), as one media item of the next message (chat_pictures.h). Sized from
 * the kept frames' headers when attached (a video that cannot fit costs one line and no
 * decoding), decoded when its message is sent. A video file (PATH naming a file that is not a
 * picture) goes through the file decoder (video_files.h), which this build may lack. */
#ifndef QVL_TOOLS_CHAT_VIDEOS_H
#define QVL_TOOLS_CHAT_VIDEOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_pictures.h"
#include "qvl/engine_video.h"
#include "qvl/status.h"

/* arg ("PATH" or "PATH@FPS") -> out, within token_budget video tokens; prints "video N: ..."
 * unless quiet. Errors are one line naming the path. */
qvl_status chat_video_plan(const qvl_video_rules *r, const char *arg, size_t number, bool quiet,
                           int64_t token_budget, chat_picture *out, qvl_error *err);

/* Decode the kept frames and preprocess them (no-op once made). */
qvl_status chat_video_make(const qvl_video_rules *r, chat_picture *p, qvl_error *err);

#endif
