/* Writing Qwen3-VL as llama.cpp's two GGUF files (qvl quantize --out FILE.gguf): the inverse of
 * qvl/qwen3vl_gguf.h, from any source qvl loads (a Hugging Face directory or GGUF files).
 *
 * The text model (general.architecture = qwen3vl) carries the qwen3vl.* keys, the tokenizer
 * (tokenizer.ggml.*: from a GGUF source copied as it is, from tokenizer.json built as the
 * converter builds it) and tokenizer.chat_template when the source has one; the mmproj
 * (general.architecture = clip, clip.projector_type = qwen3vl_merger) the clip.vision.* keys,
 * the image statistics and the vision tower, its Conv3D patch embedding split into two 2-D
 * kernels (v.patch_embd.weight, .weight.1) and its deepstack mergers named by the vision block
 * they follow, as the converter writes them (docs/MODEL.md, "GGUF files").
 *
 * Types (docs/QUANT.md): the matrices as --weights says (q4_k_m: per tensor, weight_mix.c), a
 * matrix whose rows are not whole blocks of that type in q8_0, else f16 (as llama.cpp's tools
 * fall back); vectors (norms, biases) and the position table in F32, the patch kernels in F16 (F32 when
 * the matrices are F32 or BF16): what llama.cpp's converter writes and its vision code reads. */
#ifndef QVL_QWEN3VL_GGUF_EXPORT_H
#define QVL_QWEN3VL_GGUF_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/model_files.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/status.h"
#include "qvl/weight_table.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_qwen3vl_export {
    const qvl_model_files *files;   /* the source (tokenizer, template, statistics, general.*) */
    const qvl_qwen3vl_config *cfg;
    const qvl_weights *w;           /* under the checkpoint's names */
    const char *weights;            /* f32, f16, bf16, q8_0, q4_k, q6_k or q4_k_m */
    int threads;                    /* for converting */
    const char *out;                /* the text model GGUF */
    const char *mmproj_out;         /* the mmproj GGUF; NULL: the text model only */
} qvl_qwen3vl_export;

typedef struct qvl_qwen3vl_export_stats {
    size_t tensors[2];   /* written to out, mmproj_out */
    size_t converted;    /* tensors whose dtype changed */
    size_t by_dtype[2][QVL_DTYPE_COUNT]; /* tensors written to out, mmproj_out, per type */
} qvl_qwen3vl_export_stats;

/* Writes the files (each under a temporary name, renamed into place when complete; the text
 * model first). Prints one line per converted tensor on stdout, as qvl quantize does. Errors
 * are one line: --weights unknown, a config GGUF cannot
 * express (no interleaved M-RoPE, attention bias, a temporal patch other than 2), --mmproj-out
 * for a model without vision, and I/O. */
qvl_status qvl_qwen3vl_gguf_export(const qvl_qwen3vl_export *x, qvl_qwen3vl_export_stats *stats,
                                   qvl_error *err);

/* llama.cpp's general.file_type for --weights (LLAMA_FTYPE_*: q4_k is MOSTLY_Q4_K_S, the one
 * whose matrices are all Q4_K); false for an unknown name. */
bool qvl_qwen3vl_gguf_file_type(const char *weights, uint32_t *out);

#ifdef __cplusplus
}
#endif
#endif
