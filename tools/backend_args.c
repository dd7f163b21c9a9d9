/* Backend choice and placement options onto qvl_model_options (backend_args.h). */
#include "backend_args.h"
#include "qvl/qwen3vl_model.h"

#include <stdio.h>

const qvl_options *backend_args_options(backend_args *b) {
    size_t n = 0;
    if (b->threads_seen) {
        snprintf(b->threads_text, sizeof b->threads_text, "%lld", (long long)b->threads);
        b->keys[n] = "threads";
        b->values[n++] = b->threads_text;
    }
    if (b->gpu_mem_mib > 0) {
        snprintf(b->mem_text, sizeof b->mem_text, "%lld", (long long)b->gpu_mem_mib);
        b->keys[n] = "memory_limit_mib";
        b->values[n++] = b->mem_text;
    }
    b->overlay = (qvl_options){n, b->keys, b->values};
    return n ? &b->overlay : NULL;
}

void backend_args_apply(backend_args *b, struct qvl_model_options *mo) {
    mo->backend_options = backend_args_options(b);
    mo->gpu_layers = b->gpu_layers;
    mo->cpu_backend_name = b->cpu_backend;
    mo->vision_backend_name = b->vision_backend;
}
