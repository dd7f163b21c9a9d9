/* What qvl chat and qvl run share on the engine (qvl/engine.h) with one slot: starting it from
 * the command line's settings, and one job streamed to stdout while Ctrl-C may cancel it. */
#ifndef QVL_TOOLS_ENGINE_ANSWER_H
#define QVL_TOOLS_ENGINE_ANSWER_H

#include <stdbool.h>

#include "backend_args.h"
#include "qvl/engine.h"
#include "run_args.h"
#include "run_progress.h"

/* Start a one-slot engine with a's model, context, prefill batch and placement flags, showing
 * "loading MODEL" on p while it loads (its time into t->load_seconds), and print the
 * placement line when -ngl was given (not with --quiet). be (-t etc. laid over plugins.yaml,
 * threads_seen set by the caller) must outlive the engine. `extra` (NULL: none) gives what
 * only one front end sets: the observer, image_max_tokens, on_convert, tokenizer_optional.
 * Loading's own one-line message on failure. */
qvl_status engine_answer_open(const run_args *a, backend_args *be,
                              const qvl_engine_options *extra, run_progress *p, run_timings *t,
                              qvl_engine **out, qvl_error *err);

typedef struct engine_stream {
    bool print_text;             /* write the answer's text to stdout as it becomes final */
    run_progress *progress;      /* the step shown until the first token is erased then */
    run_timings *timings;        /* first token, prefill and decode figures added */
    bool (*interrupted)(void);   /* Ctrl-C: the job is cancelled (it ends CANCELLED) */
} engine_stream;

/* Submit j and stream its answer until it finishes; j's output is then final. The caller may
 * show a progress step before (it is ended at the first token). An engine error or a deadline
 * is that job's one line. */
qvl_status engine_answer_stream(qvl_engine *e, qvl_job *j, const engine_stream *how,
                                qvl_error *err);

#endif
