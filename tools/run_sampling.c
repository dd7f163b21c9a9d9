/* Sampling flags over generation_config.json (run_sampling.h). */
#include "run_sampling.h"

void run_sampling_apply(const run_args *a, const chat_flags *f, qvl_sampling_params *p) {
    if (f->temp) p->temperature = (float)a->temp;
    if (f->top_k) p->top_k = (int32_t)a->top_k;
    if (f->top_p) p->top_p = (float)a->top_p;
    if (f->min_p) p->min_p = (float)a->min_p;
    if (f->repeat_penalty) p->repetition_penalty = (float)a->repeat_penalty;
    if (f->presence_penalty) p->presence_penalty = (float)a->presence_penalty;
    if (f->frequency_penalty) p->frequency_penalty = (float)a->frequency_penalty;
    if (a->repeat_last_n == 0) { /* an empty window: no token is penalised */
        p->repetition_penalty = 1.0f;
        p->presence_penalty = p->frequency_penalty = 0.0f;
    }
    /* A window as long as the context holds every token there is: the sampler's whole history
     * (0), which needs no ring of the window's length. */
    p->penalty_window = a->repeat_last_n < 0 || a->repeat_last_n >= a->ctx ? 0
                                                                           : (int32_t)a->repeat_last_n;
}
