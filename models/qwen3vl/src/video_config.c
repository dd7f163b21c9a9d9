/* video_preprocessor_config.json reader (cJSON) and the video processor's defaults
 * (docs/MODEL.md, "Video preprocessing"). */
#include <cjson/cJSON.h>
#include <math.h>

#include "preprocess_json.h"
#include "qvl/video_preprocess.h"

void qvl_video_config_default(const qvl_vision_config *v, qvl_video_config *out) {
    qvl_preprocess_config pc;
    qvl_preprocess_config_default(v, &pc);
    /* Qwen3VLVideoProcessor's class attributes: size {shortest_edge: 128 * 32 * 32,
     * longest_edge: 768 * 32 * 32}; mean, std and rescale as the image processor. */
    pc.min_pixels = 128 * 32 * 32;
    pc.max_pixels = 768 * 32 * 32;
    *out = (qvl_video_config){
        .pc = pc,
        .fps = 2.0,
        .min_frames = 4,
        .max_frames = 768,
        .do_sample_frames = true,
        .cap_pixels_per_frame = false,
        .max_video_tokens = 768,
    };
}

static qvl_status parse(const cJSON *root, const char *path, qvl_video_config *o, qvl_error *err) {
    /* preprocess_json_parse refuses a top level that is not an object. */
    qvl_status st = preprocess_json_parse(root, path, &o->pc, err);
    const cJSON *fps = preprocess_json_get(root, "fps");
    if (!st && fps) {
        if (!cJSON_IsNumber(fps) || !isfinite(fps->valuedouble) || !(fps->valuedouble > 0.0) ||
            fps->valuedouble > 1e6)
            return qvl_fail(err, QVL_E_INVALID, "%s: key 'fps' must be a positive number", path);
        o->fps = fps->valuedouble;
    }
    const int64_t most = (int64_t)1 << 20;
    if (!st) st = preprocess_json_int(root, path, "min_frames", 1, most, &o->min_frames, err);
    if (!st) st = preprocess_json_int(root, path, "max_frames", 1, most, &o->max_frames, err);
    if (!st) st = preprocess_json_bool(root, path, "do_sample_frames", &o->do_sample_frames, err);
    if (!st)
        st = preprocess_json_bool(root, path, "cap_pixels_per_frame", &o->cap_pixels_per_frame,
                                  err);
    if (!st)
        st = preprocess_json_int(root, path, "max_video_tokens", 1, most, &o->max_video_tokens, err);
    if (!st && o->min_frames > o->max_frames)
        return qvl_fail(err, QVL_E_INVALID, "%s: min_frames %lld exceed max_frames %lld", path,
                        (long long)o->min_frames, (long long)o->max_frames);
    return st;
}

qvl_status qvl_video_config_load(const char *path, const qvl_vision_config *v,
                                 qvl_video_config *out, qvl_error *err) {
    qvl_video_config_default(v, out);
    cJSON *root;
    qvl_status st = preprocess_json_read(path, &root, err);
    if (st != QVL_OK) return st;
    qvl_video_config tmp = *out;
    st = parse(root, path, &tmp, err);
    cJSON_Delete(root);
    if (st == QVL_OK) *out = tmp;
    return st;
}
