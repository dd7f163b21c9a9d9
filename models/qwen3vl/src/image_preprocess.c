/* The image processor of Qwen3-VL (docs/MODEL.md, "Image preprocessing"): smart_resize,
 * antialiased bicubic resampling on uint8, rescale + normalise, temporal duplication and
 * merge-window patch order. */
#include "qvl/image_preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "patch_pack.h"
#include "qvl/checked.h"

int64_t qvl_image_grid_patches(const qvl_image_grid *g) { return g->t * g->h * g->w; }

int64_t qvl_image_grid_tokens(const qvl_image_grid *g, int64_t merge_size) {
    return merge_size > 0 ? g->t * g->h * g->w / (merge_size * merge_size) : 0;
}

/* ---- smart_resize ------------------------------------------------------------------------ */

/* Python's round(): half to even (nearbyint in the default rounding mode). */
static double round_half_even(double x) {
    double r = floor(x), diff = x - r;
    if (diff > 0.5) return r + 1.0;
    if (diff < 0.5) return r;
    return fmod(r, 2.0) == 0.0 ? r : r + 1.0;
}

qvl_status qvl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                            int64_t max_pixels, int64_t *out_h, int64_t *out_w, qvl_error *err) {
    if (height < 1 || width < 1)
        return qvl_fail(err, QVL_E_INVALID, "smart_resize: image size %lldx%lld is empty",
                        (long long)width, (long long)height);
    if (factor < 1 || min_pixels < 1 || max_pixels < min_pixels)
        return qvl_fail(err, QVL_E_INVALID,
                        "smart_resize: factor %lld, min pixels %lld, max pixels %lld do not fit",
                        (long long)factor, (long long)min_pixels, (long long)max_pixels);
    if (height > ((int64_t)1 << 30) || width > ((int64_t)1 << 30))
        return qvl_fail(err, QVL_E_LIMIT, "smart_resize: image size %lldx%lld is too large",
                        (long long)width, (long long)height);
    const int64_t lo = height < width ? height : width, hi = height < width ? width : height;
    if (hi > (int64_t)QVL_IMAGE_MAX_ASPECT * lo)
        return qvl_fail(err, QVL_E_INVALID,
                        "smart_resize: absolute aspect ratio must be smaller than %d, got %g",
                        QVL_IMAGE_MAX_ASPECT, (double)hi / (double)lo);
    const double H = (double)height, W = (double)width, f = (double)factor;
    double h_bar = round_half_even(H / f) * f, w_bar = round_half_even(W / f) * f;
    if (h_bar * w_bar > (double)max_pixels) {
        double beta = sqrt(H * W / (double)max_pixels);
        h_bar = fmax(f, floor(H / beta / f) * f);
        w_bar = fmax(f, floor(W / beta / f) * f);
    } else if (h_bar * w_bar < (double)min_pixels) {
        double beta = sqrt((double)min_pixels / (H * W));
        h_bar = ceil(H * beta / f) * f;
        w_bar = ceil(W * beta / f) * f;
    }
    *out_h = (int64_t)h_bar;
    *out_w = (int64_t)w_bar;
    return QVL_OK;
}

/* ---- antialiased bicubic resampling ------------------------------------------------------ */

/* Keys' cubic with a = -0.5 (what PIL and torch's antialiased bicubic use). */
static double cubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

/* The taps of one axis in torch's uint8 fixed-point form: for output i, taps start at
 * first[i], count[i] of them, int16-range weights with `precision` fractional bits. */
typedef struct taps {
    int64_t *first, *count;
    int32_t *w; /* [out][max_taps] */
    int64_t max_taps;
    int precision;
} taps;

static void taps_free(taps *t) {
    free(t->first);
    free(t->count);
    free(t->w);
}

static qvl_status make_taps(int64_t in, int64_t out, taps *t, qvl_error *err) {
    memset(t, 0, sizeof *t);
    const double scale = (double)in / (double)out;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    t->max_taps = (int64_t)ceil(support) * 2 + 1;
    double *wd = calloc((size_t)(out * t->max_taps), sizeof *wd);
    t->first = calloc((size_t)out, sizeof *t->first);
    t->count = calloc((size_t)out, sizeof *t->count);
    t->w = calloc((size_t)(out * t->max_taps), sizeof *t->w);
    if (!wd || !t->first || !t->count || !t->w) {
        free(wd);
        taps_free(t);
        return qvl_fail(err, QVL_E_NOMEM, "image resize: out of memory");
    }
    double w_max = 0.0;
    for (int64_t i = 0; i < out; i++) {
        const double center = scale * ((double)i + 0.5);
        int64_t lo = (int64_t)(center - support + 0.5);
        if (lo < 0) lo = 0;
        int64_t hi = (int64_t)(center + support + 0.5);
        if (hi > in) hi = in;
        int64_t n = hi - lo;
        if (n < 0) n = 0;
        if (n > t->max_taps) n = t->max_taps;
        double *row = wd + i * t->max_taps, total = 0.0;
        for (int64_t j = 0; j < n; j++) {
            row[j] = cubic(((double)(j + lo) - center + 0.5) * invscale);
            total += row[j];
        }
        if (total != 0.0)
            for (int64_t j = 0; j < n; j++) {
                row[j] /= total;
                if (row[j] > w_max) w_max = row[j];
            }
        t->first[i] = lo;
        t->count[i] = n;
    }
    /* The most fractional bits that keep the largest weight inside int16 (torch's rule). */
    int p = 0;
    for (p = 0; p < 22; p++)
        if ((int)(0.5 + w_max * (double)(1 << (p + 1))) >= (1 << 15)) break;
    t->precision = p;
    for (int64_t k = 0; k < out * t->max_taps; k++) {
        double v = wd[k] * (double)(1 << p);
        t->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
    }
    free(wd);
    return QVL_OK;
}

static uint8_t clip8(int64_t acc, int precision) {
    int64_t v = acc >> precision; /* arithmetic shift: floor, as the SIMD kernels */
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass along x: src [h][sw][3] -> dst [h][dw][3]. */
static void pass_x(const uint8_t *src, int64_t h, int64_t sw, const taps *t, int64_t dw,
                   uint8_t *dst) {
    const int64_t half = t->precision > 0 ? (int64_t)1 << (t->precision - 1) : 0;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < dw; x++) {
            const int32_t *w = t->w + x * t->max_taps;
            const uint8_t *s = src + (y * sw + t->first[x]) * 3;
            for (int c = 0; c < 3; c++) {
                int64_t acc = half;
                for (int64_t k = 0; k < t->count[x]; k++) acc += (int64_t)s[k * 3 + c] * w[k];
                dst[(y * dw + x) * 3 + c] = clip8(acc, t->precision);
            }
        }
}

/* One pass along y: src [sh][w][3] -> dst [dh][w][3]. */
static void pass_y(const uint8_t *src, int64_t w, const taps *t, int64_t dh, uint8_t *dst) {
    const int64_t half = t->precision > 0 ? (int64_t)1 << (t->precision - 1) : 0;
    for (int64_t y = 0; y < dh; y++) {
        const int32_t *wt = t->w + y * t->max_taps;
        for (int64_t x = 0; x < w * 3; x++) {
            int64_t acc = half;
            for (int64_t k = 0; k < t->count[y]; k++)
                acc += (int64_t)src[(t->first[y] + k) * w * 3 + x] * wt[k];
            dst[y * w * 3 + x] = clip8(acc, t->precision);
        }
    }
}

qvl_status qvl_image_resize_bicubic(const qvl_image *src, int32_t ow, int32_t oh, uint8_t *dst,
                                    qvl_error *err) {
    if (!src || !src->rgb || src->width < 1 || src->height < 1 || ow < 1 || oh < 1 || !dst)
        return qvl_fail(err, QVL_E_INVALID, "image resize: empty source or target size");
    const int64_t sw = src->width, sh = src->height;
    /* Like torch: a pass only along an axis whose size changes, horizontal first, the
     * intermediate rounded to uint8. */
    const bool need_x = ow != sw, need_y = oh != sh;
    uint8_t *mid = NULL;
    const uint8_t *cur = src->rgb;
    qvl_status st = QVL_OK;
    if (need_x) {
        taps tx;
        st = make_taps(sw, ow, &tx, err);
        if (st != QVL_OK) return st;
        uint8_t *out = need_y ? malloc((size_t)(sh * ow * 3)) : dst;
        if (!out) {
            taps_free(&tx);
            return qvl_fail(err, QVL_E_NOMEM, "image resize: out of memory");
        }
        pass_x(cur, sh, sw, &tx, ow, out);
        taps_free(&tx);
        if (need_y) mid = out;
        cur = out;
    }
    if (need_y) {
        taps ty;
        st = make_taps(sh, oh, &ty, err);
        if (st == QVL_OK) {
            pass_y(cur, ow, &ty, oh, dst);
            taps_free(&ty);
        }
    }
    if (!need_x && !need_y) memcpy(dst, src->rgb, (size_t)(sw * sh * 3));
    free(mid);
    return st;
}

/* ---- the whole processor ------------------------------------------------------------------ */

qvl_status qvl_image_plan_grid(int64_t width, int64_t height, const qvl_preprocess_config *pc,
                               qvl_image_grid *grid, qvl_error *err) {
    const int64_t p = pc->patch_size, m = pc->merge_size;
    if (p < 1 || pc->temporal_patch_size < 1 || m < 1)
        return qvl_fail(err, QVL_E_INVALID, "image preprocess: patch sizes must be positive");
    int64_t rh, rw;
    qvl_status st = qvl_smart_resize(height, width, p * m, pc->min_pixels, pc->max_pixels, &rh,
                                     &rw, err);
    if (st != QVL_OK) return st;
    *grid = (qvl_image_grid){.t = 1, .h = rh / p, .w = rw / p}; /* one frame repeated */
    return QVL_OK;
}

qvl_status qvl_image_preprocess(const qvl_image *img, const qvl_preprocess_config *pc,
                                float **pixels, qvl_image_grid *grid, qvl_error *err) {
    *pixels = NULL;
    if (!img || !img->rgb || !pc)
        return qvl_fail(err, QVL_E_INVALID, "image preprocess: no image or config");
    const int64_t p = pc->patch_size, tp = pc->temporal_patch_size, m = pc->merge_size;
    if (p < 1 || tp < 1 || m < 1)
        return qvl_fail(err, QVL_E_INVALID, "image preprocess: patch sizes must be positive");
    int64_t rh, rw;
    qvl_status st = qvl_smart_resize(img->height, img->width, p * m, pc->min_pixels,
                                     pc->max_pixels, &rh, &rw, err);
    if (st != QVL_OK) return st;
    if (rh > INT32_MAX || rw > INT32_MAX || rh * rw > QVL_IMAGE_MAX_PIXELS)
        return qvl_fail(err, QVL_E_LIMIT, "image preprocess: resized size %lldx%lld too large",
                        (long long)rw, (long long)rh);
    uint8_t *rs = malloc((size_t)(rh * rw * 3));
    if (!rs) return qvl_fail(err, QVL_E_NOMEM, "image preprocess: out of memory");
    st = qvl_image_resize_bicubic(img, (int32_t)rw, (int32_t)rh, rs, err);
    if (st != QVL_OK) {
        free(rs);
        return st;
    }

    patch_norm nm;
    patch_norm_init(pc, &nm);
    const int64_t gh = rh / p, gw = rw / p, width = 3 * tp * p * p;
    const qvl_image_grid g = {.t = 1, .h = gh, .w = gw}; /* one frame repeated tp times */
    float *out = malloc((size_t)(gh * gw * width) * sizeof *out);
    if (!out) {
        free(rs);
        return qvl_fail(err, QVL_E_NOMEM, "image preprocess: out of memory");
    }
    const uint8_t *frame = rs;
    patch_pack_group(&frame, 1, rh, rw, pc, &nm, out);
    free(rs);
    *pixels = out;
    *grid = g;
    return QVL_OK;
}
