/* Helpers of the image and video parity tests (test_vision_parity.c, test_video_parity.c):
 * reading a fixture case (cJSON), comparing a block against transformers, and a greedy run that
 * keeps the prompt logits. Failures go through cmocka (fail_msg). */
#ifndef QVL_PARITY_CASES_H
#define QVL_PARITY_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "qvl/qwen3vl_model.h"
#include "parity_backends.h"

/* $QVL_PARITY_KV_TYPE (ctest runs f32 and the default, f16): NULL for the default. */
const char *parity_kv_type(void);
bool parity_kv_is_f32(void);

/* c[key]; the test fails when the fixture lacks it. */
const cJSON *parity_item(const cJSON *c, const char *key);
/* c[key] as an integer; the test fails when it is missing or not a number. */
int64_t parity_num(const cJSON *c, const char *key);
/* A JSON list of token ids (*n of them); the caller frees it. */
int32_t *parity_json_ids(const cJSON *arr, int64_t *n);
/* dir/file, which must hold exactly bytes bytes; the caller frees it. */
void *parity_read_exact(const char *dir, const char *file, size_t bytes);

/* Fails unless every |ours - hf| <= rtol x max|hf| over the block; prints both figures. */
void parity_compare_block(const char *what, const float *ours, const float *hf, size_t count,
                          double rtol);

/* The encoder's output f against transformers' hf_vis (the merger's K x D rows, then each of
 * the n_ds deepstack outputs'): token and deepstack counts equal, every block within rtol
 * (parity_compare_block). Messages start with who (e.g. "DIR CASE on BACKEND"). */
void parity_compare_features(const char *who, const qvl_image_features *f, const float *hf_vis,
                             int64_t K, int64_t D, int64_t n_ds, double rtol);

/* Model options for backend under test: ctx positions, the KV type and the split switches
 * ($QVL_PARITY_GPU_LAYERS, $QVL_PARITY_CPU_BACKEND, $QVL_PARITY_VISION_BACKEND). */
qvl_model_options parity_model_options(const char *backend, int64_t ctx);

/* A backend other than the reference one may not offer every op yet (QVL_E_UNSUPPORTED): true
 * (with a message naming what is skipped) when that backend is to be skipped, which it is
 * unless $QVL_PARITY_BACKENDS named it; false for anything else. */
bool parity_unsupported(const parity_backends *l, const char *backend, const char *what,
                        qvl_status st, const qvl_error *err);

/* n_greedy greedy tokens into got after the prompt ids[0..n) with 3-D positions pos and the
 * media features f; logits receives the prompt's n x vocab logits. Returns qvl_generate's
 * status, *n_generated the tokens it made. */
qvl_status parity_greedy(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                         const qvl_image_features *f, int64_t vocab, int64_t n_greedy,
                         float *logits, int32_t *got, int64_t *n_generated, qvl_error *err);

#endif
