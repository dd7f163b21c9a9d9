/* Where a model's parts come from, for the tools: a Hugging Face directory (config.json,
 * *.safetensors, tokenizer.json, generation_config.json, preprocessor_config.json,
 * video_preprocessor_config.json) or llama.cpp's GGUF files (-m MODEL.gguf [--mmproj
 * MMPROJ.gguf], or a directory without config.json holding one model GGUF and at most one
 * mmproj GGUF; a directory with config.json is a Hugging Face one, GGUF files beside it or not).
 *
 * For GGUF, what the files do not carry comes from Qwen3-VL's documented defaults
 * (docs/MODEL.md, "GGUF files"): the image and video processors' pixel bounds, frame rate and
 * temporal patch; greedy decoding unless the file has general.sampling.* keys; the stop tokens
 * are tokenizer.ggml.eos_token_id, .eot_token_id and the vocabulary's <|im_end|> and
 * <|endoftext|> (Qwen3-VL's generation_config.json stops at both). */
#ifndef QVL_MODEL_FILES_H
#define QVL_MODEL_FILES_H

#include <stdbool.h>

#include "qvl/gen_config.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/status.h"
#include "qvl/tokenizer.h"
#include "qvl/video_preprocess.h"
#include "qvl/weight_table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_model_files {
    const char *model; /* -m as given (borrowed) */
    char *dir;         /* the Hugging Face directory; NULL for GGUF */
    char *gguf;        /* the text model GGUF; NULL for a directory */
    char *mmproj;      /* the vision GGUF; NULL when there is none */
} qvl_model_files;

/* Finds the parts of -m MODEL (with --mmproj, NULL when not given). Errors are one line: MODEL
 * missing, --mmproj with a Hugging Face directory, a directory with several model GGUFs. */
qvl_status qvl_model_files_find(const char *model, const char *mmproj, qvl_model_files *out,
                                qvl_error *err);
void qvl_model_files_free(qvl_model_files *f);

/* The config (config.json, or the GGUF keys). */
qvl_status qvl_model_files_config(const qvl_model_files *f, qvl_qwen3vl_config *out,
                                  qvl_error *err);
/* The config and the weight table under the checkpoint's names (config.json and the
 * safetensors, or the GGUF files); *w is closed by the caller with qvl_weights_close. */
qvl_status qvl_model_files_open(const qvl_model_files *f, qvl_qwen3vl_config *cfg,
                                qvl_weights **w, qvl_error *err);
/* The tokenizer; QVL_E_NOT_FOUND (with a message naming the file) when there is none. */
qvl_status qvl_model_files_tokenizer(const qvl_model_files *f, qvl_tokenizer **out,
                                     qvl_error *err);
/* Generation settings; QVL_E_NOT_FOUND when a directory has no generation_config.json (out
 * then holds the defaults). */
qvl_status qvl_model_files_gen_config(const qvl_model_files *f, qvl_gen_config *out,
                                      qvl_error *err);
/* The image processor for the config's vision tower; *source names where it came from. */
qvl_status qvl_model_files_preprocess(const qvl_model_files *f, const qvl_vision_config *v,
                                      qvl_preprocess_config *out, const char **source,
                                      qvl_error *err);
/* The video processor (video_preprocessor_config.json, else the defaults). */
qvl_status qvl_model_files_video(const qvl_model_files *f, const qvl_vision_config *v,
                                 qvl_video_config *out, qvl_error *err);
/* One line for a picture or video given to a model without a vision tower. */
qvl_status qvl_model_files_no_vision(const qvl_model_files *f, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
