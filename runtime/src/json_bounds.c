/* One pass over a JSON text counting what cJSON would build (qvl/json_bounds.h). Strings are
 * skipped with their escapes; a string is a key when it comes first in an object or after a comma
 * there. Nesting deeper than JSON_STACK levels is counted but its containers are not told apart
 * (their members and elements go uncounted): every caller refuses that depth anyway. */
#include "qvl/json_bounds.h"

#include <stdbool.h>
#include <string.h>

#define JSON_STACK 256

void qvl_json_measure(const char *s, size_t n, qvl_json_shape *out) {
    memset(out, 0, sizeof *out);
    bool is_obj[JSON_STACK];
    size_t count[JSON_STACK];
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
        want_key = false;
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (c == '{' || c == '[') {
            if (depth < JSON_STACK) {
                is_obj[depth] = c == '{';
                count[depth] = 0;
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
