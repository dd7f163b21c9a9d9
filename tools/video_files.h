/* Video files (MP4, WebM, ...) for qvl serve's video_url parts and qvl chat's /video FILE: the
 * one place where the runtime's file decoder plugs in. The decoder (qvl_video_decode_file and
 * qvl_video_decode_memory of runtime/include/qvl/video_decode.h, FFmpeg's libraries) returns
 * the frames the processor keeps, decoded RGB, with their times; video_files.c adapts them to
 * this interface. A build without FFmpeg says so in one line (video_files_supported() is
 * false): the front ends answer before reading anything. */
#ifndef QVL_TOOLS_VIDEO_FILES_H
#define QVL_TOOLS_VIDEO_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_video.h"
#include "qvl/image.h"
#include "qvl/status.h"

/* Why a build cannot read video files (the front ends' one-line answer). */
#define VIDEO_FILES_UNSUPPORTED "video files are not supported by this build (built without " \
    "FFmpeg's libraries); send the video as its frames"

/* An unset field (0, NULL) takes the decoder's built-in cap (qvl/video_decode.h). */
typedef struct video_file_caps {
    int64_t max_frames;  /* frames the processor keeps, at most */
    double max_seconds;  /* the duration the file declares, at most */
    int64_t max_bytes;   /* RGB bytes of the kept frames, all together */
    qvl_image_stop stop; /* asked while decoding (a client gone, a deadline) */
    const char *frames_flag, *duration_flag, *bytes_flag; /* options named when hit (NULL: none) */
} video_file_caps;

/* A decoded file's kept frames (all of one size) and their times in seconds. */
typedef struct video_file_frames {
    qvl_image *frames;
    double *times;
    int64_t n;
} video_file_frames;

bool video_files_supported(void);

/* The file at path, or the n bytes at data, decoded to the frames the processor (r) keeps.
 * Errors name the file (or "video") in one line; QVL_E_LIMIT for a cap. */
qvl_status video_file_decode_path(const char *path, const qvl_video_rules *r,
                                  const video_file_caps *caps, video_file_frames *out,
                                  qvl_error *err);
qvl_status video_file_decode_memory(const void *data, size_t n, const qvl_video_rules *r,
                                    const video_file_caps *caps, video_file_frames *out,
                                    qvl_error *err);
void video_file_frames_free(video_file_frames *f);

#endif
