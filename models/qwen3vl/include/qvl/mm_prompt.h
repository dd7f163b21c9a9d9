/* Prompts with pictures: expanding each image placeholder to its token count (docs/MODEL.md,
 * "Prompt") and the 3-D MRoPE positions of get_rope_index (docs/MODEL.md, "Multimodal
 * positions"). */
#ifndef QVL_MM_PROMPT_H
#define QVL_MM_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/qwen3vl_graph.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replace the k-th occurrence of pad_id in ids by counts[k] copies of it. The number of
 * occurrences must equal n_images. *out is malloc'd (free()). */
qvl_status qvl_expand_image_pads(const int32_t *ids, int64_t n, int32_t pad_id,
                                 const int64_t *counts, size_t n_images, int32_t **out,
                                 int64_t *n_out, qvl_error *err);

/* Positions (t, h, w) of n tokens as 3 rows of n (pos[c*n + i]), the first text token at
 * `start`. Each image is a run of h'*w' pad tokens (h' = grid.h/merge, w' = grid.w/merge, the
 * images of `grids` in order): the k-th pad gets (s, s + k/w', s + k%w') with s the position
 * where the run starts, and the next token continues at s + max(h', w'). Pad runs that do not
 * match the images exactly are an error. *next (may be NULL) gets the position after the
 * last token. */
qvl_status qvl_mrope_positions(const int32_t *ids, int64_t n, int32_t pad_id,
                               const qvl_image_grid *grids, size_t n_images, int64_t merge,
                               int64_t start, int32_t *pos, int64_t *next, qvl_error *err);

/* The same with videos: runs of image_pad and of video_pad (video_pad -1: none) in the order
 * of grids, is_video[i] (NULL: none is) telling which items are videos. A video of grid
 * (t, h, w) is t runs of h'*w' video pads, one per frame group, each placed as a still image
 * (separated in the prompt by the group's timestamp text), the position advancing by
 * max(h', w') after each (docs/MODEL.md, "Multimodal positions"). */
qvl_status qvl_mrope_positions_media(const int32_t *ids, int64_t n, int32_t image_pad,
                                     int32_t video_pad, const qvl_image_grid *grids,
                                     const bool *is_video, size_t n_media, int64_t merge,
                                     int64_t start, int32_t *pos, int64_t *next, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
