/* -c 0: the model's trained context, capped by memory (qvl run and qvl chat). */
#ifndef QVL_TOOLS_RUN_CONTEXT_H
#define QVL_TOOLS_RUN_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/model_files.h"

/* Largest --ctx (the flag's bound). */
#define RUN_CTX_MAX ((int64_t)1 << 24)

/* *ctx becomes max_position_embeddings from the model's config, lowered so that a KV cache of
 * kv_type (NULL: f16) takes at most half of the memory available now ($QVL_MEMORY_AVAILABLE_MIB
 * when set, else /proc/meminfo's MemAvailable), a multiple of 256 tokens once capped. One line
 * on stderr says what was chosen and why (unless quiet). */
qvl_status run_context_auto(const qvl_model_files *files, const char *kv_type, bool quiet,
                            int64_t *ctx, qvl_error *err);

#endif
