/* Shared by the JSON Schema -> GBNF compiler's files (json_schema*.c): the output text, one
 * rule per schema node, and errors that name the schema location ("#/properties/a"). */
#ifndef QVL_JSON_SCHEMA_INTERNAL_H
#define QVL_JSON_SCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

typedef struct js_buf {
    char *s;
    size_t n, cap;
    bool oom;
} js_buf;

void js_put(js_buf *b, const char *text);
void js_putn(js_buf *b, const char *text, size_t n);
void js_printf(js_buf *b, const char *fmt, ...) QVL_PRINTF(2, 3);
/* A GBNF string literal holding bytes text[0, n) ("..." with escapes). */
void js_literal(js_buf *b, const char *text, size_t n);
/* One code point as a GBNF class endpoint (\uXXXX or \UXXXXXXXX). */
void js_class_cp(js_buf *b, uint32_t cp);

typedef struct js_ref {
    char *ref;
    int rule;
} js_ref;

/* The compilation: rules written so far (out), $ref targets already given a rule, the
 * location of the node being compiled, and the first error. */
typedef struct js_ctx {
    js_buf out;
    const struct cJSON *root;
    js_ref *refs;
    size_t n_refs, cap_refs;
    int n_rules, depth;
    char path[512];
    qvl_error *err;
    qvl_status st;
} js_ctx;

/* json_schema.c: fmt holds one %s for arg; false always. */
bool js_fail(js_ctx *C, const char *fmt, const char *arg);
/* Compiles the sub-schema s found at location segment seg into a rule "s<N>". */
bool js_compile_sub(js_ctx *C, const struct cJSON *s, const char *seg, int *rule);
/* A new rule "s<N> ::= " started in b (returns N); js_end_rule moves it to the output. */
int js_new_rule(js_ctx *C, js_buf *b);
void js_end_rule(js_ctx *C, js_buf *b);

/* json_schema_object.c: the body of an object schema's rule, appended to b. */
bool js_compile_object(js_ctx *C, const struct cJSON *s, js_buf *b);

/* Decimal integers in [lo, hi] (hi_inf: no upper bound) as a GBNF expression, no leading zeros,
 * at most 16 digits. False (with the reason in why) when not expressible. */
bool js_integer_range(js_buf *b, bool lo_inf, int64_t lo, bool hi_inf, int64_t hi,
                      char *why, size_t why_len);

/* A regular expression (the subset json_schema_regex.c documents) -> a GBNF expression for the
 * JSON string *contents* whose decoded text it matches. False with the reason in why. */
bool js_regex(js_buf *b, const char *re, char *why, size_t why_len);

#endif
