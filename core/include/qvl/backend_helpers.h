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

/* ---- the data checks (data_check.c) ---- */

/* Indices, segment bounds and `at` positions are values, read from inputs when the kernel
 * runs: the contract (qvl_node_check: shapes, dtypes) cannot see them, so a kernel checks them
 * before it reads or writes through them, with these. Each returns QVL_OK, or QVL_E_INVALID
 * with "<backend>: <op> '<node>': <why>" in err (qvl_node_fail; err may be NULL). The values
 * are i32 (the contract's dtype for these inputs) in host memory, element k at v[k * step],
 * step in elements: a host kernel passes (const int32_t *)t->data and t->desc.stride[0]; a
 * device backend copies them to the host first. */

/* GET_ROWS ids, SET_ROWS / ADD_ROWS row indices: every v[k * step], k < n, lies in
 * [0, rows). Else "<what> <value> at position <k> is outside [0, <rows>)" for the first bad
 * one, what naming the values ("id", "row index"). n = 0 passes. */
/* ARGMAX of one row of n values as ops.h defines it: the index of the first largest value, or -1
 * when the row holds a NaN or +inf or nothing above -inf. A plain scan in index order. */
int32_t qvl_argmax_row(const float *x, int64_t n);

qvl_status qvl_check_indices(const char *backend, const qvl_node *node, const int32_t *v,
                             int64_t n, int64_t step, int64_t rows, const char *what,
                             qvl_error *err);

/* Segment bounds [G+1] (MASK_SEGMENTS, ATTENTION with QVL_MASK_SEGMENTS): b[0] = 0, never
 * decreasing, b[(bounds - 1) * step] = len, so each position in [0, len) lies in exactly one
 * segment. Else "segments must start at 0 and end at <len>" (also for bounds < 1) or "segment
 * bounds decrease at <g>". With id not NULL, once they hold: id[i] = the segment of position
 * i, for i < len. */
qvl_status qvl_check_segments(const char *backend, const qvl_node *node, const int32_t *b,
                              int64_t bounds, int64_t step, int64_t len, int32_t *id,
                              qvl_error *err);

/* An `at` position: STORE_ROWS_AT's first row, or the KV length before the queries of
 * MASK_CAUSAL_AT and of ATTENTION with QVL_MASK_CAUSAL_AT. Rows [at, at + count), count >= 0,
 * lie in [0, limit). Else "at = <at> is negative" or "at = <at>: <what> [<at>, <at + count>)
 * do not fit in [0, <limit>)", what naming the rows ("rows", "queries"). MASK_CAUSAL_AT, whose
 * mask any at >= 0 defines, passes count 0 and limit INT64_MAX. */
qvl_status qvl_check_at(const char *backend, const qvl_node *node, int64_t at, int64_t count,
                        int64_t limit, const char *what, qvl_error *err);

/* Row i of a STORE_SLOT_ROWS or ATTENTION_SLOTS node (checked by the contract) as the
 * single-sequence node it amounts to: STORE_ROWS_AT of source row i into slot slot[i] at
 * at[i], or ATTENTION (mask CAUSAL_AT, at = at[i]) of query row i over slot slot[i] of k and v,
 * into output row i. The views point into the node's tensors (host or device addresses: only
 * offsets are taken), the `at` input into out->at_value (host memory), and slot and at are read
 * from host memory. Fails naming the row when slot[i] or at[i] is out of range. */
typedef struct qvl_slot_row {
    qvl_node node;
    qvl_tensor t[4]; /* q or dst, k or src, v, out */
    qvl_tensor at;
    int32_t at_value;
} qvl_slot_row;
qvl_status qvl_slot_row_node(const char *backend, const qvl_node *n, int64_t i,
                             qvl_slot_row *out, qvl_error *err);
/* A host backend's STORE_SLOT_ROWS / ATTENTION_SLOTS kernel: row_kernel (its STORE_ROWS_AT
 * or ATTENTION kernel) on each row's node in turn; the first failure ends it. */
qvl_status qvl_run_slot_rows(const char *backend, qvl_backend *be, const qvl_node *n,
                             qvl_kernel_fn row_kernel, qvl_error *err);

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
