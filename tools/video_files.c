/* Video files through the runtime's decoder (qvl/video_decode.h): the processor's sampling
 * (qvl_video_keep) picks the frames while the container is read, so only those are converted
 * to RGB; the front ends' caps become the decoder's. */
#include "video_files.h"

#include <stdlib.h>
#include <string.h>

#include "qvl/video_decode.h"

bool video_files_supported(void) { return qvl_video_decoder_available(); }

typedef struct pick_args {
    const qvl_video_rules *rules;
    int64_t max_kept;
    const char *kept_flag;
} pick_args;

static qvl_status pick(void *arg, int64_t n_total, double fps, int64_t *idx, int64_t *n_kept,
                       qvl_error *err) {
    const pick_args *a = arg;
    qvl_status st = qvl_video_keep(a->rules, n_total, fps, idx, n_kept, err);
    if (st == QVL_OK && a->max_kept > 0 && *n_kept > a->max_kept)
        return qvl_fail(err, QVL_E_LIMIT, "%lld frames would be kept, over %lld (the cap%s%s)",
                        (long long)*n_kept, (long long)a->max_kept, a->kept_flag ? "; " : "",
                        a->kept_flag ? a->kept_flag : "");
    return st;
}

static void to_caps(const video_file_caps *c, qvl_video_caps *caps) {
    qvl_video_caps_default(caps);
    if (c->max_seconds > 0) caps->max_duration_s = c->max_seconds;
    if (c->max_bytes > 0) caps->max_bytes = c->max_bytes;
    caps->stop = c->stop;
    caps->duration_flag = c->duration_flag;
    caps->bytes_flag = c->bytes_flag;
}

/* The decoder's kept frames and times handed over to out (frames moved, not copied). */
static qvl_status take(qvl_video_frames *v, video_file_frames *out, qvl_error *err) {
    out->times = malloc((size_t)(v->n > 0 ? v->n : 1) * sizeof *out->times);
    if (!out->times) {
        qvl_video_frames_free(v);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    memcpy(out->times, v->seconds, (size_t)v->n * sizeof *out->times);
    out->frames = v->frames;
    out->n = v->n;
    v->frames = NULL;
    v->n = 0;
    qvl_video_frames_free(v);
    return QVL_OK;
}

static qvl_status decode(const char *path, const void *data, size_t n, const qvl_video_rules *r,
                         const video_file_caps *c, video_file_frames *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    qvl_video_caps caps;
    to_caps(c, &caps);
    pick_args a = {.rules = r, .max_kept = c->max_frames, .kept_flag = c->frames_flag};
    qvl_video_frames v = {0};
    qvl_status st = path ? qvl_video_decode_file(path, &caps, pick, &a, &v, err)
                         : qvl_video_decode_memory(data, n, "video", &caps, pick, &a, &v, err);
    return st == QVL_OK ? take(&v, out, err) : st;
}

qvl_status video_file_decode_path(const char *path, const qvl_video_rules *r,
                                  const video_file_caps *caps, video_file_frames *out,
                                  qvl_error *err) {
    return decode(path, NULL, 0, r, caps, out, err);
}

qvl_status video_file_decode_memory(const void *data, size_t n, const qvl_video_rules *r,
                                    const video_file_caps *caps, video_file_frames *out,
                                    qvl_error *err) {
    return decode(NULL, data, n, r, caps, out, err);
}

void video_file_frames_free(video_file_frames *f) {
    for (int64_t i = 0; f->frames && i < f->n; i++) qvl_image_free(&f->frames[i]);
    free(f->frames);
    free(f->times);
    memset(f, 0, sizeof *f);
}
