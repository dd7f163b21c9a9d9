/* The sampling flags of qvl run and qvl chat laid over generation_config.json's settings (the
 * engine's defaults), in one place for both. */
#ifndef QVL_TOOLS_RUN_SAMPLING_H
#define QVL_TOOLS_RUN_SAMPLING_H

#include "chat_session.h"
#include "qvl/sampling.h"

/* Default of --repeat-last-n, llama.cpp's. */
#define RUN_REPEAT_LAST_N_DEFAULT 64

/* The flags in `seen` replace p's settings; --repeat-last-n sets p->penalty_window (-1: the
 * whole context; 0: no penalties at all, as llama.cpp). */
void run_sampling_apply(const run_args *a, const chat_flags *seen, qvl_sampling_params *p);

#endif
