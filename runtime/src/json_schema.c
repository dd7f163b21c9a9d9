/* JSON Schema -> GBNF (qvl_grammar_from_json_schema).
 *
 * Every schema node becomes one rule; the output is compact JSON (an optional single space
 * after ':' and ','). Supported:
 *   type (a name or an array of names; absent: inferred from the other keywords, else any
 *     value), enum, const (the values' compact JSON text), anyOf / oneOf (alternatives; a oneOf
 *     whose branches overlap may produce a value that matches several), $ref to #, #/$defs/NAME
 *     and #/definitions/NAME (recursion allowed), boolean schemas (true: any value);
 *   objects: properties in their written order, required, additionalProperties (false, true or
 *     a schema; absent means true as the standard says). Extra keys are written without
 *     escapes and never equal a listed property, so a value never repeats a key;
 *   arrays: items (one schema), minItems, maxItems;
 *   strings: minLength / maxLength (code points; \u escapes of surrogates are never produced, so
 *     one escape is one code point), format date, time, date-time, uuid, pattern (the subset in
 *     json_schema_regex.c);
 *   integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numeric); numbers:
 *     integral bounds with minimum >= 0 (no exponent then).
 * Annotations (title, description, default, examples, $schema, $id, $comment, deprecated,
 * readOnly, writeOnly) are ignored. Any other keyword, or a supported one used in a way the
 * compiler cannot honour (maximum on a number, format with minLength, ...), is an error naming
 * it and its location, never dropped. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_schema_internal.h"
#include "qvl/grammar.h"

#define MAX_DEPTH 64

/* Base rules shared by every compiled schema. */
static const char base_rules[] =
    "ws ::= \" \"?\n"
    "hex ::= [0-9a-fA-F]\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2}))\n"
    "kchar ::= [^\"\\\\\\x00-\\x1F]\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "jfrac ::= \".\" [0-9]{1,16}\n"
    "jnumber ::= jint jfrac? ([eE] [-+]? [0-9]{1,3})?\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | \"true\" | \"false\" | \"null\"\n"
    "jobject ::= \"{\" (jstring \":\" ws jvalue (\",\" ws jstring \":\" ws jvalue)*)? \"}\"\n"
    "jarray ::= \"[\" (jvalue (\",\" ws jvalue)*)? \"]\"\n"
    "jdate ::= [1-9] [0-9]{3} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])"
    " | (\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})?"
    " (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "juuid ::= hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}\n";

/* Any JSON value, whitespace between tokens allowed (bounded, so an output cannot run on in
 * blanks forever). */
static const char json_gbnf[] =
    "root ::= jws jval jws\n"
    "jval ::= jobj | jarr | jstr | jnum | \"true\" | \"false\" | \"null\"\n"
    "jobj ::= \"{\" jws (jmem (jws \",\" jws jmem)* jws)? \"}\"\n"
    "jmem ::= jstr jws \":\" jws jval\n"
    "jarr ::= \"[\" jws (jval (jws \",\" jws jval)* jws)? \"]\"\n"
    "jstr ::= \"\\\"\" jch* \"\\\"\"\n"
    "jch ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] jhex{3} | [dD] [0-7] jhex{2}))\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jnum ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "jws ::= [ \\t\\n\\r]{0,20}\n";

const char *qvl_grammar_json_gbnf(void) {
    return json_gbnf;
}

static bool fail(js_ctx *C, const char *fmt, const char *arg) {
    if (C->st == QVL_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        C->st = qvl_fail(C->err, QVL_E_UNSUPPORTED, "json schema: %s: %s",
                         C->path[0] ? C->path : "#", msg);
    }
    return false;
}

/* Appends "/seg" to the location; returns the old length for pop_path. */
static size_t push_path(js_ctx *C, const char *seg) {
    size_t n = strlen(C->path);
    snprintf(C->path + n, sizeof C->path - n, "/%s", seg);
    return n;
}

static void pop_path(js_ctx *C, size_t n) {
    C->path[n] = '\0';
}

static bool compile(js_ctx *C, const cJSON *s, int *rule);

/* Starts "sN ::= " and returns N. */
static int begin_rule(js_ctx *C, js_buf *b) {
    int r = C->n_rules++;
    js_printf(b, "s%d ::= ", r);
    return r;
}

static void end_rule(js_ctx *C, js_buf *b) {
    js_put(b, "\n");
    js_putn(&C->out, b->s ? b->s : "", b->n);
    if (b->oom) C->out.oom = true;
    free(b->s);
}

static bool is_annotation(const char *k) {
    static const char *const names[] = {"title", "description", "default", "examples", "$schema",
                                        "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                        "$defs", "definitions", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(k, names[i]) == 0) return true;
    return false;
}

static bool is_supported(const char *k) {
    static const char *const names[] = {
        "type", "enum", "const", "anyOf", "oneOf", "$ref", "properties", "required",
        "additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength",
        "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(k, names[i]) == 0) return true;
    return is_annotation(k);
}

/* A non-negative integer keyword, or def when absent. */
static bool count_kw(js_ctx *C, const cJSON *s, const char *k, long def, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    *out = def;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 ||
        v->valuedouble != floor(v->valuedouble))
        return fail(C, "'%s' must be a whole number from 0 to 100000", k);
    *out = (long)v->valuedouble;
    return true;
}

/* ---- values given literally: enum, const ---- */

static void value_literal(js_buf *b, const cJSON *v) {
    char *text = cJSON_PrintUnformatted(v);
    if (!text) {
        b->oom = true;
        return;
    }
    js_literal(b, text, strlen(text));
    free(text);
}

static bool compile_enum(js_ctx *C, const cJSON *s, int *rule) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(s, "const");
    js_buf b = {0};
    *rule = begin_rule(C, &b);
    if (k) {
        value_literal(&b, k);
    } else {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0) {
            free(b.s);
            return fail(C, "'enum' must be a non-empty array%s", NULL);
        }
        bool first = true;
        for (const cJSON *v = e->child; v; v = v->next) {
            if (!first) js_put(&b, " | ");
            first = false;
            value_literal(&b, v);
        }
    }
    end_rule(C, &b);
    return true;
}

/* ---- $ref ---- */

static bool compile_ref(js_ctx *C, const char *ref, int *rule) {
    for (size_t i = 0; i < C->n_refs; i++)
        if (strcmp(C->refs[i].ref, ref) == 0) {
            *rule = C->refs[i].rule;
            return true;
        }
    const cJSON *target = NULL;
    if (strcmp(ref, "#") == 0) {
        target = C->root;
    } else {
        const char *name = NULL;
        const cJSON *defs = NULL;
        if (strncmp(ref, "#/$defs/", 8) == 0) {
            name = ref + 8;
            defs = cJSON_GetObjectItemCaseSensitive(C->root, "$defs");
        } else if (strncmp(ref, "#/definitions/", 14) == 0) {
            name = ref + 14;
            defs = cJSON_GetObjectItemCaseSensitive(C->root, "definitions");
        } else {
            return fail(C, "$ref '%s' is not supported (only #, #/$defs/NAME, #/definitions/NAME)", ref);
        }
        if (strchr(name, '/') || strchr(name, '~') || strchr(name, '%'))
            return fail(C, "$ref '%s': nested or escaped pointers are not supported", ref);
        target = cJSON_GetObjectItemCaseSensitive(defs, name);
        if (!target) return fail(C, "$ref '%s' names no definition", ref);
    }
    /* The rule number is fixed before compiling the target, so recursion refers to it. */
    if (C->n_refs == C->cap_refs) {
        size_t c = C->cap_refs ? 2 * C->cap_refs : 8;
        js_ref *r = realloc(C->refs, c * sizeof *r);
        if (!r) return fail(C, "out of memory%s", NULL);
        C->refs = r;
        C->cap_refs = c;
    }
    js_buf b = {0};
    int r = begin_rule(C, &b);
    char *copy = strdup(ref);
    if (!copy) {
        free(b.s);
        return fail(C, "out of memory%s", NULL);
    }
    C->refs[C->n_refs++] = (js_ref){copy, r};
    char saved[sizeof C->path];
    memcpy(saved, C->path, sizeof saved);
    snprintf(C->path, sizeof C->path, "%s", ref);
    int inner;
    bool ok = compile(C, target, &inner);
    memcpy(C->path, saved, sizeof saved);
    if (!ok) {
        free(b.s);
        return false;
    }
    js_printf(&b, "s%d", inner);
    end_rule(C, &b);
    *rule = r;
    return true;
}

/* ---- anyOf / oneOf ---- */

static bool compile_any_of(js_ctx *C, const cJSON *list, const char *kw, int *rule) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return fail(C, "'%s' must be a non-empty array", kw);
    int n = cJSON_GetArraySize(list);
    int *sub = malloc((size_t)n * sizeof *sub);
    if (!sub) return fail(C, "out of memory%s", NULL);
    int i = 0;
    bool ok = true;
    for (const cJSON *v = list->child; ok && v; v = v->next, i++) {
        char seg[48];
        snprintf(seg, sizeof seg, "%s/%d", kw, i);
        size_t p = push_path(C, seg);
        ok = compile(C, v, &sub[i]);
        pop_path(C, p);
    }
    if (ok) {
        js_buf b = {0};
        *rule = begin_rule(C, &b);
        for (int j = 0; j < n; j++) js_printf(&b, j ? " | s%d" : "s%d", sub[j]);
        end_rule(C, &b);
    }
    free(sub);
    return ok;
}

/* ---- per type ---- */

static bool bound(js_ctx *C, const cJSON *s, const char *k, bool *set, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, k);
    *set = x != NULL;
    if (!x) return true;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) return fail(C, "'%s' must be a number", k);
    *v = x->valuedouble;
    return true;
}

static bool compile_integer(js_ctx *C, const cJSON *s, js_buf *b) {
    bool has_min, has_max, has_xmin, has_xmax;
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    if (!bound(C, s, "minimum", &has_min, &mn) || !bound(C, s, "maximum", &has_max, &mx) ||
        !bound(C, s, "exclusiveMinimum", &has_xmin, &xmn) ||
        !bound(C, s, "exclusiveMaximum", &has_xmax, &xmx))
        return false;
    if (!has_min && !has_max && !has_xmin && !has_xmax) {
        js_put(b, "jint");
        return true;
    }
    double lo = -INFINITY, hi = INFINITY;
    if (has_min) lo = ceil(mn);
    if (has_xmin && floor(xmn) + 1 > lo) lo = floor(xmn) + 1;
    if (has_max) hi = floor(mx);
    if (has_xmax && ceil(xmx) - 1 < hi) hi = ceil(xmx) - 1;
    if (fabs(lo) > 1e16 && isfinite(lo)) return fail(C, "'minimum' beyond 16 digits%s", NULL);
    if (fabs(hi) > 1e16 && isfinite(hi)) return fail(C, "'maximum' beyond 16 digits%s", NULL);
    char why[160];
    if (!js_integer_range(b, !isfinite(lo), isfinite(lo) ? (int64_t)lo : 0, !isfinite(hi),
                          isfinite(hi) ? (int64_t)hi : 0, why, sizeof why))
        return fail(C, "integer bounds: %s", why);
    return true;
}

static bool compile_number(js_ctx *C, const cJSON *s, js_buf *b) {
    bool has_min, has_max, has_x;
    double mn = 0, mx = 0, x;
    if (!bound(C, s, "minimum", &has_min, &mn) || !bound(C, s, "maximum", &has_max, &mx))
        return false;
    if (!bound(C, s, "exclusiveMinimum", &has_x, &x)) return false;
    if (has_x) return fail(C, "'exclusiveMinimum' on a number is not supported (only on integers)%s", NULL);
    if (!bound(C, s, "exclusiveMaximum", &has_x, &x)) return false;
    if (has_x) return fail(C, "'exclusiveMaximum' on a number is not supported (only on integers)%s", NULL);
    if (!has_min && !has_max) {
        js_put(b, "jnumber");
        return true;
    }
    if (!has_min || mn < 0 || mn != floor(mn) || mn > 1e15)
        return fail(C, "number bounds need a whole 'minimum' from 0 to 1e15 (got %s)",
                    has_min ? "another value" : "none");
    if (has_max && (mx != floor(mx) || mx < mn || mx > 1e15))
        return fail(C, "a number's 'maximum' must be whole, at least 'minimum' and at most 1e15%s", NULL);
    char why[160];
    if (!has_max) { /* integer part >= minimum, any fraction */
        js_put(b, "(");
        bool ok = js_integer_range(b, false, (int64_t)mn, true, 0, why, sizeof why);
        js_put(b, " jfrac?)");
        return ok || fail(C, "number bounds: %s", why);
    }
    js_put(b, "(");
    bool ok = true;
    if (mx > mn) { /* [min, max - 1] with a fraction, or max itself */
        ok = js_integer_range(b, false, (int64_t)mn, false, (int64_t)mx - 1, why, sizeof why);
        js_put(b, " jfrac? | ");
    }
    char lit[32];
    snprintf(lit, sizeof lit, "%lld", (long long)mx);
    js_literal(b, lit, strlen(lit));
    js_put(b, ")");
    return ok || fail(C, "number bounds: %s", why);
}

static bool compile_string(js_ctx *C, const cJSON *s, js_buf *b) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    long mn, mx;
    if (!count_kw(C, s, "minLength", 0, &mn) || !count_kw(C, s, "maxLength", -1, &mx)) return false;
    bool lengths = cJSON_GetObjectItemCaseSensitive(s, "minLength") ||
                   cJSON_GetObjectItemCaseSensitive(s, "maxLength");
    if ((fmt || pat) && lengths)
        return fail(C, "'minLength'/'maxLength' together with '%s' are not supported",
                    fmt ? "format" : "pattern");
    if (fmt && pat) return fail(C, "'format' together with 'pattern' is not supported%s", NULL);
    if (fmt) {
        if (!cJSON_IsString(fmt)) return fail(C, "'format' must be a string%s", NULL);
        const char *f = fmt->valuestring;
        if (strcmp(f, "date") == 0) js_put(b, "\"\\\"\" jdate \"\\\"\"");
        else if (strcmp(f, "time") == 0) js_put(b, "\"\\\"\" jtime \"\\\"\"");
        else if (strcmp(f, "date-time") == 0) js_put(b, "\"\\\"\" jdate \"T\" jtime \"\\\"\"");
        else if (strcmp(f, "uuid") == 0) js_put(b, "\"\\\"\" juuid \"\\\"\"");
        else return fail(C, "format '%s' is not supported (date, time, date-time, uuid)", f);
        return true;
    }
    if (pat) {
        if (!cJSON_IsString(pat)) return fail(C, "'pattern' must be a string%s", NULL);
        char why[200];
        js_put(b, "\"\\\"\" ");
        if (!js_regex(b, pat->valuestring, why, sizeof why)) return fail(C, "%s", why);
        js_put(b, " \"\\\"\"");
        return true;
    }
    if (mx >= 0 && mx < mn) return fail(C, "'maxLength' below 'minLength'%s", NULL);
    if (mx < 0) js_printf(b, "\"\\\"\" jchar{%ld,} \"\\\"\"", mn);
    else js_printf(b, "\"\\\"\" jchar{%ld,%ld} \"\\\"\"", mn, mx);
    return true;
}

static bool compile_array(js_ctx *C, const cJSON *s, js_buf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    long mn, mx;
    if (!count_kw(C, s, "minItems", 0, &mn) || !count_kw(C, s, "maxItems", -1, &mx)) return false;
    if (mx >= 0 && mx < mn) return fail(C, "'maxItems' below 'minItems'%s", NULL);
    char item[32] = "jvalue";
    if (items) {
        if (cJSON_IsArray(items))
            return fail(C, "'items' as an array (tuple form) is not supported%s", NULL);
        size_t p = push_path(C, "items");
        int r;
        bool ok = compile(C, items, &r);
        pop_path(C, p);
        if (!ok) return false;
        snprintf(item, sizeof item, "s%d", r);
    }
    if (mx == 0) {
        js_put(b, "\"[]\"");
        return true;
    }
    js_put(b, "\"[\" ");
    if (mn == 0) js_put(b, "(");
    js_printf(b, "%s (\",\" ws %s)", item, item);
    long lo = mn > 0 ? mn - 1 : 0;
    if (mx < 0) js_printf(b, "{%ld,}", lo);
    else js_printf(b, "{%ld,%ld}", lo, mx - 1);
    if (mn == 0) js_put(b, ")?");
    js_put(b, " \"]\"");
    return true;
}


static bool compile_type(js_ctx *C, const cJSON *s, const char *type, js_buf *b) {
    if (strcmp(type, "null") == 0) js_put(b, "\"null\"");
    else if (strcmp(type, "boolean") == 0) js_put(b, "(\"true\" | \"false\")");
    else if (strcmp(type, "integer") == 0) return compile_integer(C, s, b);
    else if (strcmp(type, "number") == 0) return compile_number(C, s, b);
    else if (strcmp(type, "string") == 0) return compile_string(C, s, b);
    else if (strcmp(type, "array") == 0) return compile_array(C, s, b);
    else if (strcmp(type, "object") == 0) return js_compile_object(C, s, b);
    else return fail(C, "unknown type '%s'", type);
    return true;
}

/* The type a schema without "type" implies through its other keywords, or NULL (any). */
static const char *implied_type(const cJSON *s) {
    static const struct { const char *kw, *type; } map[] = {
        {"properties", "object"}, {"additionalProperties", "object"}, {"required", "object"},
        {"items", "array"}, {"minItems", "array"}, {"maxItems", "array"},
        {"minLength", "string"}, {"maxLength", "string"}, {"pattern", "string"}, {"format", "string"},
        {"minimum", "number"}, {"maximum", "number"}, {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, map[i].kw)) return map[i].type;
    return NULL;
}

static bool compile(js_ctx *C, const cJSON *s, int *rule) {
    if (C->st != QVL_OK) return false;
    if (cJSON_IsTrue(s)) {
        js_buf b = {0};
        *rule = begin_rule(C, &b);
        js_put(&b, "jvalue");
        end_rule(C, &b);
        return true;
    }
    if (cJSON_IsFalse(s)) return fail(C, "the schema 'false' matches nothing%s", NULL);
    if (!cJSON_IsObject(s)) return fail(C, "a schema must be an object or a boolean%s", NULL);
    if (++C->depth > MAX_DEPTH) return fail(C, "schemas nested more than 64 deep%s", NULL);
    const char *composite = NULL;
    int n_other = 0;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!is_supported(k->string)) return fail(C, "unsupported keyword '%s'", k->string);
        if (is_annotation(k->string)) continue;
        if (!strcmp(k->string, "$ref") || !strcmp(k->string, "anyOf") || !strcmp(k->string, "oneOf") ||
            !strcmp(k->string, "enum") || !strcmp(k->string, "const")) {
            if (composite && !((!strcmp(composite, "enum") || !strcmp(composite, "const")) &&
                               (!strcmp(k->string, "enum") || !strcmp(k->string, "const"))))
                return fail(C, "'%s' together with another of $ref/anyOf/oneOf/enum/const is not supported",
                            k->string);
            composite = k->string;
        } else if (strcmp(k->string, "type") != 0) {
            n_other++;
        }
    }
    bool ok;
    if (composite && (!strcmp(composite, "enum") || !strcmp(composite, "const"))) {
        ok = compile_enum(C, s, rule); /* the values decide; type and the rest are redundant */
    } else if (composite) {
        if (n_other > 0 || cJSON_GetObjectItemCaseSensitive(s, "type"))
            ok = fail(C, "keywords beside '%s' are not supported (move them into its branches)",
                      composite);
        else if (!strcmp(composite, "$ref")) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
            ok = cJSON_IsString(r) ? compile_ref(C, r->valuestring, rule)
                                   : fail(C, "'$ref' must be a string%s", NULL);
        } else {
            ok = compile_any_of(C, cJSON_GetObjectItemCaseSensitive(s, composite), composite, rule);
        }
    } else {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
        js_buf b = {0};
        *rule = begin_rule(C, &b);
        ok = true;
        if (!type) {
            const char *t = implied_type(s);
            if (t) ok = compile_type(C, s, t, &b);
            else js_put(&b, "jvalue");
        } else if (cJSON_IsString(type)) {
            ok = compile_type(C, s, type->valuestring, &b);
        } else if (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0) {
            bool first = true;
            for (const cJSON *t = type->child; ok && t; t = t->next) {
                if (!cJSON_IsString(t)) {
                    ok = fail(C, "'type' lists a non-string%s", NULL);
                    break;
                }
                js_put(&b, first ? "(" : " | ");
                first = false;
                ok = compile_type(C, s, t->valuestring, &b);
            }
            js_put(&b, ")");
        } else {
            ok = fail(C, "'type' must be a string or a non-empty array of strings%s", NULL);
        }
        if (ok) end_rule(C, &b);
        else free(b.s);
    }
    C->depth--;
    return ok;
}

/* For json_schema_object.c (json_schema_internal.h). */

bool js_fail(js_ctx *C, const char *fmt, const char *arg) {
    return fail(C, fmt, arg);
}

bool js_compile_sub(js_ctx *C, const cJSON *s, const char *seg, int *rule) {
    size_t p = push_path(C, seg);
    bool ok = compile(C, s, rule);
    pop_path(C, p);
    return ok;
}

int js_new_rule(js_ctx *C, js_buf *b) {
    return begin_rule(C, b);
}

void js_end_rule(js_ctx *C, js_buf *b) {
    end_rule(C, b);
}

qvl_status qvl_grammar_from_json_schema(const char *schema, size_t len, char **gbnf,
                                        qvl_error *err) {
    *gbnf = NULL;
    if (!schema) return qvl_fail(err, QVL_E_INVALID, "json schema: NULL text");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(schema, len, &end, false);
    if (!root) return qvl_fail(err, QVL_E_PARSE, "json schema: not valid JSON (near byte %zu)",
                               end && end >= schema ? (size_t)(end - schema) : (size_t)0);
    for (; end && end < schema + len; end++)
        if (!strchr(" \t\r\n", *end)) {
            cJSON_Delete(root);
            return qvl_fail(err, QVL_E_PARSE, "json schema: text after the JSON value");
        }
    js_ctx C = {.root = root, .err = err};
    js_put(&C.out, base_rules);
    int top;
    bool ok = compile(&C, root, &top);
    if (ok) js_printf(&C.out, "root ::= s%d\n", top);
    for (size_t i = 0; i < C.n_refs; i++) free(C.refs[i].ref);
    free(C.refs);
    cJSON_Delete(root);
    if (ok && C.out.oom) C.st = qvl_fail(err, QVL_E_NOMEM, "json schema: out of memory");
    if (!ok || C.st != QVL_OK) {
        free(C.out.s);
        return C.st != QVL_OK ? C.st : qvl_fail(err, QVL_E_INVALID, "json schema: failed");
    }
    *gbnf = C.out.s;
    return QVL_OK;
}
