/* GBNF text pieces for the JSON Schema compiler: the growing output, literals, class
 * endpoints, and decimal integer ranges.
 *
 * Integer ranges: [lo, hi] is split into its negative and non-negative parts; a non-negative
 * part into runs of equal digit count (a run of L digits starts at 10^(L-1), except the
 * single-digit run that starts at 0, so no number gets a leading zero); and each run [x, y] of
 * equal-length digit strings is written digit by digit:
 *   x == y                       -> the literal
 *   first digits equal           -> that digit, then the rest of the range
 *   first digits a < b           -> a [rest of x .. 9...9] | [a+1 .. b-1] [0-9]{L-1}
 *                                   | b [0...0 .. rest of y]
 * Unbounded above means up to 16 digits (the limit of the plain integer rule too). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_internal.h"

#define MAX_DIGITS 16

void js_putn(js_buf *b, const char *text, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n + 1) c *= 2;
        char *s = realloc(b->s, c);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = c;
    }
    memcpy(b->s + b->n, text, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void js_put(js_buf *b, const char *text) {
    js_putn(b, text, strlen(text));
}

void js_printf(js_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true; /* callers only format short pieces */
        return;
    }
    js_putn(b, tmp, (size_t)n);
}

void js_literal(js_buf *b, const char *text, size_t n) {
    js_put(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '"' || c == '\\') {
            char e[3] = {'\\', (char)c, 0};
            js_put(b, e);
        } else if (c < 0x20 || c == 0x7F) {
            js_printf(b, "\\x%02X", c);
        } else {
            js_putn(b, (const char *)&c, 1);
        }
    }
    js_put(b, "\"");
}

void js_class_cp(js_buf *b, uint32_t cp) {
    if (cp <= 0xFFFF) js_printf(b, "\\u%04X", cp);
    else js_printf(b, "\\U%08X", cp);
}

/* Equal-length digit strings x <= y (len L >= 1). */
static void same_length(js_buf *b, const char *x, const char *y, size_t L) {
    size_t p = 0;
    while (p < L && x[p] == y[p]) p++;
    if (p == L) {
        js_literal(b, x, L);
        return;
    }
    if (p > 0) {
        js_literal(b, x, p);
        js_put(b, " ");
    }
    x += p;
    y += p;
    L -= p;
    if (L == 1) {
        js_printf(b, "[%c-%c]", x[0], y[0]);
        return;
    }
    bool x_low = true, y_high = true; /* rest of x all zeros, rest of y all nines */
    for (size_t i = 1; i < L; i++) {
        x_low = x_low && x[i] == '0';
        y_high = y_high && y[i] == '9';
    }
    char a = x[0], z = y[0];
    js_put(b, "(");
    if (x_low) { /* x's whole first digit is covered by the middle run */
        a--;
    } else {
        char nines[MAX_DIGITS + 2];
        memset(nines, '9', L - 1);
        js_printf(b, "\"%c\" ", x[0]);
        same_length(b, x + 1, nines, L - 1);
    }
    char lo_d = (char)(a + 1), hi_d = y_high ? z : (char)(z - 1);
    if (lo_d <= hi_d) {
        if (!x_low) js_put(b, " | ");
        js_printf(b, "[%c-%c] [0-9]{%zu}", lo_d, hi_d, L - 1);
    }
    if (!y_high) {
        char zeros[MAX_DIGITS + 2];
        memset(zeros, '0', L - 1);
        if (!x_low || lo_d <= hi_d) js_put(b, " | ");
        js_printf(b, "\"%c\" ", z);
        same_length(b, zeros, y + 1, L - 1);
    }
    js_put(b, ")");
}

static size_t digits_of(uint64_t v, char *s) {
    return (size_t)snprintf(s, MAX_DIGITS + 8, "%llu", (unsigned long long)v);
}

/* Non-negative integers in [lo, hi] (hi_inf: up to MAX_DIGITS digits). */
static void non_negative(js_buf *b, uint64_t lo, bool hi_inf, uint64_t hi) {
    char ls[MAX_DIGITS + 8], hs[MAX_DIGITS + 8], x[MAX_DIGITS + 8], y[MAX_DIGITS + 8];
    size_t ll = digits_of(lo, ls), hl = hi_inf ? MAX_DIGITS : digits_of(hi, hs);
    bool first = true;
    js_put(b, "(");
    for (size_t L = ll; L <= hl; L++) {
        if (L == ll) memcpy(x, ls, L);
        else {
            x[0] = '1';
            memset(x + 1, '0', L - 1);
        }
        if (!hi_inf && L == hl) memcpy(y, hs, L);
        else memset(y, '9', L);
        if (!first) js_put(b, " | ");
        first = false;
        same_length(b, x, y, L);
    }
    js_put(b, ")");
}

bool js_integer_range(js_buf *b, bool lo_inf, int64_t lo, bool hi_inf, int64_t hi, char *why,
                      size_t why_len) {
    const int64_t limit = 9999999999999999LL; /* MAX_DIGITS nines */
    if ((!lo_inf && (lo < -limit || lo > limit)) || (!hi_inf && (hi < -limit || hi > limit))) {
        snprintf(why, why_len, "bounds beyond 16 digits are not supported");
        return false;
    }
    if (!lo_inf && !hi_inf && lo > hi) {
        snprintf(why, why_len, "minimum above maximum: no integer fits");
        return false;
    }
    bool neg = lo_inf || lo < 0, pos = hi_inf || hi >= 0;
    js_put(b, "(");
    if (neg) { /* v in [lo, min(hi, -1)] -> "-" |v| with |v| in [max(1, -min(hi,-1)), -lo] */
        uint64_t a = (!hi_inf && hi < -1) ? (uint64_t)(-hi) : 1;
        js_put(b, "\"-\" ");
        non_negative(b, a, lo_inf, lo_inf ? 0 : (uint64_t)(-lo));
    }
    if (pos) {
        if (neg) js_put(b, " | ");
        non_negative(b, (!lo_inf && lo > 0) ? (uint64_t)lo : 0, hi_inf, hi_inf ? 0 : (uint64_t)hi);
    }
    js_put(b, ")");
    return true;
}
