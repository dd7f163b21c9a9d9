/* qvl chat's videos (chat_videos.h). */
#define _POSIX_C_SOURCE 200809L

#include "chat_videos.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "qvl/image.h"
#include "video_files.h"
#include "video_frames.h"

/* "PATH@FPS": the rate after the last '@' when it is a positive number; else all is PATH. */
static qvl_status split_rate(const char *arg, char **path, double *fps, bool *fps_set,
                             qvl_error *err) {
    const char *at = strrchr(arg, '@');
    char *end = NULL;
    double r = at ? strtod(at + 1, &end) : 0;
    *fps_set = at && at[1] && end && *end == '\0';
    if (*fps_set && !(isfinite(r) && r > 0 && r <= 1e6))
        return qvl_fail(err, QVL_E_INVALID, "%s: %s is not a frame rate (frames per second, > 0)",
                        arg, at + 1);
    *fps = *fps_set ? r : QVL_VIDEO_FPS_DEFAULT;
    *path = *fps_set ? strndup(arg, (size_t)(at - arg)) : strdup(arg);
    if (!*path) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (!**path) return qvl_fail(err, QVL_E_INVALID, "%s: no PATH before the '@'", arg);
    return QVL_OK;
}

/* The video's plan, text and the shape its item takes in the prompt before it is made. */
static qvl_status plan_kept(const qvl_video_rules *r, chat_picture *v, int64_t n_kept, int32_t w,
                            int32_t h, const double *times, int64_t budget, qvl_error *err) {
    qvl_status st = qvl_video_plan_for(r, n_kept, w, h, budget, 0, &v->plan, err);
    if (st == QVL_OK) st = qvl_video_text(r, times, n_kept, &v->text, err);
    if (st != QVL_OK) return st;
    v->pic.is_video = true;
    v->pic.grid_t = v->plan.grid_t;
    v->pic.grid_h = v->plan.grid_h;
    v->pic.grid_w = v->plan.grid_w;
    v->n_tokens = v->pic.n_tokens = v->plan.n_tokens;
    return QVL_OK;
}

/* A video file through the file decoder: decoded, planned and made at once. */
static qvl_status from_file(const qvl_video_rules *r, chat_picture *v, int64_t budget,
                            qvl_error *err) {
    const video_file_caps caps = {0}; /* the decoder's built-in caps */
    video_file_frames vf = {0};
    qvl_status st = video_file_decode_path(v->path, r, &caps, &vf, err);
    if (st == QVL_OK && vf.n < 1) st = qvl_fail(err, QVL_E_INVALID, "the file holds no frames");
    if (st == QVL_OK)
        st = plan_kept(r, v, vf.n, vf.frames[0].width, vf.frames[0].height, vf.times, budget, err);
    if (st == QVL_OK) st = qvl_video_make(r, &v->plan, vf.frames, vf.times, &v->pic, err);
    v->made = st == QVL_OK;
    video_file_frames_free(&vf);
    return st;
}

qvl_status chat_video_plan(const qvl_video_rules *r, const char *arg, size_t number, bool quiet,
                           int64_t token_budget, chat_picture *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    out->is_video = true;
    bool fps_set = false;
    qvl_status st = split_rate(arg, &out->path, &out->fps, &fps_set, err);
    struct stat sb;
    const char *base = st == QVL_OK ? strrchr(out->path, '/') : NULL;
    const bool is_file = st == QVL_OK && !strchr(out->path, ',') &&
                         stat(out->path, &sb) == 0 && S_ISREG(sb.st_mode) &&
                         !video_frames_is_picture(base ? base + 1 : out->path);
    int64_t n_kept = 0;
    int32_t w = 0, h = 0;
    double *times = NULL;
    if (st == QVL_OK && is_file) {
        st = from_file(r, out, token_budget, err);
    } else if (st == QVL_OK) {
        st = video_frames_list(out->path, &out->frames, &out->n_frames, err);
        if (st == QVL_OK && !(out->kept = malloc(out->n_frames * sizeof *out->kept)))
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        if (st == QVL_OK)
            st = qvl_video_keep(r, (int64_t)out->n_frames, out->fps, out->kept, &n_kept, err);
        if (st == QVL_OK) st = video_frames_probe(out->frames, out->kept, n_kept, &w, &h, err);
        if (st == QVL_OK && !(times = malloc((size_t)n_kept * sizeof *times)))
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        for (int64_t k = 0; st == QVL_OK && k < n_kept; k++) times[k] = (double)out->kept[k] / out->fps;
        if (st == QVL_OK) st = plan_kept(r, out, n_kept, w, h, times, token_budget, err);
    }
    free(times);
    if (st != QVL_OK) {
        qvl_error_prefix(err, "video %s", out->path ? out->path : arg);
        chat_picture_free(out);
        return st;
    }
    if (!quiet && !is_file)
        fprintf(stderr, "video %zu: %s, %zu frames at %g fps%s -> %lld kept, %dx%d -> grid "
                "%lldx%lldx%lld, %lld tokens\n", number, out->path, out->n_frames, out->fps,
                fps_set ? "" : " (assumed: no @FPS)", (long long)n_kept, w, h,
                (long long)out->plan.grid_t, (long long)out->plan.grid_h,
                (long long)out->plan.grid_w, (long long)out->n_tokens);
    return QVL_OK;
}

qvl_status chat_video_make(const qvl_video_rules *r, chat_picture *p, qvl_error *err) {
    if (p->made) return QVL_OK;
    const int64_t n = p->plan.n_kept;
    qvl_image *frames = calloc((size_t)n, sizeof *frames);
    double *times = malloc((size_t)n * sizeof *times);
    qvl_status st = frames && times ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int64_t k = 0; st == QVL_OK && k < n; k++) {
        times[k] = (double)p->kept[k] / p->fps;
        st = qvl_image_load(p->frames[p->kept[k]], &frames[k], err);
    }
    /* qvl_video_make keeps the planned shape: pic's fields are set again from its result. */
    if (st == QVL_OK) st = qvl_video_make(r, &p->plan, frames, times, &p->pic, err);
    for (int64_t k = 0; frames && k < n; k++) qvl_image_free(&frames[k]);
    free(frames);
    free(times);
    if (st != QVL_OK) return qvl_error_prefix(err, "video %s", p->path);
    p->made = true;
    return QVL_OK;
}
