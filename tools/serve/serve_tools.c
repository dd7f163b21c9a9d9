/* tools, tool_choice and parallel_tool_calls (serve_tools.h): the prompt's tool lines and the
 * grammar of the calls. */
#define _POSIX_C_SOURCE 200809L

#include "serve_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/grammar.h"
#include "serve_pyjson.h"
#include "serve_request.h"

typedef struct growing {
    char *s;
    size_t len, cap;
    bool oom;
} growing;

static void add(growing *g, const char *s, size_t n) {
    if (g->oom) return;
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 1024;
        while (cap < g->len + n + 1) cap *= 2;
        char *p = realloc(g->s, cap);
        if (!p) {
            g->oom = true;
            return;
        }
        g->s = p;
        g->cap = cap;
    }
    memcpy(g->s + g->len, s, n);
    g->len += n;
    g->s[g->len] = '\0';
}

static void adds(growing *g, const char *s) { add(g, s, strlen(s)); }

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* gbnf with every rule name (definitions and references) given `prefix`, so that several
 * compiled schemas can live in one grammar. Literals, classes, repetition counts and comments
 * are copied as they are. */
static void add_prefixed(growing *g, const char *gbnf, const char *prefix) {
    const char *p = gbnf;
    while (*p) {
        const char *start = p;
        if (*p == '"' || *p == '[') {
            const char close = *p == '"' ? '"' : ']';
            for (p++; *p && *p != close; p++)
                if (*p == '\\' && p[1]) p++;
            if (*p) p++;
        } else if (*p == '{') {
            while (*p && *p != '}') p++;
            if (*p) p++;
        } else if (*p == '#') {
            while (*p && *p != '\n') p++;
        } else if (name_char(*p)) {
            while (name_char(*p)) p++;
            adds(g, prefix);
        } else {
            p++;
        }
        add(g, start, (size_t)(p - start));
    }
}

typedef struct tool_fn {
    const char *name;
    const cJSON *parameters; /* NULL: takes none */
} tool_fn;

/* The grammar of the calls: rule `call` is one call's JSON object of any function in fns
 * (or only fns[only] when only >= 0). */
static bool add_call_rules(growing *g, const tool_fn *fns, int n, int only, serve_bad *bad) {
    adds(g, "call ::= ");
    bool first = true;
    for (int i = 0; i < n; i++) {
        if (only >= 0 && i != only) continue;
        char rule[32];
        snprintf(rule, sizeof rule, "%scall%d", first ? "" : " | ", i);
        adds(g, rule);
        first = false;
    }
    adds(g, "\n");
    for (int i = 0; i < n; i++) {
        if (only >= 0 && i != only) continue;
        char *schema = fns[i].parameters ? cJSON_PrintUnformatted(fns[i].parameters)
                                         : strdup("{\"type\":\"object\",\"properties\":{},"
                                                  "\"additionalProperties\":false}");
        if (!schema) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
        char *gbnf = NULL;
        qvl_error err = {0};
        qvl_status st = qvl_grammar_from_json_schema(schema, strlen(schema), &gbnf, &err);
        free(schema);
        if (st != QVL_OK) {
            char param[96];
            snprintf(param, sizeof param, "tools[%d].function.parameters", i);
            return serve_bad_set(bad, st == QVL_E_NOMEM ? 500 : 400, param, "unsupported_value",
                                 "%s", err.msg);
        }
        char prefix[24], line[160];
        snprintf(prefix, sizeof prefix, "f%d-", i);
        /* the names are [A-Za-z0-9_-]: nothing to escape in the literal */
        snprintf(line, sizeof line, "call%d ::= \"{\\\"name\\\": \\\"%s\\\", \\\"arguments\\\": \" "
                 "f%d-root \"}\"\n", i, fns[i].name, i);
        adds(g, line);
        add_prefixed(g, gbnf, prefix);
        adds(g, "\n");
        free(gbnf);
    }
    return true;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i])) return false;
    return true;
}

/* tools[i] -> fns[i], checked. */
static bool read_tools(const cJSON *tools, tool_fn *fns, int *n, serve_bad *bad) {
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char param[64];
        snprintf(param, sizeof param, "tools[%d]", i);
        const cJSON *type = cJSON_IsObject(t) ? serve_field(t, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
            return serve_bad_set(bad, 400, param, "invalid_value",
                                 "a tool must be {\"type\": \"function\", \"function\": {...}}");
        const cJSON *fn = serve_field(t, "function");
        const cJSON *name = cJSON_IsObject(fn) ? serve_field(fn, "name") : NULL;
        if (!cJSON_IsString(name) || !valid_name(name->valuestring))
            return serve_bad_set(bad, 400, param, "invalid_value", "a function needs a 'name' of "
                                 "1 to 64 letters, digits, '_' and '-'");
        for (int k = 0; k < i; k++)
            if (strcmp(fns[k].name, name->valuestring) == 0)
                return serve_bad_set(bad, 400, param, "invalid_value", "two tools are named '%s'",
                                     name->valuestring);
        const cJSON *d = serve_field(fn, "description");
        if (d && !cJSON_IsString(d))
            return serve_bad_set(bad, 400, param, "invalid_type", "a function's 'description' "
                                 "must be a string");
        const cJSON *params = serve_field(fn, "parameters");
        if (params && !cJSON_IsObject(params))
            return serve_bad_set(bad, 400, param, "invalid_type", "a function's 'parameters' "
                                 "must be a JSON Schema object");
        fns[i++] = (tool_fn){.name = name->valuestring, .parameters = params};
    }
    *n = i;
    return true;
}

typedef enum choice { CHOICE_AUTO, CHOICE_NONE, CHOICE_REQUIRED, CHOICE_NAMED } choice;

static bool read_choice(const cJSON *root, const tool_fn *fns, int n, choice *c, int *only,
                        serve_bad *bad) {
    const cJSON *tc = serve_field(root, "tool_choice");
    *c = CHOICE_AUTO;
    *only = -1;
    if (!tc) return true;
    if (cJSON_IsString(tc)) {
        if (strcmp(tc->valuestring, "auto") == 0) return true;
        if (strcmp(tc->valuestring, "none") == 0) *c = CHOICE_NONE;
        else if (strcmp(tc->valuestring, "required") == 0) *c = CHOICE_REQUIRED;
        else return serve_bad_set(bad, 400, "tool_choice", "invalid_value", "tool_choice must "
                                  "be auto, none, required or {\"type\": \"function\", "
                                  "\"function\": {\"name\": ...}}");
        return true;
    }
    const cJSON *fn = cJSON_IsObject(tc) ? serve_field(tc, "function") : NULL;
    const cJSON *name = cJSON_IsObject(fn) ? serve_field(fn, "name") : NULL;
    if (!cJSON_IsString(name))
        return serve_bad_set(bad, 400, "tool_choice", "invalid_value", "tool_choice must be auto, "
                             "none, required or {\"type\": \"function\", \"function\": {\"name\": "
                             "...}}");
    for (int i = 0; i < n; i++)
        if (strcmp(fns[i].name, name->valuestring) == 0) *only = i;
    if (*only < 0)
        return serve_bad_set(bad, 400, "tool_choice", "invalid_value", "tool_choice names "
                             "'%.64s', which is not among the tools", name->valuestring);
    *c = CHOICE_NAMED;
    return true;
}

/* Each tool on its own line, as the template's `tool | tojson` writes it. */
static char *tool_lines(const cJSON *tools) {
    growing g = {0};
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        char *line = serve_pyjson(t);
        if (!line) {
            free(g.s);
            return NULL;
        }
        if (g.len > 0) adds(&g, "\n");
        adds(&g, line);
        free(line);
    }
    if (g.oom) {
        free(g.s);
        return NULL;
    }
    return g.s;
}

bool serve_tools_parse(const cJSON *root, qvl_engine_request *gen, char **tools_text,
                       bool *read_calls, serve_bad *bad) {
    *tools_text = NULL;
    *read_calls = false;
    const cJSON *tools = serve_field(root, "tools");
    if (!tools) {
        if (serve_field(root, "tool_choice"))
            return serve_bad_set(bad, 400, "tool_choice", "invalid_value",
                                 "'tool_choice' needs 'tools'");
        return true;
    }
    if (!cJSON_IsArray(tools))
        return serve_bad_set(bad, 400, "tools", "invalid_type", "'tools' must be a list");
    const int count = cJSON_GetArraySize(tools);
    if (count == 0) return true;
    if (count > SERVE_MAX_TOOLS)
        return serve_bad_set(bad, 400, "tools", "invalid_value", "more than %d tools",
                             SERVE_MAX_TOOLS);
    tool_fn fns[SERVE_MAX_TOOLS];
    int n = 0, only = -1;
    choice c;
    bool parallel = true;
    if (!read_tools(tools, fns, &n, bad) || !read_choice(root, fns, n, &c, &only, bad) ||
        !serve_get_bool(root, "parallel_tool_calls", &parallel, bad))
        return false;
    *tools_text = tool_lines(tools);
    if (!*tools_text) return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    if (c == CHOICE_NONE) return true;
    if (gen->grammar)
        return serve_bad_set(bad, 400, "response_format", "unsupported_value", "response_format "
                             "with tools is not supported unless tool_choice is none");
    growing g = {0};
    static const char block[] = "block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
    if (c == CHOICE_AUTO) {
        /* after the trigger "<tool_call>": the rest of that call, then maybe more */
        adds(&g, parallel ? "root ::= \"\\n\" call \"\\n</tool_call>\" (\"\\n\" block)*\n"
                          : "root ::= \"\\n\" call \"\\n</tool_call>\"\n");
        gen->grammar_trigger = strdup("<tool_call>");
        if (!gen->grammar_trigger) g.oom = true;
    } else {
        adds(&g, parallel ? "root ::= block (\"\\n\" block)*\n" : "root ::= block\n");
    }
    adds(&g, block);
    if (!add_call_rules(&g, fns, n, only, bad)) {
        free(g.s);
        return false;
    }
    if (g.oom) {
        free(g.s);
        return serve_bad_set(bad, 500, NULL, NULL, "out of memory");
    }
    gen->grammar = g.s;
    *read_calls = true;
    return true;
}
