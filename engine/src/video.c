/* Videos: the model's video processor behind the engine's media item (qvl/engine_video.h). */
#define _POSIX_C_SOURCE 200809L

#include "qvl/engine_video.h"

#include <stdlib.h>
#include <string.h>

#include "picture_rules.h"

qvl_status qvl_video_keep(const qvl_video_rules *r, int64_t n_frames, double fps, int64_t *idx,
                          int64_t *n_kept, qvl_error *err) {
    *n_kept = 0;
    qvl_status st = qvl_video_sample_frames(n_frames, fps, &r->vc, idx, n_kept, err);
    if (st != QVL_OK) return st;
    const int64_t tp = r->vc.pc.temporal_patch_size;
    if (*n_kept < tp)
        return qvl_fail(err, QVL_E_INVALID, "%lld frame(s), %lld kept: a video needs at least %lld",
                        (long long)n_frames, (long long)*n_kept, (long long)tp);
    return QVL_OK;
}

/* Bytes of the f32 pixels of grid g. */
static int64_t pixel_bytes(const qvl_video_config *vc, int64_t t, int64_t h, int64_t w) {
    const int64_t p = vc->pc.patch_size;
    return t * h * w * 3 * vc->pc.temporal_patch_size * p * p * (int64_t)sizeof(float);
}

qvl_status qvl_video_plan_for(const qvl_video_rules *r, int64_t n_kept, int64_t width,
                              int64_t height, int64_t token_budget,
                              int64_t decode_bytes_per_pixel, qvl_video_plan *out,
                              qvl_error *err) {
    memset(out, 0, sizeof *out);
    const qvl_video_config *vc = &r->vc;
    const int64_t groups = (n_kept + vc->pc.temporal_patch_size - 1) / vc->pc.temporal_patch_size;
    qvl_video_fit fit;
    qvl_status st = qvl_video_fit_grid(n_kept, width, height, vc, token_budget, &fit, err);
    if (st != QVL_OK) return st;
    if (!fit.fits)
        return qvl_fail(err, QVL_E_LIMIT, "%lld frame groups of %lldx%lld need more than the %lld "
                        "tokens left in a slot's context (--ctx) even at their smallest size",
                        (long long)groups, (long long)width, (long long)height,
                        (long long)(token_budget > 0 ? token_budget : 0));
    const qvl_image_grid g = fit.grid;
    *out = (qvl_video_plan){.n_kept = n_kept, .width = width, .height = height,
                            .grid_t = g.t, .grid_h = g.h, .grid_w = g.w,
                            .n_tokens = fit.tokens, .n_groups = g.t,
                            .min_pixels = fit.min_pixels, .max_pixels = fit.max_pixels};
    out->held_bytes = pixel_bytes(vc, g.t, g.h, g.w);
    /* Every kept frame's RGB, one frame's decode at its peak, the temporal patch's resized
     * frames and one resampling pass's intermediate, and the f32 pixels: summed, a bound. */
    const int64_t rw = g.w * vc->pc.patch_size, rh = g.h * vc->pc.patch_size;
    out->decode_bytes = n_kept * width * height * 3 + width * height * decode_bytes_per_pixel +
                        vc->pc.temporal_patch_size * rw * rh * 3 + height * rw * 3 +
                        out->held_bytes;
    return QVL_OK;
}

/* Every preprocessing parameter, the frame times, the grid and the pixels, each field at a
 * fixed width (texts after their length). */
static void digest_of(const qvl_video_config *vc, const qvl_picture *p, const double *times,
                      int64_t n_kept, size_t pixel_bytes_n, uint8_t out[QVL_SHA256_BYTES]) {
    qvl_sha256_ctx h;
    qvl_sha256_init(&h);
    static const char domain[] = "qvl engine video v1";
    qvl_sha256_update(&h, domain, sizeof domain);
    const qvl_preprocess_config *pc = &vc->pc;
    const int64_t sizes[10] = {pc->patch_size, pc->temporal_patch_size, pc->merge_size,
                               pc->min_pixels, pc->max_pixels, vc->min_frames, vc->max_frames,
                               vc->max_video_tokens, (int64_t)vc->do_sample_frames,
                               (int64_t)vc->cap_pixels_per_frame};
    qvl_sha256_update(&h, sizes, sizeof sizes);
    const double norm[8] = {pc->rescale_factor, pc->image_mean[0], pc->image_mean[1],
                            pc->image_mean[2], pc->image_std[0], pc->image_std[1],
                            pc->image_std[2], vc->fps};
    qvl_sha256_update(&h, norm, sizeof norm);
    qvl_sha256_update(&h, &n_kept, sizeof n_kept);
    qvl_sha256_update(&h, times, (size_t)n_kept * sizeof *times);
    const uint64_t text_len = strlen(p->text);
    qvl_sha256_update(&h, &text_len, sizeof text_len);
    qvl_sha256_update(&h, p->text, (size_t)text_len);
    const int64_t grid[3] = {p->grid_t, p->grid_h, p->grid_w};
    qvl_sha256_update(&h, grid, sizeof grid);
    qvl_sha256_update(&h, p->pixels, pixel_bytes_n);
    qvl_sha256_final(&h, out);
}

/* "<t seconds>" and the placeholder per frame group: each group's time is the mean of its
 * first and last frame's (the last frame repeats to fill the final group). */
qvl_status qvl_video_text(const qvl_video_rules *r, const double *times, int64_t n, char **out,
                          qvl_error *err) {
    *out = NULL;
    const int64_t group = r->vc.pc.temporal_patch_size;
    if (n < 1) return qvl_fail(err, QVL_E_INVALID, "a video without frames");
    const int64_t groups = (n + group - 1) / group;
    double *secs = malloc((size_t)groups * sizeof *secs);
    if (!secs) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (int64_t g = 0; g < groups; g++) {
        const int64_t first = g * group, last = first + group - 1 < n ? first + group - 1 : n - 1;
        secs[g] = (times[first] + times[last]) / 2.0;
    }
    qvl_status st = qvl_video_prompt_text(secs, groups, out, err);
    free(secs);
    return st;
}

qvl_status qvl_video_make(const qvl_video_rules *r, const qvl_video_plan *plan, qvl_image *frames,
                          const double *times, qvl_picture *out, qvl_error *err) {
    qvl_video_config vc = r->vc;
    vc.pc.min_pixels = plan->min_pixels;
    vc.pc.max_pixels = plan->max_pixels;
    float *px = NULL;
    qvl_image_grid g = {0};
    qvl_status st = QVL_OK;
    for (int64_t k = 0; st == QVL_OK && k < plan->n_kept; k++)
        if (frames[k].width != plan->width || frames[k].height != plan->height)
            st = qvl_fail(err, QVL_E_INVALID, "video frame %lld is %dx%d, the video %lldx%lld",
                          (long long)(k + 1), frames[k].width, frames[k].height,
                          (long long)plan->width, (long long)plan->height);
    if (st == QVL_OK) st = qvl_video_preprocess(frames, (size_t)plan->n_kept, &vc, &px, &g, err);
    for (int64_t k = 0; k < plan->n_kept; k++) qvl_image_free(&frames[k]);
    if (st == QVL_OK && (g.t != plan->grid_t || g.h != plan->grid_h || g.w != plan->grid_w))
        st = qvl_fail(err, QVL_E_MISMATCH, "the preprocessed video differs from its plan");
    char *text = NULL;
    if (st == QVL_OK)
        st = qvl_video_text(r, times, plan->n_kept, &text, err);
    if (st != QVL_OK) {
        free(px);
        return st;
    }
    out->pixels = px;
    out->text = text;
    out->is_video = true;
    out->grid_t = g.t;
    out->grid_h = g.h;
    out->grid_w = g.w;
    out->n_rows = g.t * g.h * g.w;
    out->n_tokens = plan->n_tokens;
    digest_of(&vc, out, times, plan->n_kept, (size_t)plan->held_bytes, out->digest);
    return QVL_OK;
}
