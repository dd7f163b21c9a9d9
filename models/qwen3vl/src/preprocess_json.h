/* The JSON readers preprocessor_config.json and video_preprocessor_config.json share: both
 * files carry the same size, patch and normalisation keys. */
#ifndef QVL_PREPROCESS_JSON_H
#define QVL_PREPROCESS_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "qvl/image_preprocess.h"

/* The JSON file at path (at most 1 MiB) into *root, for the caller to cJSON_Delete; a missing
 * file is QVL_E_NOT_FOUND (the caller keeps its defaults), broken JSON QVL_E_PARSE. */
qvl_status preprocess_json_read(const char *path, cJSON **root, qvl_error *err);
/* root[key], NULL when absent or null. */
const cJSON *preprocess_json_get(const cJSON *root, const char *key);
/* obj[key] as an integer in [lo, hi] into *out; absent leaves *out. */
qvl_status preprocess_json_int(const cJSON *obj, const char *path, const char *key, int64_t lo,
                               int64_t hi, int64_t *out, qvl_error *err);
/* obj[key] as true/false into *out; absent leaves *out. */
qvl_status preprocess_json_bool(const cJSON *obj, const char *path, const char *key, bool *out,
                                qvl_error *err);
/* The size, patch, mean/std and rescale keys over o (o keeps what the file does not name). */
qvl_status preprocess_json_parse(const cJSON *root, const char *path, qvl_preprocess_config *o,
                                 qvl_error *err);

#endif
