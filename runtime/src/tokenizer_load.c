/* Loading tokenizer.json: reading the file, the top-level sections, and the per-id table used
 * for decoding. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qvl/file.h"
#include "qvl/json_bounds.h"
#include "tokenizer_internal.h"

/* A vocab token's bytes: its characters mapped back through the byte table. A token with a
 * character outside the table stands for its own UTF-8 text (what the ByteLevel decoder of
 * `tokenizers` does). */
static bool append_token_bytes(tok_bytes *pool, const char *token, size_t len) {
    size_t start = pool->len;
    const unsigned char *p = (const unsigned char *)token;
    for (size_t i = 0; i < len;) {
        size_t clen = qvl_tok_utf8_char_len(p + i, len - i, NULL);
        int byte = clen ? qvl_tok_cp_to_byte(qvl_tok_utf8_decode(p + i, clen)) : -1;
        if (byte < 0) {
            pool->len = start;
            return qvl_tok_bytes_append(pool, token, len);
        }
        uint8_t b = (uint8_t)byte;
        if (!qvl_tok_bytes_append(pool, &b, 1)) return false;
        i += clen;
    }
    return true;
}

/* Every id's bytes and flags; the pool keeps each piece NUL-terminated. */
static qvl_status build_entries(qvl_tokenizer *tok, int32_t max_id, const char *name,
                                qvl_error *err) {
    tok->n_entries = max_id + 1;
    tok->entries = calloc((size_t)tok->n_entries, sizeof *tok->entries);
    if (!tok->entries) goto oom;
    const tok_strmap *v = &tok->vocab;
    for (size_t i = 0; i <= v->mask; i++) {
        const tok_strmap_slot *s = &v->slots[i];
        if (s->key_off == UINT32_MAX) continue;
        tok_entry *e = &tok->entries[s->value];
        if (e->flags & TOK_PRESENT)
            return qvl_fail(err, QVL_E_PARSE, "%s: model.vocab: id %d is used by two tokens", name,
                            (int)s->value);
        size_t off = tok->piece_bytes.len;
        if (!append_token_bytes(&tok->piece_bytes, v->pool.data + s->key_off, s->key_len) ||
            !qvl_tok_bytes_append(&tok->piece_bytes, "", 1))
            goto oom;
        e->off = (uint32_t)off;
        e->len = (uint32_t)(tok->piece_bytes.len - off - 1);
        e->flags = TOK_PRESENT;
    }
    /* added tokens override a vocab entry with the same id */
    for (size_t i = 0; i < tok->n_added; i++) {
        const tok_added *a = &tok->added[i];
        tok_entry *e = &tok->entries[a->id];
        size_t off = tok->piece_bytes.len;
        if (!qvl_tok_bytes_append(&tok->piece_bytes, a->content, a->len + 1)) goto oom;
        e->off = (uint32_t)off;
        e->len = (uint32_t)a->len;
        e->flags = TOK_PRESENT | TOK_ADDED | (a->special ? TOK_SPECIAL : 0);
    }
    return QVL_OK;
oom:
    return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory building the token table", name);
}

static qvl_status init_encode_state(qvl_tokenizer *tok, const char *name, qvl_error *err) {
    tok->match_data = pcre2_match_data_create(8, NULL);
    tok->match_ctx = pcre2_match_context_create(NULL);
    if (!tok->match_data || !tok->match_ctx || !qvl_tok_strmap_init(&tok->cache, 65536))
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", name);
    /* A JIT stack larger than the 32 KiB default; if even this is exhausted the interpreter
     * takes over (see tokenizer_pretok.c). Without one, JIT matching still works. */
    tok->jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (tok->jit_stack) pcre2_jit_stack_assign(tok->match_ctx, NULL, tok->jit_stack);
    /* Far below PCRE2's defaults (20 GB of backtracking memory): a Split regex from a stranger's
     * tokenizer.json must not cost that much on any prompt. The step limit is set per match
     * (tokenizer_pretok.c). */
    pcre2_set_depth_limit(tok->match_ctx, QVL_TOK_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(tok->match_ctx, QVL_TOK_REGEX_HEAP_LIMIT_KIB);
    return QVL_OK;
}

static qvl_status load_tree(qvl_tokenizer *tok, const cJSON *root, const char *name,
                            qvl_error *err) {
    char buf[64];
    if (!cJSON_IsObject(root))
        return qvl_fail(err, QVL_E_PARSE, "%s: expected a JSON object at the top, found %s", name,
                        qvl_tok_json_describe(root, buf, sizeof buf));
    int32_t max_id = -1;
    qvl_status st;
    if ((st = qvl_tok_parse_model(tok, cJSON_GetObjectItemCaseSensitive(root, "model"), name,
                                  &max_id, err)) ||
        (st = qvl_tok_parse_added_tokens(
             tok, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name, err)) ||
        (st = qvl_tok_parse_normalizer(tok, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
                                       name, err)) ||
        (st = qvl_tok_parse_pre_tokenizer(
             tok, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), name, err)) ||
        (st = qvl_tok_parse_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), name, err)))
        return st;
    for (size_t i = 0; i < tok->n_added; i++)
        if (tok->added[i].id > max_id) max_id = tok->added[i].id;
    if ((st = build_entries(tok, max_id, name, err))) return st;
    return init_encode_state(tok, name, err);
}

/* What cJSON may build for a tokenizer.json (60-100 bytes of memory a value), decided before it
 * builds anything: a value for each vocabulary entry, three for each merge (["a","b"]), 16 for
 * each added token (its object holds 8), and TOK_JSON_OTHER_VALUES for everything else
 * (normalizer, pre-tokenizer, post-processor, decoder: Qwen's have 40 together). So the tree is
 * proportional to the tokens and merges the tokenizer keeps anyway, and those are bounded too. */
#define TOK_JSON_OTHER_VALUES 4096
/* 1,048,576 entries: about 7 times Qwen's 151,643, 4 times Gemma 3's 262,144. */
#define TOK_MAX_VOCAB ((size_t)1 << 20)
/* Merges per vocabulary entry: a merge makes each token past the single bytes (Qwen: 151,387
 * merges for 151,643 entries), but a converted tokenizer may list several merges that give one
 * token. */
#define TOK_MERGES_PER_TOKEN 4
#define TOK_MAX_ADDED ((size_t)1 << 16)

static qvl_status check_json_shape(const char *json, size_t len, const char *name, qvl_error *err) {
    static const char *const paths[] = {"model.vocab", "model.merges", "added_tokens"};
    size_t c[3];
    qvl_json_shape sh;
    qvl_json_measure_paths(json, len, paths, 3, c, &sh);
    const size_t vocab = c[0], merges = c[1], added = c[2];
    if (sh.max_depth > QVL_TOKENIZER_MAX_JSON_DEPTH)
        return qvl_fail(err, QVL_E_LIMIT, "%s: JSON nests %d levels deep, more than %d", name,
                        sh.max_depth, QVL_TOKENIZER_MAX_JSON_DEPTH);
    if (vocab > TOK_MAX_VOCAB)
        return qvl_fail(err, QVL_E_LIMIT, "%s: model.vocab has %zu entries, more than the limit of %zu",
                        name, vocab, TOK_MAX_VOCAB);
    if (added > TOK_MAX_ADDED)
        return qvl_fail(err, QVL_E_LIMIT, "%s: added_tokens has %zu entries, more than the limit of %zu",
                        name, added, TOK_MAX_ADDED);
    const size_t most = vocab + 3 * merges + 16 * added + TOK_JSON_OTHER_VALUES;
    if (sh.values > most)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: %zu JSON values, more than the %zu that %zu vocabulary entries, %zu "
                        "merges and %zu added tokens need",
                        name, sh.values, most, vocab, merges, added);
    if (merges > TOK_MERGES_PER_TOKEN * vocab + 1024)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: model.merges has %zu entries, more than %d for each of the %zu "
                        "vocabulary entries",
                        name, merges, TOK_MERGES_PER_TOKEN, vocab);
    return QVL_OK;
}

qvl_status qvl_tokenizer_load_buffer(const char *json, size_t len, const char *name,
                                     qvl_tokenizer **out, qvl_error *err) {
    if (!name) name = "tokenizer.json";
    if (!out || (!json && len))
        return qvl_fail(err, QVL_E_INVALID, "qvl_tokenizer_load_buffer: NULL argument");
    *out = NULL;
    if (len > QVL_TOKENIZER_MAX_FILE_BYTES)
        return qvl_fail(err, QVL_E_LIMIT, "%s: %zu bytes is larger than the %zu byte limit", name,
                        len, QVL_TOKENIZER_MAX_FILE_BYTES);
    qvl_status jst = check_json_shape(json ? json : "", len, name, err);
    if (jst != QVL_OK) return jst;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json ? json : "", len, &end, 0);
    if (!root) {
        size_t at = end && json && end >= json ? (size_t)(end - json) : 0;
        return qvl_fail(err, QVL_E_PARSE, "%s: not valid JSON (error near byte %zu)", name, at);
    }
    qvl_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        cJSON_Delete(root);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", name);
    }
    tok->unk_id = -1;
    for (int b = 0; b < 256; b++) tok->byte_token[b] = -1;
    qvl_status st = load_tree(tok, root, name, err);
    cJSON_Delete(root);
    if (st != QVL_OK) {
        qvl_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return QVL_OK;
}

qvl_status qvl_tokenizer_load(const char *path, qvl_tokenizer **out, qvl_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return qvl_fail(err, QVL_E_INVALID, "qvl_tokenizer_load: NULL argument");
    char *buf;
    size_t len;
    qvl_status st = qvl_read_file(path, QVL_TOKENIZER_MAX_FILE_BYTES, QVL_E_IO, &buf, &len, err);
    if (st != QVL_OK) return st;
    st = qvl_tokenizer_load_buffer(buf, len, path, out, err);
    free(buf);
    return st;
}

void qvl_tokenizer_free(qvl_tokenizer *tok) {
    if (!tok) return;
    qvl_tok_strmap_free(&tok->vocab);
    qvl_tok_pairmap_free(&tok->merges);
    free(tok->entries);
    free(tok->piece_bytes.data);
    for (size_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    qvl_tok_matcher_free(&tok->raw_matcher);
    qvl_tok_matcher_free(&tok->norm_matcher);
    qvl_tok_free_pre_tokenizer(tok);
    pcre2_match_data_free(tok->match_data);
    pcre2_match_context_free(tok->match_ctx);
    pcre2_jit_stack_free(tok->jit_stack);
    qvl_tok_bpe_free_scratch(tok);
    free(tok);
}
