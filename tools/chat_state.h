/* What qvl chat's parts share (chat_session.h): the engine, the conversation, the answer being
 * generated. Internal to run_chat.c and chat_answer.c. */
#ifndef QVL_TOOLS_CHAT_STATE_H
#define QVL_TOOLS_CHAT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_pictures.h"
#include "chat_session.h"
#include "qvl/engine.h"
#include "run_progress.h"

typedef struct chat_turn {
    char *user;        /* the message */
    char *reply;       /* NULL while it is being answered */
    chat_picture *pics; /* in prompt order */
    size_t n_pics;
} chat_turn;

typedef struct chat_state {
    const run_args *a;
    const chat_flags *seen;
    backend_args be;            /* -t etc. laid over plugins.yaml (outlives the engine) */
    qvl_engine *engine;
    qvl_picture_rules *rules;   /* NULL: the model has no vision encoder */
    const qvl_video_rules *video_rules; /* the engine's; NULL: the model takes no videos */
    char cap_what[128];         /* the pictures' upper size bound, for the per-picture line */
    run_progress *progress;
    int64_t job_tokens;         /* the prompt tokens of the job running (its progress line) */
    double step_start;          /* run_now_seconds() when its running picture or chunk began */
    bool step_video;            /* the item being encoded is a video */
    run_timings timings;
    uint64_t seed;              /* the base seed; job k samples with seed + k */
    char *grammar;              /* --json, --json-schema, --grammar as GBNF (NULL: none):
                                 * every answer follows it */
    uint64_t n_jobs;
    chat_turn *turns;           /* the last one is being answered during a turn */
    size_t n_turns, cap_turns;
    chat_turn pending;          /* pictures attached to the next message */
    /* The answer being generated, over every job it took (a full context starts another). */
    int32_t *ids;
    size_t n_ids, cap_ids;
    char *text;
    size_t text_len, text_cap;
} chat_state;

/* chat_answer.c */
/* Start the engine and wait for the model (errors: the loading's own one-line message). */
qvl_status chat_engine_open(chat_state *cs, qvl_error *err);
/* The answer to the last turn (its reply NULL): streamed, Ctrl-C stops it, a full context
 * drops the oldest turns and goes on. Sets the turn's reply. The user's mistakes (a message
 * that does not fit, a picture that cannot be read) are told in one line and the turn is
 * taken back: QVL_OK with *sent false. Errors end the chat. */
qvl_status chat_send(chat_state *cs, bool *sent, qvl_error *err);

/* run_chat.c */
void chat_turn_free(chat_turn *t);
/* Forget turns [0, n) (the system message stays), saying so on stderr. */
void chat_drop_oldest(chat_state *cs, size_t n);

#endif
