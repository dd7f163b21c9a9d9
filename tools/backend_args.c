/* Backend choice and placement options onto qvl_model_options (backend_args.h). */
#include "backend_args.h"

#include <stdio.h>

void backend_args_apply(backend_args *b, qvl_model_options *mo) {
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
    mo->backend_options = n ? &b->overlay : NULL;
    mo->gpu_layers = b->gpu_layers;
    mo->cpu_backend_name = b->cpu_backend;
    mo->vision_backend_name = b->vision_backend;
}
