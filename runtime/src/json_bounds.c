/* One pass over a JSON text counting what cJSON would build (qvl/json_bounds.h). Strings are
 * skipped with their escapes; a string is a key when it comes first in an object or after a comma
 * there. Nesting deeper than JSON_STACK levels is counted but its containers are not told apart
 * (their members and elements go uncounted): every caller refuses that depth anyway. */
#include "qvl/json_bounds.h"

#include <stdbool.h>
#include <string.h>

#define JSON_STACK 256
/* Paths of qvl_json_measure_paths are looked for this deep at most. */
#define PATH_DEPTH 8

/* Whether the container opened at `depth` sits at `path`: every level above it an object, and
 * keys[d] (the key read last in the object at depth d + 1) equal to the path's components. */
static bool at_path(const char *path, int depth, const bool *is_obj, const char *const *keys,
                    const size_t *key_len) {
    if (depth == 0) return path[0] == '\0';
    const char *p = path;
    for (int d = 0; d < depth; d++) {
        if (!is_obj[d]) return false;
        const char *dot = strchr(p, '.');
        const size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n != key_len[d] || memcmp(p, keys[d], n) != 0) return false;
        if ((d + 1 < depth) != (dot != NULL)) return false;
        p = dot ? dot + 1 : p + n;
    }
    return true;
}

void qvl_json_measure(const char *s, size_t n, qvl_json_shape *out) {
    qvl_json_measure_paths(s, n, NULL, 0, NULL, out);
}

void qvl_json_measure_paths(const char *s, size_t n, const char *const *paths, size_t n_paths,
                            size_t *counts, qvl_json_shape *out) {
    memset(out, 0, sizeof *out);
    for (size_t k = 0; k < n_paths; k++) counts[k] = 0;
    bool is_obj[JSON_STACK];
    size_t count[JSON_STACK];
    int watch[PATH_DEPTH + 1];        /* the path a container at each depth is at, or -1 */
    const char *keys[PATH_DEPTH];     /* the last key read in the object at each depth */
    size_t key_len[PATH_DEPTH];
    bool want_key = false, in_scalar = false;
    int depth = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_scalar) {
            if (c == ',' || c == ']' || c == '}' || c == ':' || c == '"' || c == '[' || c == '{' ||
                c == ' ' || c == '\t' || c == '\n' || c == '\r')
                in_scalar = false;
            else
                continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ':') {
            if (c == ':') want_key = false;
            continue;
        }
        if (c == ',') {
            want_key = depth > 0 && depth <= JSON_STACK && is_obj[depth - 1];
            continue;
        }
        if (c == '}' || c == ']') {
            if (depth > 0) depth--;
            want_key = false;
            continue;
        }
        /* a key, or the start of a value */
        const bool key = c == '"' && want_key;
        if (!key) {
            out->values++;
            if (depth > 0 && depth <= JSON_STACK && !is_obj[depth - 1] &&
                ++count[depth - 1] > out->max_array)
                out->max_array = count[depth - 1];
        } else if (depth > 0 && depth <= JSON_STACK) {
            const size_t m = ++count[depth - 1];
            if (depth == 1 && m > out->root_members) out->root_members = m;
            if (depth > 1 && m > out->max_members) out->max_members = m;
        }
        /* a child of a watched container: a member (its key) or an element (its value) */
        if (n_paths && depth > 0 && depth <= PATH_DEPTH && watch[depth - 1] >= 0 &&
            (key || !is_obj[depth - 1]))
            counts[watch[depth - 1]]++;
        want_key = false;
        if (c == '"') {
            const size_t start = i + 1;
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            if (key && depth <= PATH_DEPTH) {
                keys[depth - 1] = s + start;
                key_len[depth - 1] = (i < n ? i : n) - start;
            }
        } else if (c == '{' || c == '[') {
            if (depth < JSON_STACK) {
                is_obj[depth] = c == '{';
                count[depth] = 0;
            }
            if (n_paths && depth <= PATH_DEPTH) {
                watch[depth] = -1;
                for (size_t k = 0; k < n_paths && watch[depth] < 0; k++)
                    if (at_path(paths[k], depth, is_obj, keys, key_len)) watch[depth] = (int)k;
                if (depth < PATH_DEPTH) { /* no key read in it yet */
                    keys[depth] = "";
                    key_len[depth] = 0;
                }
            }
            if (++depth > out->max_depth) out->max_depth = depth;
            want_key = c == '{';
        } else {
            in_scalar = true;
        }
    }
}

qvl_status qvl_json_check(const char *text, size_t len, const qvl_json_limits *lim,
                          const char *what, qvl_error *err) {
    qvl_json_shape sh;
    qvl_json_measure(text, len, &sh);
    if (lim->max_depth && sh.max_depth > lim->max_depth)
        return qvl_fail(err, QVL_E_LIMIT, "%s: JSON nests %d levels deep, more than %d", what,
                        sh.max_depth, lim->max_depth);
    if (lim->max_array && sh.max_array > lim->max_array)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: a JSON array of %zu elements, more than the %zu this file can need",
                        what, sh.max_array, lim->max_array);
    if (lim->max_members && sh.max_members > lim->max_members)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: a JSON object of %zu members, more than the %zu this file can need",
                        what, sh.max_members, lim->max_members);
    size_t most = lim->max_values;
    if (lim->values_per_1000_bytes) {
        const size_t dense = len / 1000 * lim->values_per_1000_bytes +
                             len % 1000 * lim->values_per_1000_bytes / 1000 + lim->values_slack;
        if (!most || dense < most) most = dense;
    }
    if (most && sh.values > most)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: %zu JSON values, more than the %zu a valid file of %zu bytes can hold",
                        what, sh.values, most, len);
    return QVL_OK;
}
