/* JSON Schema `pattern` -> GBNF for the JSON string contents it matches.
 *
 * The subset: literal characters, escaped punctuation (\. \* \( ...), \n \t \r, \d \w \s and
 * \D \W \S, classes [a-z_] and [^...] (with those escapes inside), `.` (any character but a
 * newline, as Python's re), groups ( ) and (?: ), alternation |, quantifiers * + ? {m} {m,}
 * {m,n}, and ^ / $ only at the very start / end. Anything else (backreferences, lookaround,
 * lazy or possessive quantifiers, \b, named groups, ...) is an error naming it.
 *
 * The output always matches the whole string, which satisfies `pattern` whether anchored or
 * not (JSON Schema's pattern is a search). Characters are generated as JSON writes them: '"'
 * as \", '\' as \\, newline, tab and carriage return as \n \t \r; other control characters are
 * never generated. \D \W \S and negated classes that use a shorthand stay within printable
 * ASCII, since Python's \d \w \s also match non-ASCII digits, letters and spaces that the
 * complement would otherwise include. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_schema_internal.h"

typedef struct rx {
    const char *p, *start;
    js_buf *b;
    char *why;
    size_t why_len;
    int depth;
} rx;

typedef struct rset { /* sorted, merged inclusive ranges */
    uint32_t r[2 * 64];
    int n;
} rset;

static bool rx_fail(rx *R, const char *what) {
    snprintf(R->why, R->why_len, "pattern: %s at offset %d", what, (int)(R->p - R->start));
    return false;
}

static void rset_add(rset *s, uint32_t lo, uint32_t hi) {
    if (s->n < 64) {
        s->r[2 * s->n] = lo;
        s->r[2 * s->n + 1] = hi;
        s->n++;
    }
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void rset_norm(rset *s) {
    qsort(s->r, (size_t)s->n, 2 * sizeof(uint32_t), cmp_r);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m > 0 && s->r[2 * i] <= s->r[2 * (m - 1) + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * (m - 1) + 1]) s->r[2 * (m - 1) + 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * m] = s->r[2 * i];
            s->r[2 * m + 1] = s->r[2 * i + 1];
            m++;
        }
    }
    s->n = m;
}

/* Complement within [lo, hi]. */
static void rset_complement(rset *s, uint32_t lo, uint32_t hi) {
    rset_norm(s);
    rset c = {.n = 0};
    uint32_t next = lo;
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->r[2 * i], z = s->r[2 * i + 1];
        if (z < next) continue;
        if (a > hi) break;
        if (a > next) rset_add(&c, next, a - 1);
        next = z + 1;
    }
    if (next <= hi) rset_add(&c, next, hi);
    *s = c;
}

static void rset_intersect(rset *s, uint32_t lo, uint32_t hi) {
    rset c = {.n = 0};
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->r[2 * i] < lo ? lo : s->r[2 * i], z = s->r[2 * i + 1] > hi ? hi : s->r[2 * i + 1];
        if (a <= z) rset_add(&c, a, z);
    }
    *s = c;
}

static bool rset_has(const rset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->r[2 * i] && cp <= s->r[2 * i + 1]) return true;
    return false;
}

/* The set as JSON-text alternatives: plain characters as a class, then the escaped ones. */
static bool emit_set(rx *R, rset *s) {
    rset_norm(s);
    rset plain = *s;
    rset_complement(&plain, 0, 0x10FFFF); /* remove what JSON escapes: build the complement.. */
    rset_add(&plain, 0, 0x1F);
    rset_add(&plain, '"', '"');
    rset_add(&plain, '\\', '\\');
    rset_complement(&plain, 0, 0x10FFFF); /* ..and complement back */
    bool first = true;
    js_put(R->b, "(");
    if (plain.n > 0) {
        js_put(R->b, "[");
        for (int i = 0; i < plain.n; i++) {
            js_class_cp(R->b, plain.r[2 * i]);
            if (plain.r[2 * i + 1] != plain.r[2 * i]) {
                js_put(R->b, "-");
                js_class_cp(R->b, plain.r[2 * i + 1]);
            }
        }
        js_put(R->b, "]");
        first = false;
    }
    static const struct { uint32_t cp; const char *json; } esc[] = {
        {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\t', "\"\\\\t\""},
        {'\r', "\"\\\\r\""}};
    for (size_t i = 0; i < sizeof esc / sizeof esc[0]; i++) {
        if (!rset_has(s, esc[i].cp)) continue;
        if (!first) js_put(R->b, " | ");
        js_put(R->b, esc[i].json);
        first = false;
    }
    js_put(R->b, ")");
    if (first) return rx_fail(R, "a character set that JSON text cannot hold");
    return true;
}

/* \d \w \s (and upper-case negations) into s; true when c names one. */
static bool shorthand(char c, rset *s, bool *negated) {
    rset t = {.n = 0};
    switch (c | 0x20) {
    case 'd': rset_add(&t, '0', '9'); break;
    case 'w': rset_add(&t, '0', '9'); rset_add(&t, 'A', 'Z'); rset_add(&t, '_', '_'); rset_add(&t, 'a', 'z'); break;
    case 's': rset_add(&t, ' ', ' '); rset_add(&t, '\t', '\r'); break;
    default: return false;
    }
    *negated = c >= 'A' && c <= 'Z';
    if (*negated) rset_complement(&t, 0x20, 0x7E);
    for (int i = 0; i < t.n; i++) rset_add(s, t.r[2 * i], t.r[2 * i + 1]);
    return true;
}

/* One (possibly escaped) character; -1 on error. */
static int32_t rx_char(rx *R) {
    const unsigned char *s = (const unsigned char *)R->p;
    if (*s == '\\') {
        char c = (char)s[1];
        if (!c) return rx_fail(R, "a trailing backslash"), -1;
        R->p += 2;
        if (c == 'n') return '\n';
        if (c == 't') return '\t';
        if (c == 'r') return '\r';
        if (strchr(".*+?()[]{}|^$\\/-\"", c)) return c;
        char msg[40];
        snprintf(msg, sizeof msg, "unsupported escape \\%c", c);
        return rx_fail(R, msg), -1;
    }
    uint32_t c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len) return rx_fail(R, "ill-formed UTF-8"), -1;
    uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return rx_fail(R, "ill-formed UTF-8"), -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    R->p += len;
    return (int32_t)cp;
}

static bool rx_class(rx *R) {
    R->p++; /* '[' */
    bool neg = *R->p == '^', any_short = false;
    if (neg) R->p++;
    rset s = {.n = 0};
    bool first = true;
    while (*R->p != ']' || first) {
        if (!*R->p) return rx_fail(R, "an unterminated class");
        first = false;
        bool sn;
        if (R->p[0] == '\\' && R->p[1] && shorthand(R->p[1], &s, &sn)) {
            any_short = true;
            R->p += 2;
            continue;
        }
        int32_t lo = rx_char(R), hi = lo;
        if (lo < 0) return false;
        if (R->p[0] == '-' && R->p[1] && R->p[1] != ']') {
            R->p++;
            if ((hi = rx_char(R)) < 0) return false;
            if (hi < lo) return rx_fail(R, "a range whose end is before its start");
        }
        if (s.n >= 64) return rx_fail(R, "a class of more than 64 ranges");
        rset_add(&s, (uint32_t)lo, (uint32_t)hi);
    }
    R->p++;
    if (neg) {
        rset_complement(&s, 0, 0x10FFFF);
        if (any_short) rset_intersect(&s, 0x20, 0x7E);
    }
    return emit_set(R, &s);
}

static bool rx_alt(rx *R);

static bool rx_quant(rx *R) {
    char c = *R->p;
    if (c == '*' || c == '+' || c == '?') {
        js_putn(R->b, R->p++, 1);
    } else if (c == '{') {
        const char *q = R->p + 1;
        long m = -1, n = -1;
        char *e;
        if (*q >= '0' && *q <= '9') m = strtol(q, &e, 10), q = e;
        if (m < 0) return rx_fail(R, "a '{' that starts no repetition (write \\{)");
        if (*q == ',') {
            q++;
            if (*q >= '0' && *q <= '9') n = strtol(q, &e, 10), q = e;
        } else {
            n = m;
        }
        if (*q != '}') return rx_fail(R, "an unterminated repetition");
        if (m > 100000 || n > 100000 || (n >= 0 && n < m)) return rx_fail(R, "a bad repetition count");
        if (n < 0) js_printf(R->b, "{%ld,}", m);
        else js_printf(R->b, "{%ld,%ld}", m, n);
        R->p = q + 1;
    } else {
        return true;
    }
    if (*R->p == '?' || *R->p == '+') return rx_fail(R, "lazy or possessive quantifiers are not supported");
    if (*R->p && strchr("*+{", *R->p)) return rx_fail(R, "a quantifier after a quantifier");
    return true;
}

static bool rx_seq(rx *R) {
    bool any = false;
    js_put(R->b, "(");
    while (*R->p && *R->p != '|' && *R->p != ')') {
        if (any) js_put(R->b, " ");
        any = true;
        char c = *R->p;
        js_put(R->b, "(");
        if (c == '(') {
            R->p++;
            if (R->p[0] == '?') {
                if (R->p[1] != ':') return rx_fail(R, "group extensions other than (?: are not supported");
                R->p += 2;
            }
            if (++R->depth > 64) return rx_fail(R, "groups nested too deep");
            if (!rx_alt(R)) return false;
            R->depth--;
            if (*R->p != ')') return rx_fail(R, "an unclosed '('");
            R->p++;
        } else if (c == '[') {
            if (!rx_class(R)) return false;
        } else if (c == '.') {
            R->p++;
            rset s = {.n = 0};
            rset_add(&s, '\n', '\n');
            rset_complement(&s, 0, 0x10FFFF);
            if (!emit_set(R, &s)) return false;
        } else if (c == '^' || c == '$') {
            return rx_fail(R, "an anchor inside the pattern (only ^ at the start and $ at the end)");
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            return rx_fail(R, "a quantifier with nothing before it");
        } else {
            rset s = {.n = 0};
            bool neg;
            if (c == '\\' && R->p[1] && shorthand(R->p[1], &s, &neg)) {
                R->p += 2;
            } else {
                int32_t cp = rx_char(R);
                if (cp < 0) return false;
                rset_add(&s, (uint32_t)cp, (uint32_t)cp);
            }
            if (!emit_set(R, &s)) return false;
        }
        js_put(R->b, ")");
        if (!rx_quant(R)) return false;
    }
    if (!any) js_put(R->b, "\"\"");
    js_put(R->b, ")");
    return true;
}

static bool rx_alt(rx *R) {
    js_put(R->b, "(");
    for (;;) {
        if (!rx_seq(R)) return false;
        if (*R->p != '|') break;
        R->p++;
        js_put(R->b, " | ");
    }
    js_put(R->b, ")");
    return true;
}

bool js_regex(js_buf *b, const char *re, char *why, size_t why_len) {
    size_t len = strlen(re);
    char *copy = malloc(len + 1);
    if (!copy) {
        snprintf(why, why_len, "out of memory");
        return false;
    }
    memcpy(copy, re, len + 1);
    char *s = copy;
    if (*s == '^') s++;
    size_t n = strlen(s);
    if (n > 0 && s[n - 1] == '$' && (n < 2 || s[n - 2] != '\\')) s[n - 1] = '\0';
    rx R = {.p = s, .start = s, .b = b, .why = why, .why_len = why_len};
    bool ok = rx_alt(&R);
    if (ok && *R.p) ok = rx_fail(&R, "an unmatched ')'");
    free(copy);
    return ok;
}
