/* The normalizer, pre_tokenizer and decoder sections of tokenizer.json. Only what byte-level
 * BPE tokenizers use is accepted; anything else is refused with the section and type named,
 * rather than silently tokenizing differently from `tokenizers`. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer_internal.h"

/* The split ByteLevel applies itself when use_regex is true (GPT-2's pattern). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *type_of(const cJSON *node) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* ---- normalizer ---- */

static qvl_status parse_one_normalizer(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                       const char *what, qvl_error *err) {
    char buf[64];
    if (!cJSON_IsObject(node))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s: expected an object, found %s", name, what,
                        qvl_tok_json_describe(node, buf, sizeof buf));
    const char *type = type_of(node);
    if (!type) return qvl_fail(err, QVL_E_PARSE, "%s: %s.type: missing", name, what);
    if (strcmp(type, "NFC") == 0) {
        tok->nfc = true;
        return QVL_OK;
    }
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, "normalizers");
        if (!cJSON_IsArray(list))
            return qvl_fail(err, QVL_E_PARSE, "%s: %s.normalizers: expected an array", name, what);
        const cJSON *item;
        size_t i = 0;
        cJSON_ArrayForEach(item, list) {
            char sub[96];
            snprintf(sub, sizeof sub, "normalizer.normalizers[%zu]", i++);
            /* a nested Sequence is not something tokenizers writes; keep one level */
            const char *t = cJSON_IsObject(item) ? type_of(item) : NULL;
            if (t && strcmp(t, "Sequence") == 0)
                return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s: unsupported normalizer Sequence",
                                name, sub);
            qvl_status st = parse_one_normalizer(tok, item, name, sub, err);
            if (st != QVL_OK) return st;
        }
        return QVL_OK;
    }
    return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s: unsupported normalizer %s", name, what, type);
}

qvl_status qvl_tok_parse_normalizer(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                qvl_error *err) {
    tok->nfc = false;
    if (!node || cJSON_IsNull(node)) return QVL_OK;
    return parse_one_normalizer(tok, node, name, "normalizer", err);
}

/* ---- pre_tokenizer ---- */

static qvl_status add_stage(qvl_tokenizer *tok, const char *pattern, bool literal,
                            const char *name, const char *what, qvl_error *err) {
    if (tok->n_stages == TOK_MAX_SPLIT_STAGES)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s: more than %d splitting steps", name, what,
                        TOK_MAX_SPLIT_STAGES);
    if (!pattern[0])
        return qvl_fail(err, QVL_E_PARSE, "%s: %s: empty split pattern", name, what);
    /* PCRE2_UCP makes \s, \w and \d Unicode-aware like the Oniguruma regexes of `tokenizers`;
     * PCRE2 does not allow it together with PCRE2_LITERAL (which needs no classes anyway). */
    uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int code;
    PCRE2_SIZE offset;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, &code,
                                   &offset, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return qvl_fail(err, QVL_E_PARSE, "%s: %s: bad regex at offset %zu: %s", name, what,
                        (size_t)offset, (const char *)msg);
    }
    tok_split_stage *s = &tok->stages[tok->n_stages++];
    s->code = re;
    /* JIT is an optimisation: without it (or when its stack runs out) the interpreter runs.
     * QVL_PCRE2_JIT=0 turns it off: valgrind cannot follow JIT-generated code and reports
     * its word-wide reads near the end of the subject as uninitialised (scripts/valgrind.sh). */
    const char *jit_env = getenv("QVL_PCRE2_JIT");
    bool jit_off = jit_env && strcmp(jit_env, "0") == 0;
    s->jit = !jit_off && pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return QVL_OK;
}

static qvl_status parse_split(qvl_tokenizer *tok, const cJSON *node, const char *name,
                              const char *what, qvl_error *err) {
    const char *behavior;
    qvl_status st = qvl_tok_json_opt_string(node, "behavior", &behavior, name, what, err);
    if (st != QVL_OK) return st;
    if (!behavior || strcmp(behavior, "Isolated") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: %s.behavior: unsupported split behavior %s (only Isolated)", name,
                        what, behavior ? behavior : "(missing)");
    bool invert;
    if ((st = qvl_tok_json_bool(node, "invert", false, &invert, name, what, err))) return st;
    if (invert)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s.invert: true is not supported", name, what);
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(node, "pattern");
    if (!cJSON_IsObject(pattern))
        return qvl_fail(err, QVL_E_PARSE, "%s: %s.pattern: missing or not an object", name, what);
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pattern, "Regex");
    const cJSON *string = cJSON_GetObjectItemCaseSensitive(pattern, "String");
    if (cJSON_IsString(regex)) return add_stage(tok, regex->valuestring, false, name, what, err);
    if (cJSON_IsString(string)) return add_stage(tok, string->valuestring, true, name, what, err);
    return qvl_fail(err, QVL_E_PARSE, "%s: %s.pattern: needs a Regex or String string", name, what);
}

static qvl_status parse_byte_level(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                   const char *what, qvl_error *err) {
    bool prefix, use_regex;
    qvl_status st;
    if ((st = qvl_tok_json_bool(node, "add_prefix_space", false, &prefix, name, what, err)) ||
        (st = qvl_tok_json_bool(node, "use_regex", true, &use_regex, name, what, err)))
        return st;
    if (prefix)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s.add_prefix_space: true is not supported",
                        name, what);
    if (use_regex) return add_stage(tok, gpt2_pattern, false, name, what, err);
    return QVL_OK;
}

qvl_status qvl_tok_parse_pre_tokenizer(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                   qvl_error *err) {
    char buf[64];
    if (!node || cJSON_IsNull(node))
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: pre_tokenizer: missing (a byte-level BPE needs ByteLevel)", name);
    if (!cJSON_IsObject(node))
        return qvl_fail(err, QVL_E_PARSE, "%s: pre_tokenizer: expected an object, found %s", name,
                        qvl_tok_json_describe(node, buf, sizeof buf));
    const char *type = type_of(node);
    if (!type) return qvl_fail(err, QVL_E_PARSE, "%s: pre_tokenizer.type: missing", name);
    if (strcmp(type, "ByteLevel") == 0)
        return parse_byte_level(tok, node, name, "pre_tokenizer", err);
    if (strcmp(type, "Sequence") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: pre_tokenizer: unsupported pre-tokenizer %s",
                        name, type);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, "pretokenizers");
    if (!cJSON_IsArray(list))
        return qvl_fail(err, QVL_E_PARSE, "%s: pre_tokenizer.pretokenizers: expected an array",
                        name);
    /* Splits first, then exactly one ByteLevel at the end. */
    bool byte_level = false;
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, list) {
        char what[96];
        snprintf(what, sizeof what, "pre_tokenizer.pretokenizers[%zu]", i++);
        const char *t = cJSON_IsObject(item) ? type_of(item) : NULL;
        if (!t)
            return qvl_fail(err, QVL_E_PARSE, "%s: %s: expected an object with a type", name, what);
        if (byte_level)
            return qvl_fail(err, QVL_E_UNSUPPORTED,
                            "%s: %s: unsupported pre-tokenizer %s after ByteLevel", name, what, t);
        qvl_status st;
        if (strcmp(t, "Split") == 0) {
            st = parse_split(tok, item, name, what, err);
        } else if (strcmp(t, "ByteLevel") == 0) {
            st = parse_byte_level(tok, item, name, what, err);
            byte_level = true;
        } else {
            return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: %s: unsupported pre-tokenizer %s", name,
                            what, t);
        }
        if (st != QVL_OK) return st;
    }
    if (!byte_level)
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)",
                        name);
    return QVL_OK;
}

void qvl_tok_free_pre_tokenizer(qvl_tokenizer *tok) {
    for (size_t i = 0; i < tok->n_stages; i++) pcre2_code_free(tok->stages[i].code);
    tok->n_stages = 0;
}

/* ---- decoder ---- */

qvl_status qvl_tok_parse_decoder(const cJSON *node, const char *name, qvl_error *err) {
    char buf[64];
    if (!node || cJSON_IsNull(node)) return QVL_OK;
    if (!cJSON_IsObject(node))
        return qvl_fail(err, QVL_E_PARSE, "%s: decoder: expected an object, found %s", name,
                        qvl_tok_json_describe(node, buf, sizeof buf));
    const char *type = type_of(node);
    if (!type) return qvl_fail(err, QVL_E_PARSE, "%s: decoder.type: missing", name);
    if (strcmp(type, "ByteLevel") != 0)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: decoder: unsupported decoder %s", name, type);
    return QVL_OK;
}
