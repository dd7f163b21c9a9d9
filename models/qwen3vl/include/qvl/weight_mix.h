/* Weight dtype mixtures: which dtype each checkpoint tensor is stored in on the backend. */
#ifndef QVL_WEIGHT_MIX_H
#define QVL_WEIGHT_MIX_H

#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/weight_table.h" /* qvl_st_tensor */

#ifdef __cplusplus
extern "C" {
#endif

/* --weights q4_k_m: the dtype of the tensor `name` (ndim dims of shape, stored as `stored`).
 * 1-D tensors keep `stored` (the model stores all vectors in one dtype). */
qvl_dtype qvl_qwen3vl_mix_dtype(const qvl_qwen3vl_config *cfg, const char *name, int ndim,
                                const int64_t *shape, qvl_dtype stored);

/* The dtype stored tensor t is bound in on the backend: a vector (ndim < 2) in vector_dtype;
 * under --weights q4_k_m (mix_q4_k_m) per qvl_qwen3vl_mix_dtype; a matrix in matrix_dtype when
 * a dtype was asked for (requested: --weights or the backend's `weights` option); otherwise as
 * stored, so a directory written by `qvl quantize` (a mixture included) runs without any
 * conversion. */
qvl_dtype qvl_qwen3vl_bind_dtype(const qvl_qwen3vl_config *cfg, const qvl_st_tensor *t,
                                 bool mix_q4_k_m, bool requested, qvl_dtype matrix_dtype,
                                 qvl_dtype vector_dtype);

#ifdef __cplusplus
}
#endif
#endif
