/* Opening a Qwen3-VL checkpoint: the tensor list comes from the config, and a tied model's
 * stored lm_head.weight is ignored as transformers ignores it. */
#include "qvl/weights.h"

#include <stdlib.h>

qvl_status qvl_weights_open(const char *model_dir, const qvl_qwen3vl_config *cfg,
                            qvl_weights **out, qvl_error *err) {
    if (!model_dir || !cfg || !out)
        return qvl_fail(err, QVL_E_INVALID, "weights: missing argument");
    *out = NULL;
    qvl_tensor_spec *specs = NULL;
    size_t n = 0;
    qvl_status s = qvl_qwen3vl_tensor_specs(cfg, &specs, &n, err);
    if (s != QVL_OK) return s;
    static const char *const tied_extra[] = {"lm_head.weight"};
    s = qvl_weights_open_specs(model_dir, specs, n, tied_extra,
                               cfg->tie_word_embeddings ? 1 : 0, out, err);
    free(specs);
    return s;
}
