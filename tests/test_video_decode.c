/* qvl_video_decode_file / _memory on the committed clips (tests/fixtures/videos/files, made by
 * scripts/make_video_clips.sh): every container and codec pair gives its 10 frames at 8 fps,
 * each equal to the PNG frame FFmpeg's own decoder and conversion gave (exactly for the RGB
 * codecs, within a stated bound for the YUV ones); the display matrix's rotation; sampled
 * frames equal the same frames of a full decode (the seeking path); the memory API equals the
 * file API; the caps and the hostile files each give one error line. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/file.h"
#include "qvl/image.h"
#include "qvl/video_decode.h"

#define CLIPS QVL_SOURCE_DIR "/tests/fixtures/videos/files/"

/* The largest difference of one RGB byte between qvl's conversion and the ffmpeg tool's for the
 * YUV clips: none. Both run swscale's bilinear conversion with the stream's matrix and range on
 * the same decoded picture (the tool through its filter graph, rotation before conversion). */
#define YUV_MAX_DIFF 0

typedef struct clip {
    const char *name;
    int max_diff; /* 0: lossless in RGB */
    int32_t width, height;
    int rotation;
    double fps;
} clip;

static const clip clips[] = {
    {"h264.mp4", YUV_MAX_DIFF, 64, 48, 0, 8.0},
    {"vp9.webm", YUV_MAX_DIFF, 64, 48, 0, 8.0},
    {"mjpeg.avi", YUV_MAX_DIFF, 64, 48, 0, 8.0},
    {"rot90.mov", YUV_MAX_DIFF, 48, 64, 90, 8.0},
    {"ffv1.mkv", 0, 64, 48, 0, 8.0},
    {"png.mov", 0, 64, 48, 0, 8.0},
    {"anim.gif", 0, 64, 48, 0, 95.0 / 12.0},
    {"anim.webp", 0, 64, 48, 0, 8.0},
};

static int frame_diff(const qvl_image *a, const qvl_image *b) {
    assert_int_equal(a->width, b->width);
    assert_int_equal(a->height, b->height);
    int worst = 0;
    for (size_t i = 0; i < (size_t)a->width * (size_t)a->height * 3; i++) {
        const int d = abs((int)a->rgb[i] - (int)b->rgb[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static void decode_all(const char *name, qvl_video_frames *v) {
    qvl_error err = {0};
    const qvl_status st = qvl_video_decode_file(name, NULL, NULL, NULL, v, &err);
    if (st != QVL_OK) fail_msg("%s: %s", name, err.msg);
}

static void test_each_clip_matches_its_frames(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof clips / sizeof clips[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, CLIPS "%s", clips[c].name);
        qvl_video_frames v;
        decode_all(path, &v);
        assert_int_equal(v.n, 10);
        assert_int_equal(v.n_total, 10);
        assert_true(v.fps > clips[c].fps - 1e-9 && v.fps < clips[c].fps + 1e-9);
        assert_int_equal(v.width, clips[c].width);
        assert_int_equal(v.height, clips[c].height);
        assert_int_equal(v.rotation, clips[c].rotation);
        int worst = 0;
        for (int64_t k = 0; k < v.n; k++) {
            assert_int_equal(v.indices[k], k);
            char png[600];
            snprintf(png, sizeof png, CLIPS "%s.frames/%03d.png", clips[c].name, (int)k + 1);
            qvl_image want;
            qvl_error err = {0};
            if (qvl_image_load(png, &want, &err) != QVL_OK) fail_msg("%s", err.msg);
            const int d = frame_diff(&v.frames[k], &want);
            if (d > worst) worst = d;
            qvl_image_free(&want);
        }
        print_message("%s: largest byte difference %d\n", clips[c].name, worst);
        if (worst > clips[c].max_diff)
            fail_msg("%s: a byte differs by %d from FFmpeg's frames (bound %d)", clips[c].name,
                     worst, clips[c].max_diff);
        /* Timestamps: frame k of a constant-rate clip at k / 8 s (the GIF's delays are 1/8 s
         * rounded to centiseconds). */
        for (int64_t k = 0; k < v.n; k++)
            assert_true(v.seconds[k] > k / 8.0 - 0.02 && v.seconds[k] < k / 8.0 + 0.02);
        qvl_video_frames_free(&v);
    }
}

typedef struct picks {
    int64_t idx[8];
    int64_t n;
    int64_t seen_total;
    double seen_fps;
} picks;

/* The first and the last frame, whatever the count. */
static qvl_status pick_ends(void *arg, int64_t n_total, double fps, int64_t *idx, int64_t *n,
                            qvl_error *err) {
    (void)arg;
    (void)fps;
    (void)err;
    idx[0] = 0;
    idx[1] = n_total - 1;
    *n = n_total > 1 ? 2 : 1;
    return QVL_OK;
}

static qvl_status pick_some(void *arg, int64_t n_total, double fps, int64_t *idx, int64_t *n,
                            qvl_error *err) {
    (void)err;
    picks *p = arg;
    p->seen_total = n_total;
    p->seen_fps = fps;
    memcpy(idx, p->idx, (size_t)p->n * sizeof *idx);
    *n = p->n;
    return QVL_OK;
}

/* Frames 1, 6 and 9 (key frames every 4: the decoder seeks to 4 and 8) are the full decode's. */
static void test_sampled_frames_equal_full_decode(void **state) {
    (void)state;
    static const char *const names[] = {"h264.mp4", "vp9.webm", "mjpeg.avi", "ffv1.mkv",
                                        "anim.gif", "anim.webp", "rot90.mov"};
    for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, CLIPS "%s", names[c]);
        qvl_video_frames all, some;
        decode_all(path, &all);
        picks p = {.idx = {1, 6, 9}, .n = 3};
        qvl_error err = {0};
        if (qvl_video_decode_file(path, NULL, pick_some, &p, &some, &err) != QVL_OK)
            fail_msg("%s: %s", names[c], err.msg);
        assert_int_equal(p.seen_total, 10);
        assert_int_equal(some.n, 3);
        for (int64_t k = 0; k < 3; k++) {
            assert_int_equal(some.indices[k], p.idx[k]);
            if (frame_diff(&some.frames[k], &all.frames[p.idx[k]]) != 0)
                fail_msg("%s: sampled frame %lld differs from the full decode's", names[c],
                         (long long)p.idx[k]);
        }
        qvl_video_frames_free(&all);
        qvl_video_frames_free(&some);
    }
}

static void test_memory_equals_file(void **state) {
    (void)state;
    char *data = NULL;
    size_t size = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(CLIPS "vp9.webm", 1 << 20, QVL_E_IO, &data, &size, &err),
                     QVL_OK);
    qvl_video_frames a, b;
    decode_all(CLIPS "vp9.webm", &a);
    assert_int_equal(qvl_video_decode_memory(data, size, "upload", NULL, NULL, NULL, &b, &err),
                     QVL_OK);
    assert_int_equal(a.n, b.n);
    for (int64_t k = 0; k < a.n; k++) assert_int_equal(frame_diff(&a.frames[k], &b.frames[k]), 0);
    qvl_video_frames_free(&a);
    qvl_video_frames_free(&b);
    free(data);
}

/* One line, naming the source and holding `want`; nothing left allocated. */
static void expect_error(qvl_status st, const qvl_error *err, const qvl_video_frames *v,
                         const char *what, const char *want) {
    if (st == QVL_OK) fail_msg("%s: decoded, want an error with '%s'", what, want);
    if (!strstr(err->msg, what) || !strstr(err->msg, want) || strchr(err->msg, '\n'))
        fail_msg("want one line with '%s' and '%s', got '%s'", what, want, err->msg);
    assert_null(v->frames);
    assert_int_equal(v->n, 0);
}

static void test_hostile_files(void **state) {
    (void)state;
    static const struct {
        const char *name, *want;
    } cases[] = {
        {"huge.gif", "frame size"},          /* 16384x16384: over FFmpeg's own limit */
        {"big.gif", "exceed"},               /* 10000x10000: over the pixel cap */
        {"lying.avi", "declares 50000"},     /* 10 frames, the index says 50000 */
        {"ten_hours.avi", "lasts 36000 s"},  /* the index says 10 hours */
        {"truncated.mp4", "truncated"},      /* the data cut a third short */
        {"h264.mp4.frames/001.png", "not a video file"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, CLIPS "%s", cases[c].name);
        qvl_video_frames v;
        qvl_error err = {0};
        const qvl_status st = qvl_video_decode_file(path, NULL, pick_ends, NULL, &v, &err);
        expect_error(st, &err, &v, cases[c].name, cases[c].want);
    }
    qvl_video_frames v;
    qvl_error err = {0};
    expect_error(qvl_video_decode_file(CLIPS, NULL, NULL, NULL, &v, &err), &err, &v, CLIPS,
                 "not a regular file");
    expect_error(qvl_video_decode_file(CLIPS "absent.mp4", NULL, NULL, NULL, &v, &err), &err, &v,
                 "absent.mp4", "cannot open");
    static const char junk[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    expect_error(qvl_video_decode_memory(junk, sizeof junk, "junk", NULL, NULL, NULL, &v, &err),
                 &err, &v, "junk", "not a video file");
}

static bool always_stop(void *arg) {
    (void)arg;
    return true;
}

static void test_caps(void **state) {
    (void)state;
    qvl_video_frames v;
    qvl_error err = {0};
    qvl_video_caps caps;
    qvl_video_caps_default(&caps);
    caps.max_duration_s = 1.0; /* the clips last 1.25 s */
    expect_error(qvl_video_decode_file(CLIPS "h264.mp4", &caps, NULL, NULL, &v, &err), &err, &v,
                 "h264.mp4", "over 1 s");
    qvl_video_caps_default(&caps);
    caps.max_bytes = 64 * 48 * 3 * 9; /* nine frames' bytes; ten are kept */
    expect_error(qvl_video_decode_file(CLIPS "ffv1.mkv", &caps, NULL, NULL, &v, &err), &err, &v,
                 "ffv1.mkv", "10 kept frames of 64x48");
    qvl_video_caps_default(&caps);
    caps.max_frames = 9;
    expect_error(qvl_video_decode_file(CLIPS "anim.webp", &caps, NULL, NULL, &v, &err), &err, &v,
                 "anim.webp", "declares 10 frames");
    qvl_video_caps_default(&caps);
    caps.max_pixels = 64 * 47;
    expect_error(qvl_video_decode_file(CLIPS "vp9.webm", &caps, NULL, NULL, &v, &err), &err, &v,
                 "vp9.webm", "exceed 3008 pixels");
    qvl_video_caps_default(&caps);
    caps.max_seconds = 1e-9; /* over before the first packet */
    expect_error(qvl_video_decode_file(CLIPS "mjpeg.avi", &caps, NULL, NULL, &v, &err), &err, &v,
                 "mjpeg.avi", "took over");
    qvl_video_caps_default(&caps);
    caps.stop = (qvl_image_stop){always_stop, NULL};
    expect_error(qvl_video_decode_file(CLIPS "png.mov", &caps, NULL, NULL, &v, &err), &err, &v,
                 "png.mov", "decoding stopped");
    expect_error(qvl_video_decode_file(CLIPS "anim.webp", &caps, NULL, NULL, &v, &err), &err, &v,
                 "anim.webp", "decoding stopped");
}

/* A build without FFmpeg: an MP4 gets the line saying how to get it; WebP still decodes. */
static void test_without_ffmpeg(void **state) {
    (void)state;
    qvl_video_frames v;
    qvl_error err = {0};
    expect_error(qvl_video_decode_file(CLIPS "h264.mp4", NULL, NULL, NULL, &v, &err), &err, &v,
                 "h264.mp4", "apt-get install libavformat-dev");
    decode_all(CLIPS "anim.webp", &v);
    assert_int_equal(v.n, 10);
    qvl_video_frames_free(&v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_clip_matches_its_frames),
        cmocka_unit_test(test_sampled_frames_equal_full_decode),
        cmocka_unit_test(test_memory_equals_file),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_caps),
    };
    const struct CMUnitTest without[] = {cmocka_unit_test(test_without_ffmpeg)};
    if (!qvl_video_decoder_available()) return cmocka_run_group_tests(without, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
