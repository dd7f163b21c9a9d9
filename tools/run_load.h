/* qvl run's engine start: the model's load with its progress line, what a --weights
 * conversion is doing, and the tip that qvl quantize saves that step. */
#ifndef QVL_TOOLS_RUN_LOAD_H
#define QVL_TOOLS_RUN_LOAD_H

#include <stdbool.h>

#include "run_session.h"

/* A conversion at load slower than this many seconds ends with the tip (-v: always). */
#define RUN_CONVERT_TIP_SECONDS 3.0

/* A one-slot engine into s->engine (engine_answer.h), load timed into s->timings.load_seconds,
 * with `o`'s observer and placement hint (image_max_tokens); on_convert is set here. to_gguf:
 * the model is a GGUF file (the tip names a GGUF output then). */
qvl_status run_load_engine(run_session *s, qvl_engine_options *o, bool to_gguf, qvl_error *err);

#endif
