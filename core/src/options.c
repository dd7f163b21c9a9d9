/* Backend options from plugins.yaml, looked up by key. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/backend_helpers.h"

const char *qvl_options_get(const qvl_options *opts, const char *key) {
    if (!opts || !key) return NULL;
    for (size_t i = 0; i < opts->n; i++)
        if (opts->keys[i] && strcmp(opts->keys[i], key) == 0) return opts->values[i];
    return NULL;
}

qvl_status qvl_options_get_int(const qvl_options *opts, const char *key, long def, long *out,
                               qvl_error *err) {
    const char *v = qvl_options_get(opts, key);
    if (!v) {
        *out = def;
        return QVL_OK;
    }
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0')
        return qvl_fail(err, QVL_E_INVALID, "option %s: '%s' is not an integer", key, v);
    *out = x;
    return QVL_OK;
}

qvl_status qvl_options_get_bool(const qvl_options *opts, const char *key, bool def, bool *out,
                                qvl_error *err) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    const char *v = qvl_options_get(opts, key);
    if (!v) {
        *out = def;
        return QVL_OK;
    }
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcmp(v, yes[i]) == 0) return *out = true, QVL_OK;
        if (strcmp(v, no[i]) == 0) return *out = false, QVL_OK;
    }
    return qvl_fail(err, QVL_E_INVALID, "option %s: '%s' is not true or false", key, v);
}
