/* Tests load backends the way qvl does (dlopen + entry symbol) from the build tree. */
#ifndef QVL_TEST_BACKEND_H
#define QVL_TEST_BACKEND_H

#include "qvl/backend_helpers.h"

typedef struct qvl_test_backend {
    void *dl;
    const qvl_backend_iface *iface;
    qvl_backend *be;
} qvl_test_backend;

/* Load and init the backend shared object at path (options may be NULL). Returns 0 on
 * success; on failure prints why and returns -1. */
int qvl_test_backend_open(const char *path, const qvl_options *opts, qvl_test_backend *out);
void qvl_test_backend_close(qvl_test_backend *tb);

/* Runs check on every backend of paths[0..n) that loads here, printing a line for each one
 * that does not. Returns how many ran, or -1 when paths[0] (the reference) does not load. */
int qvl_test_each_backend(const char *const *paths, size_t n,
                          void (*check)(const qvl_test_backend *tb));

/* Would tb run this node? QVL_OK, or why not (err says it). The only way tests ask. */
qvl_status qvl_test_supports(const qvl_test_backend *tb, const qvl_node *node, qvl_error *err);
/* tb's kernel for op, or NULL. */
qvl_kernel_fn qvl_test_kernel(const qvl_test_backend *tb, qvl_op op);

/* One node through tb's kernel for op (src: n_src slots): QVL_E_UNSUPPORTED when tb's
 * supports() refuses it, else what the kernel returns. */
qvl_status qvl_test_run_node(const qvl_test_backend *tb, qvl_op op, const qvl_params *p,
                             qvl_tensor *const *src, uint32_t n_src, qvl_tensor *dst,
                             qvl_error *err);

/* A backend table that only declares what it runs, for tests of the code that asks a backend
 * (the fusion pass, qvl_backend_check): name, ops (QVL_OP_COUNT entries) and accepts (may be
 * NULL); nothing else is set, so it is never initialised or run. */
qvl_backend_iface qvl_test_declared_iface(const char *name, const qvl_op_impl *ops,
                                          qvl_status (*accepts)(qvl_backend *be,
                                                                const qvl_node *node,
                                                                qvl_error *err));

#endif
