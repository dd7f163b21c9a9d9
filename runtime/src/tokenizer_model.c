/* The "model" section of tokenizer.json: a BPE vocab (token -> id) and its merges (rank =
 * position in the list), in either the "left right" string form or the newer [left, right]
 * pair form. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer_internal.h"

static qvl_status check_options(qvl_tokenizer *tok, const cJSON *model, const char *name,
                                qvl_error *err) {
    char buf[64];
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!type) return qvl_fail(err, QVL_E_PARSE, "%s: model.type: missing", name);
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: model.type: %s is not supported (only BPE)",
                        name, qvl_tok_json_describe(type, buf, sizeof buf));

    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) &&
        !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: model.dropout: %s is not supported", name,
                        qvl_tok_json_describe(dropout, buf, sizeof buf));

    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *s;
        qvl_status st = qvl_tok_json_opt_string(model, affixes[i], &s, name, "model", err);
        if (st != QVL_OK) return st;
        if (s && s[0])
            return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: model.%s: \"%.40s\" is not supported",
                            name, affixes[i], s);
    }
    bool byte_fallback;
    qvl_status st;
    if ((st = qvl_tok_json_bool(model, "byte_fallback", false, &byte_fallback, name, "model",
                                err)) ||
        (st = qvl_tok_json_bool(model, "fuse_unk", false, &tok->fuse_unk, name, "model", err)) ||
        (st = qvl_tok_json_bool(model, "ignore_merges", false, &tok->ignore_merges, name, "model",
                                err)))
        return st;
    if (byte_fallback)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: model.byte_fallback: true is not supported",
                        name);
    return QVL_OK;
}

static qvl_status parse_vocab(qvl_tokenizer *tok, const cJSON *vocab, const char *name,
                              int32_t *max_id, qvl_error *err) {
    char buf[64];
    if (!vocab) return qvl_fail(err, QVL_E_PARSE, "%s: model.vocab: missing", name);
    if (!cJSON_IsObject(vocab))
        return qvl_fail(err, QVL_E_PARSE, "%s: model.vocab: expected an object, found %s", name,
                        qvl_tok_json_describe(vocab, buf, sizeof buf));
    size_t n = (size_t)cJSON_GetArraySize(vocab);
    if (n == 0) return qvl_fail(err, QVL_E_PARSE, "%s: model.vocab: empty", name);
    if (n > (size_t)QVL_TOKENIZER_MAX_ID)
        return qvl_fail(err, QVL_E_LIMIT, "%s: model.vocab: %zu tokens exceed the limit", name, n);
    if (!qvl_tok_strmap_init(&tok->vocab, n))
        return qvl_fail(err, QVL_E_NOMEM, "%s: model.vocab: out of memory", name);
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        char what[96]; /* formatted only for errors: this loop runs 100k+ times */
        int32_t id;
        qvl_status st = qvl_tok_json_id(item, name, "model.vocab", &id, NULL);
        if (st != QVL_OK) {
            snprintf(what, sizeof what, "model.vocab[\"%.40s\"]", item->string);
            return qvl_tok_json_id(item, name, what, &id, err);
        }
        int32_t previous;
        if (!qvl_tok_strmap_put(&tok->vocab, item->string, strlen(item->string), id, &previous))
            return qvl_fail(err, QVL_E_NOMEM, "%s: model.vocab: out of memory", name);
        if (previous >= 0) {
            snprintf(what, sizeof what, "model.vocab[\"%.40s\"]", item->string);
            return qvl_fail(err, QVL_E_PARSE, "%s: %s: the token appears twice", name, what);
        }
        if (id > *max_id) *max_id = id;
    }
    return QVL_OK;
}

static qvl_status lookup(const qvl_tokenizer *tok, const char *token, const char *name,
                         size_t index, int32_t *id, qvl_error *err) {
    *id = qvl_tok_strmap_get(&tok->vocab, token, strlen(token));
    if (*id < 0)
        return qvl_fail(err, QVL_E_PARSE,
                        "%s: model.merges[%zu]: token \"%.60s\" is not in the vocab", name, index,
                        token);
    return QVL_OK;
}

static qvl_status parse_merges(qvl_tokenizer *tok, const cJSON *merges, const char *name,
                               qvl_error *err) {
    char buf[64];
    if (!merges) return qvl_fail(err, QVL_E_PARSE, "%s: model.merges: missing", name);
    if (!cJSON_IsArray(merges))
        return qvl_fail(err, QVL_E_PARSE, "%s: model.merges: expected an array, found %s", name,
                        qvl_tok_json_describe(merges, buf, sizeof buf));
    size_t n = (size_t)cJSON_GetArraySize(merges);
    if (!qvl_tok_pairmap_init(&tok->merges, n))
        return qvl_fail(err, QVL_E_NOMEM, "%s: model.merges: out of memory", name);
    tok_bytes pair = {0};
    size_t rank = 0;
    qvl_status st = QVL_OK;
    const cJSON *item;
    cJSON_ArrayForEach(item, merges) {
        const char *left = NULL, *right = NULL;
        size_t left_len = 0;
        if (cJSON_IsString(item)) {
            /* "left right": exactly one space, as `tokenizers` requires */
            const char *s = item->valuestring, *space = strchr(s, ' ');
            if (!space || strchr(space + 1, ' ')) {
                st = qvl_fail(err, QVL_E_PARSE,
                              "%s: model.merges[%zu]: \"%.60s\" is not \"left right\"", name, rank,
                              s);
                break;
            }
            left = s;
            left_len = (size_t)(space - s);
            right = space + 1;
        } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(item, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(item, 1))) {
            left = cJSON_GetArrayItem(item, 0)->valuestring;
            left_len = strlen(left);
            right = cJSON_GetArrayItem(item, 1)->valuestring;
        } else {
            st = qvl_fail(
                err, QVL_E_PARSE,
                "%s: model.merges[%zu]: expected \"left right\" or [left, right], found %s", name,
                rank, qvl_tok_json_describe(item, buf, sizeof buf));
            break;
        }
        /* pair holds left (NUL-terminated by the buffer), then left + right: the merged token */
        pair.len = 0;
        int32_t l, r, merged;
        if (!qvl_tok_bytes_append(&pair, left, left_len)) goto oom;
        if ((st = lookup(tok, pair.data, name, rank, &l, err))) break;
        if ((st = lookup(tok, right, name, rank, &r, err))) break;
        if (!qvl_tok_bytes_append(&pair, right, strlen(right))) goto oom;
        merged = qvl_tok_strmap_get(&tok->vocab, pair.data, pair.len);
        if (merged < 0) {
            st = qvl_fail(err, QVL_E_PARSE,
                          "%s: model.merges[%zu]: merged token \"%.60s\" is not in the vocab", name,
                          rank, pair.data);
            break;
        }
        if (rank >= UINT32_MAX || !qvl_tok_pairmap_put(&tok->merges, l, r, (uint32_t)rank, merged))
            goto oom;
        rank++;
    }
    free(pair.data);
    return st;
oom:
    free(pair.data);
    return qvl_fail(err, QVL_E_NOMEM, "%s: model.merges: out of memory", name);
}

/* Each byte's single-character token, and its character for whole-piece lookups. */
static qvl_status build_byte_tokens(qvl_tokenizer *tok, const cJSON *model, const char *name,
                                    qvl_error *err) {
    for (int b = 0; b < 256; b++) {
        char utf8[4];
        size_t n = qvl_tok_utf8_encode(qvl_tok_byte_to_cp((uint8_t)b), utf8);
        memcpy(tok->byte_char[b], utf8, n);
        tok->byte_char_len[b] = (uint8_t)n;
        tok->byte_token[b] = qvl_tok_strmap_get(&tok->vocab, utf8, n);
    }
    const char *unk;
    qvl_status st = qvl_tok_json_opt_string(model, "unk_token", &unk, name, "model", err);
    if (st != QVL_OK) return st;
    tok->unk_id = -1;
    if (unk) {
        tok->unk_id = qvl_tok_strmap_get(&tok->vocab, unk, strlen(unk));
        if (tok->unk_id < 0)
            return qvl_fail(err, QVL_E_PARSE, "%s: model.unk_token: \"%.40s\" is not in the vocab",
                            name, unk);
    }
    return QVL_OK;
}

qvl_status qvl_tok_parse_model(qvl_tokenizer *tok, const cJSON *model, const char *name,
                           int32_t *max_id, qvl_error *err) {
    char buf[64];
    if (!model) return qvl_fail(err, QVL_E_PARSE, "%s: model: missing", name);
    if (!cJSON_IsObject(model))
        return qvl_fail(err, QVL_E_PARSE, "%s: model: expected an object, found %s", name,
                        qvl_tok_json_describe(model, buf, sizeof buf));
    qvl_status st;
    if ((st = check_options(tok, model, name, err))) return st;
    if ((st =
             parse_vocab(tok, cJSON_GetObjectItemCaseSensitive(model, "vocab"), name, max_id, err)))
        return st;
    if ((st = parse_merges(tok, cJSON_GetObjectItemCaseSensitive(model, "merges"), name, err)))
        return st;
    return build_byte_tokens(tok, model, name, err);
}
