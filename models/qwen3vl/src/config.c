/* Qwen3-VL config.json: read the file, pick the keys the engine needs, reject what it cannot run.
 * Messages name the file and the key path ("config.json: text_config.head_dim: ..."). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qvl/file.h"
#include "qvl/json_bounds.h"
#include "qvl/qwen3vl_config.h"

#define CONFIG_MAX_BYTES (16u * 1024u * 1024u)
#define SIZE_MAX_VALUE 2147483647LL /* sizes beyond int32 are surely corrupt */

typedef struct parse_ctx {
    const char *path;
    qvl_error *err;
} parse_ctx;

static const char *json_type_name(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* Treat an explicit JSON null like an absent key. */
static const cJSON *get_key(const cJSON *obj, const char *key) {
    if (!obj || !cJSON_IsObject(obj)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && cJSON_IsNull(v)) return NULL;
    return v;
}

static qvl_status as_int(parse_ctx *c, const cJSON *v, const char *sec, const char *key,
                         int64_t *out) {
    const char *dot = sec[0] ? "." : "";
    if (!cJSON_IsNumber(v))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s%s%s: expected an integer, got %s", c->path,
                        sec, dot, key, json_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s%s%s: expected an integer, got %g", c->path,
                        sec, dot, key, d);
    *out = (int64_t)d;
    return QVL_OK;
}

/* A required size in [1, SIZE_MAX_VALUE]. */
static qvl_status get_size(parse_ctx *c, const cJSON *obj, const char *sec, const char *key,
                           int64_t *out) {
    const cJSON *v = get_key(obj, key);
    if (!v) return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: missing", c->path, sec, key);
    qvl_status st = as_int(c, v, sec, key, out);
    if (st != QVL_OK) return st;
    if (*out < 1 || *out > SIZE_MAX_VALUE)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: must be between 1 and %lld (got %lld)",
                        c->path, sec, key, SIZE_MAX_VALUE, (long long)*out);
    return QVL_OK;
}

/* An optional token id: -1 when absent or null; a list takes its first entry. */
static qvl_status get_token_id(parse_ctx *c, const cJSON *obj, const char *sec, const char *key,
                               int64_t *out) {
    const cJSON *v = get_key(obj, key);
    *out = -1;
    if (!v) return QVL_OK;
    if (cJSON_IsArray(v)) {
        if (cJSON_GetArraySize(v) == 0) return QVL_OK;
        v = cJSON_GetArrayItem(v, 0);
    }
    qvl_status st = as_int(c, v, sec, key, out);
    if (st != QVL_OK) return st;
    if (*out < 0 || *out > SIZE_MAX_VALUE)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s%s%s: token id %lld is out of range", c->path,
                        sec, sec[0] ? "." : "", key, (long long)*out);
    return QVL_OK;
}

static qvl_status get_double(parse_ctx *c, const cJSON *v, const char *sec, const char *key,
                             double *out) {
    if (!cJSON_IsNumber(v))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: expected a number, got %s", c->path, sec,
                        key, json_type_name(v));
    if (!isfinite(v->valuedouble) || v->valuedouble <= 0.0)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: must be a positive number (got %g)",
                        c->path, sec, key, v->valuedouble);
    *out = v->valuedouble;
    return QVL_OK;
}

static qvl_status get_bool(parse_ctx *c, const cJSON *obj, const char *sec, const char *key,
                           bool def, bool *out) {
    const cJSON *v = get_key(obj, key);
    if (!v) {
        *out = def;
        return QVL_OK;
    }
    if (!cJSON_IsBool(v))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s%s%s: expected a boolean, got %s", c->path,
                        sec, sec[0] ? "." : "", key, json_type_name(v));
    *out = cJSON_IsTrue(v);
    return QVL_OK;
}

/* Optional string copied into buf ("" or def when absent). */
static qvl_status get_string(parse_ctx *c, const cJSON *obj, const char *sec, const char *key,
                             const char *def, char *buf, size_t size) {
    const cJSON *v = get_key(obj, key);
    if (!v) {
        snprintf(buf, size, "%s", def);
        return QVL_OK;
    }
    if (!cJSON_IsString(v))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: expected a string, got %s", c->path, sec,
                        key, json_type_name(v));
    if (strlen(v->valuestring) >= size)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.%s: '%.40s' is too long", c->path, sec, key,
                        v->valuestring);
    snprintf(buf, size, "%s", v->valuestring);
    return QVL_OK;
}

/* Rope settings live in rope_scaling (older transformers, with rope_theta beside it) or in
 * rope_parameters (newer, theta inside). */
static qvl_status parse_rope(parse_ctx *c, const cJSON *tc, qvl_text_config *t) {
    const char *rkey = "rope_parameters";
    const cJSON *rp = get_key(tc, rkey);
    if (!rp) {
        rkey = "rope_scaling";
        rp = get_key(tc, rkey);
    }
    char sec[64];
    snprintf(sec, sizeof sec, "text_config.%s", rkey);
    if (rp && !cJSON_IsObject(rp))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: %s: expected an object, got %s", c->path, sec,
                        json_type_name(rp));

    const cJSON *theta = get_key(tc, "rope_theta");
    const char *theta_sec = "text_config";
    if (!theta && rp) {
        theta = get_key(rp, "rope_theta");
        theta_sec = sec;
    }
    if (!theta)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: text_config.rope_theta: missing (also not in rope_parameters)",
                        c->path);
    qvl_status st = get_double(c, theta, theta_sec, "rope_theta", &t->rope_theta);
    if (st != QVL_OK) return st;

    snprintf(t->rope_type, sizeof t->rope_type, "default");
    t->mrope_interleaved = false;
    t->mrope_section[0] = (int32_t)(t->head_dim / 2);
    t->mrope_section[1] = 0;
    t->mrope_section[2] = 0;
    if (!rp) return QVL_OK;

    const char *type_key = get_key(rp, "rope_type") ? "rope_type" : "type";
    st = get_string(c, rp, sec, type_key, "default", t->rope_type, sizeof t->rope_type);
    if (st != QVL_OK) return st;
    if (strcmp(t->rope_type, "default") != 0)
        return qvl_fail(c->err, QVL_E_UNSUPPORTED,
                        "%s: %s.%s: '%s' is not supported (only 'default')", c->path, sec, type_key,
                        t->rope_type);

    st = get_bool(c, rp, sec, "mrope_interleaved", false, &t->mrope_interleaved);
    if (st != QVL_OK) return st;

    const cJSON *ms = get_key(rp, "mrope_section");
    if (!ms) return QVL_OK;
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) != 3)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: %s.mrope_section: expected an array of 3 integers, got %s", c->path,
                        sec, cJSON_IsArray(ms) ? "another length" : json_type_name(ms));
    int64_t sum = 0;
    for (int i = 0; i < 3; i++) {
        int64_t v = 0;
        st = as_int(c, cJSON_GetArrayItem(ms, i), sec, "mrope_section", &v);
        if (st != QVL_OK) return st;
        if (v < 0 || v > t->head_dim)
            return qvl_fail(c->err, QVL_E_INVALID, "%s: %s.mrope_section[%d]: %lld is out of range",
                            c->path, sec, i, (long long)v);
        t->mrope_section[i] = (int32_t)v;
        sum += v;
    }
    if (sum != t->head_dim / 2)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: %s.mrope_section: must sum to head_dim/2 = %lld (got %lld)", c->path,
                        sec, (long long)(t->head_dim / 2), (long long)sum);
    return QVL_OK;
}

static qvl_status parse_text(parse_ctx *c, const cJSON *root, qvl_text_config *t) {
    const char *S = "text_config";
    const cJSON *tc = get_key(root, S);
    if (!tc) return qvl_fail(c->err, QVL_E_INVALID, "%s: text_config: missing", c->path);
    if (!cJSON_IsObject(tc))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: text_config: expected an object, got %s",
                        c->path, json_type_name(tc));
    qvl_status st;
    if ((st = get_size(c, tc, S, "vocab_size", &t->vocab_size)) != QVL_OK ||
        (st = get_size(c, tc, S, "hidden_size", &t->hidden_size)) != QVL_OK ||
        (st = get_size(c, tc, S, "intermediate_size", &t->intermediate_size)) != QVL_OK ||
        (st = get_size(c, tc, S, "num_hidden_layers", &t->num_hidden_layers)) != QVL_OK ||
        (st = get_size(c, tc, S, "num_attention_heads", &t->num_attention_heads)) != QVL_OK ||
        (st = get_size(c, tc, S, "num_key_value_heads", &t->num_key_value_heads)) != QVL_OK ||
        (st = get_size(c, tc, S, "max_position_embeddings", &t->max_position_embeddings)) != QVL_OK)
        return st;
    if (t->num_attention_heads % t->num_key_value_heads != 0)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: text_config.num_key_value_heads: must divide num_attention_heads "
                        "(%lld %% %lld)",
                        c->path, (long long)t->num_attention_heads,
                        (long long)t->num_key_value_heads);
    if (get_key(tc, "head_dim")) {
        if ((st = get_size(c, tc, S, "head_dim", &t->head_dim)) != QVL_OK) return st;
    } else {
        if (t->hidden_size % t->num_attention_heads != 0)
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s: text_config.head_dim: missing and hidden_size %lld is not a "
                            "multiple of num_attention_heads %lld",
                            c->path, (long long)t->hidden_size, (long long)t->num_attention_heads);
        t->head_dim = t->hidden_size / t->num_attention_heads;
    }
    if (t->head_dim % 2 != 0)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: text_config.head_dim: must be even (got %lld)",
                        c->path, (long long)t->head_dim);

    const cJSON *eps = get_key(tc, "rms_norm_eps");
    if (!eps)
        return qvl_fail(c->err, QVL_E_INVALID, "%s: text_config.rms_norm_eps: missing", c->path);
    if ((st = get_double(c, eps, S, "rms_norm_eps", &t->rms_norm_eps)) != QVL_OK) return st;

    if ((st = parse_rope(c, tc, t)) != QVL_OK) return st;

    if ((st = get_bool(c, tc, S, "attention_bias", false, &t->attention_bias)) != QVL_OK) return st;
    if (t->attention_bias)
        return qvl_fail(c->err, QVL_E_UNSUPPORTED,
                        "%s: text_config.attention_bias: true is not supported (Qwen3-VL has no "
                        "q/k/v/o biases)",
                        c->path);
    if ((st = get_string(c, tc, S, "hidden_act", "silu", t->hidden_act, sizeof t->hidden_act)) !=
        QVL_OK)
        return st;
    if (strcmp(t->hidden_act, "silu") != 0)
        return qvl_fail(c->err, QVL_E_UNSUPPORTED,
                        "%s: text_config.hidden_act: '%s' is not supported (only 'silu')", c->path,
                        t->hidden_act);

    /* Token ids and dtype: text_config first, the top level as a fallback. */
    const char *bos_sec = get_key(tc, "bos_token_id") ? S : "";
    st = get_token_id(c, bos_sec[0] ? tc : root, bos_sec, "bos_token_id", &t->bos_token_id);
    if (st != QVL_OK) return st;
    const char *eos_sec = get_key(tc, "eos_token_id") ? S : "";
    st = get_token_id(c, eos_sec[0] ? tc : root, eos_sec, "eos_token_id", &t->eos_token_id);
    if (st != QVL_OK) return st;
    static const char *const dtype_keys[2] = {"dtype", "torch_dtype"};
    const cJSON *holders[2] = {tc, root};
    const char *holder_names[2] = {S, "(top level)"};
    t->dtype[0] = '\0';
    for (int h = 0; h < 2 && !t->dtype[0]; h++)
        for (int k = 0; k < 2 && !t->dtype[0]; k++) {
            st = get_string(c, holders[h], holder_names[h], dtype_keys[k], "", t->dtype,
                            sizeof t->dtype);
            if (st != QVL_OK) return st;
        }
    return QVL_OK;
}

static qvl_status parse_vision(parse_ctx *c, const cJSON *vc, qvl_vision_config *v) {
    const char *S = "vision_config";
    if (!cJSON_IsObject(vc))
        return qvl_fail(c->err, QVL_E_INVALID, "%s: vision_config: expected an object, got %s",
                        c->path, json_type_name(vc));
    qvl_status st;
    if ((st = get_size(c, vc, S, "depth", &v->depth)) != QVL_OK ||
        (st = get_size(c, vc, S, "hidden_size", &v->hidden_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "intermediate_size", &v->intermediate_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "num_heads", &v->num_heads)) != QVL_OK ||
        (st = get_size(c, vc, S, "patch_size", &v->patch_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "temporal_patch_size", &v->temporal_patch_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "spatial_merge_size", &v->spatial_merge_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "in_channels", &v->in_channels)) != QVL_OK ||
        (st = get_size(c, vc, S, "out_hidden_size", &v->out_hidden_size)) != QVL_OK ||
        (st = get_size(c, vc, S, "num_position_embeddings", &v->num_position_embeddings)) != QVL_OK)
        return st;
    /* Pictures are decoded to RGB and cut into 3-channel patches (docs/MODEL.md): a patch
     * embedding for any other channel count would be fed rows of the wrong width. */
    if (v->in_channels != 3)
        return qvl_fail(c->err, QVL_E_UNSUPPORTED,
                        "%s: vision_config.in_channels is %lld: images are RGB, only 3 is "
                        "supported",
                        c->path, (long long)v->in_channels);
    if (v->hidden_size % v->num_heads != 0)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: vision_config.num_heads: must divide hidden_size (%lld %% %lld)",
                        c->path, (long long)v->hidden_size, (long long)v->num_heads);
    int64_t hd = v->hidden_size / v->num_heads;
    if (hd % 4 != 0)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: vision_config: head dim hidden_size/num_heads = %lld must be a "
                        "multiple of 4 (2-D rope)",
                        c->path, (long long)hd);
    int64_t side = (int64_t)llround(sqrt((double)v->num_position_embeddings));
    while (side * side > v->num_position_embeddings) side--;
    while ((side + 1) * (side + 1) <= v->num_position_embeddings) side++;
    if (side * side != v->num_position_embeddings)
        return qvl_fail(c->err, QVL_E_INVALID,
                        "%s: vision_config.num_position_embeddings: %lld is not a square number",
                        c->path, (long long)v->num_position_embeddings);

    v->n_deepstack = 0;
    const cJSON *ds = get_key(vc, "deepstack_visual_indexes");
    if (ds) {
        if (!cJSON_IsArray(ds))
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s: vision_config.deepstack_visual_indexes: expected an array, got %s",
                            c->path, json_type_name(ds));
        int n = cJSON_GetArraySize(ds);
        if (n > QVL_MAX_DEEPSTACK)
            return qvl_fail(c->err, QVL_E_LIMIT,
                            "%s: vision_config.deepstack_visual_indexes: %d entries, at most %d",
                            c->path, n, QVL_MAX_DEEPSTACK);
        for (int i = 0; i < n; i++) {
            int64_t b = 0;
            st = as_int(c, cJSON_GetArrayItem(ds, i), S, "deepstack_visual_indexes", &b);
            if (st != QVL_OK) return st;
            if (b < 0 || b >= v->depth)
                return qvl_fail(c->err, QVL_E_INVALID,
                                "%s: vision_config.deepstack_visual_indexes[%d]: %lld is not a "
                                "block index (depth %lld)",
                                c->path, i, (long long)b, (long long)v->depth);
            v->deepstack_visual_indexes[i] = (int32_t)b;
        }
        v->n_deepstack = n;
    }
    st = get_string(c, vc, S, "hidden_act", "gelu_pytorch_tanh", v->hidden_act,
                    sizeof v->hidden_act);
    if (st != QVL_OK) return st;
    if (strcmp(v->hidden_act, "gelu_pytorch_tanh") != 0 && strcmp(v->hidden_act, "gelu") != 0)
        return qvl_fail(c->err, QVL_E_UNSUPPORTED,
                        "%s: vision_config.hidden_act: '%s' is not supported "
                        "(gelu_pytorch_tanh or gelu)",
                        c->path, v->hidden_act);
    return QVL_OK;
}

static qvl_status parse_root(parse_ctx *c, const cJSON *root, qvl_qwen3vl_config *out) {
    if (!cJSON_IsObject(root))
        return qvl_fail(c->err, QVL_E_PARSE, "%s: expected a JSON object at the top level, got %s",
                        c->path, json_type_name(root));
    qvl_status st = parse_text(c, root, &out->text);
    if (st != QVL_OK) return st;

    /* tie_word_embeddings: the top level wins over text_config. */
    const cJSON *tc = get_key(root, "text_config");
    if (get_key(root, "tie_word_embeddings"))
        st = get_bool(c, root, "", "tie_word_embeddings", false, &out->tie_word_embeddings);
    else
        st =
            get_bool(c, tc, "text_config", "tie_word_embeddings", false, &out->tie_word_embeddings);
    if (st != QVL_OK) return st;

    const cJSON *vc = get_key(root, "vision_config");
    out->has_vision = vc != NULL;
    if (vc) {
        if ((st = parse_vision(c, vc, &out->vision)) != QVL_OK) return st;
        if (out->vision.out_hidden_size != out->text.hidden_size)
            return qvl_fail(c->err, QVL_E_INVALID,
                            "%s: vision_config.out_hidden_size: must equal text_config.hidden_size "
                            "(%lld != %lld)",
                            c->path, (long long)out->vision.out_hidden_size,
                            (long long)out->text.hidden_size);
    }

    struct {
        const char *key;
        int64_t *dst;
    } ids[] = {
        {"image_token_id", &out->image_token_id},
        {"video_token_id", &out->video_token_id},
        {"vision_start_token_id", &out->vision_start_token_id},
        {"vision_end_token_id", &out->vision_end_token_id},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if ((st = get_token_id(c, root, "", ids[i].key, ids[i].dst)) != QVL_OK) return st;
        if (*ids[i].dst >= out->text.vocab_size)
            return qvl_fail(c->err, QVL_E_INVALID, "%s: %s: %lld is not below vocab_size %lld",
                            c->path, ids[i].key, (long long)*ids[i].dst,
                            (long long)out->text.vocab_size);
    }
    return QVL_OK;
}

qvl_status qvl_qwen3vl_config_parse(const char *json, size_t len, const char *path,
                                    qvl_qwen3vl_config *out, qvl_error *err) {
    parse_ctx c = {path ? path : "config.json", err};
    if (!json || !out) return qvl_fail(err, QVL_E_INVALID, "%s: no text to parse", c.path);
    memset(out, 0, sizeof *out);
    /* A config holds a few hundred values nested 4 deep; bounded before cJSON builds its tree
     * (60-100 bytes a value: 16 MiB of "0,0,0,..." would take 0.7 GB). */
    static const qvl_json_limits limits = {.max_depth = 16, .max_values = 100000};
    qvl_status jst = qvl_json_check(json, len, &limits, c.path, err);
    if (jst != QVL_OK) return jst;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = (at && at >= json && at <= json + len) ? (size_t)(at - json) : len;
        return qvl_fail(err, QVL_E_PARSE, "%s: invalid JSON near byte %zu", c.path, off);
    }
    qvl_qwen3vl_config tmp;
    memset(&tmp, 0, sizeof tmp);
    qvl_status st = parse_root(&c, root, &tmp);
    cJSON_Delete(root);
    if (st == QVL_OK) *out = tmp;
    return st;
}

qvl_status qvl_qwen3vl_config_load(const char *path, qvl_qwen3vl_config *out, qvl_error *err) {
    if (!path) return qvl_fail(err, QVL_E_INVALID, "config.json: no path given");
    char *buf;
    size_t n;
    qvl_status st = qvl_read_file(path, CONFIG_MAX_BYTES, QVL_E_IO, &buf, &n, err);
    if (st != QVL_OK) return st;
    st = qvl_qwen3vl_config_parse(buf, n, path, out, err);
    free(buf);
    return st;
}
