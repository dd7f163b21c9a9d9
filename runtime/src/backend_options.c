/* Merging a caller's backend options over plugins.yaml's before the registry picks a backend.
 * The merged arrays point into the parsed file and the caller's options, so nothing is copied
 * and they only need to live until the backend's init has copied them. */
#include "qvl/backend_options.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/log.h"

qvl_status qvl_backend_open_with_options(const char *plugins_path, const char *backend_name,
                                         const qvl_options *extra, qvl_loaded_backend **out,
                                         qvl_error *err) {
    if (!extra || extra->n == 0) return qvl_backend_open(plugins_path, backend_name, out, err);
    qvl_plugin_config *cfg = NULL;
    qvl_status st = qvl_plugins_locate(plugins_path, &cfg, err);
    if (st != QVL_OK) return st;
    size_t slots = extra->n;
    for (size_t i = 0; i < cfg->n; i++) slots += cfg->specs[i].options.n + extra->n;
    qvl_plugin_spec *specs = calloc(cfg->n + 1, sizeof *specs);
    const char **keys = calloc(slots, sizeof *keys), **values = calloc(slots, sizeof *values);
    if (!specs || !keys || !values) {
        st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
        goto done;
    }
    size_t used = 0;
    bool listed = false;
    for (size_t i = 0; i <= cfg->n; i++) {
        const qvl_options *base = i < cfg->n ? &cfg->specs[i].options : NULL;
        if (i < cfg->n) {
            specs[i] = cfg->specs[i];
            if (backend_name && strcmp(specs[i].name, backend_name) == 0) listed = true;
        } else if (backend_name && !listed) {
            specs[i].name = (char *)backend_name; /* found by the default search */
            specs[i].required = true;
        } else {
            break;
        }
        qvl_options *o = &specs[i].options;
        o->keys = keys + used;
        o->values = values + used;
        o->n = 0;
        for (size_t k = 0; base && k < base->n; k++)
            if (!qvl_options_get(extra, base->keys[k])) {
                keys[used] = base->keys[k];
                values[used++] = base->values[k];
                o->n++;
            }
        for (size_t k = 0; k < extra->n; k++) {
            keys[used] = extra->keys[k];
            values[used++] = extra->values[k];
            o->n++;
        }
    }
    qvl_plugin_config merged = *cfg;
    merged.specs = specs;
    merged.n = cfg->n + (backend_name && !listed ? 1 : 0);
    st = qvl_backend_select(&merged, backend_name, out, err);
    if (st == QVL_OK)
        QVL_LOG_I("backend %s (%s), plugins from %s, %zu option(s) from the caller", (*out)->name,
                  (*out)->library_path, cfg->path ? cfg->path : "the built-in list", extra->n);
done:
    free(specs);
    free((void *)keys);
    free((void *)values);
    qvl_plugins_free(cfg);
    return st;
}
