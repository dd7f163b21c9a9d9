/* Added tokens: parsing the added_tokens array (finding them in text: tokenizer_match.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qvl/checked.h"
#include "tokenizer_internal.h"

qvl_status qvl_tok_parse_added_tokens(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                  qvl_error *err) {
    char buf[64], what[64];
    if (!node || cJSON_IsNull(node)) return QVL_OK;
    if (!cJSON_IsArray(node))
        return qvl_fail(err, QVL_E_PARSE, "%s: added_tokens: expected an array, found %s", name,
                        qvl_tok_json_describe(node, buf, sizeof buf));
    size_t n = (size_t)cJSON_GetArraySize(node);
    if (n == 0) return QVL_OK;
    tok->added = calloc(n, sizeof *tok->added);
    if (!tok->added) return qvl_fail(err, QVL_E_NOMEM, "%s: added_tokens: out of memory", name);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, node) {
        snprintf(what, sizeof what, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(item))
            return qvl_fail(err, QVL_E_PARSE, "%s: %s: expected an object, found %s", name, what,
                            qvl_tok_json_describe(item, buf, sizeof buf));
        tok_added *a = &tok->added[i];
        char id_what[96];
        snprintf(id_what, sizeof id_what, "%s.id", what);
        qvl_status st = qvl_tok_json_id(cJSON_GetObjectItemCaseSensitive(item, "id"), name, id_what,
                                    &a->id, err);
        if (st != QVL_OK) return st;
        const char *content;
        st = qvl_tok_json_opt_string(item, "content", &content, name, what, err);
        if (st != QVL_OK) return st;
        if (!content || !content[0])
            return qvl_fail(err, QVL_E_PARSE, "%s: %s.content: missing or empty", name, what);
        bool single_word;
        if ((st = qvl_tok_json_bool(item, "special", false, &a->special, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "lstrip", false, &a->lstrip, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "rstrip", false, &a->rstrip, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "normalized", true, &a->normalized, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "single_word", false, &single_word, name, what, err)))
            return st;
        if (single_word)
            return qvl_fail(err, QVL_E_UNSUPPORTED,
                            "%s: %s (\"%.40s\"): single_word=true is not supported", name, what,
                            content);
        a->len = strlen(content);
        a->content = malloc(a->len + 1);
        if (!a->content) return qvl_fail(err, QVL_E_NOMEM, "%s: %s: out of memory", name, what);
        memcpy(a->content, content, a->len + 1);
        tok->n_added = ++i;
    }
    qvl_status st = qvl_tok_matcher_build(&tok->raw_matcher, tok->added, tok->n_added, false, err);
    if (st == QVL_OK)
        st = qvl_tok_matcher_build(&tok->norm_matcher, tok->added, tok->n_added, true, err);
    return st;
}
