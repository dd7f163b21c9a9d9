/* Python-style JSON text (serve_pyjson.h). */
#include "serve_pyjson.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct buf {
    char *s;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->oom = true;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_string(buf *b, const char *s) {
    puts_(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': puts_(b, "\\\""); break;
        case '\\': puts_(b, "\\\\"); break;
        case '\n': puts_(b, "\\n"); break;
        case '\r': puts_(b, "\\r"); break;
        case '\t': puts_(b, "\\t"); break;
        case '\b': puts_(b, "\\b"); break;
        case '\f': puts_(b, "\\f"); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                puts_(b, esc);
            } else {
                put(b, (const char *)p, 1);
            }
        }
    }
    puts_(b, "\"");
}

/* Python's repr(float): the shortest digits that read back the same (the closest of them,
 * which %.*e gives at that precision), written plainly when the decimal point falls within 16
 * digits of the first one and not more than 4 before it (0.0001, 1e-05, 1e+16), else as d.ddde+XX
 * with at least two exponent digits; an integral value keeps ".0". */
static void put_float(buf *b, double d) {
    char text[48];
    if (!isfinite(d)) {
        puts_(b, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (signbit(d)) puts_(b, "-");
    d = fabs(d);
    if (d == 0) {
        puts_(b, "0.0");
        return;
    }
    int p = 0;
    for (; p < 17; p++) {
        snprintf(text, sizeof text, "%.*e", p, d);
        if (strtod(text, NULL) == d) break;
    }
    char digits[24];
    int n = 0;
    const char *c = text;
    for (; *c && *c != 'e'; c++)
        if (*c != '.') digits[n++] = *c;
    while (n > 1 && digits[n - 1] == '0') n--;
    const int exp10 = atoi(c + 1), point = exp10 + 1; /* d = 0.DIGITS x 10^point */
    if (point > -4 && point <= 16) {
        if (point <= 0) {
            puts_(b, "0.");
            for (int i = point; i < 0; i++) puts_(b, "0");
            put(b, digits, (size_t)n);
        } else if (point >= n) {
            put(b, digits, (size_t)n);
            for (int i = n; i < point; i++) puts_(b, "0");
            puts_(b, ".0");
        } else {
            put(b, digits, (size_t)point);
            puts_(b, ".");
            put(b, digits + point, (size_t)(n - point));
        }
        return;
    }
    put(b, digits, 1);
    if (n > 1) {
        puts_(b, ".");
        put(b, digits + 1, (size_t)(n - 1));
    }
    snprintf(text, sizeof text, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    puts_(b, text);
}

/* Python's str(int) of an integer lexeme: no leading zeros, no sign on zero. */
static void put_integer(buf *b, const char *lexeme) {
    const bool minus = *lexeme == '-';
    const char *s = lexeme + (minus || *lexeme == '+');
    while (*s == '0' && s[1]) s++;
    if (minus && strcmp(s, "0") != 0) puts_(b, "-");
    puts_(b, s);
}

static void put_number(buf *b, const cJSON *v) {
    const char *lexeme = v->valuestring; /* serve_pyjson_keep_numbers's, when it ran */
    if (lexeme) {
        if (strpbrk(lexeme, ".eE")) put_float(b, v->valuedouble);
        else put_integer(b, lexeme);
        return;
    }
    /* A number built in code has no lexeme: integral values within 2^53 print as integers. */
    const double d = v->valuedouble;
    if (isfinite(d) && d == floor(d) && fabs(d) <= 9007199254740992.0) {
        char text[40];
        snprintf(text, sizeof text, "%.0f", d);
        puts_(b, text);
    } else {
        put_float(b, d);
    }
}

/* ---- number lexemes, found on the text in document order ---- */

typedef struct lexer {
    const char *s;
    size_t n, at;
} lexer;

/* The next number lexeme outside strings: [start, *len), or NULL at the end. Valid JSON has
 * digits only in numbers and strings, and a number is followed by a delimiter, so the run of
 * number characters is exactly the lexeme cJSON read. */
static const char *next_number(lexer *lx, size_t *len) {
    while (lx->at < lx->n) {
        const char c = lx->s[lx->at];
        if (c == '"') {
            for (lx->at++; lx->at < lx->n && lx->s[lx->at] != '"'; lx->at++)
                if (lx->s[lx->at] == '\\') lx->at++;
            lx->at++;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            const size_t start = lx->at;
            while (lx->at < lx->n && strchr("0123456789+-.eE", lx->s[lx->at]) && lx->s[lx->at])
                lx->at++;
            *len = lx->at - start;
            return lx->s + start;
        } else {
            lx->at++;
        }
    }
    return NULL;
}

/* cJSON keeps children in document order, so a depth-first walk meets the numbers in the
 * order the lexer finds them. */
static bool keep_in(cJSON *v, lexer *lx) {
    for (; v; v = v->next) {
        if (cJSON_IsNumber(v)) {
            size_t len = 0;
            const char *lexeme = next_number(lx, &len);
            if (!lexeme || v->valuestring) return false;
            if (!(v->valuestring = malloc(len + 1))) return false;
            memcpy(v->valuestring, lexeme, len);
            v->valuestring[len] = '\0';
        } else if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !keep_in(v->child, lx)) {
            return false;
        }
    }
    return true;
}

bool serve_pyjson_keep_numbers(cJSON *root, const char *text, size_t len) {
    lexer lx = {.s = text, .n = len};
    if (!root) return false;
    /* the root alone: keep_in walks siblings, and a parsed root has none */
    cJSON *next = root->next;
    root->next = NULL;
    const bool ok = keep_in(root, &lx);
    root->next = next;
    return ok;
}

static void put_value(buf *b, const cJSON *v) {
    if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
        const bool obj = cJSON_IsObject(v);
        puts_(b, obj ? "{" : "[");
        bool first = true;
        for (const cJSON *c = v->child; c; c = c->next) {
            if (!first) puts_(b, ", ");
            first = false;
            if (obj) {
                put_string(b, c->string ? c->string : "");
                puts_(b, ": ");
            }
            put_value(b, c);
        }
        puts_(b, obj ? "}" : "]");
    } else if (cJSON_IsString(v)) {
        put_string(b, v->valuestring);
    } else if (cJSON_IsNumber(v)) {
        put_number(b, v);
    } else if (cJSON_IsTrue(v)) {
        puts_(b, "true");
    } else if (cJSON_IsFalse(v)) {
        puts_(b, "false");
    } else {
        puts_(b, "null");
    }
}

char *serve_pyjson(const cJSON *v) {
    buf b = {0};
    put_value(&b, v);
    if (b.oom || !b.s) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
