/* Qwen3-VL configuration (config.json) and the list of tensors a checkpoint must hold.
 * Every size and token id comes from the file; nothing here assumes the 2B model. */
#ifndef QVL_QWEN3VL_CONFIG_H
#define QVL_QWEN3VL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"
#include "qvl/tensor.h"
#include "qvl/weight_table.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_MAX_DEEPSTACK 8

typedef struct qvl_text_config {
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;
    int64_t head_dim;             /* from the file; hidden/heads only when absent */
    double rms_norm_eps;
    double rope_theta;
    int32_t mrope_section[3];     /* t, h, w pairs */
    bool mrope_interleaved;
    char rope_type[32];           /* "default" (others are rejected for now) */
    int64_t max_position_embeddings;
    bool attention_bias;
    char hidden_act[32];          /* "silu" */
    int64_t bos_token_id;         /* -1 when absent */
    int64_t eos_token_id;         /* -1 when absent */
    char dtype[16];               /* "bfloat16" etc., "" when absent */
} qvl_text_config;

typedef struct qvl_vision_config {
    int64_t depth;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_heads;
    int64_t patch_size;
    int64_t temporal_patch_size;
    int64_t spatial_merge_size;
    int64_t in_channels;
    int64_t out_hidden_size;
    int64_t num_position_embeddings; /* a square number: side^2 */
    int32_t n_deepstack;
    int32_t deepstack_visual_indexes[QVL_MAX_DEEPSTACK];
    char hidden_act[32];          /* "gelu_pytorch_tanh" */
} qvl_vision_config;

typedef struct qvl_qwen3vl_config {
    qvl_text_config text;
    qvl_vision_config vision;
    bool has_vision;              /* vision_config present */
    bool tie_word_embeddings;     /* top level or text_config; default false */
    int64_t image_token_id;       /* -1 when absent */
    int64_t video_token_id;
    int64_t vision_start_token_id;
    int64_t vision_end_token_id;
} qvl_qwen3vl_config;

/* Parse config.json. Accepts rope settings under text_config.rope_scaling (+ rope_theta) or
 * text_config.rope_parameters. Missing required keys, wrong types and impossible values
 * (non-positive sizes, heads not dividing, sections not summing to head_dim/2) are errors
 * naming the file and key. */
qvl_status qvl_qwen3vl_config_load(const char *path, qvl_qwen3vl_config *out, qvl_error *err);
qvl_status qvl_qwen3vl_config_parse(const char *json, size_t len, const char *path,
                                    qvl_qwen3vl_config *out, qvl_error *err);

/* ---- the tensors a checkpoint holds --------------------------------------------------------
 * Names are Hugging Face's ("model.language_model.layers.0.self_attn.q_proj.weight").
 * Shapes are as stored in the file (the patch embedding is 5-D: [out, in_ch, t, p, p]); the
 * full list is in docs/MODEL.md. */

/* All tensors the config implies, text then vision; lm_head.weight only when untied.
 * Returns a malloc'd array (free with free()) and its length. */
qvl_status qvl_qwen3vl_tensor_specs(const qvl_qwen3vl_config *cfg, qvl_tensor_spec **out,
                                    size_t *n, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
