/* The model load of qvl run (run_load.h). */
#include "run_load.h"

#include <stdio.h>

#include "engine_answer.h"
#include "qvl/qwen3vl_model.h"

typedef struct convert_watch {
    run_progress *p;
    const char *to;
    size_t total;
} convert_watch;

/* On the engine thread while the main thread waits for the load. */
static void on_convert(size_t done, size_t total, void *user) {
    convert_watch *w = user;
    w->total = total;
    run_progress_update(w->p, "converting weights to %s: %zu/%zu tensors", w->to, done, total);
}

qvl_status run_load_engine(run_session *s, qvl_engine_options *o, bool to_gguf, qvl_error *err) {
    const run_args *a = s->a;
    convert_watch w = {s->progress, a->weights ? a->weights : "plugins.yaml's weights", 0};
    o->on_convert = on_convert;
    o->convert_user = &w;
    qvl_status st = engine_answer_open(a, &s->be, o, s->progress, &s->timings, &s->engine, err);
    if (st != QVL_OK || w.total == 0 || !a->weights || a->quiet) return st;
    qvl_model_load_stats ls;
    qvl_model_get_load_stats(qvl_engine_model(s->engine), &ls);
    if (ls.bind_seconds > RUN_CONVERT_TIP_SECONDS || a->verbose)
        fprintf(stderr, "tip: qvl quantize -m %s --weights %s --out %s saves this step (%zu "
                "tensors converted in %.1f s at every load)\n", a->model, a->weights,
                to_gguf ? "OUT.gguf" : "DIR2", w.total, ls.bind_seconds);
    return st;
}
