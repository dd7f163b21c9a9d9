/* What qvl run needs once the command line is parsed: the settings, the loaded pieces, and one
 * answer from prompt ids to streamed text (qvl chat runs on the engine: chat_session.h). */
#ifndef QVL_TOOLS_RUN_SESSION_H
#define QVL_TOOLS_RUN_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/chat.h"
#include "qvl/gen_config.h"
#include "qvl/grammar_sampler.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"
#include "qvl/text_stream.h"
#include "qvl/tokenizer.h"
#include "run_args.h"
#include "run_images.h"
#include "run_progress.h"

/* What the generation callback needs. */
typedef struct run_output {
    const qvl_tokenizer *tok;
    bool print_text;
    qvl_text_stream stream;
    int32_t *ids;
    size_t n_ids, cap_ids;
    bool oom;
} run_output;

typedef struct run_session {
    const run_args *a;
    qvl_model *m;
    qvl_sampler *sampler;
    qvl_grammar_sampler *grammar; /* --json / --json-schema / --grammar, else NULL */
    const qvl_gen_config *gen;
    qvl_tokenizer *tok;
    run_output out;
    run_progress *progress;
    run_timings timings;
    bool interrupted; /* the answer ended at a Ctrl-C (run_interrupt.h) */
} run_session;

/* One generation: prompt ids in (with im's pictures when im is not NULL), answer streamed out.
 * A full context is QVL_E_LIMIT naming --ctx. */
qvl_status run_answer(run_session *s, const int32_t *ids, int64_t n, bool feed_last,
                      const run_images *im, qvl_error *err);

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
