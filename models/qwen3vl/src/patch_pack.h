/* The pixel matrix both processors write (docs/MODEL.md, "Patch order"): one temporal group of
 * resized uint8 RGB frames, rescaled, normalised and laid out in merge-window patch order. An
 * image is a group of temporal_patch_size copies of one frame; a video's last group may repeat
 * its last frame. */
#ifndef QVL_PATCH_PACK_H
#define QVL_PATCH_PACK_H

#include <stdint.h>

#include "qvl/image_preprocess.h"

/* The fused rescale + normalise of the fast processor, (x - mean/r) / (std/r) in f32: the
 * per-channel mean and std already divided by the rescale factor. */
typedef struct {
    float mean[3];
    float stdv[3];
} patch_norm;

void patch_norm_init(const qvl_preprocess_config *pc, patch_norm *nm);

/* Writes the (rh/p)·(rw/p) rows of one temporal group into out, each 3·tp·p·p floats with
 * element ((c·tp + t)·p + py)·p + px. frames[0..n_frames) are rw x rh RGB (3 bytes a pixel,
 * row-major); time slot t reads frames[t], or frames[n_frames - 1] once t reaches n_frames.
 * 1 <= n_frames <= temporal_patch_size; rh and rw are multiples of patch·merge. */
void patch_pack_group(const uint8_t *const *frames, int64_t n_frames, int64_t rh, int64_t rw,
                      const qvl_preprocess_config *pc, const patch_norm *nm, float *out);

#endif
