/* GBNF text -> qvl_grammar (the notation is described in qvl/grammar.h).
 *
 * Recursive descent over the text. Groups and repetitions are rewritten on the spot into
 * generated rules named after the rule they occur in ("value-3"), so the compiled grammar has
 * only character tests, rule references and alternative ends:
 *   x*      -> R ::= x R | ""            (right recursion: the matcher's tail-call rule keeps
 *                                          its stacks flat however long the run)
 *   x+      -> x R  with R as for x*
 *   x?      -> R ::= x | ""
 *   x{m,n}  -> x ... x (m times) then O(n-m), O(k) ::= x O(k-1) | "", O(1) ::= x | ""
 *   x{m,}   -> x ... x (m times) then R as for x*
 * A multi-element operand (a literal of several characters) becomes a rule first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

typedef struct evec {
    g_elem *e;
    size_t n, cap;
} evec;

typedef struct prule {
    char *name;
    evec body; /* alternatives, each ended by GE_END */
    bool defined;
    size_t ref_at; /* text offset of the first reference, for "undefined rule" */
} prule;

typedef struct parser {
    const char *text, *p, *end;
    prule *rules;
    size_t n_rules, cap_rules;
    g_class *classes;
    size_t n_classes, cap_classes;
    uint32_t *ranges;
    size_t n_ranges, cap_ranges;
    size_t total; /* elements in all bodies */
    int depth;
    qvl_error *err;
    qvl_status st; /* first failure */
} parser;

#define MAX_NESTING 256

static void where(const parser *P, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = P->text; q < at; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)*q & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

static bool fail_at(parser *P, const char *at, const char *fmt, const char *arg) {
    if (P->st != QVL_OK) return false;
    int line, col;
    where(P, at, &line, &col);
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    P->st = qvl_fail(P->err, QVL_E_PARSE, "grammar:%d:%d: %s", line, col, msg);
    return false;
}

static bool nomem(parser *P) {
    if (P->st == QVL_OK) P->st = qvl_fail(P->err, QVL_E_NOMEM, "grammar: out of memory");
    return false;
}

static bool grow(parser *P, void **data, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *d = realloc(*data, c * size);
    if (!d) return nomem(P);
    *data = d;
    *cap = c;
    return true;
}

static bool push(parser *P, evec *v, int32_t type, int32_t val) {
    if (++P->total > QVL_GRAMMAR_MAX_ELEMENTS) {
        if (P->st == QVL_OK)
            P->st = qvl_fail(P->err, QVL_E_LIMIT, "grammar: expands to more than %zu elements",
                             QVL_GRAMMAR_MAX_ELEMENTS);
        return false;
    }
    if (!grow(P, (void **)&v->e, &v->cap, v->n + 1, sizeof *v->e)) return false;
    v->e[v->n++] = (g_elem){type, val};
    return true;
}

static bool append(parser *P, evec *v, const evec *w) {
    for (size_t i = 0; i < w->n; i++)
        if (!push(P, v, w->e[i].type, w->e[i].v)) return false;
    return true;
}

/* A new rule: named name (len bytes), or generated from base ("base-N") when name is NULL. */
static int32_t new_rule(parser *P, const char *name, size_t len, const char *base) {
    if (!grow(P, (void **)&P->rules, &P->cap_rules, P->n_rules + 1, sizeof *P->rules)) return -1;
    char buf[96];
    if (!name) {
        int n = snprintf(buf, sizeof buf, "%.60s-%zu", base, P->n_rules);
        name = buf;
        len = (size_t)n;
    }
    char *copy = malloc(len + 1);
    if (!copy) return nomem(P), -1;
    memcpy(copy, name, len);
    copy[len] = '\0';
    P->rules[P->n_rules] = (prule){.name = copy, .defined = name == buf};
    return (int32_t)P->n_rules++;
}

static int32_t find_rule(parser *P, const char *name, size_t len) {
    for (size_t i = 0; i < P->n_rules; i++)
        if (strlen(P->rules[i].name) == len && memcmp(P->rules[i].name, name, len) == 0)
            return (int32_t)i;
    return -1;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* Spaces, tabs, carriage returns and comments; newlines too when newline_ok. */
static void skip_space(parser *P, bool newline_ok) {
    while (P->p < P->end) {
        char c = *P->p;
        if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newline_ok)) {
            P->p++;
        } else if (c == '#') {
            while (P->p < P->end && *P->p != '\n') P->p++;
        } else {
            break;
        }
    }
}

/* One UTF-8 character of the text -> code point, or -1 when ill-formed. */
static int32_t utf8_next(parser *P) {
    const unsigned char *s = (const unsigned char *)P->p;
    size_t left = (size_t)(P->end - P->p);
    uint32_t c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || (size_t)len > left) return -1;
    uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    P->p += len;
    return (int32_t)cp;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes decoded; -1 after an error. */
static int32_t read_char(parser *P) {
    const char *at = P->p;
    if (P->p >= P->end) return fail_at(P, at, "unexpected end of the grammar%s", NULL), -1;
    if (*P->p != '\\') {
        int32_t cp = utf8_next(P);
        if (cp < 0) fail_at(P, at, "ill-formed UTF-8%s", NULL);
        return cp;
    }
    P->p++;
    if (P->p >= P->end) return fail_at(P, at, "unfinished escape%s", NULL), -1;
    char c = *P->p++;
    int digits = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': return c;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: {
        char s[2] = {c, 0};
        return fail_at(P, at, "unknown escape \\%s", s), -1;
    }
    }
    uint32_t cp = 0;
    for (int i = 0; i < digits; i++) {
        int h = P->p < P->end ? hexval(*P->p) : -1;
        if (h < 0) return fail_at(P, at, "\\%s needs hexadecimal digits", c == 'x' ? "x" : "u"), -1;
        cp = cp * 16 + (uint32_t)h;
        P->p++;
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return fail_at(P, at, "escape names no Unicode scalar value%s", NULL), -1;
    return (int32_t)cp;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* [ ... ] after the '[' -> one element appended to out. */
static bool parse_class(parser *P, const char *at, evec *out) {
    bool negated = P->p < P->end && *P->p == '^';
    if (negated) P->p++;
    uint32_t *r = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    while (ok) {
        if (P->p >= P->end) {
            ok = fail_at(P, at, "unterminated character class%s", NULL);
            break;
        }
        if (*P->p == ']') {
            P->p++;
            break;
        }
        int32_t lo = read_char(P), hi = lo;
        if (lo < 0) {
            ok = false;
            break;
        }
        if (P->p + 1 < P->end && P->p[0] == '-' && P->p[1] != ']') {
            P->p++;
            const char *hat = P->p;
            hi = read_char(P);
            if (hi < 0) {
                ok = false;
                break;
            }
            if (hi < lo) ok = fail_at(P, hat, "range end before its start%s", NULL);
        }
        if (ok && (ok = grow(P, (void **)&r, &cap, n + 1, 2 * sizeof *r))) {
            r[2 * n] = (uint32_t)lo;
            r[2 * n + 1] = (uint32_t)hi;
            n++;
        }
    }
    if (!ok) {
        free(r);
        return false;
    }
    qsort(r, n, 2 * sizeof *r, cmp_range);
    size_t m = 0; /* merge overlapping and adjacent ranges */
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    size_t first = P->n_ranges;
    uint32_t next = 0; /* complement: the gaps between the merged ranges */
    for (size_t i = 0; ok && i <= m; i++) {
        uint32_t lo, hi;
        if (negated) {
            if (i < m && r[2 * i] <= next) {
                next = r[2 * i + 1] + 1;
                continue;
            }
            if (next > 0x10FFFF) break;
            lo = next;
            hi = i < m ? r[2 * i] - 1 : 0x10FFFF;
            if (i < m) next = r[2 * i + 1] + 1;
        } else {
            if (i == m) break;
            lo = r[2 * i];
            hi = r[2 * i + 1];
        }
        if ((ok = grow(P, (void **)&P->ranges, &P->cap_ranges, 2 * (P->n_ranges + 1),
                       sizeof *P->ranges))) {
            P->ranges[2 * P->n_ranges] = lo;
            P->ranges[2 * P->n_ranges + 1] = hi;
            P->n_ranges++;
        }
    }
    free(r);
    if (!ok) return false;
    size_t count = P->n_ranges - first;
    if (count == 0) return fail_at(P, at, "character class matches nothing%s", NULL);
    if (count == 1 && P->ranges[2 * first] == P->ranges[2 * first + 1]) {
        int32_t cp = (int32_t)P->ranges[2 * first];
        P->n_ranges = first;
        return push(P, out, GE_CP, cp);
    }
    if (!grow(P, (void **)&P->classes, &P->cap_classes, P->n_classes + 1, sizeof *P->classes))
        return false;
    P->classes[P->n_classes] = (g_class){(uint32_t)first, (uint32_t)count};
    return push(P, out, GE_CLASS, (int32_t)P->n_classes++);
}

static bool parse_alternates(parser *P, int32_t rule, evec *out, bool nested);

/* The rule r gets body (moved in). */
static void set_body(parser *P, int32_t r, evec *body) {
    free(P->rules[r].body.e);
    P->rules[r].body = *body;
    memset(body, 0, sizeof *body);
}

/* A rule whose alternatives are `x tail` and, when empty_alt, "" (tail < 0: none). */
static int32_t rep_rule(parser *P, int32_t base, const g_elem *x, int32_t tail, bool self) {
    int32_t r = new_rule(P, NULL, 0, P->rules[base].name);
    if (r < 0) return -1;
    evec b = {0};
    bool ok = push(P, &b, x->type, x->v);
    if (ok && self) ok = push(P, &b, GE_RULE, r);
    if (ok && tail >= 0) ok = push(P, &b, GE_RULE, tail);
    ok = ok && push(P, &b, GE_END, 0) && push(P, &b, GE_END, 0);
    if (!ok) {
        free(b.e);
        return -1;
    }
    set_body(P, r, &b);
    return r;
}

/* x{min,max} appended to seq (max < 0: unbounded). */
static bool repeat(parser *P, int32_t base, g_elem x, long min, long max, evec *seq) {
    for (long i = 0; i < min; i++)
        if (!push(P, seq, x.type, x.v)) return false;
    if (max < 0) {
        int32_t r = rep_rule(P, base, &x, -1, true);
        return r >= 0 && push(P, seq, GE_RULE, r);
    }
    int32_t tail = -1;
    for (long k = min; k < max; k++)
        if ((tail = rep_rule(P, base, &x, tail, false)) < 0) return false;
    return tail < 0 || push(P, seq, GE_RULE, tail);
}

static bool read_count(parser *P, long *v) {
    const char *at = P->p;
    long n = 0;
    if (P->p >= P->end || *P->p < '0' || *P->p > '9') return fail_at(P, at, "expected a number%s", NULL);
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
        n = n * 10 + (*P->p++ - '0');
        if (n > QVL_GRAMMAR_MAX_REPEAT)
            return fail_at(P, at, "repetition count over the limit of 100000%s", NULL);
    }
    *v = n;
    return true;
}

/* A postfix operator after the unit u (already parsed), if any; the result goes to seq. */
static bool postfix(parser *P, int32_t rule, evec *u, evec *seq, bool nested) {
    skip_space(P, nested);
    if (P->p >= P->end || !strchr("*+?{", *P->p)) return append(P, seq, u);
    const char *at = P->p;
    char op = *P->p++;
    long min = 0, max = -1;
    if (op == '+') min = 1;
    else if (op == '?') max = 1;
    else if (op == '{') {
        skip_space(P, false);
        if (P->p < P->end && *P->p == ',') min = 0;
        else if (!read_count(P, &min)) return false;
        skip_space(P, false);
        if (P->p < P->end && *P->p == ',') {
            P->p++;
            skip_space(P, false);
            if (P->p < P->end && *P->p != '}' && !read_count(P, &max)) return false;
        } else {
            max = min;
        }
        skip_space(P, false);
        if (P->p >= P->end || *P->p != '}') return fail_at(P, at, "expected '}' closing the repetition%s", NULL);
        P->p++;
        if (max >= 0 && max < min) return fail_at(P, at, "repetition maximum below its minimum%s", NULL);
    }
    g_elem x;
    if (u->n == 1) {
        x = u->e[0];
    } else {
        int32_t r = new_rule(P, NULL, 0, P->rules[rule].name);
        evec b = {0};
        if (r < 0 || !append(P, &b, u) || !push(P, &b, GE_END, 0)) {
            free(b.e);
            return false;
        }
        set_body(P, r, &b);
        x = (g_elem){GE_RULE, r};
    }
    if (u->n == 0) return true; /* "" repeated is still "" */
    skip_space(P, nested);
    if (P->p < P->end && strchr("*+?{", *P->p))
        return fail_at(P, P->p, "a repetition cannot follow another; use a group%s", NULL);
    return repeat(P, rule, x, min, max, seq);
}

/* One sequence into out (not terminated). */
static bool parse_sequence(parser *P, int32_t rule, evec *out, bool nested) {
    for (;;) {
        skip_space(P, nested);
        if (P->p >= P->end) return true;
        const char *at = P->p;
        char c = *P->p;
        if (c == '|' || c == ')' || c == '\n') return true;
        evec u = {0};
        bool ok = true;
        if (c == '"') {
            P->p++;
            for (;;) {
                if (P->p >= P->end || *P->p == '\n') {
                    ok = fail_at(P, at, "unterminated string literal%s", NULL);
                    break;
                }
                if (*P->p == '"') {
                    P->p++;
                    break;
                }
                int32_t cp = read_char(P);
                if (cp < 0 || !push(P, &u, GE_CP, cp)) {
                    ok = false;
                    break;
                }
            }
        } else if (c == '[') {
            P->p++;
            ok = parse_class(P, at, &u);
        } else if (c == '.') {
            P->p++;
            ok = push(P, &u, GE_ANY, 0);
        } else if (c == '(') {
            P->p++;
            if (++P->depth > MAX_NESTING) {
                ok = fail_at(P, at, "groups nested too deep%s", NULL);
            } else {
                int32_t r = new_rule(P, NULL, 0, P->rules[rule].name);
                evec b = {0};
                ok = r >= 0 && parse_alternates(P, r, &b, true);
                if (ok && (P->p >= P->end || *P->p != ')'))
                    ok = fail_at(P, at, "unclosed '('%s", NULL);
                if (ok) {
                    P->p++;
                    set_body(P, r, &b);
                    ok = push(P, &u, GE_RULE, r);
                }
                free(b.e);
            }
            P->depth--;
        } else if (is_name_char(c)) {
            const char *s = P->p;
            while (P->p < P->end && is_name_char(*P->p)) P->p++;
            size_t len = (size_t)(P->p - s);
            int32_t r = find_rule(P, s, len);
            if (r < 0 && (r = new_rule(P, s, len, NULL)) >= 0) P->rules[r].ref_at = (size_t)(s - P->text);
            ok = r >= 0 && push(P, &u, GE_RULE, r);
        } else {
            char s[2] = {c, 0};
            ok = fail_at(P, at, "unexpected '%s'", s);
        }
        ok = ok && postfix(P, rule, &u, out, nested);
        free(u.e);
        if (!ok) return false;
    }
}

static bool parse_alternates(parser *P, int32_t rule, evec *out, bool nested) {
    for (;;) {
        if (!parse_sequence(P, rule, out, nested) || !push(P, out, GE_END, 0)) return false;
        if (!nested) { /* a following line that starts with '|' continues this rule */
            const char *save = P->p;
            skip_space(P, true);
            if (P->p >= P->end || *P->p != '|') P->p = save;
        }
        if (P->p >= P->end || *P->p != '|') return true;
        P->p++;
        skip_space(P, true);
    }
}

static bool parse_rules(parser *P) {
    for (;;) {
        skip_space(P, true);
        if (P->p >= P->end) return true;
        const char *at = P->p;
        if (!is_name_char(*P->p)) {
            char s[2] = {*P->p, 0};
            return fail_at(P, at, "expected a rule name, found '%s'", s);
        }
        while (P->p < P->end && is_name_char(*P->p)) P->p++;
        size_t len = (size_t)(P->p - at);
        skip_space(P, false);
        if (P->end - P->p < 3 || memcmp(P->p, "::=", 3) != 0)
            return fail_at(P, P->p, "expected '::=' after the rule name%s", NULL);
        P->p += 3;
        int32_t r = find_rule(P, at, len);
        if (r >= 0 && P->rules[r].defined) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(len < 60 ? len : 60), at);
            return fail_at(P, at, "rule '%s' defined twice", name);
        }
        if (r < 0 && (r = new_rule(P, at, len, NULL)) < 0) return false;
        P->rules[r].defined = true;
        skip_space(P, true);
        evec body = {0};
        if (!parse_alternates(P, r, &body, false)) {
            free(body.e);
            return false;
        }
        set_body(P, r, &body);
        if (P->p < P->end && *P->p != '\n') {
            char s[2] = {*P->p, 0};
            return fail_at(P, P->p, "unexpected '%s'", s);
        }
    }
}

/* The parser's rules -> the flat compiled form. */
static qvl_status build(parser *P, qvl_grammar *g) {
    size_t n = 0, n_alts = 0;
    for (size_t r = 0; r < P->n_rules; r++) {
        n += P->rules[r].body.n;
        for (size_t i = 0; i < P->rules[r].body.n; i++) n_alts += P->rules[r].body.e[i].type == GE_END;
    }
    g->elems = malloc((n + 1) * sizeof *g->elems);
    g->alt_off = malloc((P->n_rules + 1) * sizeof *g->alt_off);
    g->alt_start = malloc((n_alts + 1) * sizeof *g->alt_start);
    g->names = calloc(P->n_rules + 1, sizeof *g->names);
    g->min_len = calloc(P->n_rules + 1, sizeof *g->min_len);
    if (!g->elems || !g->alt_off || !g->alt_start || !g->names || !g->min_len)
        return qvl_fail(P->err, QVL_E_NOMEM, "grammar: out of memory");
    g->n_rules = P->n_rules;
    size_t k = 0, a = 0;
    for (size_t r = 0; r < P->n_rules; r++) {
        g->alt_off[r] = (uint32_t)a;
        const evec *b = &P->rules[r].body;
        bool start = true;
        for (size_t i = 0; i < b->n; i++) {
            if (start) g->alt_start[a++] = (int32_t)k;
            g->elems[k++] = b->e[i];
            start = b->e[i].type == GE_END;
        }
        g->names[r] = P->rules[r].name;
        P->rules[r].name = NULL;
    }
    g->alt_off[P->n_rules] = (uint32_t)a;
    g->n_elems = k;
    g->classes = P->classes;
    g->n_classes = P->n_classes;
    g->ranges = P->ranges;
    P->classes = NULL;
    P->ranges = NULL;
    return QVL_OK;
}

qvl_status qvl_grammar_parse(const char *text, size_t len, qvl_grammar **out, qvl_error *err) {
    *out = NULL;
    if (!text && len) return qvl_fail(err, QVL_E_INVALID, "qvl_grammar_parse: NULL text");
    if (len > QVL_GRAMMAR_MAX_TEXT)
        return qvl_fail(err, QVL_E_LIMIT, "grammar: over %zu MiB", QVL_GRAMMAR_MAX_TEXT >> 20);
    if (len && memchr(text, '\0', len))
        return qvl_fail(err, QVL_E_PARSE, "grammar: holds a NUL byte");
    parser P = {.text = text ? text : "", .err = err};
    P.p = P.text;
    P.end = P.text + len;
    qvl_grammar *g = calloc(1, sizeof *g);
    if (!g) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    parse_rules(&P);
    qvl_status st = P.st;
    for (size_t r = 0; st == QVL_OK && r < P.n_rules; r++) {
        if (!P.rules[r].defined) {
            fail_at(&P, P.text + P.rules[r].ref_at, "undefined rule '%s'", P.rules[r].name);
            st = P.st;
        }
    }
    int32_t root = st == QVL_OK ? find_rule(&P, "root", 4) : -1;
    if (st == QVL_OK && root < 0) st = qvl_fail(err, QVL_E_PARSE, "grammar: no rule named 'root'");
    if (st == QVL_OK) st = build(&P, g);
    g->root = root;
    if (st == QVL_OK) st = qvl_g_check(g, err);
    for (size_t r = 0; r < P.n_rules; r++) {
        free(P.rules[r].name);
        free(P.rules[r].body.e);
    }
    free(P.rules);
    free(P.classes);
    free(P.ranges);
    if (st != QVL_OK) {
        qvl_grammar_free(g);
        return st;
    }
    *out = g;
    return QVL_OK;
}

void qvl_grammar_free(qvl_grammar *g) {
    if (!g) return;
    for (size_t r = 0; g->names && r < g->n_rules; r++) free(g->names[r]);
    free(g->names);
    free(g->elems);
    free(g->alt_off);
    free(g->alt_start);
    free(g->classes);
    free(g->ranges);
    free(g->min_len);
    free(g);
}

size_t qvl_grammar_n_rules(const qvl_grammar *g) {
    return g ? g->n_rules : 0;
}
