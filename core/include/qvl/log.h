/* Logging with levels. The level comes from the environment variable QVL_LOG
 * (error, warn, info, debug; default warn) and can be changed by tools (-v). Messages go to
 * stderr as one line: "qvl: warning: ...". */
#ifndef QVL_LOG_H
#define QVL_LOG_H

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_log_level {
    QVL_LOG_ERROR = 0,
    QVL_LOG_WARN = 1,
    QVL_LOG_INFO = 2,
    QVL_LOG_DEBUG = 3
} qvl_log_level;

qvl_log_level qvl_log_level_get(void);
void qvl_log_level_set(qvl_log_level level);
/* Parses "error|warn|info|debug" (case-insensitive); returns 0 on success, -1 if unknown. */
int qvl_log_level_parse(const char *text, qvl_log_level *out);

void qvl_log(qvl_log_level level, const char *fmt, ...) QVL_PRINTF(2, 3);

#define QVL_LOG_E(...) qvl_log(QVL_LOG_ERROR, __VA_ARGS__)
#define QVL_LOG_W(...) qvl_log(QVL_LOG_WARN, __VA_ARGS__)
#define QVL_LOG_I(...) qvl_log(QVL_LOG_INFO, __VA_ARGS__)
#define QVL_LOG_D(...) qvl_log(QVL_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
