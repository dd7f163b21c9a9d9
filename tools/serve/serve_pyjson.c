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

static void put_number(buf *b, double d) {
    char text[40];
    if (!isfinite(d)) {
        snprintf(text, sizeof text, "%s", isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity");
    } else if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
        snprintf(text, sizeof text, "%.0f", d);
    } else {
        for (int p = 1; p <= 17; p++) { /* the shortest digits that read back the same */
            snprintf(text, sizeof text, "%.*g", p, d);
            if (strtod(text, NULL) == d) break;
        }
    }
    puts_(b, text);
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
        put_number(b, v->valuedouble);
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
