/* NFC normalization (utf8proc) and regex pre-tokenization (PCRE2) of valid UTF-8 text. */
#include <stdlib.h>

#include <utf8proc.h>

#include "tokenizer_internal.h"

qvl_status qvl_tok_nfc(const char *text, size_t len, char **norm, size_t *norm_len,
                       qvl_error *err) {
    *norm = NULL;
    *norm_len = 0;
    size_t i = 0;
    while (i < len && (unsigned char)text[i] < 0x80) i++;
    if (i == len) return QVL_OK; /* ASCII is already NFC */
    utf8proc_uint8_t *out = NULL;
    /* explicit length (no UTF8PROC_NULLTERM): NUL bytes are ordinary characters here */
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (n < 0)
        return qvl_fail(err, n == UTF8PROC_ERROR_NOMEM ? QVL_E_NOMEM : QVL_E_INVALID,
                        "tokenizer: NFC normalization failed: %s", utf8proc_errmsg(n));
    *norm = (char *)out;
    *norm_len = (size_t)n;
    return QVL_OK;
}

static int match_once(const qvl_tokenizer *tok, const tok_split_stage *stage, const char *text,
                      size_t len, size_t from, uint32_t limit) {
    /* the text was validated once; letting PCRE2 re-check it on every call would be quadratic
     * (pcre2_jit_match never checks) */
    uint32_t options = PCRE2_NO_UTF_CHECK;
    pcre2_set_match_limit(tok->match_ctx, limit);
    int rc = stage->jit ? pcre2_jit_match(stage->code, (PCRE2_SPTR)text, len, from, 0,
                                          tok->match_data, tok->match_ctx)
                        : pcre2_match(stage->code, (PCRE2_SPTR)text, len, from, options,
                                      tok->match_data, tok->match_ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(stage->code, (PCRE2_SPTR)text, len, from, options | PCRE2_NO_JIT,
                         tok->match_data, tok->match_ctx);
    return rc;
}

/* The next match from `from`, costing at most about QVL_TOK_REGEX_BASE_STEPS plus
 * QVL_TOK_REGEX_STEPS_PER_BYTE for each byte it moves on. PCRE2 cannot say how many steps a
 * match took, so the step limit starts at BASE and doubles while the limit is hit (up to what
 * the rest of the text could allow); a match found with limit L took more than L / 2 steps
 * (the previous try failed), so it is accepted only when L / 2 is within the allowance of the
 * bytes it covers. The retries cost less than the last try, so one call costs at most four times
 * the allowance of what it consumes: linear in the text, whatever the regex. Real pre-tokenizer
 * regexes need a few steps a byte (a long run of spaces: about 3). */
static int run_match(const qvl_tokenizer *tok, const tok_split_stage *stage, const char *text,
                     size_t len, size_t from) {
    const uint64_t base = QVL_TOK_REGEX_BASE_STEPS, per = QVL_TOK_REGEX_STEPS_PER_BYTE;
    uint64_t cap = base + per * (uint64_t)(len - from);
    if (cap > UINT32_MAX) cap = UINT32_MAX;
    uint64_t limit = base;
    for (;;) {
        int rc = match_once(tok, stage, text, len, from, (uint32_t)limit);
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
            if (limit >= cap) return rc;
            limit = limit * 2 < cap ? limit * 2 : cap;
            continue;
        }
        if (limit == base || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) return rc;
        const size_t end = rc >= 0 ? pcre2_get_ovector_pointer(tok->match_data)[1] : len;
        const size_t moved = end > from ? end - from : 1;
        return limit / 2 <= base + per * (uint64_t)moved ? rc : PCRE2_ERROR_MATCHLIMIT;
    }
}

/* Isolated splitting: every match is a piece and so is every non-empty gap between matches. */
static qvl_status split(qvl_tokenizer *tok, size_t stage, const char *text, size_t len,
                        tok_piece_fn emit, tok_ids *out, qvl_error *err) {
    if (len == 0) return QVL_OK;
    if (stage == tok->n_stages) return emit(tok, text, len, out, err);
    const tok_split_stage *s = &tok->stages[stage];
    size_t from = 0, last = 0;
    qvl_status st = QVL_OK;
    while (from <= len) {
        int rc = run_match(tok, s, text, len, from);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            if (rc == PCRE2_ERROR_MATCHLIMIT)
                return qvl_fail(err, QVL_E_LIMIT,
                                "tokenizer: pre-tokenizer regex too costly at byte %zu (more "
                                "than %d steps plus %d a byte; see docs/hostile-input.md)",
                                from, QVL_TOK_REGEX_BASE_STEPS, QVL_TOK_REGEX_STEPS_PER_BYTE);
            return qvl_fail(err, QVL_E_LIMIT,
                            "tokenizer: pre-tokenizer regex failed at byte %zu: %s", from,
                            (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(tok->match_data);
        size_t start = ov[0], end = ov[1];
        if (start < last || end < start || end > len) break; /* cannot happen; stay safe */
        if ((st = split(tok, stage + 1, text + last, start - last, emit, out, err))) return st;
        if ((st = split(tok, stage + 1, text + start, end - start, emit, out, err))) return st;
        last = end;
        if (end > start) {
            from = end;
        } else {
            /* an empty match: move on by one character */
            if (start >= len) break;
            size_t clen =
                qvl_tok_utf8_char_len((const unsigned char *)text + start, len - start, NULL);
            from = start + (clen ? clen : 1);
        }
    }
    return split(tok, stage + 1, text + last, len - last, emit, out, err);
}

qvl_status qvl_tok_pretokenize(qvl_tokenizer *tok, const char *text, size_t len, tok_piece_fn emit,
                           tok_ids *out, qvl_error *err) {
    return split(tok, 0, text, len, emit, out, err);
}
