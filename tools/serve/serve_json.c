/* A request body's JSON, parsed with bounded memory (serve_json.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* malloc_usable_size */
#endif

#include "serve_json.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/json_bounds.h"
#include "serve_pyjson.h"

/* The budget of the parse running on this thread. The hooks measure blocks with
 * malloc_usable_size rather than a size header, so that memory cJSON allocates (a printed
 * response, say) may still be released with plain free() by code that never heard of the hooks:
 * every block is an ordinary malloc block. */
static _Thread_local struct {
    bool active, exceeded;
    size_t budget, used, peak;
} tl_budget;

/* Invariant while active: used <= budget. */
static void *counted_malloc(size_t n) {
    if (!tl_budget.active) return malloc(n);
    void *p = n <= tl_budget.budget - tl_budget.used ? malloc(n) : NULL;
    if (!p && n <= tl_budget.budget - tl_budget.used) return NULL; /* the system's own refusal */
    if (!p || malloc_usable_size(p) > tl_budget.budget - tl_budget.used) {
        free(p);
        tl_budget.exceeded = true;
        return NULL;
    }
    const size_t got = malloc_usable_size(p);
    tl_budget.used += got;
    if (tl_budget.used > tl_budget.peak) tl_budget.peak = tl_budget.used;
    return p;
}

static void counted_free(void *p) {
    if (p && tl_budget.active) {
        const size_t n = malloc_usable_size(p);
        tl_budget.used = n < tl_budget.used ? tl_budget.used - n : 0;
    }
    free(p);
}

void serve_json_budget_begin(size_t budget) {
    tl_budget.budget = budget;
    tl_budget.used = tl_budget.peak = 0;
    tl_budget.exceeded = false;
    tl_budget.active = true;
}

serve_json_usage serve_json_budget_end(void) {
    tl_budget.active = false;
    return (serve_json_usage){.budget = tl_budget.budget, .peak = tl_budget.peak,
                              .exceeded = tl_budget.exceeded};
}

static void install_once(void) {
    cJSON_Hooks hooks = {.malloc_fn = counted_malloc, .free_fn = counted_free};
    cJSON_InitHooks(&hooks);
}

void serve_json_install_hooks(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_once);
}

static bool bad_set(serve_bad *bad, int status, const char *param, const char *code,
                    const char *message) {
    snprintf(bad->message, sizeof bad->message, "%s", message);
    for (char *c = bad->message; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    snprintf(bad->param, sizeof bad->param, "%s", param ? param : "");
    bad->status = status;
    bad->code = code;
    return false;
}

/* ---- U+0000 in strings, found on the text with the path that leads to it ---- */

typedef struct path_frame {
    bool is_obj;
    size_t index;      /* arrays: the element being read */
    const char *key;   /* objects: the key read last (raw, escapes as written) */
    size_t key_len;
} path_frame;

#define PATH_FRAMES 64

static void write_path(const path_frame *frames, int depth, char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (int d = 0; d < depth && d < PATH_FRAMES && o + 1 < cap; d++) {
        int w;
        if (frames[d].is_obj)
            w = snprintf(out + o, cap - o, "%s%.*s", o ? "." : "",
                         (int)(frames[d].key_len > 40 ? 40 : frames[d].key_len), frames[d].key);
        else
            w = snprintf(out + o, cap - o, "[%zu]", frames[d].index);
        if (w < 0) break;
        o += (size_t)w;
        if (o >= cap) o = cap - 1;
    }
}

/* Whether the escape at s[i] ('\\') is \u0000. */
static bool is_nul_escape(const char *s, size_t n, size_t i) {
    return i + 5 < n && s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' &&
           s[i + 5] == '0';
}

bool serve_json_find_nul(const char *s, size_t n, char *where, size_t where_len) {
    path_frame frames[PATH_FRAMES];
    int depth = 0;
    bool want_key = false;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (c == '\0') {
            write_path(frames, depth, where, where_len);
            return true;
        }
        if (c == '{' || c == '[') {
            if (depth < PATH_FRAMES) frames[depth] = (path_frame){.is_obj = c == '{', .key = ""};
            depth++;
            want_key = c == '{';
        } else if (c == '}' || c == ']') {
            if (depth > 0) depth--;
            want_key = false;
        } else if (c == ',') {
            want_key = false;
            if (depth > 0 && depth <= PATH_FRAMES) {
                if (frames[depth - 1].is_obj) want_key = true;
                else frames[depth - 1].index++;
            }
        } else if (c == '"') {
            const bool key = want_key;
            const size_t start = i + 1;
            bool nul = false;
            for (i++; i < n && s[i] != '"'; i++) {
                if (s[i] == '\0') nul = true;
                if (s[i] == '\\') {
                    nul = nul || is_nul_escape(s, n, i);
                    i++;
                }
            }
            if (key && depth > 0 && depth <= PATH_FRAMES) {
                frames[depth - 1].key = s + start;
                frames[depth - 1].key_len = (i < n ? i : n) - start;
            }
            if (nul) {
                /* a key holding U+0000 is named by its object's path, a value by its own */
                write_path(frames, key ? depth - 1 : depth, where, where_len);
                return true;
            }
            want_key = false;
        }
    }
    return false;
}

/* ---- duplicate keys, found on the tree (keys compared unescaped) ---- */

static int compare_keys(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* path: the container's path, written at path[0, len); cap bytes in all. */
static bool duplicate_in(const cJSON *node, const char **key, char *path, size_t len, size_t cap,
                         bool *oom) {
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return false;
    path[len] = '\0';
    if (cJSON_IsObject(node)) {
        size_t n = 0;
        for (const cJSON *c = node->child; c; c = c->next) n++;
        if (n > 1) {
            const char **keys = malloc(n * sizeof *keys);
            if (!keys) {
                *oom = true;
                return false;
            }
            size_t k = 0;
            for (const cJSON *c = node->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
            qsort(keys, n, sizeof *keys, compare_keys);
            for (k = 1; k < n && strcmp(keys[k - 1], keys[k]) != 0; k++) {}
            const char *dup = k < n ? keys[k] : NULL;
            free(keys);
            if (dup) {
                *key = dup;
                return true;
            }
        }
    }
    size_t index = 0;
    for (const cJSON *c = node->child; c; c = c->next, index++) {
        int w = cJSON_IsObject(node)
                    ? snprintf(path + len, cap - len, "%s%.40s", len ? "." : "", c->string)
                    : snprintf(path + len, cap - len, "[%zu]", index);
        size_t next = w < 0 ? len : len + (size_t)w;
        if (next >= cap) next = cap - 1;
        if (duplicate_in(c, key, path, next, cap, oom)) return true;
        if (*oom) return false;
        path[len] = '\0';
    }
    return false;
}

int serve_json_find_duplicate(const cJSON *root, const char **key, char *where,
                              size_t where_len) {
    bool oom = false;
    *key = NULL;
    if (duplicate_in(root, key, where, 0, where_len, &oom)) return 1;
    return oom ? -1 : 0;
}

/* ---- the parse ---- */

static bool json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

cJSON *serve_json_parse(const char *body, size_t len, int max_depth, serve_bad *bad,
                        serve_json_usage *usage) {
    char msg[256], where[96];
    if (usage) memset(usage, 0, sizeof *usage);
    serve_json_install_hooks();
    qvl_json_shape shape;
    qvl_json_measure(body, len, &shape);
    if (shape.max_depth > max_depth) {
        snprintf(msg, sizeof msg, "the JSON body is nested deeper than %d", max_depth);
        bad_set(bad, 400, NULL, "invalid_json", msg);
        return NULL;
    }
    if (shape.values > SERVE_MAX_JSON_VALUES) {
        snprintf(msg, sizeof msg, "the JSON body holds %zu values, more than the %d a request may "
                 "hold (SERVE_MAX_JSON_VALUES)", shape.values, SERVE_MAX_JSON_VALUES);
        bad_set(bad, 413, NULL, "too_many_json_values", msg);
        return NULL;
    }
    if (serve_json_find_nul(body, len, where, sizeof where)) {
        snprintf(msg, sizeof msg, "%s holds U+0000 (a NUL character), which the server does "
                 "not accept in any string", where[0] ? where : "the body");
        bad_set(bad, 400, where, "invalid_value", msg);
        return NULL;
    }
    /* The budget holds the tree of any valid body of this size and count (serve_json.h). */
    serve_json_budget_begin(len + shape.values * SERVE_JSON_BYTES_PER_VALUE +
                            SERVE_JSON_BUDGET_SLACK);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    const serve_json_usage used = serve_json_budget_end();
    if (usage) *usage = used;
    if (!root) {
        if (used.exceeded) {
            snprintf(msg, sizeof msg, "the JSON body would take more than %zu bytes of memory "
                     "to parse", used.budget);
            bad_set(bad, 413, NULL, "json_too_large", msg);
        } else {
            bad_set(bad, 400, NULL, "invalid_json", "the body is not valid JSON");
        }
        return NULL;
    }
    size_t at = end ? (size_t)(end - body) : len;
    while (at < len && json_space(body[at])) at++;
    if (at < len) {
        cJSON_Delete(root);
        snprintf(msg, sizeof msg, "the body holds more than one JSON value (bytes after the "
                 "first, at offset %zu)", at);
        bad_set(bad, 400, NULL, "invalid_json", msg);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        bad_set(bad, 400, NULL, "invalid_json", "the body must be a JSON object");
        return NULL;
    }
    const char *key = NULL;
    const int dup = serve_json_find_duplicate(root, &key, where, sizeof where);
    if (dup < 0) {
        cJSON_Delete(root);
        bad_set(bad, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    if (dup > 0) {
        snprintf(msg, sizeof msg, "duplicate key '%.60s' in %s", key,
                 where[0] ? where : "the request object");
        char param[sizeof bad->param];
        const size_t wl = strlen(where) < 40 ? strlen(where) : 40;
        snprintf(param, sizeof param, "%.*s%s%.40s", (int)wl, where, where[0] ? "." : "", key);
        cJSON_Delete(root);
        bad_set(bad, 400, param, "duplicate_key", msg);
        return NULL;
    }
    /* after the budget: lexemes are small next to the nodes, and at most one per value */
    if (!serve_pyjson_keep_numbers(root, body, len)) {
        cJSON_Delete(root);
        bad_set(bad, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    return root;
}

bool serve_json_stream_feed(serve_json_stream *st, const char *p, size_t n) {
    const char *end = p + n;
    while (p < end) {
        if (st->escaped) {
            st->escaped = false;
            p++;
        } else if (st->in_string) {
            /* Jump to the next quote or backslash: pictures are long base64 strings. */
            const char *q = memchr(p, '"', (size_t)(end - p));
            const char *b = memchr(p, '\\', (size_t)(q ? q - p : end - p));
            if (b) {
                st->escaped = true;
                p = b + 1;
            } else if (q) {
                st->in_string = false;
                p = q + 1;
            } else {
                p = end;
            }
        } else {
            const char c = *p++;
            if (c == '"') st->in_string = true;
            else if (c == ',' && ++st->commas >= SERVE_MAX_JSON_VALUES) return false;
        }
    }
    return true;
}
