/* The model side of qvl run: the vision encoder one picture at a time (so each has its own
 * time) and generation with the prompt prefilled in batches (so a long prompt shows progress,
 * tokens done / total). */
#ifndef QVL_TOOLS_RUN_ANSWER_H
#define QVL_TOOLS_RUN_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/gen_config.h"
#include "qvl/generate.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"
#include "run_images.h"
#include "run_progress.h"
#include "run_session.h"

/* Encode im's decoded pictures into im->feats; adds each picture's time to t->image_seconds
 * (which must hold im->n entries). */
qvl_status run_encode_images(qvl_model *m, run_images *im, run_progress *p, run_timings *t,
                             qvl_error *err);

typedef struct run_prompt {
    const int32_t *ids;
    int64_t n;
    const run_images *images; /* NULL: no pictures in this prompt (their pads are in ids) */
    int64_t batch;            /* prompt tokens per prefill step (> 0) */
    float *prompt_logits;     /* optional [n, vocab] */
} run_prompt;

/* qvl_generate with the prompt split in batches of at most prompt->batch tokens: every batch
 * but the last goes through the model here (the sampler's history sees it in order), the last
 * through qvl_generate. The same tokens as one prefill step: the cache holds exactly what one
 * step would have written, only computed in parts. Adds to t's prefill and decode figures.
 * g->cancel is also asked between prefill batches: true there ends with r->stop
 * QVL_STOP_CANCELLED, nothing generated and the cache holding the batches done. */
qvl_status run_generate(qvl_model *m, const run_prompt *prompt, const qvl_generation *g,
                        run_progress *p, run_timings *t, qvl_generation_result *r,
                        qvl_error *err);

/* One generated token into o: its id appended (o->oom on failure), its text streamed when o
 * prints text (special tokens are never printed). */
void run_output_token(run_output *o, int32_t id);

#endif
