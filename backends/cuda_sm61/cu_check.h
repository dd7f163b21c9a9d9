/* The node checks of the cuda_sm61 backend. The op contract is core's (qvl_node_check); this
 * backend reads the base dtypes wherever the contract allows them and adds only the limits
 * of its kernels (head sizes, grid dimensions), in cu_accepts. supports() and every kernel (through
 * cu_begin, before touching memory) ask the same question. Failures name this backend:
 * "cuda_sm61: <op> '<name>': <what>". */
#ifndef QVL_CU_CHECK_H
#define QVL_CU_CHECK_H

#include "qvl/backend_helpers.h"

/* The name in every message, and a failure "cuda_sm61: <op> '<name>': <what>" recorded (err
 * may be NULL), returning s. */
#define CU_NAME "cuda_sm61"
#define cu_fail(n, err, s, ...) qvl_node_fail(CU_NAME, n, err, s, __VA_ARGS__)

/* What every kernel does first: qvl_kernel_begin with this backend's table. */
qvl_status cu_begin(qvl_backend *be, const qvl_node *n, qvl_error *err);

/* This backend's own limits (the iface's accepts hook). */
qvl_status cu_accepts(qvl_backend *be, const qvl_node *n, qvl_error *err);

/* NORM_LINEAR's slots: weight and bias of projection p (0..2). */
#define CU_NL_W_SLOT(p) (3u + 2u * (uint32_t)(p))
#define CU_NL_B_SLOT(p) (4u + 2u * (uint32_t)(p))
/* Largest grid y/z dimension (batches, tile rows). */
#define CU_MAX_GRID_YZ 65535

#endif
