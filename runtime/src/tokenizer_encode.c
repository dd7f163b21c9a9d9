/* Encoding pipeline: added tokens on the raw text -> (invalid UTF-8 bytes aside) NFC ->
 * normalized added tokens -> regex pieces -> BPE. */
#include <stdlib.h>

#include "tokenizer_internal.h"

/* Valid UTF-8 text between raw added tokens. */
static qvl_status encode_valid(qvl_tokenizer *tok, const char *text, size_t len, tok_ids *out,
                               qvl_error *err) {
    if (len == 0) return QVL_OK;
    char *norm = NULL;
    size_t norm_len = 0;
    if (tok->nfc) {
        qvl_status st = qvl_tok_nfc(text, len, &norm, &norm_len, err);
        if (st != QVL_OK) return st;
        if (norm) {
            text = norm;
            len = norm_len;
        }
    }
    tok_starts starts;
    qvl_status st = qvl_tok_matcher_scan(&tok->norm_matcher, text, len, &starts, err);
    size_t pos = 0;
    while (pos < len && st == QVL_OK) {
        tok_match m;
        bool found = qvl_tok_starts_next(&starts, tok->added, text, len, pos, pos, &m);
        size_t seg_end = found ? m.start : len;
        st = qvl_tok_pretokenize(tok, text + pos, seg_end - pos, qvl_tok_bpe_piece, out, err);
        if (!found) break;
        if (st == QVL_OK && !qvl_tok_ids_push(out, m.id))
            st = qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory");
        pos = m.end;
    }
    qvl_tok_starts_free(&starts);
    free(norm);
    return st;
}

/* Text between raw added tokens: bytes that are not part of well-formed UTF-8 become their
 * own byte tokens; the valid runs around them are encoded normally. */
static qvl_status encode_segment(qvl_tokenizer *tok, const char *text, size_t len, tok_ids *out,
                                 qvl_error *err) {
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0, run = 0;
    while (i < len) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t clen = qvl_tok_utf8_char_len(p + i, len - i, NULL);
        if (clen) {
            i += clen;
            continue;
        }
        qvl_status st = encode_valid(tok, text + run, i - run, out, err);
        if (st != QVL_OK) return st;
        if (!qvl_tok_push_byte(tok, p[i], out))
            return qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory");
        run = ++i;
    }
    return encode_valid(tok, text + run, len - run, out, err);
}

qvl_status qvl_tokenizer_encode(qvl_tokenizer *tok, const char *text, size_t len,
                                int32_t **ids, size_t *n, qvl_error *err) {
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!tok || !ids || !n || (!text && len))
        return qvl_fail(err, QVL_E_INVALID, "qvl_tokenizer_encode: NULL argument");
    tok_ids out = {0};
    /* a rough guess (English averages over 4 bytes per token) that avoids most regrowth */
    if (!qvl_tok_ids_reserve(&out, len / 4 + 16))
        return qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
    tok_starts starts;
    qvl_status st = qvl_tok_matcher_scan(&tok->raw_matcher, text, len, &starts, err);
    size_t pos = 0;
    while (pos < len && st == QVL_OK) {
        tok_match m;
        bool found = qvl_tok_starts_next(&starts, tok->added, text, len, pos, pos, &m);
        size_t seg_end = found ? m.start : len;
        if ((st = encode_segment(tok, text + pos, seg_end - pos, &out, err))) break;
        if (!found) break;
        if (!qvl_tok_ids_push(&out, m.id)) {
            st = qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory");
            break;
        }
        pos = m.end;
    }
    qvl_tok_starts_free(&starts);
    if (st != QVL_OK) {
        free(out.data);
        return st;
    }
    *ids = out.data;
    *n = out.len;
    return QVL_OK;
}
