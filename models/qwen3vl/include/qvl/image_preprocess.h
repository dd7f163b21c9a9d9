/* The Qwen3-VL image processor (docs/MODEL.md, "Image preprocessing"; Hugging Face's
 * Qwen2VLImageProcessorFast): smart_resize,
 * antialiased bicubic resampling of the uint8 picture, rescale + normalise, temporal duplication
 * and patch flattening in merge-window order. */
#ifndef QVL_IMAGE_PREPROCESS_H
#define QVL_IMAGE_PREPROCESS_H

#include <stdint.h>

#include "qvl/image.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/qwen3vl_graph.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_preprocess_config {
    int64_t patch_size;          /* pixels per patch side */
    int64_t temporal_patch_size; /* frames per patch (a still image is repeated to fill it) */
    int64_t merge_size;          /* patches per merged token side */
    int64_t min_pixels;          /* size.shortest_edge */
    int64_t max_pixels;          /* size.longest_edge */
    double rescale_factor;       /* 1/255 */
    double image_mean[3], image_std[3];
} qvl_preprocess_config;

/* The values of Qwen3-VL's preprocessor_config.json (min_pixels 65536, max_pixels 16777216,
 * mean = std = 0.5, rescale 1/255) with patch, temporal and merge sizes from the vision config. */
void qvl_preprocess_config_default(const qvl_vision_config *v, qvl_preprocess_config *out);
/* Read preprocessor_config.json over the defaults (keys size.shortest_edge/longest_edge, or the
 * older min_pixels/max_pixels; patch_size, temporal_patch_size, merge_size, image_mean,
 * image_std, rescale_factor). A missing file is QVL_E_NOT_FOUND (out keeps the defaults). */
qvl_status qvl_preprocess_config_load(const char *path, const qvl_vision_config *v,
                                      qvl_preprocess_config *out, qvl_error *err);

/* smart_resize (docs/MODEL.md, "smart_resize"): the size (multiples of factor) the picture is
 * resampled to. Python's round-half-to-even; errors for zero sizes, aspect > 200 and impossible
 * min/max. */
qvl_status qvl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                            int64_t max_pixels, int64_t *out_h, int64_t *out_w, qvl_error *err);

/* Pixels that `tokens` merged tokens cover: tokens x (patch_size x merge_size)^2 (one merged
 * token is a merge_size x merge_size block of patches). How a token bound becomes the pixel
 * bound smart_resize takes: with max_pixels = this, a still picture never yields more than
 * `tokens` tokens, and with min_pixels = this never fewer. -1 when it overflows int64. */
int64_t qvl_preprocess_tokens_to_pixels(const qvl_preprocess_config *pc, int64_t tokens);

/* The patch grid qvl_image_preprocess gives a width x height picture (after any EXIF rotation),
 * without touching pixels: smart_resize with factor patch_size x merge_size. The same errors as
 * qvl_smart_resize. */
qvl_status qvl_image_plan_grid(int64_t width, int64_t height, const qvl_preprocess_config *pc,
                               qvl_image_grid *grid, qvl_error *err);

/* Bicubic resampling with antialiasing of interleaved RGB uint8 (torchvision resize(BICUBIC,
 * antialias=True) on uint8, PIL's filter: a = -0.5, support widened by the downscale factor,
 * horizontal pass then vertical, each rounded and clamped to uint8). dst holds ow*oh*3. */
qvl_status qvl_image_resize_bicubic(const qvl_image *src, int32_t ow, int32_t oh, uint8_t *dst,
                                    qvl_error *err);

/* A whole picture to the vision encoder's input: *pixels (malloc'd, free()) is
 * [grid t*h*w, 3*temporal*patch*patch] f32 in the order of docs/MODEL.md, "Patch order";
 * *grid is in patches. */
qvl_status qvl_image_preprocess(const qvl_image *img, const qvl_preprocess_config *pc,
                                float **pixels, qvl_image_grid *grid, qvl_error *err);

/* Rows of one picture's pixel matrix, and the LLM tokens it becomes. */
int64_t qvl_image_grid_patches(const qvl_image_grid *g);
int64_t qvl_image_grid_tokens(const qvl_image_grid *g, int64_t merge_size);

#ifdef __cplusplus
}
#endif
#endif
