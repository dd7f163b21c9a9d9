/* Shared by gguf_export.c (tensors, writing) and gguf_export_keys.c (metadata). */
#ifndef QVL_QWEN3VL_GGUF_EXPORT_INTERNAL_H
#define QVL_QWEN3VL_GGUF_EXPORT_INTERNAL_H

#include "qvl/gguf.h"
#include "qvl/gguf_write.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_gguf_export.h"

/* The keys of each file; call after its tensors are added (general.size_label counts them).
 * src: the source GGUF of that file (its tokenizer and extra general.* keys are copied), NULL
 * for a directory. */
qvl_status export_text_keys(qvl_gguf_writer *w, const qvl_qwen3vl_export *x, uint32_t ftype,
                            const qvl_gguf *src, qvl_error *err);
qvl_status export_vision_keys(qvl_gguf_writer *w, const qvl_qwen3vl_export *x, uint32_t ftype,
                              const qvl_gguf *src, const qvl_preprocess_config *pc,
                              qvl_error *err);
/* tokenizer.* of a Hugging Face directory (tokenizer.json, tokenizer_config.json, config.json,
 * the chat template files). */
qvl_status export_dir_tokenizer(qvl_gguf_writer *w, const qvl_qwen3vl_export *x,
                                qvl_error *err);

#endif
