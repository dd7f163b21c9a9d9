/* Video files through the runtime's decoder (video_files.h). This build has no decoder: the
 * runtime's qvl/video_decode.h does not exist yet. When it lands, this file is the only one to
 * change: call qvl_video_decode_file / qvl_video_decode_memory with the processor's sampling
 * and the caps, and hand their kept frames and times back as video_file_frames. */
#include "video_files.h"

#include <stdlib.h>
#include <string.h>

bool video_files_supported(void) { return false; }

qvl_status video_file_decode_path(const char *path, const qvl_video_rules *r,
                                  const video_file_caps *caps, video_file_frames *out,
                                  qvl_error *err) {
    (void)r;
    (void)caps;
    memset(out, 0, sizeof *out);
    return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: " VIDEO_FILES_UNSUPPORTED, path);
}

qvl_status video_file_decode_memory(const void *data, size_t n, const qvl_video_rules *r,
                                    const video_file_caps *caps, video_file_frames *out,
                                    qvl_error *err) {
    (void)data;
    (void)n;
    (void)r;
    (void)caps;
    memset(out, 0, sizeof *out);
    return qvl_fail(err, QVL_E_UNSUPPORTED, VIDEO_FILES_UNSUPPORTED);
}

void video_file_frames_free(video_file_frames *f) {
    for (int64_t i = 0; f->frames && i < f->n; i++) qvl_image_free(&f->frames[i]);
    free(f->frames);
    free(f->times);
    memset(f, 0, sizeof *f);
}
