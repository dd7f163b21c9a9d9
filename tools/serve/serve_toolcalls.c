/* Reading tool calls out of the answer's text (serve_tools.h). The text is the grammar's, so
 * each call is exactly "<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>"; the
 * reader still copes with text that is not (a call cut by max_tokens, or an unconstrained
 * answer that merely mentions the tag): what does not parse as a call stays content.
 *
 * Text that could be the start of a tag is held back until it is known not to be, so a stream
 * never sends as content what turns out to be part of a call. */
#define _POSIX_C_SOURCE 200809L

#include "serve_tools.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { M_TEXT, M_HEAD, M_ARGS, M_BETWEEN };

static const char OPEN[] = "<tool_call>";
static const char HEAD[] = "\n{\"name\": \"";
static const char MID[] = "\", \"arguments\": ";
static const char CLOSE[] = "}\n</tool_call>";

void serve_toolcalls_init(serve_toolcalls *t) {
    static atomic_uint_fast64_t counter;
    memset(t, 0, sizeof *t);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
                 ((atomic_fetch_add(&counter, 1) + 1) * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 32;
    snprintf(t->id_base, sizeof t->id_base, "call_%016llx", (unsigned long long)x);
}

/* Where `pat` occurs in s[0, n), or n. */
static size_t find(const char *s, size_t n, const char *pat) {
    const size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (memcmp(s + i, pat, m) == 0) return i;
    return n;
}

/* The longest tail of s[0, n) that is a proper beginning of pat (may still become it). */
static size_t partial_tail(const char *s, size_t n, const char *pat) {
    const size_t m = strlen(pat);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, pat, k) == 0) return k;
    return 0;
}

typedef struct out {
    char *content;
    size_t n_content;
    cJSON *calls;
    bool oom;
} out;

static void add_content(out *o, const char *s, size_t n) {
    if (n == 0 || o->oom) return;
    char *grown = realloc(o->content, o->n_content + n + 1);
    if (!grown) {
        o->oom = true;
        return;
    }
    memcpy(grown + o->n_content, s, n);
    o->n_content += n;
    grown[o->n_content] = '\0';
    o->content = grown;
}

/* One delta item: the call's start (name given) or an arguments piece. */
static void add_item(out *o, const serve_toolcalls *t, const char *name, size_t name_len,
                     const char *args, size_t args_len) {
    if (o->oom) return;
    if (!o->calls && !(o->calls = cJSON_CreateArray())) {
        o->oom = true;
        return;
    }
    cJSON *item = cJSON_CreateObject();
    cJSON *fn = item ? cJSON_AddObjectToObject(item, "function") : NULL;
    char *piece = malloc((name ? name_len : args_len) + 1);
    bool ok = fn && piece && cJSON_AddItemToArray(o->calls, item);
    if (!ok) cJSON_Delete(item);
    ok = ok && cJSON_AddNumberToObject(item, "index", t->n_calls - 1);
    if (ok && name) {
        char id[48];
        snprintf(id, sizeof id, "%s%02d", t->id_base, t->n_calls - 1);
        memcpy(piece, name, name_len);
        piece[name_len] = '\0';
        ok = cJSON_AddStringToObject(item, "id", id) &&
             cJSON_AddStringToObject(item, "type", "function") &&
             cJSON_AddStringToObject(fn, "name", piece) &&
             cJSON_AddStringToObject(fn, "arguments", "");
    } else if (ok) {
        memcpy(piece, args, args_len);
        piece[args_len] = '\0';
        ok = cJSON_AddStringToObject(fn, "arguments", piece) != NULL;
    }
    free(piece);
    if (!ok) o->oom = true;
}

bool serve_toolcalls_feed(serve_toolcalls *t, const char *text, size_t len, bool final,
                          char **content, cJSON **calls) {
    out o = {0};
    while (t->at < len && !o.oom) {
        const char *s = text + t->at;
        const size_t n = len - t->at;
        if (t->mode == M_TEXT || t->mode == M_BETWEEN) {
            if (t->mode == M_BETWEEN) { /* blanks between calls are not content */
                size_t k = 0;
                while (k < n && (s[k] == '\n' || s[k] == ' ')) k++;
                if (k == n && !final) {
                    break; /* wait: a call or text may follow */
                }
                t->at += k;
                t->mode = M_TEXT;
                continue;
            }
            size_t at = find(s, n, OPEN);
            if (at < n) {
                add_content(&o, s, at);
                t->at += at + strlen(OPEN);
                t->mode = M_HEAD;
                continue;
            }
            size_t keep = final ? 0 : partial_tail(s, n, OPEN);
            add_content(&o, s, n - keep);
            t->at += n - keep;
            break;
        }
        if (t->mode == M_HEAD) {
            const size_t hn = strlen(HEAD);
            const bool head_ok = memcmp(s, HEAD, n < hn ? n : hn) == 0;
            const size_t mid = head_ok && n > hn ? find(s + hn, n - hn, MID) : SIZE_MAX;
            if (head_ok && n > hn && mid < n - hn) {
                t->n_calls++;
                add_item(&o, t, s + hn, mid, NULL, 0);
                t->at += hn + mid + strlen(MID);
                t->mode = M_ARGS;
                continue;
            }
            if (head_ok && !final) break; /* the rest of the head is still to come */
            /* not a call after all: the tag and what follows are content */
            add_content(&o, OPEN, strlen(OPEN));
            t->mode = M_TEXT;
            continue;
        }
        /* M_ARGS */
        size_t end = find(s, n, CLOSE);
        if (end < n) {
            if (end > 0) add_item(&o, t, NULL, 0, s, end);
            t->at += end + strlen(CLOSE);
            t->mode = M_BETWEEN;
            continue;
        }
        size_t keep = final ? 0 : partial_tail(s, n, CLOSE);
        if (n - keep > 0) add_item(&o, t, NULL, 0, s, n - keep);
        t->at += n - keep;
        break;
    }
    if (o.oom) {
        free(o.content);
        cJSON_Delete(o.calls);
        *content = NULL;
        *calls = NULL;
        return false;
    }
    *content = o.content;
    *calls = o.calls;
    return true;
}

bool serve_toolcalls_merge(cJSON *into, cJSON *items) {
    if (!items) return true;
    bool ok = true;
    cJSON *item;
    while (ok && (item = cJSON_DetachItemFromArray(items, 0)) != NULL) {
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(item, "index");
        const int i = cJSON_IsNumber(idx) ? (int)idx->valuedouble : 0;
        cJSON *have = cJSON_GetArrayItem(into, i);
        if (!have) { /* a call's first item: keep it whole, without the delta's index */
            cJSON_DeleteItemFromObjectCaseSensitive(item, "index");
            ok = cJSON_AddItemToArray(into, item);
            if (!ok) cJSON_Delete(item);
            continue;
        }
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(have, "function");
        cJSON *args = fn ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        const cJSON *ifn = cJSON_GetObjectItemCaseSensitive(item, "function");
        const cJSON *piece = ifn ? cJSON_GetObjectItemCaseSensitive(ifn, "arguments") : NULL;
        if (cJSON_IsString(args) && cJSON_IsString(piece)) {
            size_t a = strlen(args->valuestring), b = strlen(piece->valuestring);
            char *joined = malloc(a + b + 1);
            if (joined) {
                memcpy(joined, args->valuestring, a);
                memcpy(joined + a, piece->valuestring, b + 1);
                cJSON *v = cJSON_CreateString(joined);
                ok = v && cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", v);
                if (!ok) cJSON_Delete(v);
                free(joined);
            } else {
                ok = false;
            }
        }
        cJSON_Delete(item);
    }
    cJSON_Delete(items);
    return ok;
}
