/* The FFmpeg side of video decoding in a build without FFmpeg's -dev packages: every container
 * but WebP is answered with the line that says how to get them (qvl/video_decode.h). */
#include "../video_internal.h"

bool video_ffmpeg_available(void) { return false; }

qvl_status video_ffmpeg_decode(const video_source *src, const video_job *job,
                               qvl_video_frames *out, qvl_error *err) {
    (void)out;
    (void)job;
    return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s", src->what, QVL_VIDEO_NO_FFMPEG);
}
