/* The cpu_avx2 kernels, one per op (semantics in qvl/ops.h), and the row functions the fused
 * kernels share with the primitive ones. */
#ifndef QVL_AVX_KERNELS_H
#define QVL_AVX_KERNELS_H

#include "avx_common.h"

qvl_status avx_get_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_add(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_mul(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_scale(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_softmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_silu(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_gelu_tanh(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_gelu_erf(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_mask_causal(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_mask_causal_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_mask_segments(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_cont(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_store_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_store_rows_at(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_attention(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_store_slot_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_set_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);
qvl_status avx_add_rows(qvl_backend *be, const qvl_node *n, qvl_error *err);

/* avx_norm.c (y may equal x; beta may be NULL) */
void avx_rms_norm_row(float *y, const float *x, const float *gamma, int64_t n, float eps);
void avx_layer_norm_row(float *y, const float *x, const float *gamma, const float *beta,
                        int64_t n, float eps);
/* avx_elementwise.c: in place over n values */
void avx_softmax_row(float *x, int64_t n);
void avx_silu_row(float *x, int64_t n);
void avx_gelu_tanh_row(float *x, int64_t n);
void avx_gelu_erf_row(float *x, int64_t n);
/* avx_attention.c: segment number of each of len positions from bounds seg, checked
 * (qvl_check_segments) */
qvl_status avx_segment_ids(const qvl_node *n, const qvl_tensor *seg, int64_t len, int32_t *id,
                           qvl_error *err);

#endif
