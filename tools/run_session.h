/* What qvl run needs once the command line is parsed: the settings, the engine with one slot
 * (as qvl chat: chat_session.h), and one answer from prompt ids to streamed text. */
#ifndef QVL_TOOLS_RUN_SESSION_H
#define QVL_TOOLS_RUN_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "chat_session.h"
#include "qvl/chat.h"
#include "qvl/engine.h"
#include "qvl/tokenizer.h"
#include "run_args.h"
#include "run_images.h"
#include "run_progress.h"

typedef struct run_session {
    const run_args *a;
    const chat_flags *seen;  /* which sampling flags were given */
    backend_args be;         /* -t etc. laid over plugins.yaml (outlives the engine) */
    qvl_engine *engine;      /* one slot (engine_answer.h) */
    char *grammar;           /* --json / --json-schema / --grammar as GBNF, else NULL */
    uint64_t seed;
    const run_images *im;    /* the prompt's pictures and videos (the progress names them) */
    int64_t vision_done, vision_total; /* vision tokens encoded / to encode */
    double vision_item_start;  /* run_now_seconds() when the item being encoded began */
    int64_t vision_item_tokens; /* its prompt tokens */
    bool vision_item_video;
    double prefill_step_start; /* run_now_seconds() when the running prefill chunk began */
    double vision_seconds;   /* the encoder's time, which the job counts as prefill */
    run_progress *progress;
    run_timings timings;
    bool interrupted; /* the answer ended at a Ctrl-C (run_interrupt.h) */
} run_session;

/* One answer on the engine: prompt ids in (holding im's pads when im has items), answer
 * streamed out (text, or ids with --print-ids), --dump-logits written. A full context is
 * QVL_E_LIMIT naming --ctx (with -n -1 a note on stderr). */
qvl_status run_answer(run_session *s, const int32_t *ids, int64_t n, qvl_error *err);

/* The user's message: the pictures at "<image>" markers in the text when it has any (as many
 * markers as pictures), else all pictures first and then the text. */
qvl_status run_add_user_message(qvl_chat *chat, const char *text, size_t n_images,
                                qvl_error *err);
size_t run_count_markers(const char *text);
/* With videos: every picture and video, in command-line order, then the text (<image>
 * markers are refused). */
qvl_status run_add_user_media(qvl_chat *chat, const char *text, const run_images *im,
                              qvl_error *err);

/* Tokenize rendered text and give each image placeholder its token count (video pads stay
 * one per frame group: run_videos_fit, run_videos_expand). */
qvl_status run_encode_text(qvl_tokenizer *tok, const char *text, const run_images *im,
                           int32_t **ids, int64_t *n, qvl_error *err);

#endif
