/* What qvl run/chat tells the user while it works: a progress line on stderr for each long step
 * (only when stderr is a terminal and not --quiet), and the timings summary at the end. */
#ifndef QVL_TOOLS_RUN_PROGRESS_H
#define QVL_TOOLS_RUN_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h" /* QVL_PRINTF */

struct qvl_model;

/* A step in progress: "label ... 2.3 s", drawn at once and redrawn in place four times a second
 * by a helper thread until run_progress_end erases it. Does nothing when off. */
typedef struct run_progress run_progress;

/* enabled: draw at all (the caller decides: stderr is a TTY and no --quiet). NULL on OOM. */
run_progress *run_progress_create(bool enabled);
void run_progress_free(run_progress *p);
bool run_progress_on(const run_progress *p);
/* Start a step (ends any step still shown). */
void run_progress_begin(run_progress *p, const char *fmt, ...) QVL_PRINTF(2, 3);
/* Change the label of the step shown (e.g. "prefill 512/4030 tokens"). */
void run_progress_update(run_progress *p, const char *fmt, ...) QVL_PRINTF(2, 3);
/* The same, shown at the next redraw (within a quarter second) instead of at once: for a
 * label that changes after every step of a long computation. */
void run_progress_note(run_progress *p, const char *fmt, ...) QVL_PRINTF(2, 3);
/* Erase the line. */
void run_progress_end(run_progress *p);

double run_now_seconds(void);

/* What the summary reports; seconds are wall-clock. */
typedef struct run_timings {
    double start;          /* run_now_seconds() when the command began */
    double load_seconds;   /* qvl_model_open */
    size_t n_images;
    double *image_seconds; /* per picture or video: the vision encoder (n_images) */
    const bool *is_video;  /* [n_images]: which items are videos; NULL: all pictures */
    int64_t prefill_tokens;
    double prefill_seconds;
    double first_token_at; /* run_now_seconds() of the first generated token; 0 = none */
    int64_t decode_tokens;
    double decode_seconds;
    int64_t mask_sets;     /* grammar masks computed (one per constrained token); 0 = no grammar */
    double mask_seconds;   /* their time in all, overlapped with decode steps or not */
    double mask_waited;    /* the part of mask_seconds the decode loop waited for */
} run_timings;

/* The summary, a few lines "timings: ..." on stderr: load, vision per picture, prefill tok/s,
 * time to first token (from the start of the command), decode tok/s and tokens generated,
 * the grammar mask's time (all, and what the decode loop waited for) when a grammar ran,
 * peak resident memory and, for a backend with memory of its own, its device memory in use
 * (m NULL: no backend line, no memory lines). */
void run_timings_print(const run_timings *t, const struct qvl_model *m);
/* One line per backend the model uses: weights, KV cache, activations and, where the device
 * reports its memory, the backend's own scratch. */
void run_memory_print(const struct qvl_model *m);

#endif
