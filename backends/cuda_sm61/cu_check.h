/* The node checks of the cuda_sm61 backend: the reference backend's own checks (ref_check.h,
 * ref_ops.h; compiled into this plugin), so both accept the same nodes with the same rules,
 * plus the few limits of these kernels (head sizes, grid dimensions).
 *
 * An op without such a limit is checked by ref_check_<op> itself; matmul, attention and
 * norm_rope by cu_check_<op>, which runs ref_check_<op> and then this backend's limits.
 * supports() calls the check with err == NULL; the kernel calls it again (through cu_begin)
 * before touching memory. Failures name this backend: "cuda_sm61: <op> '<name>': <what>". */
#ifndef QVL_CU_CHECK_H
#define QVL_CU_CHECK_H

#include "qvl/ops.h"
#include "qvl/status.h"
#include "ref_access.h"
#include "ref_check.h"
#include "ref_ops.h"

/* Record a failure "cuda_sm61: <op> '<name>': <what>" (err may be NULL) and return s. */
qvl_status cu_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *fmt, ...)
    QVL_PRINTF(4, 5);

/* ref_begin (the check, then memory for every present tensor), with the reference's message
 * reworded as this backend's. */
qvl_status cu_begin(const qvl_node *n, ref_check_fn check, qvl_error *err);

/* NORM_LINEAR's slots: weight and bias of projection p (0..2). */
#define CU_NL_W_SLOT(p) (3u + 2u * (uint32_t)(p))
#define CU_NL_B_SLOT(p) (4u + 2u * (uint32_t)(p))
/* Largest grid y/z dimension (batches, tile rows). */
#define CU_MAX_GRID_YZ 65535

/* The reference's check plus this backend's limits. */
qvl_status cu_check_matmul(const qvl_node *n, qvl_error *err);
qvl_status cu_check_attention(const qvl_node *n, qvl_error *err);
qvl_status cu_check_norm_rope(const qvl_node *n, qvl_error *err);

#endif
