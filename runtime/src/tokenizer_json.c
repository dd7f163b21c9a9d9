/* Typed reads of tokenizer.json values; every failure names the file and the key. */
#include <math.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "tokenizer_internal.h"

const char *qvl_tok_json_describe(const cJSON *v, char *buf, size_t size) {
    if (!v) return "nothing";
    if (cJSON_IsString(v)) {
        snprintf(buf, size, "\"%.40s\"", v->valuestring);
        return buf;
    }
    if (cJSON_IsNumber(v)) {
        snprintf(buf, size, "%.17g", v->valuedouble);
        return buf;
    }
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v) ? "true" : "false";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

qvl_status qvl_tok_json_id(const cJSON *v, const char *name, const char *what, int32_t *out,
                       qvl_error *err) {
    char buf[64];
    if (!cJSON_IsNumber(v))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s: expected a token id, found %s", name, what,
                        qvl_tok_json_describe(v, buf, sizeof buf));
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s: token id %s is not a non-negative integer",
                        name, what, qvl_tok_json_describe(v, buf, sizeof buf));
    if (d >= (double)QVL_TOKENIZER_MAX_ID)
        return qvl_fail(err, QVL_E_LIMIT, "%s: %s: token id %.0f exceeds the limit %d", name,
                        what, d, (int)QVL_TOKENIZER_MAX_ID);
    *out = (int32_t)d;
    return QVL_OK;
}

qvl_status qvl_tok_json_bool(const cJSON *obj, const char *key, bool def, bool *out,
                         const char *name, const char *what, qvl_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char buf[64];
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return QVL_OK;
    }
    if (!cJSON_IsBool(v))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s.%s: expected true or false, found %s", name,
                        what, key, qvl_tok_json_describe(v, buf, sizeof buf));
    *out = cJSON_IsTrue(v);
    return QVL_OK;
}

qvl_status qvl_tok_json_opt_string(const cJSON *obj, const char *key, const char **out,
                               const char *name, const char *what, qvl_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    char buf[64];
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return QVL_OK;
    if (!cJSON_IsString(v))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s.%s: expected a string, found %s", name, what,
                        key, qvl_tok_json_describe(v, buf, sizeof buf));
    *out = v->valuestring;
    return QVL_OK;
}
