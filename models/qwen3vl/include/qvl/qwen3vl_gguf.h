/* Qwen3-VL from llama.cpp's GGUF files: a text model (general.architecture = qwen3vl) and, for
 * pictures and videos, its mmproj (clip.projector_type = qwen3vl_merger). docs/MODEL.md, "GGUF
 * files", gives the mapping: qwen3vl.* and clip.vision.* keys to qvl's config, GGUF tensor names
 * to the checkpoint's names, and what the converter changed (the Conv3D patch embedding split
 * into two 2-D kernels, deepstack mergers numbered by vision layer).
 *
 * The result is what a Hugging Face directory gives: a qvl_qwen3vl_config and a weight table
 * under the checkpoint's names and shapes, so the rest of the model code does not know where the
 * weights came from. Tensors in a type qvl reads natively (F32, F16, BF16, Q8_0, Q4_K, Q6_K) are
 * used in place from the mapping; others are converted once at load (one log line each, with
 * the RMS error the conversion adds). */
#ifndef QVL_QWEN3VL_GGUF_H
#define QVL_QWEN3VL_GGUF_H

#include <stdbool.h>

#include "qvl/gguf.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/status.h"
#include "qvl/tokenizer.h"
#include "qvl/weight_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PATH is a GGUF file: it ends in ".gguf" (any case) or starts with the GGUF magic. */
bool qvl_is_gguf_path(const char *path);

/* A directory holding exactly one model GGUF and at most one mmproj GGUF ("mmproj" in the file
 * name, as llama.cpp names them): their paths (malloc'd; *mmproj NULL when there is none).
 * QVL_E_NOT_FOUND when the directory holds no GGUF file at all (a Hugging Face directory). */
qvl_status qvl_gguf_dir_files(const char *dir, char **model, char **mmproj, qvl_error *err);

/* The config from the text GGUF and, when not NULL, the mmproj (has_vision then). Errors are
 * one line naming the file and key: another architecture or projector, a missing or mistyped
 * key, impossible values (the same checks as config.json), an mmproj whose projection width or
 * deepstack count disagrees with the text model. */
qvl_status qvl_qwen3vl_gguf_config(const qvl_gguf *text, const qvl_gguf *mmproj,
                                   qvl_qwen3vl_config *out, qvl_error *err);

/* The weight table for cfg over the two files' tensors. Takes ownership of text and mmproj
 * (closed with the table, or here on failure). threads: for converting tensors. Errors name the
 * GGUF tensor: missing, unexpected, a shape that disagrees with the config, a type qvl cannot
 * read. */
qvl_status qvl_qwen3vl_gguf_weights(qvl_gguf *text, qvl_gguf *mmproj,
                                    const qvl_qwen3vl_config *cfg, qvl_weights **out,
                                    qvl_error *err);

/* The GGUF name of a checkpoint tensor (the converter's: "model.language_model.layers.3.
 * mlp.up_proj.weight" is "blk.3.ffn_up.weight"); false for a name the mapping does not know.
 * *vision says which file holds it (the mmproj). The patch embedding's name is its first
 * temporal kernel's; the second is that name + ".1". */
bool qvl_qwen3vl_gguf_name(const char *hf, const qvl_vision_config *v, char *out, size_t size,
                           bool *vision);

/* The tokenizer from tokenizer.ggml.* (qvl_tokenizer_from_lists). */
qvl_status qvl_qwen3vl_gguf_tokenizer(const qvl_gguf *text, qvl_tokenizer **out, qvl_error *err);

/* tokenizer.chat_template, malloc'd; NULL (and QVL_OK) when the file has none. */
qvl_status qvl_qwen3vl_gguf_chat_template(const qvl_gguf *text, char **out, qvl_error *err);

/* The image processor's settings: mean and std from the mmproj (clip.vision.image_mean/std),
 * the rest Qwen3-VL's documented defaults for this vision config
 * (qvl_preprocess_config_default). */
qvl_status qvl_qwen3vl_gguf_preprocess(const qvl_gguf *mmproj, const qvl_vision_config *v,
                                       qvl_preprocess_config *out, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
