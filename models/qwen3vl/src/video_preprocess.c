/* The video processor of Qwen3-VL for frames already decoded (docs/MODEL.md, "Video
 * preprocessing"): frame sampling, the video smart_resize, temporal pairing, the pixel matrix,
 * and the timestamp text of each frame group. */
#include "qvl/video_preprocess.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patch_pack.h"
#include "qvl/checked.h"

#define VIDEO_PAD "<|video_pad|>"
#define VIDEO_PART "<|vision_start|>" VIDEO_PAD "<|vision_end|>"

/* Python's round() and numpy's round(): half to even. */
static double round_half_even(double x) {
    double r = floor(x), diff = x - r;
    if (diff > 0.5) return r + 1.0;
    if (diff < 0.5) return r;
    return fmod(r, 2.0) == 0.0 ? r : r + 1.0;
}

/* ---- which frames ------------------------------------------------------------------------- */

qvl_status qvl_video_sample_frames(int64_t n_total, double video_fps, const qvl_video_config *vc,
                                   int64_t *idx, int64_t *n_out, qvl_error *err) {
    *n_out = 0;
    if (n_total < 1) return qvl_fail(err, QVL_E_INVALID, "video: no frames");
    if (!(video_fps > 0.0) || !isfinite(video_fps))
        return qvl_fail(err, QVL_E_INVALID, "video: frame rate %g is not positive", video_fps);
    int64_t n = n_total;
    if (vc->do_sample_frames) {
        /* int(total / video_fps * fps): truncation, then clamped to [min, max] and to total. */
        double want = (double)n_total / video_fps * vc->fps;
        n = want >= (double)INT64_MAX ? INT64_MAX : (int64_t)want;
        if (n < vc->min_frames) n = vc->min_frames;
        if (n > vc->max_frames) n = vc->max_frames;
        if (n > n_total) n = n_total;
    }
    if (n < 1) return qvl_fail(err, QVL_E_INVALID, "video: no frames to keep");
    /* numpy.linspace(0, total - 1, n): i * step, the last value exactly total - 1; rounded
     * half to even. */
    const double stop = (double)(n_total - 1);
    const double step = n > 1 ? stop / (double)(n - 1) : 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = (n > 1 && i == n - 1) ? stop : (double)i * step;
        idx[i] = (int64_t)round_half_even(v);
    }
    *n_out = n;
    return QVL_OK;
}

/* ---- size ----------------------------------------------------------------------------------- */

/* a * b * c > limit, exactly (a product past int64 is larger than any limit). */
static bool product_over(int64_t a, int64_t b, int64_t c, int64_t limit) {
    int64_t p;
    if (!qvl_mul_i64(a, b, &p) || !qvl_mul_i64(p, c, &p)) return true;
    return p > limit;
}

static bool product_under(int64_t a, int64_t b, int64_t c, int64_t limit) {
    int64_t p;
    if (!qvl_mul_i64(a, b, &p) || !qvl_mul_i64(p, c, &p)) return false;
    return p < limit;
}

/* The video smart_resize: like the image one, but a side below the factor first scales the
 * frame up, and the bounds hold the frames' pixels together (t rounded to whole groups). */
static qvl_status video_smart_resize(int64_t frames, int64_t height, int64_t width,
                                     const qvl_video_config *vc, int64_t *out_h, int64_t *out_w,
                                     qvl_error *err) {
    const qvl_preprocess_config *pc = &vc->pc;
    const int64_t tf = pc->temporal_patch_size, fi = pc->patch_size * pc->merge_size;
    if (frames < tf)
        return qvl_fail(err, QVL_E_INVALID,
                        "video: %lld frame(s) kept, at least %lld needed (one temporal patch)",
                        (long long)frames, (long long)tf);
    if (height < 1 || width < 1 || height > ((int64_t)1 << 30) || width > ((int64_t)1 << 30))
        return qvl_fail(err, QVL_E_LIMIT, "video: frame size %lldx%lld is not usable",
                        (long long)width, (long long)height);
    int64_t min_px = pc->min_pixels, max_px = pc->max_pixels;
    if (vc->cap_pixels_per_frame) {
        int64_t cap = vc->max_video_tokens * fi * fi, share = max_px / frames;
        int64_t per = cap < share ? cap : share;
        int64_t floor_px = (int64_t)((double)min_px * 1.05);
        if (per < floor_px) per = floor_px;
        if (!qvl_mul_i64(per, frames, &max_px))
            return qvl_fail(err, QVL_E_LIMIT, "video: pixel budget overflows");
    }
    if (min_px < 1 || max_px < min_px)
        return qvl_fail(err, QVL_E_INVALID, "video: min pixels %lld, max pixels %lld do not fit",
                        (long long)min_px, (long long)max_px);
    const double f = (double)fi;
    double H = (double)height, W = (double)width;
    if (height < fi || width < fi) { /* int(side * scale) */
        double scale = fmax(f / H, f / W);
        H = trunc(H * scale);
        W = trunc(W * scale);
    }
    const double lo = fmin(H, W), hi = fmax(H, W);
    if (hi / lo > (double)QVL_IMAGE_MAX_ASPECT)
        return qvl_fail(err, QVL_E_INVALID,
                        "video: absolute aspect ratio must be smaller than %d, got %g",
                        QVL_IMAGE_MAX_ASPECT, hi / lo);
    int64_t h_bar = (int64_t)(round_half_even(H / f) * f);
    int64_t w_bar = (int64_t)(round_half_even(W / f) * f);
    const int64_t t_bar = (int64_t)round_half_even((double)frames / (double)tf) * tf;
    const double volume = (double)frames * H * W;
    if (product_over(t_bar, h_bar, w_bar, max_px)) {
        double beta = sqrt(volume / (double)max_px);
        h_bar = (int64_t)fmax(f, floor(H / beta / f) * f);
        w_bar = (int64_t)fmax(f, floor(W / beta / f) * f);
    } else if (product_under(t_bar, h_bar, w_bar, min_px)) {
        double beta = sqrt((double)min_px / volume);
        h_bar = (int64_t)(ceil(H * beta / f) * f);
        w_bar = (int64_t)(ceil(W * beta / f) * f);
    }
    if (h_bar < fi || w_bar < fi || h_bar * w_bar > QVL_IMAGE_MAX_PIXELS)
        return qvl_fail(err, QVL_E_LIMIT, "video: resized frame size %lldx%lld is not usable",
                        (long long)w_bar, (long long)h_bar);
    *out_h = h_bar;
    *out_w = w_bar;
    return QVL_OK;
}

qvl_status qvl_video_plan_grid(int64_t n_frames, int64_t width, int64_t height,
                               const qvl_video_config *vc, qvl_image_grid *grid, qvl_error *err) {
    const qvl_preprocess_config *pc = &vc->pc;
    const int64_t p = pc->patch_size, tp = pc->temporal_patch_size, m = pc->merge_size;
    if (p < 1 || tp < 1 || m < 1)
        return qvl_fail(err, QVL_E_INVALID, "video preprocess: patch sizes must be positive");
    int64_t rh = 0, rw = 0;
    qvl_status st = video_smart_resize(n_frames, height, width, vc, &rh, &rw, err);
    if (st != QVL_OK) return st;
    *grid = (qvl_image_grid){.t = (n_frames + tp - 1) / tp, .h = rh / p, .w = rw / p};
    return QVL_OK;
}

qvl_status qvl_video_fit_grid(int64_t n_frames, int64_t width, int64_t height,
                              const qvl_video_config *vc, int64_t budget, qvl_video_fit *out,
                              qvl_error *err) {
    memset(out, 0, sizeof *out);
    qvl_video_config c = *vc;
    const int64_t merge = c.pc.merge_size, f = c.pc.patch_size * merge;
    /* Each round scales the pixel bound by budget / tokens: a few rounds settle it (the grid
     * moves in whole merge windows); 64 bounds a pathological config. */
    for (int round = 0; round < 64; round++) {
        qvl_image_grid g;
        qvl_status st = qvl_video_plan_grid(n_frames, width, height, &c, &g, err);
        if (st != QVL_OK) return st;
        *out = (qvl_video_fit){.grid = g, .tokens = g.t * g.h * g.w / (merge * merge),
                               .min_pixels = c.pc.min_pixels, .max_pixels = c.pc.max_pixels};
        if (out->tokens <= budget) {
            out->fits = true;
            return QVL_OK;
        }
        if (g.h * g.w <= merge * merge || c.pc.max_pixels <= f * f * c.pc.temporal_patch_size)
            break;
        int64_t next =
            (int64_t)((double)c.pc.max_pixels * (double)budget / (double)out->tokens) - 1;
        if (next >= c.pc.max_pixels) next = c.pc.max_pixels - 1;
        if (next < 1) next = 1;
        c.pc.max_pixels = next;
        if (c.pc.min_pixels > next) c.pc.min_pixels = next;
    }
    return QVL_OK;
}

/* ---- pixels --------------------------------------------------------------------------------- */

qvl_status qvl_video_preprocess(const qvl_image *frames, size_t n_frames,
                                const qvl_video_config *vc, float **pixels, qvl_image_grid *grid,
                                qvl_error *err) {
    *pixels = NULL;
    if (!frames || n_frames == 0 || !vc)
        return qvl_fail(err, QVL_E_INVALID, "video preprocess: no frames or config");
    const qvl_preprocess_config *pc = &vc->pc;
    for (size_t i = 0; i < n_frames; i++) {
        if (!frames[i].rgb)
            return qvl_fail(err, QVL_E_INVALID, "video preprocess: frame %zu is empty", i + 1);
        if (frames[i].width != frames[0].width || frames[i].height != frames[0].height)
            return qvl_fail(err, QVL_E_INVALID,
                            "video preprocess: frame %zu is %dx%d, the first %dx%d", i + 1,
                            frames[i].width, frames[i].height, frames[0].width, frames[0].height);
    }
    qvl_image_grid g;
    qvl_status st = qvl_video_plan_grid((int64_t)n_frames, frames[0].width, frames[0].height, vc,
                                        &g, err);
    if (st != QVL_OK) return st;
    const int64_t p = pc->patch_size, tp = pc->temporal_patch_size;
    if (tp > 64) return qvl_fail(err, QVL_E_INVALID, "video preprocess: temporal patch too large");
    const int64_t rh = g.h * p, rw = g.w * p, hw = g.h * g.w, width = 3 * tp * p * p;
    patch_norm nm;
    patch_norm_init(pc, &nm);
    float *out = malloc((size_t)(g.t * hw * width) * sizeof *out);
    uint8_t *buf[64] = {0};
    for (int64_t t = 0; out && t < tp; t++)
        if (!(buf[t] = malloc((size_t)(rh * rw * 3)))) st = QVL_E_NOMEM;
    if (!out || st == QVL_E_NOMEM) {
        st = qvl_fail(err, QVL_E_NOMEM, "video preprocess: out of memory");
    }
    for (int64_t gi = 0; st == QVL_OK && gi < g.t; gi++) {
        /* The last group may run out of frames: the packer repeats its last one to fill it. */
        const uint8_t *fr[64];
        int64_t n_fr = 0;
        for (int64_t t = 0; st == QVL_OK && t < tp && gi * tp + t < (int64_t)n_frames; t++) {
            int64_t k = gi * tp + t;
            st = qvl_image_resize_bicubic(&frames[k], (int32_t)rw, (int32_t)rh, buf[t], err);
            fr[n_fr++] = buf[t];
            if (st != QVL_OK) qvl_error_prefix(err, "video frame %lld", (long long)(k + 1));
        }
        if (st == QVL_OK) patch_pack_group(fr, n_fr, rh, rw, pc, &nm, out + gi * hw * width);
    }
    for (int64_t t = 0; t < tp; t++) free(buf[t]);
    if (st != QVL_OK) {
        free(out);
        return st;
    }
    *pixels = out;
    *grid = g;
    return QVL_OK;
}

/* ---- prompt text ---------------------------------------------------------------------------- */

qvl_status qvl_video_timestamps(const int64_t *idx, int64_t n, double video_fps, int64_t group,
                                double *out, qvl_error *err) {
    if (!idx || n < 1 || group < 1 || !(video_fps > 0.0))
        return qvl_fail(err, QVL_E_INVALID, "video timestamps: no frames or bad rate");
    const int64_t groups = (n + group - 1) / group;
    for (int64_t gi = 0; gi < groups; gi++) {
        int64_t first = gi * group, last = first + group - 1;
        if (last >= n) last = n - 1; /* padded with the last kept frame */
        double a = (double)idx[first] / video_fps, b = (double)idx[last] / video_fps;
        out[gi] = (a + b) / 2.0;
    }
    return QVL_OK;
}

qvl_status qvl_video_prompt_text(const double *seconds, int64_t n_groups, char **out,
                                 qvl_error *err) {
    *out = NULL;
    if (!seconds || n_groups < 1 || n_groups > ((int64_t)1 << 24))
        return qvl_fail(err, QVL_E_INVALID, "video prompt: no frame groups");
    size_t cap = (size_t)n_groups * (sizeof VIDEO_PART + 48) + 1, len = 0;
    char *s = malloc(cap);
    if (!s) return qvl_fail(err, QVL_E_NOMEM, "video prompt: out of memory");
    for (int64_t g = 0; g < n_groups; g++) {
        if (!isfinite(seconds[g]) || fabs(seconds[g]) > 1e15) {
            free(s);
            return qvl_fail(err, QVL_E_INVALID, "video prompt: time %g is not usable", seconds[g]);
        }
        /* f"<{t:.1f} seconds>": both round the exact binary value to nearest, ties to even. */
        int w = snprintf(s + len, cap - len, "<%.1f seconds>" VIDEO_PART, seconds[g]);
        if (w < 0 || (size_t)w >= cap - len) {
            free(s);
            return qvl_fail(err, QVL_E_LIMIT, "video prompt: text too long");
        }
        len += (size_t)w;
    }
    *out = s;
    return QVL_OK;
}

qvl_status qvl_video_expand_text(const char *text, const char *const *texts, size_t n, char **out,
                                 qvl_error *err) {
    *out = NULL;
    if (!text || (n > 0 && !texts)) return qvl_fail(err, QVL_E_INVALID, "video prompt: no text");
    /* Only the pad is replaced: the template's "<|vision_start|>" and "<|vision_end|>" around
     * it stay (transformers 5's processor; docs/MODEL.md, "Video prompt"). */
    const size_t pad = strlen(VIDEO_PAD);
    size_t found = 0, total = strlen(text);
    for (const char *q = strstr(text, VIDEO_PAD); q; q = strstr(q + pad, VIDEO_PAD)) {
        if (found < n && !qvl_add_size(total, strlen(texts[found]), &total))
            return qvl_fail(err, QVL_E_LIMIT, "video prompt: text too long");
        found++;
    }
    if (found != n)
        return qvl_fail(err, QVL_E_INVALID,
                        "the prompt has %zu %s tokens but %zu video(s) were given", found, VIDEO_PAD,
                        n);
    char *r = malloc(total + 1);
    if (!r) return qvl_fail(err, QVL_E_NOMEM, "video prompt: out of memory");
    size_t o = 0, k = 0;
    const char *p = text;
    for (const char *q = strstr(p, VIDEO_PAD); q; q = strstr(p, VIDEO_PAD)) {
        memcpy(r + o, p, (size_t)(q - p));
        o += (size_t)(q - p);
        size_t tl = strlen(texts[k]);
        memcpy(r + o, texts[k++], tl);
        o += tl;
        p = q + pad;
    }
    memcpy(r + o, p, strlen(p) + 1);
    *out = r;
    return QVL_OK;
}
