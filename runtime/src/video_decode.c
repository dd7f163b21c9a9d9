/* Video decoding's entry points and what both decoders share: caps, plan, storage
 * (qvl/video_decode.h, video_internal.h). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qvl/file.h"
#include "video_internal.h"

/* A WebP file is read whole (libwebp's demuxer wants it in memory); RIFF sizes are 32-bit. */
#define VIDEO_WEBP_MAX_BYTES ((size_t)1 << 30)

void qvl_video_caps_default(qvl_video_caps *caps) {
    memset(caps, 0, sizeof *caps);
    caps->max_duration_s = QVL_VIDEO_MAX_DURATION_S;
    caps->max_frames = QVL_VIDEO_MAX_STREAM_FRAMES;
    caps->max_pixels = qvl_image_max_pixels();
    caps->max_bytes = QVL_VIDEO_MAX_BYTES;
    caps->max_seconds = QVL_VIDEO_MAX_SECONDS;
}

bool qvl_video_decoder_available(void) { return video_ffmpeg_available(); }

const char *video_cap_hint(const char *flag, char *buf, size_t size) {
    if (flag) snprintf(buf, size, "the cap; %s raises it", flag);
    else snprintf(buf, size, "the cap");
    return buf;
}

double video_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

qvl_status video_check_time(const video_job *job, qvl_error *err) {
    if (job->caps.stop.should_stop && job->caps.stop.should_stop(job->caps.stop.arg))
        return qvl_fail(err, QVL_E_LIMIT, "%s: decoding stopped", job->what);
    char hint[96];
    if (video_now() > job->deadline)
        return qvl_fail(err, QVL_E_LIMIT, "%s: decoding took over %g s (%s)", job->what,
                        job->caps.max_seconds, video_cap_hint(job->caps.seconds_flag, hint, sizeof hint));
    return QVL_OK;
}

qvl_status video_check_size(const video_job *job, int64_t width, int64_t height, qvl_error *err) {
    if (width <= 0 || height <= 0)
        return qvl_fail(err, QVL_E_PARSE, "%s: the video stream has no usable frame size (none, "
                        "or one too large for FFmpeg)", job->what);
    if (width > job->caps.max_pixels / height)
        return qvl_fail(err, QVL_E_LIMIT, "%s: frames of %lldx%lld exceed %lld pixels (the cap; "
                        "QVL_IMAGE_MAX_PIXELS raises it)", job->what, (long long)width,
                        (long long)height, (long long)job->caps.max_pixels);
    const int64_t lo = width < height ? width : height, hi = width < height ? height : width;
    if (hi > (int64_t)QVL_IMAGE_MAX_ASPECT * lo)
        return qvl_fail(err, QVL_E_LIMIT, "%s: frames of %lldx%lld: aspect ratio over %d",
                        job->what, (long long)width, (long long)height, QVL_IMAGE_MAX_ASPECT);
    return QVL_OK;
}

qvl_status video_plan(const video_job *job, int64_t n_total, double fps, int64_t width,
                      int64_t height, int64_t **idx, int64_t *n_kept, qvl_error *err) {
    *idx = NULL;
    *n_kept = 0;
    qvl_status st = video_check_size(job, width, height, err);
    if (st != QVL_OK) return st;
    if (n_total < 1) return qvl_fail(err, QVL_E_PARSE, "%s: the video stream has no frames", job->what);
    if (!(fps > 0) || !isfinite(fps))
        return qvl_fail(err, QVL_E_PARSE, "%s: no frame rate", job->what);
    if (n_total > job->caps.max_frames)
        return qvl_fail(err, QVL_E_LIMIT, "%s: the stream declares %lld frames, over %lld (the cap)",
                        job->what, (long long)n_total, (long long)job->caps.max_frames);
    const double duration = (double)n_total / fps;
    char hint[96];
    if (duration > job->caps.max_duration_s)
        return qvl_fail(err, QVL_E_LIMIT, "%s: %lld frames at %g fps last %.0f s, over %.0f s (%s)",
                        job->what, (long long)n_total, fps, duration, job->caps.max_duration_s,
                        video_cap_hint(job->caps.duration_flag, hint, sizeof hint));
    int64_t *k = malloc((size_t)n_total * sizeof *k);
    if (!k) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", job->what);
    int64_t n = n_total;
    if (job->pick) {
        st = job->pick(job->pick_arg, n_total, fps, k, &n, err);
        if (st != QVL_OK) {
            free(k);
            return qvl_error_prefix(err, "%s", job->what);
        }
        for (int64_t i = 0; i < n; i++)
            if (k[i] < 0 || k[i] >= n_total || (i > 0 && k[i] <= k[i - 1])) {
                free(k);
                return qvl_fail(err, QVL_E_INVALID, "%s: frame sampling gave a bad index",
                                job->what);
            }
    } else {
        for (int64_t i = 0; i < n; i++) k[i] = i;
    }
    if (n < 1) {
        free(k);
        return qvl_fail(err, QVL_E_INVALID, "%s: no frame kept", job->what);
    }
    const double bytes = (double)n * (double)width * (double)height * 3.0;
    if (bytes > (double)job->caps.max_bytes) {
        free(k);
        return qvl_fail(err, QVL_E_LIMIT, "%s: %lld kept frames of %lldx%lld need %.0f MiB, over "
                        "%lld MiB (%s)", job->what, (long long)n, (long long)width,
                        (long long)height, bytes / 1048576.0, (long long)(job->caps.max_bytes >> 20),
                        video_cap_hint(job->caps.bytes_flag, hint, sizeof hint));
    }
    *idx = k;
    *n_kept = n;
    return QVL_OK;
}

qvl_status video_frames_alloc(qvl_video_frames *out, int64_t n, qvl_error *err) {
    out->frames = calloc((size_t)n, sizeof *out->frames);
    out->indices = calloc((size_t)n, sizeof *out->indices);
    out->seconds = calloc((size_t)n, sizeof *out->seconds);
    out->n = 0;
    if (!out->frames || !out->indices || !out->seconds) {
        qvl_video_frames_free(out);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    return QVL_OK;
}

int video_rotation_orientation(int rotation) {
    return rotation == 90 ? 6 : rotation == 180 ? 3 : rotation == 270 ? 8 : 1;
}

void qvl_video_frames_free(qvl_video_frames *v) {
    for (int64_t i = 0; v->frames && i < v->n; i++) qvl_image_free(&v->frames[i]);
    free(v->frames);
    free(v->indices);
    free(v->seconds);
    memset(v, 0, sizeof *v);
}

/* ---- entry points ----------------------------------------------------------------------------- */

static void job_init(video_job *job, const qvl_video_caps *caps, qvl_video_pick_fn pick,
                     void *pick_arg, const char *what) {
    qvl_video_caps def;
    qvl_video_caps_default(&def);
    job->caps = caps ? *caps : def;
    if (!(job->caps.max_duration_s > 0)) job->caps.max_duration_s = def.max_duration_s;
    if (job->caps.max_frames <= 0) job->caps.max_frames = def.max_frames;
    if (job->caps.max_pixels <= 0) job->caps.max_pixels = def.max_pixels;
    if (job->caps.max_bytes <= 0) job->caps.max_bytes = def.max_bytes;
    if (!(job->caps.max_seconds > 0)) job->caps.max_seconds = def.max_seconds;
    job->deadline = video_now() + job->caps.max_seconds;
    job->pick = pick;
    job->pick_arg = pick_arg;
    job->what = what;
}

bool video_is_webp(const uint8_t *head, size_t n) {
    return n >= 12 && memcmp(head, "RIFF", 4) == 0 && memcmp(head + 8, "WEBP", 4) == 0;
}

static qvl_status finish(qvl_status st, qvl_video_frames *out) {
    if (st != QVL_OK) qvl_video_frames_free(out);
    return st;
}

qvl_status qvl_video_decode_memory(const void *data, size_t size, const char *what,
                                   const qvl_video_caps *caps, qvl_video_pick_fn pick,
                                   void *pick_arg, qvl_video_frames *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (!what) what = "video";
    if (!data || size == 0) return qvl_fail(err, QVL_E_INVALID, "%s: empty video", what);
    video_job job;
    job_init(&job, caps, pick, pick_arg, what);
    if (video_is_webp(data, size)) return finish(video_webp_decode(data, size, &job, out, err), out);
    const video_source src = {.fd = -1, .data = data, .size = (int64_t)size, .what = what};
    return finish(video_ffmpeg_decode(&src, &job, out, err), out);
}

qvl_status qvl_video_decode_file(const char *path, const qvl_video_caps *caps,
                                 qvl_video_pick_fn pick, void *pick_arg, qvl_video_frames *out,
                                 qvl_error *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return qvl_fail(err, QVL_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return qvl_fail(err, QVL_E_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return qvl_fail(err, QVL_E_INVALID, "%s: empty file", path);
    }
    uint8_t head[12];
    const ssize_t got = pread(fd, head, sizeof head, 0);
    if (got > 0 && video_is_webp(head, (size_t)got)) {
        close(fd);
        char *data = NULL;
        size_t size = 0;
        qvl_status st = qvl_read_file(path, VIDEO_WEBP_MAX_BYTES, QVL_E_IO, &data, &size, err);
        if (st == QVL_OK)
            st = qvl_video_decode_memory(data, size, path, caps, pick, pick_arg, out, err);
        free(data);
        return st;
    }
    video_job job;
    job_init(&job, caps, pick, pick_arg, path);
    const video_source src = {.fd = fd, .size = (int64_t)sb.st_size, .what = path};
    qvl_status st = video_ffmpeg_decode(&src, &job, out, err);
    close(fd);
    return finish(st, out);
}
