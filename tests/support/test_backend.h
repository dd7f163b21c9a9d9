/* Tests load backends the way qvl does (dlopen + entry symbol) from the build tree. */
#ifndef QVL_TEST_BACKEND_H
#define QVL_TEST_BACKEND_H

#include "qvl/backend.h"

typedef struct qvl_test_backend {
    void *dl;
    const qvl_backend_iface *iface;
    qvl_backend *be;
} qvl_test_backend;

/* Load and init the backend shared object at path (options may be NULL). Returns 0 on
 * success; on failure prints why and returns -1. */
int qvl_test_backend_open(const char *path, const qvl_options *opts, qvl_test_backend *out);
void qvl_test_backend_close(qvl_test_backend *tb);

#endif
