/* qvl chat: a conversation on the engine (qvl/engine.h) with one slot. Each message submits
 * the whole conversation as one prompt; the engine's prefix reuse keeps the earlier turns in
 * the slot's KV cache, so only the new turn is prefilled and no picture is encoded twice. */
#ifndef QVL_TOOLS_CHAT_SESSION_H
#define QVL_TOOLS_CHAT_SESSION_H

#include <stdbool.h>
#include <stddef.h>

#include "run_args.h"

/* Which sampling flags were on the command line (the rest come from generation_config.json),
 * and whether -t was. */
typedef struct chat_flags {
    bool temp, top_k, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty, seed;
    bool threads;
} chat_flags;

/* The chat to its end; returns the exit status (130 after Ctrl-C at the prompt). The --image
 * files go with the first message. `start`: run_now_seconds() when the command began. */
int run_chat(const run_args *a, const chat_flags *seen, const char *const *images,
             size_t n_images, double start);

#endif
