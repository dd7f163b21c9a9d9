/* Object schemas -> GBNF (part of the JSON Schema compiler, json_schema.c).
 *
 * Properties come in the order the schema lists them; optional ones may be left out, and the
 * commas must still come out right. Two rules per position i do that: A(i) "nothing written
 * yet, at property i" and B(i) "something written, at property i":
 *   A(i) ::= kv(i) B(i+1)          | A(i+1)   (the second alternative only when i is optional)
 *   B(i) ::= "," ws kv(i) B(i+1)   | B(i+1)   (likewise)
 *   A(n) ::= extra ("," ws extra)* | ""       B(n) ::= ("," ws extra)*
 * where extra is an additional member (only when additionalProperties allows them; absent
 * means allowed). An additional member's key has no escapes and is never one of the listed
 * property names: a trie of the names becomes one rule per trie node, each either ending the
 * key (when the path so far is no name), leaving the trie with a character no name has next,
 * or following a name one character further. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_schema_internal.h"

typedef struct member {
    const char *name;
    int rule; /* the value's rule, s<rule> */
    bool required;
} member;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Length of the UTF-8 character at s (1 for anything malformed: it only has to advance). */
static size_t char_len(const char *s) {
    unsigned char c = (unsigned char)*s;
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    for (size_t i = 1; i < n; i++)
        if (!s[i]) return i;
    return n;
}

static uint32_t code_point(const char *s, size_t n) {
    uint32_t c = (unsigned char)s[0];
    if (n == 1) return c;
    c &= 0x7Fu >> n;
    for (size_t i = 1; i < n; i++) c = (c << 6) | ((unsigned char)s[i] & 0x3Fu);
    return c;
}

/* The key rule for the names names[lo, hi) that share their first `depth` bytes; returns its
 * rule number. Names holding characters a key cannot (quote, backslash, control) drop out when
 * the walk reaches that character. */
static int key_node(js_ctx *C, const char **names, size_t lo, size_t hi, size_t depth) {
    bool term = false;
    for (size_t i = lo; i < hi; i++) term = term || names[i][depth] == '\0';
    js_buf b = {0};
    int r = js_new_rule(C, &b);
    /* the child rules are written first (the rule text of this node refers to them) */
    js_buf alts = {0}, cls = {0};
    js_put(&cls, "[^\"\\\\\\x00-\\x1F");
    for (size_t i = lo; i < hi;) {
        if (names[i][depth] == '\0') {
            i++;
            continue;
        }
        size_t n = char_len(names[i] + depth), j = i + 1;
        while (j < hi && strncmp(names[j] + depth, names[i] + depth, n) == 0 &&
               strlen(names[j] + depth) >= n)
            j++;
        uint32_t cp = code_point(names[i] + depth, n);
        if (cp >= 0x20 && cp != '"' && cp != '\\') {
            int child = key_node(C, names, i, j, depth + n);
            js_class_cp(&cls, cp);
            js_put(&alts, " | ");
            js_literal(&alts, names[i] + depth, n);
            js_printf(&alts, " s%d", child);
        }
        i = j;
    }
    js_put(&cls, "]");
    if (!term) js_put(&b, "\"\\\"\" | ");
    js_putn(&b, cls.s ? cls.s : "", cls.n);
    js_put(&b, " kchar* \"\\\"\"");
    js_putn(&b, alts.s ? alts.s : "", alts.n);
    if (cls.oom || alts.oom) b.oom = true;
    free(cls.s);
    free(alts.s);
    js_end_rule(C, &b);
    return r;
}

/* "\"name\"" as a GBNF literal of the key's JSON text. */
static bool key_literal(js_buf *b, const char *name) {
    cJSON *s = cJSON_CreateString(name);
    char *text = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    if (!text) return false;
    js_literal(b, text, strlen(text));
    free(text);
    return true;
}

bool js_compile_object(js_ctx *C, const cJSON *s, js_buf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return js_fail(C, "'properties' must be an object%s", NULL);
    if (req && !cJSON_IsArray(req)) return js_fail(C, "'required' must be an array%s", NULL);
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r)) return js_fail(C, "'required' lists a non-string%s", NULL);
    bool extra_ok = !add || !cJSON_IsFalse(add);
    int extra_rule = -1; /* the additional values' rule; -1: any value (jvalue) */
    if (add && !cJSON_IsBool(add) && !js_compile_sub(C, add, "additionalProperties", &extra_rule))
        return false;

    size_t n = 0, cap = (size_t)cJSON_GetArraySize(props) + (size_t)cJSON_GetArraySize(req) + 1;
    member *m = calloc(cap, sizeof *m);
    const char **names = calloc(cap, sizeof *names);
    bool ok = m && names;
    if (!ok) js_fail(C, "out of memory%s", NULL);
    for (const cJSON *p = props ? props->child : NULL; ok && p; p = p->next) {
        char seg[300];
        snprintf(seg, sizeof seg, "properties/%.250s", p->string);
        m[n].name = p->string;
        ok = js_compile_sub(C, p, seg, &m[n].rule);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (strcmp(r->valuestring, p->string) == 0) m[n].required = true;
        n++;
    }
    for (const cJSON *r = req ? req->child : NULL; ok && r; r = r->next) {
        bool listed = false;
        for (size_t i = 0; i < n; i++) listed = listed || strcmp(m[i].name, r->valuestring) == 0;
        if (listed) continue;
        if (!extra_ok) {
            ok = js_fail(C, "required property '%s' is not in 'properties' and "
                         "'additionalProperties' is false", r->valuestring);
            break;
        }
        m[n++] = (member){r->valuestring, extra_rule, true};
        if (extra_rule < 0) { /* any value: a rule that says so */
            js_buf v = {0};
            m[n - 1].rule = js_new_rule(C, &v);
            js_put(&v, "jvalue");
            js_end_rule(C, &v);
        }
    }
    int key = -1;
    if (ok && extra_ok) {
        for (size_t i = 0; i < n; i++) names[i] = m[i].name;
        qsort(names, n, sizeof *names, cmp_str);
        key = key_node(C, names, 0, n, 0);
    }
    if (ok) {
        /* kv(i) written inline; A(i), B(i) as rules s<base + 2i>, s<base + 2i + 1> */
        int base = C->n_rules;
        C->n_rules += 2 * (int)(n + 1);
        char extra[96];
        if (extra_rule < 0) snprintf(extra, sizeof extra, "\"\\\"\" s%d \":\" ws jvalue", key);
        else snprintf(extra, sizeof extra, "\"\\\"\" s%d \":\" ws s%d", key, extra_rule);
        for (size_t i = 0; i <= n; i++) {
            js_buf kv = {0};
            if (i < n) {
                if (!key_literal(&kv, m[i].name)) kv.oom = true;
                js_printf(&kv, " \":\" ws s%d", m[i].rule);
            }
            int a = base + 2 * (int)i, bb = a + 1;
            js_printf(&C->out, "s%d ::= ", a);
            if (i == n) {
                if (extra_ok) js_printf(&C->out, "(%s (\",\" ws %s)*)?", extra, extra);
                else js_put(&C->out, "\"\"");
            } else {
                js_putn(&C->out, kv.s ? kv.s : "", kv.n);
                js_printf(&C->out, " s%d", bb + 2);
                if (!m[i].required) js_printf(&C->out, " | s%d", a + 2);
            }
            js_printf(&C->out, "\ns%d ::= ", bb);
            if (i == n) {
                if (extra_ok) js_printf(&C->out, "(\",\" ws %s)*", extra);
                else js_put(&C->out, "\"\"");
            } else {
                js_put(&C->out, "\",\" ws ");
                js_putn(&C->out, kv.s ? kv.s : "", kv.n);
                js_printf(&C->out, " s%d", bb + 2);
                if (!m[i].required) js_printf(&C->out, " | s%d", bb + 2);
            }
            js_put(&C->out, "\n");
            if (kv.oom) C->out.oom = true;
            free(kv.s);
        }
        js_printf(b, "\"{\" s%d \"}\"", base);
    }
    free(m);
    free(names);
    return ok;
}
