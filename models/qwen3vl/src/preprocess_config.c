/* preprocessor_config.json reader (cJSON): the image processor's sizes and normalisation. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess_json.h"
#include "qvl/file.h"
#include "qvl/image_preprocess.h"

#define PREPROCESS_CONFIG_MAX_BYTES (1u << 20)

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

const cJSON *preprocess_json_get(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

qvl_status preprocess_json_int(const cJSON *obj, const char *path, const char *key, int64_t lo,
                          int64_t hi, int64_t *out, qvl_error *err) {
    const cJSON *it = preprocess_json_get(obj, key);
    if (!it) return QVL_OK;
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(v) || floor(v) != v || v < (double)lo || v > (double)hi)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be an integer in [%lld, %lld]", path,
                        key, (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return QVL_OK;
}

/* A number or a list of 3 numbers (one per channel), each in (lo, hi]. */
static qvl_status opt_triple(const cJSON *obj, const char *path, const char *key, double lo,
                             double hi, double out[3], qvl_error *err) {
    const cJSON *it = preprocess_json_get(obj, key);
    if (!it) return QVL_OK;
    double v[3];
    if (cJSON_IsNumber(it)) {
        v[0] = v[1] = v[2] = it->valuedouble;
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 3) {
        for (int c = 0; c < 3; c++) {
            const cJSON *e = cJSON_GetArrayItem(it, c);
            if (!cJSON_IsNumber(e))
                return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must hold numbers", path, key);
            v[c] = e->valuedouble;
        }
    } else {
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be a number or a list of 3", path,
                        key);
    }
    for (int c = 0; c < 3; c++)
        if (!isfinite(v[c]) || v[c] <= lo || v[c] > hi)
            return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' value %g is outside (%g, %g]", path,
                            key, v[c], lo, hi);
    memcpy(out, v, sizeof v);
    return QVL_OK;
}

qvl_status preprocess_json_parse(const cJSON *root, const char *path, qvl_preprocess_config *o,
                                 qvl_error *err) {
    if (!cJSON_IsObject(root))
        return qvl_fail(err, QVL_E_PARSE, "%s: top level must be an object", path);
    qvl_status st = QVL_OK;
    const int64_t big = (int64_t)1 << 40;
    /* Older files spell the bounds min_pixels/max_pixels; size.* wins when both are present. */
    if (!st) st = preprocess_json_int(root, path, "min_pixels", 1, big, &o->min_pixels, err);
    if (!st) st = preprocess_json_int(root, path, "max_pixels", 1, big, &o->max_pixels, err);
    const cJSON *size = preprocess_json_get(root, "size");
    if (!st && size) {
        if (!cJSON_IsObject(size))
            return qvl_fail(err, QVL_E_INVALID, "%s: key 'size' must be an object", path);
        st = preprocess_json_int(size, path, "shortest_edge", 1, big, &o->min_pixels, err);
        if (!st) st = preprocess_json_int(size, path, "longest_edge", 1, big, &o->max_pixels, err);
    }
    if (!st) st = preprocess_json_int(root, path, "patch_size", 1, 1024, &o->patch_size, err);
    if (!st) st = preprocess_json_int(root, path, "temporal_patch_size", 1, 64, &o->temporal_patch_size, err);
    if (!st) st = preprocess_json_int(root, path, "merge_size", 1, 64, &o->merge_size, err);
    if (!st) st = opt_triple(root, path, "image_mean", -1e9, 1e9, o->image_mean, err);
    if (!st) st = opt_triple(root, path, "image_std", 0.0, 1e9, o->image_std, err);
    const cJSON *rf = preprocess_json_get(root, "rescale_factor");
    if (!st && rf) {
        if (!cJSON_IsNumber(rf) || !(rf->valuedouble > 0.0) || !isfinite(rf->valuedouble))
            return qvl_fail(err, QVL_E_INVALID, "%s: key 'rescale_factor' must be positive", path);
        o->rescale_factor = rf->valuedouble;
    }
    if (!st && o->min_pixels > o->max_pixels)
        return qvl_fail(err, QVL_E_INVALID, "%s: min pixels %lld exceed max pixels %lld", path,
                        (long long)o->min_pixels, (long long)o->max_pixels);
    return st;
}

qvl_status qvl_preprocess_config_load(const char *path, const qvl_vision_config *v,
                                      qvl_preprocess_config *out, qvl_error *err) {
    qvl_preprocess_config_default(v, out);
    char *buf;
    size_t n;
    qvl_status rs = qvl_read_file(path, PREPROCESS_CONFIG_MAX_BYTES, QVL_E_NOT_FOUND, &buf, &n, err);
    if (rs != QVL_OK) return rs;
    cJSON *root = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!root) return qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON", path);
    qvl_preprocess_config tmp = *out;
    qvl_status st = preprocess_json_parse(root, path, &tmp, err);
    cJSON_Delete(root);
    if (st == QVL_OK) *out = tmp;
    return st;
}
