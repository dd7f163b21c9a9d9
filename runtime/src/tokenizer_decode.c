/* Decoding ids to text, and the per-token lookups. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static const tok_entry *entry_of(const qvl_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->n_entries) return NULL;
    const tok_entry *e = &tok->entries[id];
    return (e->flags & TOK_PRESENT) ? e : NULL;
}

qvl_status qvl_tokenizer_decode(const qvl_tokenizer *tok, const int32_t *ids, size_t n,
                                bool skip_special, char **out_text, size_t *out_len,
                                qvl_error *err) {
    if (out_text) *out_text = NULL;
    if (out_len) *out_len = 0;
    if (!tok || !out_text || (!ids && n))
        return qvl_fail(err, QVL_E_INVALID, "qvl_tokenizer_decode: NULL argument");
    tok_bytes raw = {0}, text = {0};
    bool ok = qvl_tok_bytes_append(&raw, "", 0);
    for (size_t i = 0; ok && i < n; i++) {
        const tok_entry *e = entry_of(tok, ids[i]);
        if (!e || (skip_special && (e->flags & TOK_SPECIAL))) continue;
        ok = qvl_tok_bytes_append(&raw, tok->piece_bytes.data + e->off, e->len);
    }
    ok = ok && qvl_tok_utf8_sanitize_append(&text, raw.data, raw.len) &&
         qvl_tok_bytes_append(&text, "", 0);
    free(raw.data);
    if (!ok) {
        free(text.data);
        return qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory decoding %zu tokens", n);
    }
    *out_text = text.data;
    if (out_len) *out_len = text.len;
    return QVL_OK;
}

qvl_status qvl_tokenizer_token_to_piece(const qvl_tokenizer *tok, int32_t id,
                                        const char **bytes, size_t *len, qvl_error *err) {
    if (bytes) *bytes = NULL;
    if (len) *len = 0;
    if (!tok || !bytes || !len)
        return qvl_fail(err, QVL_E_INVALID, "qvl_tokenizer_token_to_piece: NULL argument");
    const tok_entry *e = entry_of(tok, id);
    if (!e) return qvl_fail(err, QVL_E_NOT_FOUND, "tokenizer: no token has id %d", (int)id);
    *bytes = tok->piece_bytes.data + e->off;
    *len = e->len;
    return QVL_OK;
}

int32_t qvl_tokenizer_token_id(const qvl_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    size_t len = strlen(token);
    /* added tokens first, later entries winning, as when matching text */
    for (size_t i = tok->n_added; i-- > 0;) {
        if (tok->added[i].len == len && memcmp(tok->added[i].content, token, len) == 0)
            return tok->added[i].id;
    }
    return qvl_tok_strmap_get(&tok->vocab, token, len);
}

int32_t qvl_tokenizer_vocab_size(const qvl_tokenizer *tok) {
    return tok ? tok->n_entries : 0;
}

bool qvl_tokenizer_is_special(const qvl_tokenizer *tok, int32_t id) {
    const tok_entry *e = entry_of(tok, id);
    return e && (e->flags & TOK_SPECIAL);
}

bool qvl_tokenizer_is_added(const qvl_tokenizer *tok, int32_t id) {
    const tok_entry *e = entry_of(tok, id);
    return e && (e->flags & TOK_ADDED);
}
