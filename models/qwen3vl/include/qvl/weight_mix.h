/* Weight dtype mixtures: which dtype each checkpoint tensor is stored in on the backend. */
#ifndef QVL_WEIGHT_MIX_H
#define QVL_WEIGHT_MIX_H

#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/qwen3vl_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --weights q4_k_m: the dtype of the tensor `name` (ndim dims of shape, stored as `stored`).
 * 1-D tensors keep `stored` (the model stores all vectors in one dtype). */
qvl_dtype qvl_qwen3vl_mix_dtype(const qvl_qwen3vl_config *cfg, const char *name, int ndim,
                                const int64_t *shape, qvl_dtype stored);

#ifdef __cplusplus
}
#endif
#endif
