/* The GGUF tokenizer lists of a tokenizer.json (qvl/tokenizer_lists.h), built the way llama.cpp's
 * converter builds them for a byte-level BPE ("gpt2") vocabulary:
 *   - ids 0 .. vocab_size-1, vocab_size being the model's (the embedding's rows), not the
 *     tokenizer's: an id neither the vocabulary nor the added tokens use is "[PAD<id>]", UNUSED;
 *     tokens with ids at or above vocab_size are left out;
 *   - a vocabulary token is NORMAL, in its byte-level form as tokenizer.json holds it;
 *   - an added token keeps its text; it is CONTROL when special or when it looks special
 *     ("<|...|>", "<｜...｜>", "<unused...>", "<pad>", "<mask>"), else USER_DEFINED;
 *   - merges as "left right", in tokenizer.json's order (strings or [left, right] pairs). */
#define _POSIX_C_SOURCE 200809L
#include "qvl/tokenizer_lists.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"

#define TOKENIZER_MAX_BYTES ((size_t)512 << 20)
#define PAD_NAME_BYTES 24 /* "[PAD" + up to 19 digits + "]" + NUL */

struct qvl_tokenizer_lists_owned {
    qvl_tokenizer_lists l;
    cJSON *root;       /* token texts point into it */
    qvl_str *tokens;
    int32_t *types;
    qvl_str *merges;
    char *pads;        /* PAD_NAME_BYTES per id, used for the ids no token has */
    char *joined;      /* merges given as pairs, joined with a space */
};

void qvl_tokenizer_lists_free(qvl_tokenizer_lists_owned *o) {
    if (!o) return;
    cJSON_Delete(o->root);
    free(o->tokens);
    free(o->types);
    free(o->merges);
    free(o->pads);
    free(o->joined);
    free(o);
}

const qvl_tokenizer_lists *qvl_tokenizer_lists_get(const qvl_tokenizer_lists_owned *o) {
    return &o->l;
}

static bool looks_special(const char *s) {
    const size_t n = strlen(s);
    static const char fw_open[] = "<\xef\xbd\x9c", fw_close[] = "\xef\xbd\x9c>"; /* <｜ ｜> */
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(s, fw_open, 4) && !strcmp(s + n - 4, fw_close)) return true;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return true;
    return !strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") ||
           !strcmp(s, "[@BOS@]");
}

/* An id from a JSON number: an integer in 0..INT32_MAX, else -1. */
static int64_t json_id(const cJSON *v) {
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 2147483647.0 ||
        v->valuedouble != (double)(int64_t)v->valuedouble)
        return -1;
    return (int64_t)v->valuedouble;
}

static qvl_status set_token(qvl_tokenizer_lists_owned *o, const char *path, int64_t id,
                            int64_t vocab, const char *text, int32_t type, qvl_error *err) {
    if (id < 0)
        return qvl_fail(err, QVL_E_INVALID, "%s: token '%.64s' has no valid id", path, text);
    if (id >= vocab) return QVL_OK; /* beyond the model's embedding: the converter drops it */
    o->tokens[id] = (qvl_str){text, strlen(text)};
    o->types[id] = type;
    return QVL_OK;
}

static qvl_status read_merges(qvl_tokenizer_lists_owned *o, const char *path, const cJSON *m,
                              qvl_error *err) {
    const int n = cJSON_GetArraySize(m) > 0 ? cJSON_GetArraySize(m) : 0;
    size_t joined = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(m, i);
        const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);
        if (cJSON_IsString(e)) continue;
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsString(a) ||
            !cJSON_IsString(b))
            return qvl_fail(err, QVL_E_INVALID, "%s: model.merges[%d] is neither \"a b\" nor "
                            "[a, b]", path, i);
        joined += strlen(a->valuestring) + strlen(b->valuestring) + 2;
    }
    o->merges = calloc(n > 0 ? (size_t)n : 1, sizeof *o->merges);
    o->joined = malloc(joined ? joined : 1);
    if (!o->merges || !o->joined) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    char *at = o->joined;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(m, i);
        if (cJSON_IsString(e)) {
            o->merges[i] = (qvl_str){e->valuestring, strlen(e->valuestring)};
            continue;
        }
        const char *a = cJSON_GetArrayItem(e, 0)->valuestring;
        const char *b = cJSON_GetArrayItem(e, 1)->valuestring;
        const int len = sprintf(at, "%s %s", a, b);
        o->merges[i] = (qvl_str){at, (size_t)len};
        at += len + 1;
    }
    o->l.merges = o->merges;
    o->l.n_merges = (size_t)n;
    return QVL_OK;
}

static qvl_status build(qvl_tokenizer_lists_owned *o, const char *path, int64_t vocab,
                        qvl_error *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o->root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(o->root, "added_tokens");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: model.type is not BPE: GGUF's gpt2 "
                        "tokenizer needs a byte-level BPE", path);
    if (!cJSON_IsObject(v) || !cJSON_IsArray(m) || (added && !cJSON_IsArray(added)))
        return qvl_fail(err, QVL_E_INVALID, "%s: model.vocab, model.merges or added_tokens is "
                        "missing or of the wrong type", path);
    o->tokens = calloc((size_t)vocab, sizeof *o->tokens);
    o->types = calloc((size_t)vocab, sizeof *o->types);
    o->pads = malloc((size_t)vocab * PAD_NAME_BYTES);
    if (!o->tokens || !o->types || !o->pads) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = QVL_OK;
    for (const cJSON *e = v->child; st == QVL_OK && e; e = e->next)
        st = set_token(o, path, json_id(e), vocab, e->string, QVL_TOKEN_NORMAL, err);
    for (const cJSON *e = added ? added->child : NULL; st == QVL_OK && e; e = e->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "special");
        if (!cJSON_IsString(c))
            return qvl_fail(err, QVL_E_INVALID, "%s: an added token has no content", path);
        const bool special = cJSON_IsTrue(sp) || looks_special(c->valuestring);
        st = set_token(o, path, json_id(cJSON_GetObjectItemCaseSensitive(e, "id")), vocab,
                       c->valuestring, special ? QVL_TOKEN_CONTROL : QVL_TOKEN_USER_DEFINED,
                       err);
    }
    for (int64_t i = 0; st == QVL_OK && i < vocab; i++) {
        if (o->tokens[i].data) continue;
        char *name = o->pads + (size_t)i * PAD_NAME_BYTES;
        const int len = snprintf(name, PAD_NAME_BYTES, "[PAD%lld]", (long long)i);
        o->tokens[i] = (qvl_str){name, (size_t)len};
        o->types[i] = QVL_TOKEN_UNUSED;
    }
    if (st == QVL_OK) st = read_merges(o, path, m, err);
    o->l.model = "gpt2";
    o->l.pre = "qwen2";
    o->l.tokens = o->tokens;
    o->l.n_tokens = (size_t)vocab;
    o->l.types = o->types;
    return st;
}

qvl_status qvl_tokenizer_lists_from_json(const char *path, int64_t vocab_size,
                                         qvl_tokenizer_lists_owned **out, qvl_error *err) {
    *out = NULL;
    if (vocab_size < 1 || vocab_size > 2147483647)
        return qvl_fail(err, QVL_E_INVALID, "%s: vocabulary size %lld", path,
                        (long long)vocab_size);
    char *text = NULL;
    size_t len = 0;
    qvl_status st = qvl_read_file(path, TOKENIZER_MAX_BYTES, QVL_E_NOT_FOUND, &text, &len, err);
    if (st != QVL_OK) return st;
    qvl_tokenizer_lists_owned *o = calloc(1, sizeof *o);
    if (!o) {
        free(text);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    o->root = cJSON_ParseWithLength(text, len);
    free(text);
    st = o->root ? build(o, path, vocab_size, err)
                 : qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON", path);
    if (st != QVL_OK) {
        qvl_tokenizer_lists_free(o);
        return st;
    }
    *out = o;
    return QVL_OK;
}
