/* preprocessor_config.json: the image processor's defaults and the file's loader (the key
 * readers are preprocess_json.c's). */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "preprocess_json.h"
#include "qvl/image_preprocess.h"

void qvl_preprocess_config_default(const qvl_vision_config *v, qvl_preprocess_config *out) {
    *out = (qvl_preprocess_config){
        .patch_size = v ? v->patch_size : 16,
        .temporal_patch_size = v ? v->temporal_patch_size : 2,
        .merge_size = v ? v->spatial_merge_size : 2,
        .min_pixels = 65536,
        .max_pixels = 16777216,
        .rescale_factor = 1.0 / 255.0,
        .image_mean = {0.5, 0.5, 0.5},
        .image_std = {0.5, 0.5, 0.5},
    };
}

int64_t qvl_preprocess_tokens_to_pixels(const qvl_preprocess_config *pc, int64_t tokens) {
    const int64_t f = pc->patch_size * pc->merge_size;
    if (tokens < 0 || f < 1 || f > ((int64_t)1 << 20)) return -1;
    if (tokens > INT64_MAX / (f * f)) return -1;
    return tokens * f * f;
}

qvl_status qvl_preprocess_config_load(const char *path, const qvl_vision_config *v,
                                      qvl_preprocess_config *out, qvl_error *err) {
    qvl_preprocess_config_default(v, out);
    cJSON *root;
    qvl_status st = preprocess_json_read(path, &root, err);
    if (st != QVL_OK) return st;
    qvl_preprocess_config tmp = *out;
    st = preprocess_json_parse(root, path, &tmp, err);
    cJSON_Delete(root);
    if (st == QVL_OK) *out = tmp;
    return st;
}
