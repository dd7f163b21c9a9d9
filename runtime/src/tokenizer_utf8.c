/* UTF-8 checks (with the "maximal subpart" rule for replacements), Unicode White_Space, and the
 * GPT-2 byte <-> character map of byte-level BPE. */
#include <string.h>

#include "tokenizer_internal.h"

size_t qvl_tok_utf8_char_len(const unsigned char *p, size_t n, size_t *bad_len) {
    if (bad_len) *bad_len = 1;
    if (n == 0) return 0;
    unsigned b = p[0];
    if (b < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;      /* no overlongs */
        else if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;      /* no overlongs */
        else if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return 0; /* 80..C1, F5..FF never start a character */
    }
    size_t i = 1;
    for (; i < need; i++) {
        if (i >= n) break;
        unsigned c = p[i];
        if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    }
    if (i == need) return need;
    if (bad_len) *bad_len = i;
    return 0;
}

uint32_t qvl_tok_utf8_decode(const unsigned char *p, size_t len) {
    switch (len) {
    case 1: return p[0];
    case 2: return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
        return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
               ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
}

size_t qvl_tok_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool qvl_tok_utf8_sanitize_append(tok_bytes *out, const char *src, size_t n) {
    static const char replacement[] = "\xEF\xBF\xBD";
    const unsigned char *p = (const unsigned char *)src;
    size_t i = 0, run = 0; /* valid bytes not yet copied start at run */
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        size_t len = qvl_tok_utf8_char_len(p + i, n - i, &bad);
        if (len) {
            i += len;
            continue;
        }
        if (!qvl_tok_bytes_append(out, src + run, i - run)) return false;
        if (!qvl_tok_bytes_append(out, replacement, 3)) return false;
        i += bad;
        run = i;
    }
    return qvl_tok_bytes_append(out, src + run, n - run);
}

static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t qvl_tok_whitespace_len_at(const unsigned char *p, size_t n) {
    size_t len = qvl_tok_utf8_char_len(p, n, NULL);
    return len && is_white_space(qvl_tok_utf8_decode(p, len)) ? len : 0;
}

size_t qvl_tok_whitespace_len_before(const unsigned char *p, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        if (qvl_tok_utf8_char_len(p + n - k, k, NULL) == k)
            return is_white_space(qvl_tok_utf8_decode(p + n - k, k)) ? k : 0;
    }
    return 0;
}

/* GPT-2's table keeps the printable bytes 33-126, 161-172 and 174-255 as their own code point
 * and gives the other 68 bytes U+0100 + n, n counting them in increasing byte order. */
uint32_t qvl_tok_byte_to_cp(uint8_t b) {
    if (b <= 32) return 256u + b;             /* n = 0..32 */
    if (b >= 127 && b <= 160) return b + 162u; /* n = 33..66 */
    if (b == 173) return 323;                  /* n = 67 */
    return b;
}

int qvl_tok_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp <= 288) return (int)(cp - 256);
    if (cp >= 289 && cp <= 322) return (int)(cp - 162);
    if (cp == 323) return 173;
    return -1;
}
