/* A tokenizer from GGUF-style lists (qvl/tokenizer_lists.h): the lists are written out as the
 * tokenizer.json they stand for and loaded by qvl_tokenizer_load_buffer, so both ways of
 * loading share one parser, one set of checks and one encoder. */
#include "qvl/tokenizer_lists.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* The sections of Qwen2's tokenizer.json that a GGUF file names only as pre = "qwen2": NFC,
 * Qwen2's split regex, byte level (the pattern is the model's, from its tokenizer.json). */
static const char qwen2_sections[] =
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|"
    " ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
    "\"use_regex\":false}]},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":false,"
    "\"use_regex\":false},";

static bool put(tok_bytes *b, const char *s) { return qvl_tok_bytes_append(b, s, strlen(s)); }

/* s as a JSON string literal. */
static bool put_string(tok_bytes *b, const qvl_str *s) {
    if (!put(b, "\"")) return false;
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->data[i];
        if (c != '"' && c != '\\' && c >= 0x20) {
            run++;
            continue;
        }
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else snprintf(esc, sizeof esc, "\\u%04x", c);
        if (!qvl_tok_bytes_append(b, s->data + i - run, run) || !put(b, esc)) return false;
        run = 0;
    }
    return qvl_tok_bytes_append(b, s->data + s->len - run, run) && put(b, "\"");
}

static bool put_int(tok_bytes *b, long long v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", v);
    return put(b, num);
}

static qvl_status check_lists(const qvl_tokenizer_lists *l, const char *name, qvl_error *err) {
    if (!l->model || strcmp(l->model, "gpt2") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: tokenizer model \"%s\" is not supported (only gpt2: byte-level BPE)",
                        name, l->model ? l->model : "(none)");
    if (!l->pre || strcmp(l->pre, "qwen2") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: pre-tokenizer \"%s\" is not supported (only qwen2)", name,
                        l->pre ? l->pre : "(none)");
    if (l->n_tokens == 0 || !l->tokens)
        return qvl_fail(err, QVL_E_PARSE, "%s: the tokenizer has no tokens", name);
    if (l->n_tokens > (size_t)QVL_TOKENIZER_MAX_ID)
        return qvl_fail(err, QVL_E_LIMIT, "%s: %zu tokens, more than qvl accepts (%d)", name,
                        l->n_tokens, (int)QVL_TOKENIZER_MAX_ID);
    if (l->n_merges && !l->merges)
        return qvl_fail(err, QVL_E_INVALID, "%s: merges missing", name);
    for (size_t i = 0; i < l->n_tokens; i++) {
        int32_t t = l->types ? l->types[i] : QVL_TOKEN_NORMAL;
        if (t < QVL_TOKEN_NORMAL || t > QVL_TOKEN_BYTE)
            return qvl_fail(err, QVL_E_PARSE, "%s: token %zu has unknown type %d", name, i, (int)t);
        if (t == QVL_TOKEN_BYTE || t == QVL_TOKEN_UNKNOWN)
            return qvl_fail(err, QVL_E_UNSUPPORTED,
                            "%s: token %zu has type %s, which a byte-level BPE does not use", name,
                            i, t == QVL_TOKEN_BYTE ? "BYTE" : "UNKNOWN");
        if (t == QVL_TOKEN_UNUSED) continue;
        if (!l->tokens[i].data || memchr(l->tokens[i].data, '\0', l->tokens[i].len))
            return qvl_fail(err, QVL_E_PARSE, "%s: token %zu holds a NUL byte", name, i);
    }
    for (size_t i = 0; i < l->n_merges; i++)
        if (!l->merges[i].data || memchr(l->merges[i].data, '\0', l->merges[i].len))
            return qvl_fail(err, QVL_E_PARSE, "%s: merge %zu holds a NUL byte", name, i);
    return QVL_OK;
}

/* The tokenizer.json the lists stand for. */
static bool write_json(const qvl_tokenizer_lists *l, tok_bytes *b) {
    bool ok = put(b, "{\"version\":\"1.0\",\"added_tokens\":[");
    bool first = true;
    for (size_t i = 0; ok && i < l->n_tokens; i++) {
        int32_t t = l->types ? l->types[i] : QVL_TOKEN_NORMAL;
        if (t != QVL_TOKEN_CONTROL && t != QVL_TOKEN_USER_DEFINED) continue;
        ok = put(b, first ? "{\"id\":" : ",{\"id\":") && put_int(b, (long long)i) &&
             put(b, ",\"content\":") && put_string(b, &l->tokens[i]) &&
             put(b, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                    "\"normalized\":false,\"special\":") &&
             put(b, t == QVL_TOKEN_CONTROL ? "true}" : "false}");
        first = false;
    }
    ok = ok && put(b, "],") && put(b, qwen2_sections) &&
         put(b, "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
                "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\","
                "\"fuse_unk\":false,\"byte_fallback\":false,\"ignore_merges\":false,\"vocab\":{");
    first = true;
    for (size_t i = 0; ok && i < l->n_tokens; i++) {
        int32_t t = l->types ? l->types[i] : QVL_TOKEN_NORMAL;
        if (t != QVL_TOKEN_NORMAL) continue;
        ok = (first || put(b, ",")) && put_string(b, &l->tokens[i]) && put(b, ":") &&
             put_int(b, (long long)i);
        first = false;
    }
    ok = ok && put(b, "},\"merges\":[");
    for (size_t i = 0; ok && i < l->n_merges; i++)
        ok = (i == 0 || put(b, ",")) && put_string(b, &l->merges[i]);
    return ok && put(b, "]}}");
}

qvl_status qvl_tokenizer_from_lists(const qvl_tokenizer_lists *l, const char *name,
                                    qvl_tokenizer **out, qvl_error *err) {
    *out = NULL;
    qvl_status st = check_lists(l, name, err);
    if (st != QVL_OK) return st;
    tok_bytes json = {0};
    if (!write_json(l, &json)) {
        free(json.data);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory building the tokenizer", name);
    }
    if (json.len > QVL_TOKENIZER_MAX_FILE_BYTES) {
        free(json.data);
        return qvl_fail(err, QVL_E_LIMIT, "%s: the tokenizer's lists are larger than %zu MiB",
                        name, QVL_TOKENIZER_MAX_FILE_BYTES >> 20);
    }
    st = qvl_tokenizer_load_buffer(json.data, json.len, name, out, err);
    free(json.data);
    return st;
}
