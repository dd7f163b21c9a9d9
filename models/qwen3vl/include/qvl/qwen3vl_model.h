/* A loaded Qwen3-VL model on one backend: config, weights bound to backend memory, KV cache,
 * and evaluation of token batches through the text graph (prefill and decode).
 *
 * Weights stay in the safetensors mapping when the backend can use host memory in place and
 * the dtype is what the graph reads; otherwise they are converted/uploaded once at load. */
#ifndef QVL_QWEN3VL_MODEL_H
#define QVL_QWEN3VL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/qwen3vl_config.h"
#include "qvl/registry.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_model qvl_model;

typedef struct qvl_model_options {
    const char *plugins_path; /* --plugins (NULL: the default search) */
    const char *backend_name; /* --backend (NULL: by priority) */
    int64_t ctx;              /* KV cache capacity in tokens (> 0) */
    bool no_fuse;             /* run the primitive graph (debugging, backend bring-up) */
} qvl_model_options;

/* Read DIR/config.json, map the weights, check them against the config, open the backend and
 * allocate the KV cache. */
qvl_status qvl_model_open(const char *dir, const qvl_model_options *opts, qvl_model **out,
                          qvl_error *err);
void qvl_model_close(qvl_model *m);

const qvl_qwen3vl_config *qvl_model_config(const qvl_model *m);
const qvl_loaded_backend *qvl_model_backend(const qvl_model *m);
int64_t qvl_model_ctx(const qvl_model *m);
/* Tokens in the KV cache. */
int64_t qvl_model_n_past(const qvl_model *m);
/* Forget everything after the first n_past tokens (n_past <= current). */
void qvl_model_truncate(qvl_model *m, int64_t n_past);

/* Append n tokens to the sequence: run them through the text graph (writing their keys and
 * values into the cache) and write logits: all n rows [n, vocab] when all_logits, else only
 * the last row [vocab]. pos gives their (t, h, w) positions as 3 rows of n (NULL: text
 * positions continuing the sequence). Token ids must lie in [0, vocab_size) and the cache must
 * have room (a QVL_E_LIMIT error names --ctx otherwise). */
qvl_status qvl_model_eval(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                          bool all_logits, float *logits, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
