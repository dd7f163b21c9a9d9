/* Pictures: the model's preprocessing behind the engine's picture type. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/engine_picture.h"

#include <stdlib.h>
#include <string.h>

#include "picture_rules.h"

qvl_picture_rules *qvl_picture_rules_create(const struct qvl_preprocess_config *pc) {
    qvl_picture_rules *r = malloc(sizeof *r);
    if (r) r->pc = *pc;
    return r;
}

void qvl_picture_rules_free(qvl_picture_rules *r) { free(r); }

static int64_t held_bytes(const qvl_image_grid *grid, const qvl_preprocess_config *pc) {
    const int64_t width = 3 * pc->temporal_patch_size * pc->patch_size * pc->patch_size;
    return qvl_image_grid_patches(grid) * width * (int64_t)sizeof(float);
}

qvl_status qvl_picture_plan_for(const qvl_picture_rules *r, int64_t width, int64_t height,
                                int64_t decode_bytes_per_pixel, qvl_picture_plan *out,
                                qvl_error *err) {
    const qvl_preprocess_config *pc = &r->pc;
    qvl_image_grid grid;
    qvl_status st = qvl_image_plan_grid(width, height, pc, &grid, err);
    if (st != QVL_OK) return st;
    out->n_tokens = qvl_image_grid_tokens(&grid, pc->merge_size);
    out->held_bytes = held_bytes(&grid, pc);
    /* The decode's peak, then preprocessing: the resized RGB picture and the horizontal
     * resampling pass's intermediate (height rows of the new width), and the f32 pixels.
     * Summed, though the decode's buffers are gone before the resize starts: a bound, not a
     * guess. */
    const int64_t rw = grid.w * pc->patch_size, rh = grid.h * pc->patch_size;
    out->decode_bytes = width * height * decode_bytes_per_pixel + rw * rh * 3 + height * rw * 3 +
                        out->held_bytes;
    return QVL_OK;
}

/* What the encoder will see (pixels and grid) and the preprocessing that made them, each
 * field at a fixed width. */
static void digest_of(const qvl_picture *p, const qvl_preprocess_config *pc, size_t pixel_bytes,
                      uint8_t out[QVL_SHA256_BYTES]) {
    qvl_sha256_ctx h;
    qvl_sha256_init(&h);
    static const char domain[] = "qvl serve picture v1";
    qvl_sha256_update(&h, domain, sizeof domain);
    const int64_t sizes[6] = {pc->patch_size, pc->temporal_patch_size, pc->merge_size,
                              pc->min_pixels, pc->max_pixels, p->grid_t};
    qvl_sha256_update(&h, sizes, sizeof sizes);
    const double norm[7] = {pc->rescale_factor, pc->image_mean[0], pc->image_mean[1],
                            pc->image_mean[2], pc->image_std[0], pc->image_std[1],
                            pc->image_std[2]};
    qvl_sha256_update(&h, norm, sizeof norm);
    const int64_t grid[2] = {p->grid_h, p->grid_w};
    qvl_sha256_update(&h, grid, sizeof grid);
    qvl_sha256_update(&h, p->pixels, pixel_bytes);
    qvl_sha256_final(&h, out);
}

qvl_status qvl_picture_make(const qvl_picture_rules *r, qvl_image *img, qvl_picture *out,
                            qvl_error *err) {
    const qvl_preprocess_config *pc = &r->pc;
    float *px = NULL;
    qvl_image_grid grid;
    qvl_status st = qvl_image_preprocess(img, pc, &px, &grid, err);
    qvl_image_free(img);
    if (st != QVL_OK) return st;
    out->pixels = px;
    out->grid_t = grid.t;
    out->grid_h = grid.h;
    out->grid_w = grid.w;
    out->n_rows = qvl_image_grid_patches(&grid);
    out->n_tokens = qvl_image_grid_tokens(&grid, pc->merge_size);
    digest_of(out, pc, (size_t)held_bytes(&grid, pc), out->digest);
    return QVL_OK;
}

void qvl_picture_free(qvl_picture *p) {
    if (!p) return;
    free(p->pixels);
    p->pixels = NULL;
    free(p->text);
    p->text = NULL;
    if (p->give_back && p->reserved > 0) p->give_back(p->give_back_arg, p->reserved);
    p->reserved = 0;
    p->give_back = NULL;
}

void qvl_picture_window(const qvl_picture_rules *r, int64_t *min_pixels, int64_t *max_pixels) {
    *min_pixels = r->pc.min_pixels;
    *max_pixels = r->pc.max_pixels;
}

int64_t qvl_picture_tokens_to_pixels(const qvl_picture_rules *r, int64_t tokens) {
    return qvl_preprocess_tokens_to_pixels(&r->pc, tokens);
}

qvl_picture_rules *qvl_picture_rules_with_window(const qvl_picture_rules *r, int64_t min_pixels,
                                                 int64_t max_pixels) {
    qvl_picture_rules *w = qvl_picture_rules_create(&r->pc);
    if (w) {
        w->pc.min_pixels = min_pixels;
        w->pc.max_pixels = max_pixels;
    }
    return w;
}

qvl_status qvl_picture_copy(const qvl_picture_rules *r, const qvl_picture *src, qvl_picture *out,
                            qvl_error *err) {
    if (!src->pixels) return qvl_fail(err, QVL_E_INVALID, "the picture's pixels are gone");
    const qvl_image_grid grid = qvl_picture_grid(src);
    const size_t bytes = (size_t)held_bytes(&grid, &r->pc);
    float *px = malloc(bytes);
    if (!px) return qvl_fail(err, QVL_E_NOMEM, "out of memory for a picture");
    char *text = src->text ? strdup(src->text) : NULL;
    if (src->text && !text) {
        free(px);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for a video's text");
    }
    memcpy(px, src->pixels, bytes);
    *out = *src;
    out->pixels = px;
    out->text = text;
    out->give_back = NULL;
    out->give_back_arg = NULL;
    out->reserved = 0;
    return QVL_OK;
}
