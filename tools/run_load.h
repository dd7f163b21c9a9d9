/* qvl run's model load: the progress line, what a --weights conversion is doing, and the tip
 * that qvl quantize saves that step. */
#ifndef QVL_TOOLS_RUN_LOAD_H
#define QVL_TOOLS_RUN_LOAD_H

#include "qvl/qwen3vl_model.h"
#include "run_session.h"

/* A conversion at load slower than this many seconds ends with the tip (-v: always). */
#define RUN_CONVERT_TIP_SECONDS 3.0

/* qvl_model_open(a->model, mo) into s->m, timed into s->timings.load_seconds. mo->on_convert
 * is set here. to_gguf: the model is a GGUF file (the tip names a GGUF output then). */
qvl_status run_load_model(run_session *s, qvl_model_options *mo, bool to_gguf, qvl_error *err);

#endif
