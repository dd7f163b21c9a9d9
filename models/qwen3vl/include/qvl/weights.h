/* The weight store: a model directory's safetensors files, checked against the tensor list the
 * config implies (qvl_qwen3vl_tensor_specs).
 *
 * The directory holds model.safetensors, or model.safetensors.index.json whose "weight_map"
 * maps each tensor name to a shard file in the same directory (plain file names only). When
 * both exist, model.safetensors is used, as Hugging Face transformers does.
 *
 * Opening is strict: every expected tensor must be present with exactly the expected shape
 * (the patch embedding is 5-D), in F32, F16 or BF16, and any tensor the config does not imply
 * is an error. One exception, as in transformers: with tie_word_embeddings a stored
 * "lm_head.weight" is accepted and ignored (qvl_weights_get returns NULL for it; use
 * model.language_model.embed_tokens.weight). Tensor data stays memory-mapped until close. */
#ifndef QVL_WEIGHTS_H
#define QVL_WEIGHTS_H

#include <stddef.h>

#include "qvl/qwen3vl_config.h"
#include "qvl/safetensors.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_weights qvl_weights;

/* Errors name the directory or file and list the offending tensors (a few names and a count):
 * missing (QVL_E_NOT_FOUND), mis-shaped (QVL_E_SHAPE), unexpected (QVL_E_INVALID). */
qvl_status qvl_weights_open(const char *model_dir, const qvl_qwen3vl_config *cfg,
                            qvl_weights **out, qvl_error *err);
void qvl_weights_close(qvl_weights *w); /* NULL is fine */

/* The tensor called name, NULL when it is not one of the expected tensors. */
const qvl_st_tensor *qvl_weights_get(const qvl_weights *w, const char *name);
/* The expected tensors, in qvl_qwen3vl_tensor_specs order. */
size_t qvl_weights_count(const qvl_weights *w);
const qvl_st_tensor *qvl_weights_at(const qvl_weights *w, size_t i);
/* Sum of the expected tensors' sizes in bytes. */
size_t qvl_weights_total_bytes(const qvl_weights *w);

#ifdef __cplusplus
}
#endif
#endif
