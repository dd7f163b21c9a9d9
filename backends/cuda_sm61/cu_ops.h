/* The host side of every cuda_sm61 kernel (cu_ops.c): one function per op, as the ABI table
 * lists them, and the launch jobs of the two small ops that cu_launch_groups.c launches
 * several at a time. */
#ifndef QVL_CU_OPS_H
#define QVL_CU_OPS_H

#include "cu_device.h"
#include "cu_kernels.h"

/* The kernels, one per op (VIEW has none). Each starts by running its check. */
qvl_status cu_op_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_add(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_scale(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_silu(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_cont(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_attention(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err); /* and SLOT_ROWS */
qvl_status cu_op_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status cu_op_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err);


/* The checked launch job of one NORM_ROPE / STORE_ROWS_AT / STORE_SLOT_ROWS node (what its
 * kernel would launch), for launching several nodes at once. */
qvl_status cu_norm_rope_job_of(qvl_backend *be, const qvl_node *n, cu_norm_rope_job *j,
                               qvl_error *err);
qvl_status cu_store_at_job_of(qvl_backend *be, const qvl_node *n, cu_store_at_job *j,
                              qvl_error *err);
/* QVL_OK when a launch returned 0, else a QVL_E_BACKEND failure naming node n. */
qvl_status cu_launched(const qvl_node *n, int rc, qvl_error *err);

/* Extension QVL_EXT_SCRATCH (backend.h): raises s[slot] to the scratch the node's kernel grows
 * in that slot (CU_SCRATCH_*). */
void cu_scratch_need(qvl_backend *be, const qvl_node *n, size_t s[QVL_SCRATCH_SLOTS]);

#endif
