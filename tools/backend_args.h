/* The command-line options that choose and shape backends, shared by qvl run/chat, qvl serve
 * and qvl-bench: -t (the backends' `threads` option), --gpu-mem-mib (cuda_sm61's
 * `memory_limit_mib`), -ngl/--gpu-layers, --cpu-backend, --vision-backend. */
#ifndef QVL_TOOLS_BACKEND_ARGS_H
#define QVL_TOOLS_BACKEND_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/backend.h" /* qvl_options */

typedef struct backend_args {
    const char *gpu_layers, *cpu_backend, *vision_backend;
    int64_t threads;     /* valid when threads_seen */
    int64_t gpu_mem_mib; /* 0: not given */
    bool threads_seen;
    /* the options laid over plugins.yaml (backend_args_apply points the model options here) */
    char threads_text[24], mem_text[24];
    const char *keys[2], *values[2];
    qvl_options overlay;
} backend_args;

/* The cli_opt entries of the placement options (the threads entry stays with each tool). */
#define BACKEND_ARGS_CLI_OPTS(b)                                                                \
    {"gpu-layers", 0, CLI_STRING, &(b)->gpu_layers, "N|auto|all", "decoder layers on the primary backend: the last N plus the output head (the rest and the token embedding on --cpu-backend); auto fits what the GPU's free memory holds; default all", 0, 0, false}, \
    {"cpu-backend", 0, CLI_STRING, &(b)->cpu_backend, "NAME", "backend of the layers off the primary (default cpu_avx2, else reference)", 0, 0, false}, \
    {"vision-backend", 0, CLI_STRING, &(b)->vision_backend, "NAME", "backend of the vision tower (default: the primary)", 0, 0, false}, \
    {"gpu-mem-mib", 0, CLI_INT, &(b)->gpu_mem_mib, "MIB", "GPU memory the GPU backend may use (its memory_limit_mib option): stand in for a smaller card", 1, 1 << 30, false}

/* The options laid over plugins.yaml (-t, --gpu-mem-mib), NULL when none was given (b must
 * outlive their use). */
const qvl_options *backend_args_options(backend_args *b);
/* Fills the placement fields and the option overlay of a model's options from b (b must
 * outlive mo's use). */
struct qvl_model_options;
void backend_args_apply(backend_args *b, struct qvl_model_options *mo);

#endif
