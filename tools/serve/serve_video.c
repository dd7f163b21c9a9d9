/* video and video_url parts -> the engine's video item (serve_video.h). */
#define _XOPEN_SOURCE 700

#include "serve_video.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/image.h"
#include "video_files.h"

static int failf(char *msg, size_t msg_len, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return status;
}

static bool guard_stop(void *arg) { return serve_image_should_stop(arg); }

/* Frame i's encoded bytes (its name for messages in name). */
static int frame_bytes(const char *const *urls, size_t i, const serve_video_limits *lim,
                       unsigned char **bytes, size_t *n, char *name, size_t name_len, char *msg,
                       size_t msg_len) {
    char what[48];
    snprintf(what, sizeof what, "video frame %zu", i + 1);
    return serve_url_read(urls[i], what, "image/", lim->image_dir, lim->max_file_bytes, bytes, n,
                          name, name_len, msg, msg_len);
}

/* Every frame's header: readable, and all of one size (*w x *h). */
static int probe_frames(const char *const *urls, size_t n, const serve_video_limits *lim,
                        int32_t *w, int32_t *h, char *msg, size_t msg_len) {
    for (size_t i = 0; i < n; i++) {
        if (serve_image_should_stop(lim->guard))
            return serve_image_stopped(lim->guard, "video", msg, msg_len);
        unsigned char *bytes = NULL;
        size_t size = 0;
        char name[PATH_MAX];
        int rc = frame_bytes(urls, i, lim, &bytes, &size, name, sizeof name, msg, msg_len);
        if (rc != 0) return rc;
        qvl_error err = {0};
        int32_t fw = 0, fh = 0;
        qvl_status st = qvl_image_probe(bytes, size, name, &fw, &fh, &err);
        free(bytes);
        if (st != QVL_OK) return failf(msg, msg_len, 400, "video frame %zu: %s", i + 1, err.msg);
        if (i == 0) {
            *w = fw;
            *h = fh;
        } else if (fw != *w || fh != *h) {
            return failf(msg, msg_len, 400, "video frame %zu is %dx%d but frame 1 is %dx%d: the "
                         "frames of a video must have one size", i + 1, (int)fw, (int)fh,
                         (int)*w, (int)*h);
        }
    }
    return 0;
}

/* The kept frames decoded into frames[0, n_kept). */
static int decode_kept(const char *const *urls, const int64_t *kept, const qvl_video_plan *plan,
                       const serve_video_limits *lim, qvl_image *frames, char *msg,
                       size_t msg_len) {
    const qvl_image_stop stop = {.should_stop = guard_stop, .arg = lim->guard};
    for (int64_t k = 0; k < plan->n_kept; k++) {
        const size_t i = (size_t)kept[k];
        unsigned char *bytes = NULL;
        size_t size = 0;
        char name[PATH_MAX];
        int rc = frame_bytes(urls, i, lim, &bytes, &size, name, sizeof name, msg, msg_len);
        if (rc != 0) return rc;
        qvl_error err = {0};
        qvl_status st = qvl_image_decode_stoppable(bytes, size, name, lim->guard ? &stop : NULL,
                                                   &frames[k], &err);
        free(bytes);
        if (st != QVL_OK && lim->guard && lim->guard->why != SERVE_IMAGE_GO_ON)
            return serve_image_stopped(lim->guard, "video", msg, msg_len);
        if (st != QVL_OK)
            return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "video frame %zu: %s",
                         i + 1, err.msg);
        if (frames[k].width != plan->width || frames[k].height != plan->height)
            return failf(msg, msg_len, 400, "video frame %zu decodes to %dx%d, its header said "
                         "%lldx%lld", i + 1, frames[k].width, frames[k].height,
                         (long long)plan->width, (long long)plan->height);
    }
    return 0;
}

/* The kept frames' plan within the token budget. */
static int plan_video(const serve_video_limits *lim, int64_t n_kept, int32_t w, int32_t h,
                      qvl_video_plan *plan, char *msg, size_t msg_len) {
    qvl_error err = {0};
    qvl_status st = qvl_video_plan_for(lim->rules, n_kept, w, h, lim->token_budget,
                                       SERVE_DECODE_BYTES_PER_PIXEL, plan, &err);
    if (st != QVL_OK) return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "video: %s", err.msg);
    return 0;
}

/* Made: only the f32 pixels stay reserved until the prefill. */
static void keep_held(serve_image *out, const qvl_video_plan *plan) {
    if (out->give_back && out->reserved > plan->held_bytes) {
        serve_budget_release(out->give_back_arg, out->reserved - plan->held_bytes);
        out->reserved = plan->held_bytes;
    }
}

int serve_video_from_frames(const char *const *urls, size_t n, double fps,
                            const serve_video_limits *lim, serve_image *out, char *msg,
                            size_t msg_len) {
    memset(out, 0, sizeof *out);
    if (n == 0) return failf(msg, msg_len, 400, "video: the frame list is empty");
    if ((int64_t)n > lim->max_frames)
        return failf(msg, msg_len, 400, "video: %zu frames, more than %lld in one video "
                     "(--max-video-frames)", n, (long long)lim->max_frames);
    const double seconds = (double)n / fps;
    if (seconds > lim->max_seconds)
        return failf(msg, msg_len, 400, "video: %zu frames at %g fps last %.1f s, more than "
                     "%g s (--max-video-seconds)", n, fps, seconds, lim->max_seconds);
    int64_t *kept = malloc(n * sizeof *kept);
    double *times = malloc(n * sizeof *times);
    qvl_image *frames = calloc(n, sizeof *frames);
    if (!kept || !times || !frames) {
        free(kept);
        free(times);
        free(frames);
        return failf(msg, msg_len, 500, "out of memory for a video");
    }
    int64_t n_kept = 0;
    int32_t w = 0, h = 0;
    qvl_video_plan plan;
    qvl_error err = {0};
    int rc = qvl_video_keep(lim->rules, (int64_t)n, fps, kept, &n_kept, &err) == QVL_OK
                 ? 0 : failf(msg, msg_len, 400, "video: %s", err.msg);
    if (rc == 0) rc = probe_frames(urls, n, lim, &w, &h, msg, msg_len);
    if (rc == 0) rc = plan_video(lim, n_kept, w, h, &plan, msg, msg_len);
    if (rc == 0) rc = serve_image_reserve(lim->guard, plan.decode_bytes, "video", out, msg, msg_len);
    if (rc == 0) rc = decode_kept(urls, kept, &plan, lim, frames, msg, msg_len);
    for (int64_t k = 0; k < n_kept; k++) times[k] = (double)kept[k] / fps;
    if (rc == 0 && qvl_video_make(lim->rules, &plan, frames, times, out, &err) != QVL_OK)
        rc = failf(msg, msg_len, err.status == QVL_E_NOMEM ? 500 : 400, "video: %s", err.msg);
    for (int64_t k = 0; k < n_kept; k++) qvl_image_free(&frames[k]); /* no-op once made */
    free(kept);
    free(times);
    free(frames);
    if (rc != 0) {
        qvl_picture_free(out); /* gives a reservation back */
        return rc;
    }
    keep_held(out, &plan);
    return 0;
}

int serve_video_from_url(const char *url, const serve_video_limits *lim, serve_image *out,
                         char *msg, size_t msg_len) {
    memset(out, 0, sizeof *out);
    /* Without a decoder nothing is read: the answer does not depend on the URL. */
    if (!video_files_supported()) return failf(msg, msg_len, 400, "video_url: " VIDEO_FILES_UNSUPPORTED);
    unsigned char *bytes = NULL;
    size_t n = 0;
    char name[PATH_MAX];
    int rc = serve_url_read(url, "video_url", "video/", lim->image_dir, lim->max_file_bytes,
                            &bytes, &n, name, sizeof name, msg, msg_len);
    if (rc != 0) return rc;
    /* The kept frames' RGB is bounded by the whole picture budget before decoding (their size
     * is known only from the stream); what stays afterwards is reserved from it below. */
    serve_image_guard *g = lim->guard;
    const video_file_caps caps = {
        .max_frames = lim->max_frames, .max_seconds = lim->max_seconds,
        .max_bytes = g && g->budget ? g->budget->cap : 0, .stop = serve_image_stop_of(g),
        .frames_flag = "--max-video-frames", .duration_flag = "--max-video-seconds",
        .bytes_flag = "--max-image-memory"};
    video_file_frames vf = {0};
    qvl_error err = {0};
    qvl_status st = video_file_decode_memory(bytes, n, lim->rules, &caps, &vf, &err);
    free(bytes);
    if (st != QVL_OK && g && g->why != SERVE_IMAGE_GO_ON)
        return serve_image_stopped(g, "video_url", msg, msg_len);
    if (st != QVL_OK)
        return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "video_url: %s", err.msg);
    qvl_video_plan plan;
    rc = vf.n > 0 ? plan_video(lim, vf.n, vf.frames[0].width, vf.frames[0].height, &plan, msg, msg_len)
                  : failf(msg, msg_len, 400, "video_url: the file holds no frames");
    if (rc == 0) rc = serve_image_reserve(lim->guard, plan.held_bytes, "video_url", out, msg, msg_len);
    if (rc == 0 && qvl_video_make(lim->rules, &plan, vf.frames, vf.times, out, &err) != QVL_OK)
        rc = failf(msg, msg_len, err.status == QVL_E_NOMEM ? 500 : 400, "video_url: %s", err.msg);
    if (rc != 0) qvl_picture_free(out);
    video_file_frames_free(&vf); /* frames qvl_video_make freed are freed no more */
    if (rc == 0) keep_held(out, &plan);
    return rc;
}
