/* Between the minimal backend's plugin side (minimal.c) and its kernels (minimal_kernels.c). */
#ifndef QVL_MINIMAL_H
#define QVL_MINIMAL_H

#include "qvl/backend_helpers.h"

#define NAME "minimal" /* the name in plugins.yaml and in every message */

/* qvl_kernel_begin with this backend's table: the first call of every kernel. */
qvl_status min_begin(qvl_backend *be, const qvl_node *node, qvl_error *err);

#define MIN_KERNEL(fn) qvl_status fn(qvl_backend *be, const qvl_node *node, qvl_error *err);
MIN_KERNEL(k_get_rows)
MIN_KERNEL(k_matmul)
MIN_KERNEL(k_add)
MIN_KERNEL(k_mul)
MIN_KERNEL(k_scale)
MIN_KERNEL(k_silu)
MIN_KERNEL(k_gelu_tanh)
MIN_KERNEL(k_gelu_erf)
MIN_KERNEL(k_rms_norm)
MIN_KERNEL(k_layer_norm)
MIN_KERNEL(k_softmax)
MIN_KERNEL(k_rope)
MIN_KERNEL(k_mask_causal)
MIN_KERNEL(k_mask_causal_at)
MIN_KERNEL(k_mask_segments)
MIN_KERNEL(k_cont)
MIN_KERNEL(k_store_rows)
MIN_KERNEL(k_store_rows_at)
MIN_KERNEL(k_set_rows)
MIN_KERNEL(k_add_rows)
#undef MIN_KERNEL

#endif
