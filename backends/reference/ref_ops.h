/* The reference kernels and their checks, one pair per op (see ops.h for the semantics).
 *
 * ref_check_<op>(node, err) says whether the kernels handle the node (supports() asks it
 * with err == NULL); ref_<op>(be, node, err) runs it and starts by running the check. */
#ifndef QVL_REF_OPS_H
#define QVL_REF_OPS_H

#include "qvl/backend.h"

/* ref_matmul.c */
qvl_status ref_check_matmul(const qvl_node *n, qvl_error *err);
qvl_status ref_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_elementwise.c */
qvl_status ref_check_add(const qvl_node *n, qvl_error *err);
qvl_status ref_add(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_mul(const qvl_node *n, qvl_error *err);
qvl_status ref_mul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_scale(const qvl_node *n, qvl_error *err);
qvl_status ref_scale(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_silu(const qvl_node *n, qvl_error *err);
qvl_status ref_silu(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_gelu_tanh(const qvl_node *n, qvl_error *err);
qvl_status ref_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_gelu_erf(const qvl_node *n, qvl_error *err);
qvl_status ref_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_norm.c */
qvl_status ref_check_rms_norm(const qvl_node *n, qvl_error *err);
qvl_status ref_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_layer_norm(const qvl_node *n, qvl_error *err);
qvl_status ref_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_rope.c */
qvl_status ref_check_rope(const qvl_node *n, qvl_error *err);
qvl_status ref_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_norm_rope(const qvl_node *n, qvl_error *err);
qvl_status ref_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_attention.c */
qvl_status ref_check_softmax(const qvl_node *n, qvl_error *err);
qvl_status ref_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_mask_causal(const qvl_node *n, qvl_error *err);
qvl_status ref_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_mask_segments(const qvl_node *n, qvl_error *err);
qvl_status ref_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_attention(const qvl_node *n, qvl_error *err);
qvl_status ref_attention(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_mask_causal_at(const qvl_node *n, qvl_error *err);
qvl_status ref_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_view.c */
qvl_status ref_check_get_rows(const qvl_node *n, qvl_error *err);
qvl_status ref_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_cont(const qvl_node *n, qvl_error *err);
qvl_status ref_cont(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_store_rows(const qvl_node *n, qvl_error *err);
qvl_status ref_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_store_rows_at(const qvl_node *n, qvl_error *err);
qvl_status ref_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_fused.c */
qvl_status ref_check_norm_linear(const qvl_node *n, qvl_error *err);
qvl_status ref_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_mlp_residual(const qvl_node *n, qvl_error *err);
qvl_status ref_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err);
/* ref_scatter.c */
qvl_status ref_check_set_rows(const qvl_node *n, qvl_error *err);
qvl_status ref_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status ref_check_add_rows(const qvl_node *n, qvl_error *err);
qvl_status ref_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);

/* VIEW has no kernel (the executor aliases memory); this only checks the descriptor. */
qvl_status ref_check_view(const qvl_node *n, qvl_error *err);

#endif
