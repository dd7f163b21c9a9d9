/* Fuzz target: video decoding from memory (qvl_video_decode_memory): FFmpeg's demuxers and
 * decoders behind qvl's whitelist, custom reader, caps, seeking and RGB conversion, and the
 * animated WebP path through libwebp.
 *
 * The caps are small so that every input stays fast: frames of at most 1 Mpixel, 64 MiB of kept
 * frames, 4096 declared frames, 10 s of decoding. The pick callback keeps frames chosen by the
 * input's last byte: every frame, the first and last, or every third (so that the seeking path
 * runs). Checked: a refusal is one line with nothing left allocated; a decode gives its kept
 * frames in increasing index order inside the declared count, all of the reported upright size
 * within the caps, with finite non-negative timestamps. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "qvl/video_decode.h"

typedef struct pick_mode {
    int mode;
    int64_t asked_total;
} pick_mode;

static qvl_status pick(void *arg, int64_t n_total, double fps, int64_t *idx, int64_t *n,
                       qvl_error *err) {
    (void)err;
    pick_mode *p = arg;
    FUZZ_CHECK(n_total >= 1 && fps > 0 && isfinite(fps));
    p->asked_total = n_total;
    *n = 0;
    if (p->mode == 0) {
        for (int64_t i = 0; i < n_total; i++) idx[(*n)++] = i;
    } else if (p->mode == 1) {
        idx[(*n)++] = 0;
        if (n_total > 1) idx[(*n)++] = n_total - 1;
    } else {
        for (int64_t i = 1; i < n_total; i += 3) idx[(*n)++] = i;
        if (*n == 0) idx[(*n)++] = 0;
    }
    return QVL_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_video_caps caps;
    qvl_video_caps_default(&caps);
    caps.max_pixels = 1 << 20;
    caps.max_bytes = 64LL << 20;
    caps.max_frames = 4096;
    caps.max_seconds = 10;
    pick_mode p = {.mode = size > 0 ? data[size - 1] % 3 : 0};
    qvl_video_frames v;
    qvl_error err = {0};
    const qvl_status s = qvl_video_decode_memory(data, size, "fuzz", &caps, pick, &p, &v, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(v.frames == NULL && v.indices == NULL && v.seconds == NULL && v.n == 0);
        return 0;
    }
    FUZZ_CHECK(v.n >= 1 && v.n <= v.n_total && v.n_total <= caps.max_frames);
    FUZZ_CHECK(v.n_total <= p.asked_total); /* a second pass samples a smaller true count */
    FUZZ_CHECK(v.width > 0 && v.height > 0 && (int64_t)v.width * v.height <= caps.max_pixels);
    FUZZ_CHECK(v.rotation == 0 || v.rotation == 90 || v.rotation == 180 || v.rotation == 270);
    FUZZ_CHECK(v.fps > 0 && isfinite(v.fps));
    FUZZ_CHECK((double)v.n * v.width * v.height * 3 <= (double)caps.max_bytes);
    unsigned sum = 0;
    for (int64_t k = 0; k < v.n; k++) {
        FUZZ_CHECK(v.indices[k] >= 0 && v.indices[k] < v.n_total);
        FUZZ_CHECK(k == 0 || v.indices[k] > v.indices[k - 1]);
        FUZZ_CHECK(isfinite(v.seconds[k]));
        const qvl_image *f = &v.frames[k];
        FUZZ_CHECK(f->rgb != NULL && f->width == v.width && f->height == v.height);
        for (size_t i = 0; i < (size_t)f->width * (size_t)f->height * 3; i += 61) sum += f->rgb[i];
    }
    qvl_video_frames_free(&v);
    FUZZ_CHECK(v.frames == NULL && v.n == 0);
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}
