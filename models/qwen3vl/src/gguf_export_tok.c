/* tokenizer.* for a GGUF written from a Hugging Face directory, as the converter (gguf-py's
 * SpecialVocab) takes them:
 *   - tokenizer.ggml.model/pre/tokens/token_type/merges from tokenizer.json
 *     (qvl_tokenizer_lists_from_json);
 *   - the special ids: tokenizer_config.json's bos_token, eos_token, pad_token (a string or
 *     {"content": ...}) looked up in the vocabulary, then config.json's bos/eos ids for those
 *     still unset; add_bos_token / add_eos_token when tokenizer_config.json has them;
 *   - tokenizer.chat_template: tokenizer_config.json's chat_template (a string, or the entry
 *     named "default" of a list), else chat_template.jinja, else chat_template.json's. */
#define _POSIX_C_SOURCE 200809L
#include "gguf_export.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"
#include "qvl/tokenizer_lists.h"

#define CONFIG_MAX_BYTES ((size_t)64 << 20)

enum { BOS, EOS, PAD, N_SPECIAL };
static const char *const special_key[N_SPECIAL] = {"bos_token", "eos_token", "pad_token"};
static const char *const special_gguf[N_SPECIAL] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id"};

/* A JSON file of the directory; *root NULL (and QVL_OK) when the file is absent. */
static qvl_status read_json(const char *dir, const char *name, cJSON **root, qvl_error *err) {
    *root = NULL;
    char *path = qvl_path_join(dir, name), *text = NULL;
    size_t len = 0;
    if (!path) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = qvl_read_file(path, CONFIG_MAX_BYTES, QVL_E_NOT_FOUND, &text, &len, err);
    if (st == QVL_OK && !(*root = cJSON_ParseWithLength(text, len)))
        st = qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON", path);
    free(path);
    free(text);
    return st == QVL_E_NOT_FOUND ? QVL_OK : st;
}

static int64_t find_token(const qvl_tokenizer_lists *l, const char *text) {
    const size_t n = strlen(text);
    for (size_t i = 0; i < l->n_tokens; i++)
        if (l->tokens[i].len == n && !memcmp(l->tokens[i].data, text, n)) return (int64_t)i;
    return -1;
}

static qvl_status put_lists(qvl_gguf_writer *w, const qvl_tokenizer_lists *l, qvl_error *err) {
    const size_t n = l->n_tokens > l->n_merges ? l->n_tokens : l->n_merges;
    const char **p = malloc((n ? n : 1) * sizeof *p);
    size_t *len = malloc((n ? n : 1) * sizeof *len);
    qvl_status st = p && len ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK)
        st = qvl_gguf_writer_str(w, "tokenizer.ggml.model", l->model, strlen(l->model), err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_str(w, "tokenizer.ggml.pre", l->pre, strlen(l->pre), err);
    for (size_t i = 0; st == QVL_OK && i < l->n_tokens; i++)
        p[i] = l->tokens[i].data, len[i] = l->tokens[i].len;
    if (st == QVL_OK)
        st = qvl_gguf_writer_str_array(w, "tokenizer.ggml.tokens", p, len, l->n_tokens, err);
    if (st == QVL_OK)
        st = qvl_gguf_writer_array(w, "tokenizer.ggml.token_type", QVL_GGUF_I32, l->types,
                                   l->n_tokens, err);
    for (size_t i = 0; st == QVL_OK && i < l->n_merges; i++)
        p[i] = l->merges[i].data, len[i] = l->merges[i].len;
    if (st == QVL_OK)
        st = qvl_gguf_writer_str_array(w, "tokenizer.ggml.merges", p, len, l->n_merges, err);
    free(p);
    free(len);
    return st;
}

/* The special ids and flags, in the converter's order: those tokenizer_config.json names
 * first, then config.json's. */
static qvl_status put_specials(qvl_gguf_writer *w, const qvl_qwen3vl_export *x,
                               const qvl_tokenizer_lists *l, const cJSON *tc, qvl_error *err) {
    int64_t from_config[N_SPECIAL] = {x->cfg->text.bos_token_id, x->cfg->text.eos_token_id, -1};
    qvl_status st = QVL_OK;
    for (int k = 0; st == QVL_OK && k < N_SPECIAL; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, special_key[k]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        const int64_t id = cJSON_IsString(v) ? find_token(l, v->valuestring) : -1;
        if (id < 0) continue;
        st = qvl_gguf_writer_u32(w, special_gguf[k], (uint32_t)id, err);
        from_config[k] = -1;
    }
    for (int k = 0; st == QVL_OK && k < N_SPECIAL; k++)
        if (from_config[k] >= 0 && (size_t)from_config[k] < l->n_tokens)
            st = qvl_gguf_writer_u32(w, special_gguf[k], (uint32_t)from_config[k], err);
    static const char *const flags[2][2] = {{"add_bos_token", "tokenizer.ggml.add_bos_token"},
                                            {"add_eos_token", "tokenizer.ggml.add_eos_token"}};
    for (int k = 0; st == QVL_OK && k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, flags[k][0]);
        if (cJSON_IsBool(v)) st = qvl_gguf_writer_bool(w, flags[k][1], cJSON_IsTrue(v), err);
    }
    return st;
}

/* The chat template (malloc'd), NULL when the directory has none. */
static qvl_status chat_template(const char *dir, const cJSON *tc, char **out, qvl_error *err) {
    *out = NULL;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
    if (cJSON_IsArray(t)) { /* [{"name": ..., "template": ...}]: the default one */
        const cJSON *e = NULL, *found = NULL;
        cJSON_ArrayForEach(e, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
                found = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        t = found;
    }
    if (cJSON_IsString(t))
        return (*out = strdup(t->valuestring)) ? QVL_OK
                                               : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    char *path = qvl_path_join(dir, "chat_template.jinja");
    size_t len = 0;
    if (!path) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = qvl_read_file(path, CONFIG_MAX_BYTES, QVL_E_NOT_FOUND, out, &len, err);
    free(path);
    if (st != QVL_E_NOT_FOUND) return st;
    cJSON *root = NULL;
    if ((st = read_json(dir, "chat_template.json", &root, err)) != QVL_OK) return st;
    t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (cJSON_IsString(t) && !(*out = strdup(t->valuestring)))
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    cJSON_Delete(root);
    return st;
}

qvl_status export_dir_tokenizer(qvl_gguf_writer *w, const qvl_qwen3vl_export *x,
                                qvl_error *err) {
    char *path = qvl_path_join(x->files->dir, "tokenizer.json"), *tmpl = NULL;
    if (!path) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_tokenizer_lists_owned *lists = NULL;
    cJSON *tc = NULL;
    qvl_status st = qvl_tokenizer_lists_from_json(path, x->cfg->text.vocab_size, &lists, err);
    free(path);
    if (st == QVL_OK) st = read_json(x->files->dir, "tokenizer_config.json", &tc, err);
    if (st == QVL_OK) st = put_lists(w, qvl_tokenizer_lists_get(lists), err);
    if (st == QVL_OK) st = put_specials(w, x, qvl_tokenizer_lists_get(lists), tc, err);
    if (st == QVL_OK) st = chat_template(x->files->dir, tc, &tmpl, err);
    if (st == QVL_OK && tmpl)
        st = qvl_gguf_writer_str(w, "tokenizer.chat_template", tmpl, strlen(tmpl), err);
    free(tmpl);
    cJSON_Delete(tc);
    qvl_tokenizer_lists_free(lists);
    return st;
}
