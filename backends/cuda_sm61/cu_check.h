/* The node checks of the cuda_sm61 backend, mirroring the reference backend's (ref_check.h),
 * so both accept the same nodes with the same messages. Shared parts: presence, dtype, rank,
 * layout and output shape.: presence, dtype, rank, layout and output shape.
 *
 * Every op has a check function `cu_check_<op>(node, err)`. supports() calls it with
 * err == NULL; the kernel calls it again (through cu_begin) before touching memory, so a
 * kernel never trusts that the node was validated elsewhere. Failures are one line naming the
 * op, the node and what is wrong: dtypes the kernels do not handle give QVL_E_UNSUPPORTED,
 * shapes that do not fit QVL_E_SHAPE, bad parameters or missing inputs QVL_E_INVALID. */
#ifndef QVL_CU_CHECK_H
#define QVL_CU_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/ops.h"
#include "qvl/status.h"

/* Sets of dtypes, as bit masks. */
#define CU_DT(t) (1u << (t))
#define CU_READABLE (CU_DT(QVL_F32) | CU_DT(QVL_F16) | CU_DT(QVL_BF16) | CU_DT(QVL_Q8_0))
#define CU_WRITABLE (CU_DT(QVL_F32) | CU_DT(QVL_F16) | CU_DT(QVL_BF16))
#define CU_INDEX CU_DT(QVL_I32)
#define CU_ANY (CU_READABLE | CU_INDEX)

typedef qvl_status (*cu_check_fn)(const qvl_node *n, qvl_error *err);

/* Record a failure "cuda_sm61: <op> '<name>': <what>" (err may be NULL) and return s. */
qvl_status cu_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *fmt, ...)
    QVL_PRINTF(4, 5);

/* Input slot, or NULL when the slot is empty (or beyond n_src). */
const qvl_tensor *cu_src(const qvl_node *n, uint32_t slot);

/* Tensor t is one of `dtypes`, has ndim in [min_ndim, max_ndim] and a layout the kernels can
 * walk (sizes >= 1, offsets that fit int64, the q8_0 block rule). */
qvl_status cu_check_tensor(const qvl_node *n, const qvl_tensor *t, const char *what,
                            unsigned dtypes, int min_ndim, int max_ndim, qvl_error *err);
/* A required input: present, one of `dtypes`, ndim in [min_ndim, max_ndim], sane layout. */
qvl_status cu_need(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                    int min_ndim, int max_ndim, qvl_error *err);
/* An optional input: the same checks when present, OK when absent. */
qvl_status cu_maybe(const qvl_node *n, uint32_t slot, const char *what, unsigned dtypes,
                     int min_ndim, int max_ndim, qvl_error *err);
/* An input that must be absent (e.g. a bias of an unused projection). */
qvl_status cu_absent(const qvl_node *n, uint32_t slot, const char *what, qvl_error *err);

/* A 1-D input of length len (gamma, beta, bias) when present. */
qvl_status cu_vector_len(const qvl_node *n, uint32_t slot, const char *what, int64_t len,
                          qvl_error *err);

/* The output: present, one of `dtypes`, contiguous, exactly the given shape. */
qvl_status cu_output(const qvl_node *n, unsigned dtypes, int ndim, const int64_t *shape,
                      qvl_error *err);

bool cu_is_contiguous(const qvl_tensor_desc *d);
/* Length of the innermost dim, and the number of rows (product of the others). */
int64_t cu_row_len(const qvl_tensor_desc *d);
int64_t cu_n_rows(const qvl_tensor_desc *d);
/* Leading dims (all but the innermost) of a and b are equal (same ndim too). */
bool cu_same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b);

/* Run the op's check, then make sure every present tensor has memory: what each kernel does
 * first. */
qvl_status cu_begin(const qvl_node *n, cu_check_fn check, qvl_error *err);

/* NORM_LINEAR's slots: weight and bias of projection p (0..2). */
#define CU_NL_W_SLOT(p) (3u + 2u * (uint32_t)(p))
#define CU_NL_B_SLOT(p) (4u + 2u * (uint32_t)(p))
/* Largest grid y/z dimension (batches, tile rows). */
#define CU_MAX_GRID_YZ 65535

/* Per-op checks (cu_op_checks.c), one per op with the reference's rules. */
qvl_status cu_check_get_rows(const qvl_node *n, qvl_error *err);
qvl_status cu_check_matmul(const qvl_node *n, qvl_error *err);
qvl_status cu_check_add(const qvl_node *n, qvl_error *err);
qvl_status cu_check_mul(const qvl_node *n, qvl_error *err);
qvl_status cu_check_scale(const qvl_node *n, qvl_error *err);
qvl_status cu_check_rms_norm(const qvl_node *n, qvl_error *err);
qvl_status cu_check_layer_norm(const qvl_node *n, qvl_error *err);
qvl_status cu_check_rope(const qvl_node *n, qvl_error *err);
qvl_status cu_check_softmax(const qvl_node *n, qvl_error *err);
qvl_status cu_check_silu(const qvl_node *n, qvl_error *err);
qvl_status cu_check_gelu_tanh(const qvl_node *n, qvl_error *err);
qvl_status cu_check_gelu_erf(const qvl_node *n, qvl_error *err);
qvl_status cu_check_mask_causal(const qvl_node *n, qvl_error *err);
qvl_status cu_check_mask_segments(const qvl_node *n, qvl_error *err);
qvl_status cu_check_view(const qvl_node *n, qvl_error *err);
qvl_status cu_check_cont(const qvl_node *n, qvl_error *err);
qvl_status cu_check_store_rows(const qvl_node *n, qvl_error *err);
qvl_status cu_check_norm_linear(const qvl_node *n, qvl_error *err);
qvl_status cu_check_attention(const qvl_node *n, qvl_error *err);
qvl_status cu_check_mlp_residual(const qvl_node *n, qvl_error *err);
qvl_status cu_check_set_rows(const qvl_node *n, qvl_error *err);
qvl_status cu_check_add_rows(const qvl_node *n, qvl_error *err);

#endif
