/* Merge-window patch packing shared by the image and the video processor (patch_pack.h). */
#include "patch_pack.h"

void patch_norm_init(const qvl_preprocess_config *pc, patch_norm *nm) {
    const float inv_r = (float)(1.0 / pc->rescale_factor);
    for (int c = 0; c < 3; c++) {
        nm->mean[c] = (float)pc->image_mean[c] * inv_r;
        nm->stdv[c] = (float)pc->image_std[c] * inv_r;
    }
}

void patch_pack_group(const uint8_t *const *frames, int64_t n_frames, int64_t rh, int64_t rw,
                      const qvl_preprocess_config *pc, const patch_norm *nm, float *out) {
    const int64_t p = pc->patch_size, tp = pc->temporal_patch_size, m = pc->merge_size;
    const int64_t gh = rh / p, gw = rw / p, width = 3 * tp * p * p;
    /* Row s = window-order patch index: windows row-major, then the m x m patches inside. */
    int64_t s = 0;
    for (int64_t bh = 0; bh < gh / m; bh++)
        for (int64_t bw = 0; bw < gw / m; bw++)
            for (int64_t mh = 0; mh < m; mh++)
                for (int64_t mw = 0; mw < m; mw++, s++) {
                    const int64_t y0 = (bh * m + mh) * p, x0 = (bw * m + mw) * p;
                    float *row = out + s * width;
                    for (int c = 0; c < 3; c++)
                        for (int64_t t = 0; t < tp; t++) {
                            const uint8_t *fr = frames[t < n_frames ? t : n_frames - 1];
                            for (int64_t py = 0; py < p; py++)
                                for (int64_t px = 0; px < p; px++) {
                                    uint8_t v = fr[((y0 + py) * rw + x0 + px) * 3 + c];
                                    row[((c * tp + t) * p + py) * p + px] =
                                        ((float)v - nm->mean[c]) / nm->stdv[c];
                                }
                        }
                }
}
