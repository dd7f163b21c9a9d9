/* generation_config.json reader (cJSON). */
#include "qvl/gen_config.h"
#include "qvl/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A generation config is a few hundred bytes; refuse anything absurd before reading it. */
#define GEN_CONFIG_MAX_BYTES (16u << 20)

void qvl_gen_config_defaults(qvl_gen_config *out) {
    if (!out) return;
    *out = (qvl_gen_config){
        .n_eos = 0,
        .bos_token_id = -1,
        .pad_token_id = -1,
        .do_sample = false,
        .temperature = 1.0,
        .top_k = 50,
        .top_p = 1.0,
        .min_p = 0.0,
        .repetition_penalty = 1.0,
        .presence_penalty = 0.0,
        .max_new_tokens = -1,
    };
}

/* The key's item, or NULL when absent or null. */
static const cJSON *get(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static qvl_status read_int(const cJSON *it, const char *path, const char *key, int64_t lo,
                           int64_t hi, int64_t *out, qvl_error *err) {
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!cJSON_IsNumber(it) || !isfinite(v) || floor(v) != v)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be an integer", path, key);
    if (v < (double)lo || v > (double)hi)
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' is %.0f, outside [%lld, %lld]", path, key, v,
                        (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return QVL_OK;
}

/* Optional integer key. */
static qvl_status opt_int(const cJSON *root, const char *path, const char *key, int64_t lo, int64_t hi,
                          int64_t *out, qvl_error *err) {
    const cJSON *it = get(root, key);
    return it ? read_int(it, path, key, lo, hi, out, err) : QVL_OK;
}

/* Optional number key within [lo, hi] (lo_open: lo itself excluded). */
static qvl_status opt_num(const cJSON *root, const char *path, const char *key, double lo, bool lo_open,
                          double hi, double *out, qvl_error *err) {
    const cJSON *it = get(root, key);
    if (!it) return QVL_OK;
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' must be a number", path, key);
    double v = it->valuedouble;
    if (v < lo || (lo_open && v == lo) || v > hi) {
        if (isinf(hi))
            return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' is %g, must be %s %g", path, key, v,
                            lo_open ? ">" : ">=", lo);
        return qvl_fail(err, QVL_E_INVALID, "%s: key '%s' is %g, outside %s%g, %g]", path, key, v,
                        lo_open ? "(" : "[", lo, hi);
    }
    *out = v;
    return QVL_OK;
}

static qvl_status add_eos(qvl_gen_config *cfg, const cJSON *it, const char *path, qvl_error *err) {
    int64_t id = -1;
    qvl_status st = read_int(it, path, "eos_token_id", 0, INT32_MAX, &id, err);
    if (st != QVL_OK) return st;
    if (qvl_gen_config_is_eos(cfg, (int32_t)id)) return QVL_OK;
    if (cfg->n_eos >= QVL_GEN_MAX_EOS)
        return qvl_fail(err, QVL_E_LIMIT, "%s: key 'eos_token_id' lists more than %d tokens", path,
                        QVL_GEN_MAX_EOS);
    cfg->eos_token_ids[cfg->n_eos++] = (int32_t)id;
    return QVL_OK;
}

static qvl_status parse_eos(const cJSON *root, const char *path, qvl_gen_config *cfg, qvl_error *err) {
    const cJSON *it = get(root, "eos_token_id");
    if (!it) return QVL_OK;
    if (!cJSON_IsArray(it)) return add_eos(cfg, it, path, err);
    const cJSON *e;
    cJSON_ArrayForEach(e, it) {
        qvl_status st = add_eos(cfg, e, path, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

static qvl_status parse_object(const cJSON *root, const char *path, qvl_gen_config *cfg, qvl_error *err) {
    if (!cJSON_IsObject(root)) return qvl_fail(err, QVL_E_INVALID, "%s: top level is not a JSON object", path);
    qvl_status st = parse_eos(root, path, cfg, err);
    if (st == QVL_OK) st = opt_int(root, path, "bos_token_id", 0, INT64_MAX / 2, &cfg->bos_token_id, err);
    if (st == QVL_OK) st = opt_int(root, path, "pad_token_id", 0, INT64_MAX / 2, &cfg->pad_token_id, err);
    if (st == QVL_OK) st = opt_int(root, path, "max_new_tokens", 1, INT64_MAX / 2, &cfg->max_new_tokens, err);
    if (st != QVL_OK) return st;

    const cJSON *ds = get(root, "do_sample");
    if (ds) {
        if (!cJSON_IsBool(ds)) return qvl_fail(err, QVL_E_INVALID, "%s: key 'do_sample' must be true or false", path);
        cfg->do_sample = cJSON_IsTrue(ds);
    }
    int64_t top_k = cfg->top_k;
    st = opt_int(root, path, "top_k", 0, INT32_MAX, &top_k, err);
    if (st != QVL_OK) return st;
    cfg->top_k = (int32_t)top_k;

    st = opt_num(root, path, "temperature", 0.0, false, INFINITY, &cfg->temperature, err);
    if (st == QVL_OK) st = opt_num(root, path, "top_p", 0.0, false, 1.0, &cfg->top_p, err);
    if (st == QVL_OK) st = opt_num(root, path, "min_p", 0.0, false, 1.0, &cfg->min_p, err);
    if (st == QVL_OK)
        st = opt_num(root, path, "repetition_penalty", 0.0, true, INFINITY, &cfg->repetition_penalty, err);
    if (st == QVL_OK)
        st = opt_num(root, path, "presence_penalty", -INFINITY, false, INFINITY, &cfg->presence_penalty, err);
    return st;
}

qvl_status qvl_gen_config_parse(const char *json, size_t len, const char *path, qvl_gen_config *out,
                                qvl_error *err) {
    if (!path) path = "generation_config.json";
    if (!json || !out) return qvl_fail(err, QVL_E_INVALID, "%s: NULL text or output", path);
    qvl_gen_config cfg;
    qvl_gen_config_defaults(&cfg);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : len;
        return qvl_fail(err, QVL_E_PARSE, "%s: malformed JSON near byte %zu", path, off);
    }
    qvl_status st = parse_object(root, path, &cfg, err);
    cJSON_Delete(root);
    if (st == QVL_OK) *out = cfg;
    return st;
}

qvl_status qvl_gen_config_load(const char *path, qvl_gen_config *out, qvl_error *err) {
    if (!path || !out) return qvl_fail(err, QVL_E_INVALID, "generation config: NULL path or output");
    qvl_gen_config_defaults(out);
    char *buf;
    size_t len;
    qvl_status st = qvl_read_file(path, GEN_CONFIG_MAX_BYTES, QVL_E_NOT_FOUND, &buf, &len, err);
    if (st != QVL_OK) return st;
    st = qvl_gen_config_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

bool qvl_gen_config_is_eos(const qvl_gen_config *cfg, int32_t id) {
    if (!cfg) return false;
    for (int32_t i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_token_ids[i] == id) return true;
    return false;
}

void qvl_gen_config_sampling_params(const qvl_gen_config *cfg, qvl_sampling_params *p) {
    if (!cfg || !p) return;
    p->temperature = cfg->do_sample ? (float)cfg->temperature : 0.0f;
    p->top_k = cfg->top_k;
    p->top_p = (float)cfg->top_p;
    p->min_p = (float)cfg->min_p;
    p->repetition_penalty = (float)cfg->repetition_penalty;
    p->presence_penalty = (float)cfg->presence_penalty;
}
