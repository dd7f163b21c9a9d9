/* generation_config.json: stop tokens and default sampling settings.
 *
 * Keys read (all optional; null counts as absent): eos_token_id (an integer or a list of
 * integers), bos_token_id, pad_token_id, do_sample, temperature, top_k, top_p, min_p,
 * repetition_penalty, presence_penalty, max_new_tokens. Other keys are ignored. Absent keys keep
 * the defaults of transformers' GenerationConfig (do_sample false, temperature 1, top_k 50,
 * top_p 1, repetition_penalty 1; min_p and presence_penalty off), so a file read here samples
 * as transformers would with it. A key of the wrong type or an impossible value is an error
 * naming the file and the key. */
#ifndef QVL_GEN_CONFIG_H
#define QVL_GEN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/sampling.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_GEN_MAX_EOS 32

typedef struct qvl_gen_config {
    int32_t eos_token_ids[QVL_GEN_MAX_EOS]; /* in file order, without duplicates */
    int32_t n_eos;                          /* 0 when the file names none */
    int64_t bos_token_id;                   /* -1 when absent */
    int64_t pad_token_id;                   /* -1 when absent */
    bool do_sample;                         /* false: greedy, whatever the other settings */
    double temperature;
    int32_t top_k;                          /* 0: off */
    double top_p;
    double min_p;                           /* 0: off */
    double repetition_penalty;
    double presence_penalty;                /* 0: off */
    int64_t max_new_tokens;                 /* -1 when absent */
} qvl_gen_config;

/* transformers' GenerationConfig defaults, no stop tokens. */
void qvl_gen_config_defaults(qvl_gen_config *out);

/* Read path. A file that does not exist returns QVL_E_NOT_FOUND (with *out set to the
 * defaults) so the caller can decide whether that matters; unreadable files are QVL_E_IO,
 * malformed JSON QVL_E_PARSE, wrong types or values QVL_E_INVALID. */
qvl_status qvl_gen_config_load(const char *path, qvl_gen_config *out, qvl_error *err);

/* Parse JSON text of len bytes; path only names the source in messages. */
qvl_status qvl_gen_config_parse(const char *json, size_t len, const char *path, qvl_gen_config *out,
                                qvl_error *err);

/* True when id is one of the stop tokens. */
bool qvl_gen_config_is_eos(const qvl_gen_config *cfg, int32_t id);

/* Sampler settings for this config: do_sample false gives temperature 0 (greedy). The seed
 * and n_valid are left as *p had them (fill p with qvl_sampling_params_default first). */
void qvl_gen_config_sampling_params(const qvl_gen_config *cfg, qvl_sampling_params *p);

#ifdef __cplusplus
}
#endif
#endif
