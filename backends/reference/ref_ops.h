/* The reference kernels, one per op (see ops.h for the semantics), and what they share.
 *
 * Every kernel starts with ref_begin: the node must pass the op contract and this backend's
 * declaration (the same question supports() answers), and have memory, before it is touched. */
#ifndef QVL_REF_OPS_H
#define QVL_REF_OPS_H

#include "qvl/backend_helpers.h"

/* The check every kernel runs first (qvl_kernel_begin with this backend's table). */
qvl_status ref_begin(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* The name in every message, and a run-time failure: "reference: <op> '<node>': <what>". The
 * data checks (ids, segment bounds, `at`) are core's: qvl_check_indices and the others. */
#define REF_NAME "reference"
#define ref_fail(n, err, s, ...) qvl_node_fail(REF_NAME, n, err, s, __VA_ARGS__)

/* ref_matmul.c */
qvl_status ref_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_elementwise.c */
qvl_status ref_add(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_mul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_scale(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_silu(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_norm.c */
qvl_status ref_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_rope.c */
qvl_status ref_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_attention.c */
qvl_status ref_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_attention(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_store_slot_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_view.c */
qvl_status ref_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_cont(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_fused.c */
qvl_status ref_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_scatter.c */
qvl_status ref_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);

#endif
