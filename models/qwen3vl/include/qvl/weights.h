/* A Qwen3-VL checkpoint's weights: the runtime's weight table opened against the tensor list
 * the config implies (qvl_qwen3vl_tensor_specs; names and shapes in docs/MODEL.md).
 *
 * The patch embedding is 5-D. As in transformers, with tie_word_embeddings a stored
 * "lm_head.weight" is accepted and ignored (qvl_weights_get returns NULL for it; use
 * model.language_model.embed_tokens.weight). */
#ifndef QVL_WEIGHTS_H
#define QVL_WEIGHTS_H

#include "qvl/qwen3vl_config.h"
#include "qvl/status.h"
#include "qvl/weight_table.h"

#ifdef __cplusplus
extern "C" {
#endif

qvl_status qvl_weights_open(const char *model_dir, const qvl_qwen3vl_config *cfg,
                            qvl_weights **out, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
