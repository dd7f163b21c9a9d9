/* Fuzz target: config.json (qvl_qwen3vl_config_parse), then the tensor list a parsed config
 * implies (qvl_qwen3vl_tensor_specs), whose shape arithmetic comes straight from the file. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_check.h"
#include "qvl/qwen3vl_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_qwen3vl_config cfg;
    qvl_error err = {0};
    qvl_status s = qvl_qwen3vl_config_parse((const char *)data, size, "fuzz/config.json", &cfg, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        return 0;
    }
    qvl_tensor_spec *specs = NULL;
    size_t n = 0;
    s = qvl_qwen3vl_tensor_specs(&cfg, &specs, &n, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(specs[i].ndim >= 1 && specs[i].ndim <= 5);
        for (int d = 0; d < specs[i].ndim; d++) FUZZ_CHECK(specs[i].shape[d] > 0);
    }
    free(specs);
    return 0;
}
