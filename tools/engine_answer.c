/* The engine under qvl chat and qvl run (engine_answer.h). */
#include "engine_answer.h"

#include <stdio.h>
#include <string.h>

/* How often a wait for the answer looks at Ctrl-C: the engine wakes the wait for every new
 * piece of text, so this only bounds how long a Ctrl-C waits while no text comes (prefill). */
#define WAIT_MS 100

qvl_status engine_answer_open(const run_args *a, backend_args *be,
                              const qvl_engine_options *extra, run_progress *p, run_timings *t,
                              qvl_engine **out, qvl_error *err) {
    qvl_engine_options o = {0};
    if (extra) o = *extra;
    o.model = a->model;
    o.mmproj = a->mmproj;
    /* queue 1: the next job may be submitted while the engine thread is still counting the
     * slot the last one left idle. */
    o.slots = 1;
    o.queue = 1;
    o.ctx = a->ctx;
    o.prefill_chunk = a->batch;
    o.backend = a->backend;
    o.plugins = a->plugins;
    o.weights = a->weights;
    o.kv_type = a->kv_type;
    o.gpu_layers = be->gpu_layers;
    o.cpu_backend = be->cpu_backend;
    o.vision_backend = be->vision_backend;
    o.no_fuse = a->no_fuse;
    o.no_mmap = a->no_mmap;
    o.backend_options = backend_args_options(be);
    *out = NULL;
    run_progress_begin(p, "loading %s", a->model);
    const double t0 = run_now_seconds();
    qvl_engine *e = qvl_engine_start(&o, err);
    if (!e) {
        run_progress_end(p);
        return QVL_E_NOMEM;
    }
    qvl_engine_phase ph = qvl_engine_wait_loaded(e);
    t->load_seconds = run_now_seconds() - t0;
    run_progress_end(p);
    if (ph != QVL_ENGINE_READY) {
        qvl_status st = qvl_fail(err, QVL_E_INVALID, "%s", qvl_engine_error(e));
        qvl_engine_free(e);
        return st;
    }
    /* a split or an automatic choice is worth one line; everything on one backend is not */
    if (!a->quiet && be->gpu_layers) {
        char place[256];
        qvl_engine_placement(e, place, sizeof place);
        fprintf(stderr, "placement: %s\n", place);
    }
    *out = e;
    return QVL_OK;
}

qvl_status engine_answer_stream(qvl_engine *e, qvl_job *j, const engine_stream *how,
                                qvl_error *err) {
    if (qvl_engine_submit(e, j) != QVL_OK) {
        run_progress_end(how->progress);
        return qvl_fail(err, QVL_E_INVALID, "the engine does not take the prompt");
    }
    run_timings *t = how->timings;
    bool started = false;
    size_t printed = 0;
    char chunk[4096];
    for (;;) {
        qvl_job_wait(j, QVL_WAIT_TEXT, printed, WAIT_MS);
        if (how->interrupted && how->interrupted()) atomic_store(&j->cancel, true);
        pthread_mutex_lock(&j->mu);
        const bool done = j->finish != QVL_JOB_RUNNING;
        const bool now_started = j->started;
        size_t n = j->visible > printed ? j->visible - printed : 0;
        if (n > sizeof chunk) n = sizeof chunk;
        if (n > 0) memcpy(chunk, j->text + printed, n);
        pthread_mutex_unlock(&j->mu);
        if (now_started && !started) {
            started = true;
            run_progress_end(how->progress);
            if (t->first_token_at == 0) t->first_token_at = run_now_seconds();
        }
        if (n > 0 && how->print_text) {
            fwrite(chunk, 1, n, stdout);
            fflush(stdout);
        }
        printed += n;
        if (done && n == 0) break;
    }
    run_progress_end(how->progress);
    /* Finished: the engine writes the job no more. */
    if (j->finish == QVL_FINISH_ERROR || j->finish == QVL_FINISH_TIMEOUT)
        return qvl_fail(err, QVL_E_INVALID, "%s", j->error);
    t->prefill_tokens += j->n_ids - j->cached_tokens;
    t->prefill_seconds += j->prefill_seconds;
    t->decode_tokens += j->completion_tokens;
    t->decode_seconds += j->decode_seconds;
    return QVL_OK;
}
