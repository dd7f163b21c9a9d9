/* Fuzz target: plugins.yaml (qvl_plugins_parse_string), then library path resolution for each
 * entry (string handling only: nothing is loaded). Properties: every entry has a name, and a
 * resolved library path always contains a '/', so dlopen never searches LD_LIBRARY_PATH or the
 * current directory (qvl/registry.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "qvl/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_plugins_parse_string((const char *)data, size, "plugins.yaml", &cfg, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        return 0;
    }
    FUZZ_CHECK(cfg != NULL);
    for (size_t i = 0; i < cfg->n; i++) {
        const qvl_plugin_spec *spec = &cfg->specs[i];
        FUZZ_CHECK(spec->name && spec->name[0]);
        if (i > 0) FUZZ_CHECK(cfg->specs[i - 1].priority >= spec->priority);
        char *path = NULL;
        s = qvl_plugin_resolve_library(cfg, spec, &path, &err);
        if (s == QVL_OK) {
            FUZZ_CHECK(path && strchr(path, '/'));
            free(path);
        } else {
            fuzz_check_error(s, &err);
        }
    }
    qvl_plugins_free(cfg);
    return 0;
}
