/* Random-weight checkpoints with the real architecture, for tests and benchmarks.
 *
 * Values are deterministic for a given seed and tensor name (each tensor has its own stream,
 * so adding or removing a tensor does not change the others): norm weights are 1 + N(0, std),
 * biases and all other weights N(0, std) (Box-Muller normals with the angle quantised to 4096
 * steps, truncated at about 5.8 std).
 * Data is generated and written in bounded chunks, so the full-size model needs little
 * memory. */
#ifndef QVL_MKMODEL_H
#define QVL_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Write one safetensors file holding the given tensors with random values in dtype
 * (f32, f16 or bf16), with __metadata__ {"format": "pt"}. */
qvl_status qvl_qwen3vl_write_random_weights(const char *path, const qvl_tensor_spec *specs,
                                            size_t n_specs, uint64_t seed, qvl_dtype dtype,
                                            float std, qvl_error *err);

/* Make a model directory from a config.json:
 *  - out_dir is created like `mkdir -p` (an existing non-directory is an error);
 *  - config.json is copied;
 *  - generation_config.json and preprocessor_config.json are copied from beside the config
 *    when present, otherwise written: generation from the config's bos/eos ids, preprocessor
 *    (vision models only) from patch/temporal patch/merge sizes, mean = std = 0.5 per input
 *    channel and a pixel budget of 64..16384 merged tokens;
 *  - chat_template.jinja, chat_template.json and tokenizer_config.json are copied from beside
 *    the config when present;
 *  - tokenizer_path, when not NULL, is copied to tokenizer.json (it must exist);
 *  - model.safetensors gets every tensor of qvl_qwen3vl_tensor_specs, random as above. */
qvl_status qvl_qwen3vl_mkmodel(const char *config_path, const char *out_dir, uint64_t seed,
                               qvl_dtype dtype, float std, const char *tokenizer_path,
                               qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
