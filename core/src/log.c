/* Leveled logging to stderr; the level starts from $QVL_LOG. */
#include "qvl/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static int current_level = -1; /* -1: not yet read from the environment */

int qvl_log_level_parse(const char *text, qvl_log_level *out) {
    static const struct { const char *name; qvl_log_level level; } names[] = {
        {"error", QVL_LOG_ERROR}, {"warn", QVL_LOG_WARN}, {"warning", QVL_LOG_WARN},
        {"info", QVL_LOG_INFO},   {"debug", QVL_LOG_DEBUG},
    };
    if (!text) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcasecmp(text, names[i].name) == 0) {
            *out = names[i].level;
            return 0;
        }
    }
    return -1;
}

qvl_log_level qvl_log_level_get(void) {
    if (current_level < 0) {
        qvl_log_level level = QVL_LOG_WARN;
        const char *env = getenv("QVL_LOG");
        if (env && *env && qvl_log_level_parse(env, &level) != 0) {
            fprintf(stderr, "qvl: warning: QVL_LOG=%s is not one of error, warn, info, debug\n", env);
            level = QVL_LOG_WARN;
        }
        current_level = (int)level;
    }
    return (qvl_log_level)current_level;
}

void qvl_log_level_set(qvl_log_level level) { current_level = (int)level; }

void qvl_log(qvl_log_level level, const char *fmt, ...) {
    if (level > qvl_log_level_get()) return;
    static const char *const tags[] = {"error", "warning", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "qvl: %s: %s\n", tags[level], line);
}
