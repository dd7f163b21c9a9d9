/* qvl --version: the program's version, the git commit it was configured from, the compiler,
 * and every backend plugins.yaml lists: loaded (with its device) or why it was skipped. */
#include <stdio.h>
#include <string.h>

#include "qvl/registry.h"
#include "qvl_commands.h"

#ifndef QVL_VERSION
#define QVL_VERSION "unknown"
#endif
#ifndef QVL_GIT_COMMIT
#define QVL_GIT_COMMIT "unknown"
#endif
#ifndef QVL_COMPILER
#define QVL_COMPILER "unknown"
#endif

int qvl_cmd_version(const char *plugins_path) {
    printf("qvl %s (commit %s)\n", QVL_VERSION, QVL_GIT_COMMIT);
    printf("built with %s\n", QVL_COMPILER);
    qvl_error err = {0};
    qvl_plugin_config *cfg = NULL;
    if (qvl_plugins_locate(plugins_path, &cfg, &err) != QVL_OK) {
        fprintf(stderr, "qvl: %s\n", err.msg);
        return 1;
    }
    printf("backends (%s), by priority:\n", cfg->path ? cfg->path : "built-in list");
    const char *chosen = NULL;
    for (size_t i = 0; i < cfg->n; i++) {
        const qvl_plugin_spec *spec = &cfg->specs[i];
        qvl_loaded_backend *lb = NULL;
        qvl_error why = {0};
        if (qvl_backend_load(cfg, spec, &lb, &why) == QVL_OK) {
            qvl_device_info info;
            memset(&info, 0, sizeof info);
            if (!lb->iface->describe || lb->iface->describe(lb->be, &info) != QVL_OK)
                snprintf(info.name, sizeof info.name, "device not described");
            printf("  %-10s priority %-4ld found: %s (%s)%s\n", spec->name, spec->priority,
                   info.name, lb->library_path, chosen ? "" : "  <- used by default");
            if (!chosen) chosen = spec->name;
            qvl_backend_unload(lb);
        } else {
            for (char *c = why.msg; *c; c++)
                if (*c == '\n') *c = ' ';
            /* The line names the backend already. */
            char prefix[160];
            snprintf(prefix, sizeof prefix, "backend '%s': ", spec->name);
            const char *reason = why.msg;
            if (strncmp(reason, prefix, strlen(prefix)) == 0) reason += strlen(prefix);
            printf("  %-10s priority %-4ld skipped: %s\n", spec->name, spec->priority, reason);
        }
    }
    qvl_plugins_free(cfg);
    return 0;
}
