/* Fuzz target: generation_config.json (qvl_gen_config_parse) and what is derived from it. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_check.h"
#include "qvl/gen_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_gen_config cfg;
    qvl_error err = {0};
    qvl_status s =
        qvl_gen_config_parse((const char *)data, size, "fuzz/generation_config.json", &cfg, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        return 0;
    }
    FUZZ_CHECK(cfg.n_eos >= 0 && cfg.n_eos <= QVL_GEN_MAX_EOS);
    for (int32_t i = 0; i < cfg.n_eos; i++) FUZZ_CHECK(qvl_gen_config_is_eos(&cfg, cfg.eos_token_ids[i]));
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    qvl_gen_config_sampling_params(&cfg, &p);
    return 0;
}
