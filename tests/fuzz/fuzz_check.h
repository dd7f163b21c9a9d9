/* Helpers shared by the fuzz targets: a property check that aborts (so libFuzzer and the replay
 * programs report it as a finding) and the error-message rule every parser must follow.
 * Failures are written to fd 2 directly, so they show even where a target silences stderr. */
#ifndef QVL_FUZZ_CHECK_H
#define QVL_FUZZ_CHECK_H

#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/status.h"

#define FUZZ_CHECK(cond)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            dprintf(2, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

/* A rejected input must come with one non-empty line saying what is wrong, and the status
 * recorded in the error must be the one returned. */
static inline void fuzz_check_error(qvl_status s, const qvl_error *err) {
    FUZZ_CHECK(s != QVL_OK);
    FUZZ_CHECK(s < QVL_STATUS_COUNT);
    FUZZ_CHECK(err->status == s);
    FUZZ_CHECK(err->msg[0] != '\0');
    FUZZ_CHECK(strchr(err->msg, '\n') == NULL);
}

#endif
