/* The weight table: a model directory's safetensors files, checked against a list of expected
 * tensors that the caller (a model) derives from its config.
 *
 * The directory holds model.safetensors, or model.safetensors.index.json whose "weight_map"
 * maps each tensor name to a shard file in the same directory (plain file names only). When
 * both exist, model.safetensors is used, as Hugging Face transformers does.
 *
 * Opening is strict: every expected tensor must be present with exactly the expected shape,
 * in F32, F16 or BF16, and any stored tensor that is neither expected nor on the caller's
 * list of ignored names is an error. Ignored tensors are not reachable through the table
 * (qvl_weights_get returns NULL for them). Tensor data stays memory-mapped until close. */
#ifndef QVL_WEIGHT_TABLE_H
#define QVL_WEIGHT_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/safetensors.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One tensor a checkpoint must hold. Shapes are as stored in the file (up to 5-D). */
#define QVL_TENSOR_NAME_MAX 96
typedef struct qvl_tensor_spec {
    char name[QVL_TENSOR_NAME_MAX];
    int32_t ndim;
    int64_t shape[5];
    bool is_norm;  /* a norm weight (a random checkpoint initialises it to ~1) */
    bool is_bias;  /* a bias (a random checkpoint initialises it to ~0) */
} qvl_tensor_spec;

typedef struct qvl_weights qvl_weights;

/* Opens model_dir against specs[0..n) (copied; the caller keeps its array). ignored[0..n_ignored)
 * names tensors a file may hold that are accepted and left out of the table.
 * Errors name the directory or file and list the offending tensors (a few names and a count):
 * missing (QVL_E_NOT_FOUND), mis-shaped (QVL_E_SHAPE), unexpected (QVL_E_INVALID). */
qvl_status qvl_weights_open_specs(const char *model_dir, const qvl_tensor_spec *specs, size_t n,
                                  const char *const *ignored, size_t n_ignored,
                                  qvl_weights **out, qvl_error *err);
/* The same checks over tensors the caller already holds under the names the specs use (a GGUF
 * file's tensors renamed to the checkpoint's names, qvl/qwen3vl_gguf.h). tensors[0..n_tensors)
 * is copied (names and data are not: they must live until close). owner, when not NULL, is
 * released with owner_free at close, or here when opening fails: it is what keeps the data
 * alive (mappings, converted copies). where names the source in error messages. */
qvl_status qvl_weights_open_tensors(const char *where, const qvl_tensor_spec *specs, size_t n,
                                    const qvl_st_tensor *tensors, size_t n_tensors,
                                    const char *const *ignored, size_t n_ignored, void *owner,
                                    void (*owner_free)(void *), qvl_weights **out,
                                    qvl_error *err);
void qvl_weights_close(qvl_weights *w); /* NULL is fine */

/* The tensor called name, NULL when it is not one of the expected tensors. */
const qvl_st_tensor *qvl_weights_get(const qvl_weights *w, const char *name);
/* The expected tensors, in specs order. */
size_t qvl_weights_count(const qvl_weights *w);
const qvl_st_tensor *qvl_weights_at(const qvl_weights *w, size_t i);
/* Sum of the expected tensors' sizes in bytes. */
size_t qvl_weights_total_bytes(const qvl_weights *w);

#ifdef __cplusplus
}
#endif
#endif
