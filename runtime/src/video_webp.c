/* Animated WebP as a video, through libwebp's animation decoder (FFmpeg 5's webp decoder reads
 * still pictures only). The demuxer's canvas size, frame count and frame durations are checked
 * against the caps before the animation decoder allocates its canvas; then every frame is
 * composed in order (a frame may build on the ones before it) and only the kept ones are copied
 * out as RGB, alpha dropped. The frame rate is frames / total duration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/demux.h>

#include "video_internal.h"

/* The rate when the frames declare no duration at all (a still picture, or durations of 0):
 * the one transformers assumes for a video of unknown rate. */
#define WEBP_DEFAULT_FPS 24.0

/* The canvas size, frame count and total duration in milliseconds, from the demuxer alone. */
static qvl_status probe(const uint8_t *data, size_t size, const video_job *job, int64_t *w,
                        int64_t *h, int64_t *frames, int64_t *total_ms, qvl_error *err) {
    const WebPData wd = {data, size};
    WebPDemuxState state;
    WebPDemuxer *demux = WebPDemuxPartial(&wd, &state);
    if (!demux || state != WEBP_DEMUX_DONE) {
        WebPDemuxDelete(demux);
        return qvl_fail(err, QVL_E_PARSE, "%s: not a complete WebP file", job->what);
    }
    *w = WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH);
    *h = WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
    *frames = WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT);
    *total_ms = 0;
    WebPIterator it;
    if (WebPDemuxGetFrame(demux, 1, &it)) {
        do {
            *total_ms += it.duration > 0 ? it.duration : 0;
        } while (WebPDemuxNextFrame(&it));
        WebPDemuxReleaseIterator(&it);
    }
    WebPDemuxDelete(demux);
    return QVL_OK;
}

qvl_status video_webp_decode(const uint8_t *data, size_t size, const video_job *job,
                             qvl_video_frames *out, qvl_error *err) {
    int64_t w = 0, h = 0, n_total = 0, total_ms = 0;
    qvl_status st = probe(data, size, job, &w, &h, &n_total, &total_ms, err);
    if (st != QVL_OK) return st;
    const double fps = total_ms > 0 ? (double)n_total * 1000.0 / (double)total_ms : WEBP_DEFAULT_FPS;
    int64_t *idx = NULL, n_kept = 0;
    st = video_plan(job, n_total, fps, w, h, &idx, &n_kept, err);
    if (st != QVL_OK) return st;
    st = video_frames_alloc(out, n_kept, err);
    if (st != QVL_OK) {
        free(idx);
        return st;
    }
    snprintf(out->container, sizeof out->container, "webp");
    snprintf(out->codec, sizeof out->codec, "webp");
    out->fps = fps;
    out->n_total = n_total;
    out->width = (int32_t)w;
    out->height = (int32_t)h;

    WebPAnimDecoderOptions opt;
    WebPAnimDecoder *dec = NULL;
    if (!WebPAnimDecoderOptionsInit(&opt)) {
        free(idx);
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: libwebp version mismatch", job->what);
    }
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    const WebPData wd = {data, size};
    dec = WebPAnimDecoderNew(&wd, &opt);
    if (!dec) {
        free(idx);
        return qvl_fail(err, QVL_E_PARSE, "%s: libwebp cannot decode the animation", job->what);
    }
    int prev_ms = 0;
    for (int64_t f = 0, k = 0; st == QVL_OK && k < n_kept; f++) {
        st = video_check_time(job, err);
        if (st != QVL_OK) break;
        uint8_t *canvas = NULL;
        int end_ms = 0;
        if (!WebPAnimDecoderHasMoreFrames(dec) || !WebPAnimDecoderGetNext(dec, &canvas, &end_ms)) {
            st = qvl_fail(err, QVL_E_PARSE, "%s: WebP frame %lld does not decode", job->what,
                          (long long)f + 1);
            break;
        }
        if (f == idx[k]) {
            qvl_image *img = &out->frames[k];
            img->rgb = malloc((size_t)(w * h * 3));
            if (!img->rgb) {
                st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", job->what);
                break;
            }
            img->width = (int32_t)w;
            img->height = (int32_t)h;
            for (int64_t p = 0; p < w * h; p++) memcpy(img->rgb + 3 * p, canvas + 4 * p, 3);
            out->indices[k] = f;
            out->seconds[k] = prev_ms / 1000.0;
            out->n = ++k;
        }
        prev_ms = end_ms;
    }
    WebPAnimDecoderDelete(dec);
    free(idx);
    return st;
}
