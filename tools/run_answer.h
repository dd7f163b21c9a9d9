/* qvl run's answer on the engine with one slot (run_answer is declared in run_session.h): the
 * progress lines of the vision encoder (vision tokens done / total, each picture's time in
 * the timings) and of the prefill (tokens done / total, and what the running step adds). */
#ifndef QVL_TOOLS_RUN_ANSWER_H
#define QVL_TOOLS_RUN_ANSWER_H

#include "qvl/engine.h"
#include "run_session.h"

/* The observer of s's engine: it draws s->progress and fills s->timings' picture times. */
void run_answer_observer(run_session *s, qvl_engine_observer *o);

#endif
