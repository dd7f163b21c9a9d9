/* Checks shared by the per-op checks: presence, dtype, rank, layout and output shape.
 *
 * Every op has a check function `ref_check_<op>(node, err)`. supports() calls it with
 * err == NULL; the kernel calls it again (through ref_begin) before touching memory, so a
 * kernel never trusts that the node was validated elsewhere. Failures are one line naming the
 * op, the node and what is wrong: dtypes the kernels do not handle give QVL_E_UNSUPPORTED,
 * shapes that do not fit QVL_E_SHAPE, bad parameters or missing inputs QVL_E_INVALID. */
#ifndef QVL_REF_CHECK_H
#define QVL_REF_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/ops.h"
#include "qvl/status.h"

/* Sets of dtypes, as bit masks. */
#define REF_DT(t) (1u << (t))
#define REF_READABLE (REF_DT(QVL_F32) | REF_DT(QVL_F16) | REF_DT(QVL_BF16) | REF_DT(QVL_Q8_0))
#define REF_WRITABLE (REF_DT(QVL_F32) | REF_DT(QVL_F16) | REF_DT(QVL_BF16))
#define REF_INDEX REF_DT(QVL_I32)
#define REF_ANY (REF_READABLE | REF_INDEX)

typedef qvl_status (*ref_check_fn)(const qvl_node *n, qvl_error *err);

/* Record a failure "reference: <op> '<name>': <what>" (err may be NULL) and return s. */
qvl_status ref_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *fmt, ...)
    QVL_PRINTF(4, 5);

/* Input slot, or NULL when the slot is empty (or beyond n_src). */
const qvl_tensor *ref_src(const qvl_node *n, uint32_t slot);

/* Tensor t is one of `dtypes`, has ndim in [min_ndim, max_ndim] and a layout the kernels can
 * walk (sizes >= 1, offsets that fit int64, the q8_0 block rule). */
qvl_status ref_check_tensor(const qvl_node *n, const qvl_tensor *t, const char *what,
                            unsigned dtypes, int min_ndim, int max_ndim, qvl_error *err);
/* A required input: present, one of `dtypes`, ndim in [min_ndim, max_ndim], sane layout. */
qvl_status ref_need(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                    int min_ndim, int max_ndim, qvl_error *err);
/* An optional input: the same checks when present, OK when absent. */
qvl_status ref_maybe(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                     int min_ndim, int max_ndim, qvl_error *err);
/* The "at" input of the ops that read a KV length from data: one i32 row count, shape [1]. */
qvl_status ref_check_at(const qvl_node *n, uint32_t slot, qvl_error *err);
/* An input that must be absent (e.g. a bias of an unused projection). */
qvl_status ref_absent(const qvl_node *n, uint32_t slot, const char *what, qvl_error *err);

/* A 1-D input of length len (gamma, beta, bias) when present. */
qvl_status ref_vector_len(const qvl_node *n, uint32_t slot, const char *what, int64_t len,
                          qvl_error *err);

/* The output: present, one of `dtypes`, contiguous, exactly the given shape. */
qvl_status ref_output(const qvl_node *n, unsigned dtypes, int ndim, const int64_t *shape,
                      qvl_error *err);

bool ref_is_contiguous(const qvl_tensor_desc *d);
/* Leading dims (all but the innermost) of a and b are equal (same ndim too). */
bool ref_same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b);

/* The reference check for a node's op, NULL for an unknown op (ref_check_table.c). */
ref_check_fn ref_check_for(const qvl_node *node);

/* Run the op's check, then make sure every present tensor has memory: what each kernel does
 * first. */
qvl_status ref_begin(const qvl_node *n, ref_check_fn check, qvl_error *err);

#endif
