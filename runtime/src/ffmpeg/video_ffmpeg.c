/* Video files through FFmpeg's libraries (qvl/video_decode.h): libavformat demuxes from the
 * caller's file descriptor or buffer through a custom reader (no protocol is ever opened, so a
 * playlist or reference cannot reach another file), libavcodec decodes, libswscale converts the
 * kept frames to RGB.
 *
 * One pass: the kept indices in order; before each, when the container's index has a key frame
 * after everything decoded so far and at or before the target, seek there (so gaps cost one
 * GOP, not the whole stretch); frames before the target are dropped without conversion (and
 * those no other frame refers to are not decoded at all). A frame
 * at or past a target is kept for it (a variable-rate stream may skip an index). A stream that
 * ends early gets a second pass with its true count when the shortfall is within rounding
 * (declared counts from a duration, edit lists); a larger shortfall is an error. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>

#include "../video_internal.h"

/* The demuxers FFmpeg may pick (by its names; "mov" and "matroska" cover MP4/MOV/3GP and
 * MKV/WebM). */
#define FF_FORMATS "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,gif"
#define FF_IO_BUFFER 65536
/* Packets that fail to decode before the stream counts as corrupt. */
#define FF_MAX_BAD_PACKETS 64

static const enum AVCodecID ff_codecs[] = {
    AV_CODEC_ID_H264, AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8, AV_CODEC_ID_VP9, AV_CODEC_ID_AV1,
    AV_CODEC_ID_MPEG4, AV_CODEC_ID_MPEG2VIDEO, AV_CODEC_ID_MJPEG, AV_CODEC_ID_GIF,
    AV_CODEC_ID_PNG, AV_CODEC_ID_FFV1,
};

bool video_ffmpeg_available(void) { return true; }

typedef struct ff_io {
    const video_source *src;
    int64_t pos;
} ff_io;

typedef struct ff {
    AVFormatContext *fmt;
    AVIOContext *avio;
    AVCodecContext *dec;
    struct SwsContext *sws;
    AVPacket *pkt;
    AVFrame *frame;
    AVStream *st;
    ff_io io;
    const video_job *job;
    int64_t start;        /* the stream's first timestamp, stream time base */
    double tb;            /* seconds per time-base unit */
    int64_t width, height; /* decoded, before rotation */
    bool seekable;        /* the container has an index to seek by */
} ff;

static int io_read(void *opaque, uint8_t *buf, int n) {
    ff_io *io = opaque;
    const video_source *s = io->src;
    if (io->pos >= s->size) return AVERROR_EOF;
    if ((int64_t)n > s->size - io->pos) n = (int)(s->size - io->pos);
    if (s->fd < 0) {
        memcpy(buf, s->data + io->pos, (size_t)n);
    } else {
        ssize_t got;
        do got = pread(s->fd, buf, (size_t)n, (off_t)io->pos);
        while (got < 0 && errno == EINTR);
        if (got < 0) return AVERROR(errno);
        if (got == 0) return AVERROR_EOF;
        n = (int)got;
    }
    io->pos += n;
    return n;
}

static int64_t io_seek(void *opaque, int64_t off, int whence) {
    ff_io *io = opaque;
    if (whence & AVSEEK_SIZE) return io->src->size;
    whence &= ~AVSEEK_FORCE;
    int64_t pos = whence == SEEK_SET ? off : whence == SEEK_CUR ? io->pos + off
                : whence == SEEK_END ? io->src->size + off : -1;
    if (pos < 0 || pos > io->src->size) return AVERROR(EINVAL);
    io->pos = pos;
    return pos;
}

static int interrupted(void *opaque) {
    const video_job *job = opaque;
    if (job->caps.stop.should_stop && job->caps.stop.should_stop(job->caps.stop.arg)) return 1;
    return video_now() > job->deadline;
}

/* FFmpeg logs to stderr by default; a library reports through qvl_error only. */
static void quiet_logs(void) { av_log_set_level(AV_LOG_QUIET); }

static void ff_close(ff *f) {
    sws_freeContext(f->sws);
    avcodec_free_context(&f->dec);
    avformat_close_input(&f->fmt);
    if (f->avio) av_freep(&f->avio->buffer);
    avio_context_free(&f->avio);
    av_packet_free(&f->pkt);
    av_frame_free(&f->frame);
    const video_job *job = f->job;
    memset(f, 0, sizeof *f);
    f->job = job;
}

static qvl_status av_fail(const ff *f, int ret, const char *doing, qvl_error *err) {
    if (interrupted((void *)f->job)) return video_check_time(f->job, err);
    char buf[AV_ERROR_MAX_STRING_SIZE] = "";
    av_strerror(ret, buf, sizeof buf);
    return qvl_fail(err, ret == AVERROR(ENOMEM) ? QVL_E_NOMEM : QVL_E_PARSE, "%s: %s: %s",
                    f->job->what, doing, buf);
}

static bool codec_allowed(enum AVCodecID id) {
    for (size_t i = 0; i < sizeof ff_codecs / sizeof ff_codecs[0]; i++)
        if (ff_codecs[i] == id) return true;
    return false;
}

/* Open the container and the decoder of its best video stream. */
static qvl_status ff_open(ff *f, const video_source *src, qvl_error *err) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, quiet_logs);
    const video_job *job = f->job;
    f->io = (ff_io){.src = src, .pos = 0};
    uint8_t *buffer = av_malloc(FF_IO_BUFFER);
    f->fmt = avformat_alloc_context();
    f->pkt = av_packet_alloc();
    f->frame = av_frame_alloc();
    if (buffer)
        f->avio = avio_alloc_context(buffer, FF_IO_BUFFER, 0, &f->io, io_read, NULL, io_seek);
    if (!f->avio) av_free(buffer);
    if (!f->fmt || !f->avio || !f->pkt || !f->frame)
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", job->what);
    f->fmt->pb = f->avio;
    f->fmt->interrupt_callback = (AVIOInterruptCB){interrupted, (void *)job};
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "format_whitelist", FF_FORMATS, 0);
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
    int ret = avformat_open_input(&f->fmt, NULL, NULL, &opts);
    av_dict_free(&opts);
    if (ret < 0) {
        /* EINVAL: a format FFmpeg knows but the whitelist leaves out (a PNG, a playlist). */
        if (ret == AVERROR_INVALIDDATA || ret == AVERROR(EINVAL))
            return qvl_fail(err, QVL_E_PARSE, "%s: not a video file qvl reads (MP4/MOV, MKV/WebM, "
                            "AVI, GIF or WebP)", job->what);
        return av_fail(f, ret, "cannot open", err);
    }
    if ((ret = avformat_find_stream_info(f->fmt, NULL)) < 0)
        return av_fail(f, ret, "cannot read the stream headers", err);
    const AVCodec *codec = NULL;
    ret = av_find_best_stream(f->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (ret < 0 || !codec) {
        if (ret >= 0 || ret == AVERROR_DECODER_NOT_FOUND)
            return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: no decoder for its video codec",
                            job->what);
        return qvl_fail(err, QVL_E_PARSE, "%s: no video stream", job->what);
    }
    f->st = f->fmt->streams[ret];
    if (!codec_allowed(f->st->codecpar->codec_id))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: video codec %s is not one qvl decodes "
                        "(H.264, HEVC, VP8, VP9, AV1, MPEG-4, MPEG-2, MJPEG, GIF, PNG, FFV1)",
                        job->what, codec->name);
    f->width = f->st->codecpar->width;
    f->height = f->st->codecpar->height;
    qvl_status st = video_check_size(job, f->width, f->height, err);
    if (st != QVL_OK) return st;
    f->dec = avcodec_alloc_context3(codec);
    if (!f->dec) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", job->what);
    if ((ret = avcodec_parameters_to_context(f->dec, f->st->codecpar)) < 0)
        return av_fail(f, ret, "bad codec parameters", err);
    /* The decoder refuses any frame over the cap, whatever the container said. */
    f->dec->max_pixels = job->caps.max_pixels;
    f->dec->thread_count = 0;
    if ((ret = avcodec_open2(f->dec, codec, NULL)) < 0)
        return av_fail(f, ret, "cannot open the decoder", err);
    f->tb = av_q2d(f->st->time_base);
    f->start = f->st->start_time != AV_NOPTS_VALUE ? f->st->start_time : 0;
    f->seekable = avformat_index_get_entries_count(f->st) > 1 && f->tb > 0;
    return QVL_OK;
}

/* Clockwise degrees the display matrix turns the picture (0 without one; flips ignored). */
static int rotation_of(const AVStream *st) {
    const uint8_t *m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, NULL);
    if (!m) return 0;
    const double a = -av_display_rotation_get((const int32_t *)m);
    if (!isfinite(a)) return 0;
    int r = (int)lround(a / 90.0) * 90 % 360;
    return r < 0 ? r + 360 : r;
}

/* The average frame rate (PyAV's average_rate), else the base rate. */
static double rate_of(const AVStream *st) {
    if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0) return av_q2d(st->avg_frame_rate);
    if (st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0) return av_q2d(st->r_frame_rate);
    return 0;
}

/* The declared duration in seconds (stream, else container; not one guessed from the bitrate),
 * or -1. */
static double declared_duration(const ff *f) {
    if (f->st->duration != AV_NOPTS_VALUE && f->st->duration > 0) return f->st->duration * f->tb;
    if (f->fmt->duration != AV_NOPTS_VALUE && f->fmt->duration > 0 &&
        f->fmt->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE)
        return (double)f->fmt->duration / AV_TIME_BASE;
    return -1;
}

/* Frames of the stream counted by demuxing alone (no decoding), when the container declares
 * neither a count nor a duration (a GIF). Stops past the frame cap. */
static qvl_status count_packets(ff *f, int64_t *n, qvl_error *err) {
    *n = 0;
    for (;;) {
        qvl_status st = video_check_time(f->job, err);
        if (st != QVL_OK) return st;
        int ret = av_read_frame(f->fmt, f->pkt);
        if (ret == AVERROR_EOF) return QVL_OK;
        if (ret < 0) return av_fail(f, ret, "cannot read the stream", err);
        *n += f->pkt->stream_index == f->st->index;
        av_packet_unref(f->pkt);
        if (*n > f->job->caps.max_frames) return QVL_OK; /* video_plan refuses it */
    }
}

/* The frame in f->frame as RGB (rotated) into img. */
static qvl_status convert(ff *f, int rotation, qvl_image *img, qvl_error *err) {
    const AVFrame *fr = f->frame;
    if (fr->width != f->width || fr->height != f->height)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: the frame size changes mid-stream (%lldx%lld "
                        "to %dx%d)", f->job->what, (long long)f->width, (long long)f->height,
                        fr->width, fr->height);
    enum AVPixelFormat pf = fr->format;
    int full = fr->color_range == AVCOL_RANGE_JPEG;
    /* The deprecated full-range formats: the same layout with the range said separately. */
    switch (pf) {
    case AV_PIX_FMT_YUVJ420P: pf = AV_PIX_FMT_YUV420P; full = 1; break;
    case AV_PIX_FMT_YUVJ422P: pf = AV_PIX_FMT_YUV422P; full = 1; break;
    case AV_PIX_FMT_YUVJ444P: pf = AV_PIX_FMT_YUV444P; full = 1; break;
    case AV_PIX_FMT_YUVJ440P: pf = AV_PIX_FMT_YUV440P; full = 1; break;
    default: break;
    }
    f->sws = sws_getCachedContext(f->sws, fr->width, fr->height, pf, fr->width, fr->height,
                                  AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
    if (!f->sws)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: cannot convert pixel format %s to RGB",
                        f->job->what, av_get_pix_fmt_name(fr->format));
    /* The frame's own matrix (sws_getCoefficients maps unspecified to BT.601) and range; RGB
     * sources ignore this (the call then fails harmlessly). */
    sws_setColorspaceDetails(f->sws, sws_getCoefficients(fr->colorspace), full,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    const size_t row = (size_t)fr->width * 3;
    img->rgb = malloc(row * (size_t)fr->height);
    if (!img->rgb) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", f->job->what);
    img->width = fr->width;
    img->height = fr->height;
    uint8_t *dst[4] = {img->rgb, NULL, NULL, NULL};
    int stride[4] = {(int)row, 0, 0, 0};
    if (sws_scale(f->sws, (const uint8_t *const *)fr->data, fr->linesize, 0, fr->height, dst,
                  stride) != fr->height)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: RGB conversion failed", f->job->what);
    return qvl_image_apply_orientation(img, video_rotation_orientation(rotation), err);
}

/* Seek when the key frame at or before `target` comes after frame `last` and after the key
 * frame of the last seek (*key_at; the decoder may not have output a frame since), so that
 * seeking never repeats or lengthens work. */
static void maybe_seek(ff *f, int64_t target, int64_t last, double fps, int64_t *key_at,
                       bool *seeked) {
    if (!f->seekable) return;
    const int64_t ts = f->start + llround((double)target / fps / f->tb);
    const AVIndexEntry *e = avformat_index_get_entry_from_timestamp(f->st, ts, AVSEEK_FLAG_BACKWARD);
    if (!e) return;
    const int64_t key = llround((double)(e->timestamp - f->start) * f->tb * fps);
    if (key <= last + 1 || key <= *key_at) return;
    /* A failed seek leaves the position alone: decoding on from there is slower, not wrong. */
    if (av_seek_frame(f->fmt, f->st->index, e->timestamp, AVSEEK_FLAG_BACKWARD) < 0) return;
    avcodec_flush_buffers(f->dec);
    *key_at = key;
    *seeked = true;
}

/* One pass over the kept indices. *n_seen: frames the stream turned out to hold when it ended
 * before the last kept one (else untouched). */
static qvl_status ff_pass(ff *f, const int64_t *idx, int64_t n_kept, double fps, int rotation,
                          qvl_video_frames *out, bool *ended_early, int64_t *n_seen,
                          qvl_error *err) {
    int64_t k = 0, count = 0, last = -1, bad = 0, key_at = -1;
    bool seeked = false, draining = false;
    qvl_status st = QVL_OK;
    *ended_early = false;
    while (st == QVL_OK && k < n_kept) {
        if ((st = video_check_time(f->job, err)) != QVL_OK) break;
        if (!draining) maybe_seek(f, idx[k], last, fps, &key_at, &seeked);
        int ret = 0;
        if (!draining) {
            ret = av_read_frame(f->fmt, f->pkt);
            if (ret == AVERROR_EOF || ret == AVERROR(EIO) || ret == AVERROR_INVALIDDATA) {
                draining = true; /* a truncated file ends here too */
                ret = avcodec_send_packet(f->dec, NULL);
            } else if (ret < 0) {
                st = av_fail(f, ret, "cannot read the stream", err);
                break;
            } else if (f->pkt->stream_index != f->st->index) {
                av_packet_unref(f->pkt);
                continue;
            } else {
                /* A frame shown before the target is never kept: when nothing refers to it
                 * either (a B-frame), the decoder may skip it. Only with timestamps, which
                 * then give every index. */
                const int64_t pts = f->pkt->pts;
                f->dec->skip_frame =
                    f->seekable && pts != AV_NOPTS_VALUE &&
                            llround((double)(pts - f->start) * f->tb * fps) < idx[k]
                        ? AVDISCARD_NONREF
                        : AVDISCARD_DEFAULT;
                ret = avcodec_send_packet(f->dec, f->pkt);
                av_packet_unref(f->pkt);
                if (ret < 0 && ret != AVERROR(EAGAIN) && ++bad > FF_MAX_BAD_PACKETS) {
                    st = av_fail(f, ret, "the video stream is corrupt", err);
                    break;
                }
            }
        }
        for (;;) { /* every frame the decoder has ready */
            ret = avcodec_receive_frame(f->dec, f->frame);
            if (ret == AVERROR(EAGAIN)) break;
            if (ret == AVERROR_EOF) {
                *ended_early = true;
                *n_seen = last + 1;
                return QVL_OK;
            }
            if (ret < 0) {
                if (++bad > FF_MAX_BAD_PACKETS) return av_fail(f, ret, "the video stream is corrupt", err);
                if (draining) break;
                continue;
            }
            const int64_t pts = f->frame->best_effort_timestamp;
            int64_t i = count++;
            if (pts != AV_NOPTS_VALUE && f->tb > 0)
                i = llround((double)(pts - f->start) * f->tb * fps);
            else if (seeked)
                i = last + 1; /* no timestamps after a seek: count on from where it landed */
            if (i < 0) i = 0;
            if (i > last) last = i;
            const int64_t first = k;
            while (k < n_kept && idx[k] <= i && st == QVL_OK) {
                qvl_image *img = &out->frames[k];
                if (k == first) {
                    st = convert(f, rotation, img, err);
                } else { /* one frame stands for several indices */
                    const size_t bytes = (size_t)out->frames[first].width *
                                         (size_t)out->frames[first].height * 3;
                    *img = out->frames[first];
                    img->rgb = malloc(bytes);
                    if (img->rgb) memcpy(img->rgb, out->frames[first].rgb, bytes);
                    else st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", f->job->what);
                }
                out->indices[k] = idx[k];
                out->seconds[k] = pts != AV_NOPTS_VALUE ? (double)(pts - f->start) * f->tb
                                                        : (double)i / fps;
                out->n = ++k;
            }
            av_frame_unref(f->frame);
            if (st != QVL_OK || k == n_kept) break;
        }
        if (draining && k < n_kept && st == QVL_OK) {
            *ended_early = true;
            *n_seen = last + 1;
            return QVL_OK;
        }
    }
    return st;
}

/* The stream's declared frame count: the container's, else duration x rate, else counted. */
static qvl_status frame_count(ff *f, const video_source *src, double fps, int64_t *n,
                              qvl_error *err) {
    const double dur = declared_duration(f);
    char hint[96];
    if (dur > f->job->caps.max_duration_s)
        return qvl_fail(err, QVL_E_LIMIT, "%s: lasts %.0f s, over %.0f s (%s)", f->job->what, dur,
                        f->job->caps.max_duration_s,
                        video_cap_hint(f->job->caps.duration_flag, hint, sizeof hint));
    if (f->st->nb_frames > 0) {
        *n = f->st->nb_frames;
        return QVL_OK;
    }
    if (dur > 0) {
        *n = llround(dur * fps);
        return QVL_OK;
    }
    qvl_status st = count_packets(f, n, err);
    if (st != QVL_OK) return st;
    ff_close(f);
    return ff_open(f, src, err);
}

qvl_status video_ffmpeg_decode(const video_source *src, const video_job *job,
                               qvl_video_frames *out, qvl_error *err) {
    ff f = {.job = job};
    qvl_status st = ff_open(&f, src, err);
    double fps = 0;
    int64_t n_total = 0, *idx = NULL, n_kept = 0;
    if (st == QVL_OK) {
        fps = rate_of(f.st);
        if (!(fps > 0)) st = qvl_fail(err, QVL_E_PARSE, "%s: the stream declares no frame rate",
                                      job->what);
    }
    if (st == QVL_OK) st = frame_count(&f, src, fps, &n_total, err);
    const int rotation = st == QVL_OK ? rotation_of(f.st) : 0;
    for (int pass = 0; st == QVL_OK; pass++) {
        st = video_plan(job, n_total, fps, f.width, f.height, &idx, &n_kept, err);
        if (st == QVL_OK) st = video_frames_alloc(out, n_kept, err);
        if (st != QVL_OK) break;
        snprintf(out->container, sizeof out->container, "%.*s",
                 (int)strcspn(f.fmt->iformat->name, ","), f.fmt->iformat->name);
        snprintf(out->codec, sizeof out->codec, "%s", f.dec->codec->name);
        out->fps = fps;
        out->n_total = n_total;
        out->rotation = rotation;
        const bool turned = rotation == 90 || rotation == 270;
        out->width = (int32_t)(turned ? f.height : f.width);
        out->height = (int32_t)(turned ? f.width : f.height);
        bool early = false;
        int64_t seen = 0;
        st = ff_pass(&f, idx, n_kept, fps, rotation, out, &early, &seen, err);
        free(idx);
        idx = NULL;
        if (st != QVL_OK || !early) break;
        /* Within rounding of the declared count: sample again from the true one. */
        const int64_t slack = n_total / 100 > 2 ? n_total / 100 : 2;
        if (pass > 0 || seen < 1 || seen < n_total - slack) {
            st = qvl_fail(err, QVL_E_PARSE, "%s: the stream ends after %lld frames but declares "
                          "%lld (truncated, or its index lies)", job->what, (long long)seen,
                          (long long)n_total);
            break;
        }
        qvl_video_frames_free(out);
        n_total = seen;
        ff_close(&f);
        st = ff_open(&f, src, err);
    }
    free(idx);
    ff_close(&f);
    return st;
}
