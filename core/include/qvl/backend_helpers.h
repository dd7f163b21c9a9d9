/* Functions of libqvl-core about backends: the ones a plugin may call from its kernels and
 * init(), and the ones qvl itself calls to ask a backend about a node. What a plugin
 * implements is in backend.h. */
#ifndef QVL_BACKEND_HELPERS_H
#define QVL_BACKEND_HELPERS_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/backend.h"
#include "qvl/tensor_access.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options (plugins.yaml `options:`), for init() ---- */

/* Value for key, or NULL when absent (opts may be NULL). */
const char *qvl_options_get(const qvl_options *opts, const char *key);
/* Integer option: def when absent; QVL_E_INVALID (with a message) when not an integer. */
qvl_status qvl_options_get_int(const qvl_options *opts, const char *key, long def, long *out,
                               qvl_error *err);
/* Boolean option (true/false, yes/no, on/off, 1/0): def when absent; QVL_E_INVALID otherwise. */
qvl_status qvl_options_get_bool(const qvl_options *opts, const char *key, bool def, bool *out,
                                qvl_error *err);

/* ---- the op contract ---- */

/* Is the node well-formed? The one contract of every op, owned by core: the inputs fit the
 * op (qvl_op_infer: presence, dtypes, shapes, strides, params) and the output descriptor is
 * the one the op produces (contiguous, or the alias VIEW / STORE_ROWS describe). Says nothing
 * about any backend. Messages name the op and the node. */
qvl_status qvl_node_check(const qvl_node *node, qvl_error *err);

/* Would this backend run this node? The contract (qvl_node_check), then the backend's
 * declaration: a kernel in ops[], every input's dtype in ops[op].dtypes[slot], and accepts()
 * when the backend has one. QVL_OK, or the reason in err (err may be NULL: no message is
 * formatted), prefixed with the backend's name. be may be NULL only for a backend without
 * accepts(). */
qvl_status qvl_backend_check(const qvl_backend_iface *iface, qvl_backend *be,
                             const qvl_node *node, qvl_error *err);
static inline bool qvl_backend_supports(const qvl_backend_iface *iface, qvl_backend *be,
                                        const qvl_node *node) {
    return qvl_backend_check(iface, be, node, NULL) == QVL_OK;
}

/* What a kernel does first: qvl_backend_check, then every present tensor has memory. A kernel
 * never trusts that the node was checked elsewhere. */
qvl_status qvl_kernel_begin(const qvl_backend_iface *iface, qvl_backend *be,
                            const qvl_node *node, qvl_error *err);

/* Record "<backend>: <op> '<node>': <what>" in err (err may be NULL) and return s: the one
 * shape of a kernel's run-time error. */
qvl_status qvl_node_fail(const char *backend, const qvl_node *node, qvl_error *err, qvl_status s,
                         const char *fmt, ...) QVL_PRINTF(5, 6);

/* Input slot, or NULL when the slot is empty (or beyond n_src). */
static inline const qvl_tensor *qvl_node_src(const qvl_node *node, uint32_t slot) {
    return slot < node->n_src && slot < QVL_MAX_SRC ? node->src[slot] : NULL;
}

/* ---- the table, as qvl reads it ---- */

/* The kernel for op, or NULL when the backend has none. */
static inline qvl_kernel_fn qvl_backend_kernel(const qvl_backend_iface *iface, qvl_op op) {
    if (!iface || (int)op < 0 || (uint32_t)op >= iface->n_ops || !iface->ops) return NULL;
    return iface->ops[op].kernel;
}

/* An extension by name (QVL_EXT_*), or NULL when the backend does not offer it. */
static inline qvl_proc_fn qvl_backend_proc(const qvl_backend_iface *iface, const char *name) {
    return iface && iface->get_proc_address && name ? iface->get_proc_address(name) : NULL;
}

#ifdef __cplusplus
}
#endif
#endif
