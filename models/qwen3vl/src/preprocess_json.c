/* The JSON readers preprocessor_config.json and video_preprocessor_config.json share
 * (preprocess_json.h). */
#include "preprocess_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"

/* Either file is a few hundred bytes; the cap keeps a hostile path from costing memory. */
#define PREPROCESS_JSON_MAX_BYTES (1u << 20)

qvl_status preprocess_json_read(const char *path, cJSON **root, qvl_error *err) {
    *root = NULL;
    char *buf;
    size_t n;
    qvl_status st = qvl_read_file(path, PREPROCESS_JSON_MAX_BYTES, QVL_E_NOT_FOUND, &buf, &n, err);
    if (st != QVL_OK) return st;
    *root = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!*root) return qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON", path);
    return QVL_OK;
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

qvl_status preprocess_json_bool(const cJSON *obj, const char *path, const char *key, bool *out,
                               qvl_error *err) {
    const cJSON *it = preprocess_json_get(obj, key);
    if (!it) return QVL_OK;
    if (!cJSON_IsBool(it))
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be true or false", path, key);
    *out = cJSON_IsTrue(it);
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
