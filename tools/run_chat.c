/* qvl chat: one message per line, the KV cache reused across turns.
 *
 * The conversation is kept as turns (a user message with its pictures, and the reply). While
 * the cache holds exactly the rendered conversation, a new message appends only its own
 * tokens (qvl_chat_render_continuation). When it does not fit, the oldest turns are dropped
 * (the system message stays) until the rest takes at most half the context, and the cache is
 * rebuilt from the rendering of what is left: the same idea as llama.cpp's context shift, but
 * re-prefilled rather than re-rotated, so every position stays what one prompt would give. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_images.h"
#include "chat_input.h"
#include "run_answer.h"
#include "run_session.h"

typedef struct chat_turn {
    char *user;        /* the message */
    char *reply;       /* NULL while it is being answered */
    run_images *parts; /* its pictures: each /image one part, the --image files one part */
    char **owned;      /* per part: the /image path it points to (NULL for --image) */
    size_t n_parts;
} chat_turn;

typedef struct chat_state {
    run_session *s;
    chat_turn *turns; /* the conversation; the last one is being answered during a turn */
    size_t n_turns, cap_turns;
    chat_turn pending; /* pictures attached to the next message */
    bool cache_ok;     /* the cache holds the rendered conversation up to the last reply */
} chat_state;

static void turn_free(chat_turn *t) {
    for (size_t i = 0; i < t->n_parts; i++) {
        run_images_free(&t->parts[i]);
        free(t->owned[i]);
    }
    free(t->parts);
    free(t->owned);
    free(t->user);
    free(t->reply);
    memset(t, 0, sizeof *t);
}

static void say(const char *fmt, const char *arg) {
    fprintf(stderr, "qvl chat: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
}

static void print_help(void) {
    fprintf(stderr,
            "  /image PATH   attach a picture to the next message (repeatable)\n"
            "  /clear        forget the conversation (and the attached pictures)\n"
            "  /help         this list\n"
            "  /exit         end the chat (also /quit, Ctrl-D, Ctrl-C at the prompt)\n"
            "  Ctrl-C while answering stops the answer; a line starting with // sends it with "
            "one / less\n");
}

/* ---- the conversation as a prompt ------------------------------------------------------------ */

/* System message and turns [from, n_turns): every reply present is added. */
static qvl_status build_chat(const chat_state *cs, size_t from, qvl_chat **out, qvl_error *err) {
    qvl_chat *chat = NULL;
    qvl_status st = qvl_chat_create(&chat, err);
    const char *sys = cs->s->a->system;
    if (st == QVL_OK && sys) st = qvl_chat_add(chat, QVL_CHAT_SYSTEM, sys, err);
    for (size_t i = from; st == QVL_OK && i < cs->n_turns; i++) {
        const chat_turn *t = &cs->turns[i];
        size_t n_images = 0;
        for (size_t p = 0; p < t->n_parts; p++) n_images += t->parts[p].n;
        st = run_add_user_message(chat, t->user, n_images, err);
        if (st == QVL_OK && t->reply) st = qvl_chat_add(chat, QVL_CHAT_ASSISTANT, t->reply, err);
    }
    if (st != QVL_OK) qvl_chat_free(chat);
    else *out = chat;
    return st;
}

/* The pictures of turns [from, to) as one run_images. */
static qvl_status join_turns(const chat_state *cs, size_t from, size_t to, bool with_features,
                             run_images *out, qvl_error *err) {
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += cs->turns[i].n_parts;
    run_images **parts = malloc((n + 1) * sizeof *parts);
    if (!parts) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    n = 0;
    for (size_t i = from; i < to; i++)
        for (size_t p = 0; p < cs->turns[i].n_parts; p++) parts[n++] = &cs->turns[i].parts[p];
    qvl_status st = chat_images_join(parts, n, with_features, out, err);
    free(parts);
    return st;
}

/* Prompt ids of turns [from, n_turns) from scratch, ending with the generation prompt. */
static qvl_status full_prompt(const chat_state *cs, size_t from, int32_t **ids, int64_t *n,
                              qvl_error *err) {
    qvl_chat *chat = NULL;
    char *text = NULL;
    run_images im = {0};
    qvl_status st = build_chat(cs, from, &chat, err);
    if (st == QVL_OK) st = qvl_chat_render(chat, true, &text, NULL, err);
    if (st == QVL_OK) st = join_turns(cs, from, cs->n_turns, false, &im, err);
    if (st == QVL_OK) st = run_encode_text(cs->s->tok, text, &im, ids, n, err);
    run_images_free(&im);
    free(text);
    qvl_chat_free(chat);
    return st;
}

/* What a full prompt becomes: the ids of turns [from, ...) plus the reply so far. Picks `from`:
 * 0 when everything fits (and nothing has to go), else the oldest turns go until the rest takes
 * at most half the context. *fits false: even the current turn alone does not fit. */
static qvl_status plan_rebuild(chat_state *cs, bool must_drop, int64_t n_reply, size_t *from,
                               int32_t **ids, int64_t *n, bool *fits, qvl_error *err) {
    const int64_t ctx = qvl_model_ctx(cs->s->m);
    const size_t cur = cs->n_turns - 1;
    size_t d = must_drop ? 1 : 0;
    *fits = false;
    for (; d <= cur; d++) {
        free(*ids);
        *ids = NULL;
        qvl_status st = full_prompt(cs, d, ids, n, err);
        if (st != QVL_OK) return st;
        int64_t total = *n + n_reply; /* at least one position left for the next token */
        bool shifting = must_drop || d > 0;
        if (total < ctx && (!shifting || total <= ctx / 2 || d == cur)) {
            *fits = true;
            break;
        }
    }
    *from = d;
    return QVL_OK;
}

/* Forget turns [0, from) (the caller then rebuilds the cache). */
static void drop_oldest(chat_state *cs, size_t from) {
    if (from == 0) return;
    for (size_t i = 0; i < from; i++) turn_free(&cs->turns[i]);
    memmove(cs->turns, cs->turns + from, (cs->n_turns - from) * sizeof *cs->turns);
    cs->n_turns -= from;
    fprintf(stderr, "qvl chat: the context of %lld tokens is full: the %zu oldest exchange%s "
            "dropped%s\n", (long long)qvl_model_ctx(cs->s->m), from,
            from == 1 ? " is" : "s are", cs->s->a->system ? " (the system prompt is kept)" : "");
}

/* ---- generation --------------------------------------------------------------------------- */

static void on_token(int32_t id, void *user) {
    run_output_token(&((chat_state *)user)->s->out, id);
}

static bool on_cancel(void *user) {
    run_output *o = &((chat_state *)user)->s->out;
    return chat_interrupted() || o->oom;
}

/* Generate after ids (appended to the cache). *in_cache: afterwards the cache holds ids and
 * every generated token. */
static qvl_status generate(chat_state *cs, const int32_t *ids, int64_t n, const run_images *im,
                           qvl_generation_result *r, bool *in_cache, qvl_error *err) {
    run_session *s = cs->s;
    const int64_t base = qvl_model_n_past(s->m);
    qvl_generation g = {.max_new = s->a->n_predict - (int64_t)s->out.n_ids, .stop = s->gen,
                        .sampler = s->sampler, .feed_last = true, .on_token = on_token,
                        .cancel = on_cancel, .user = cs};
    run_prompt pr = {.ids = ids, .n = n, .images = im, .batch = s->a->batch};
    qvl_status st = run_generate(s->m, &pr, &g, s->progress, &s->timings, r, err);
    if (st == QVL_OK && s->out.oom) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    *in_cache = qvl_model_n_past(s->m) == base + n + r->n_generated;
    return st;
}

/* The answer to the last turn, whose prompt ids (with im's pictures) follow the cache. */
static qvl_status answer(chat_state *cs, int32_t *ids, int64_t n, run_images *im,
                         qvl_error *err) {
    run_session *s = cs->s;
    s->out.n_ids = 0;
    s->out.oom = false;
    qvl_status st;
    for (;;) {
        qvl_generation_result r;
        bool in_cache = false;
        st = generate(cs, ids, n, im, &r, &in_cache, err);
        cs->cache_ok = st == QVL_OK && in_cache;
        free(ids);
        ids = NULL;
        run_images_free(im);
        if (st != QVL_OK || r.stop != QVL_STOP_CONTEXT || (int64_t)s->out.n_ids >= s->a->n_predict)
            break;
        /* The cache is full in the middle of the answer: older turns go, the rest is
         * prefilled again with the reply so far, and the answer goes on. */
        size_t from = 0;
        bool fits = false;
        st = plan_rebuild(cs, true, (int64_t)s->out.n_ids, &from, &ids, &n, &fits, err);
        if (st != QVL_OK) break;
        if (!fits) {
            qvl_text_stream_flush(&s->out.stream);
            fprintf(stderr, "\nqvl chat: the context of %lld tokens is full: the answer stops "
                    "here (raise --ctx)\n", (long long)qvl_model_ctx(s->m));
            break;
        }
        int32_t *all = realloc(ids, (size_t)(n + (int64_t)s->out.n_ids) * sizeof *all);
        if (!all) {
            st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
            break;
        }
        ids = all;
        memcpy(ids + n, s->out.ids, s->out.n_ids * sizeof *ids);
        n += (int64_t)s->out.n_ids;
        qvl_text_stream_flush(&s->out.stream);
        fflush(stdout);
        fputc('\n', stderr); /* the answer's line is open */
        drop_oldest(cs, from);
        st = join_turns(cs, 0, cs->n_turns, true, im, err);
        if (st != QVL_OK) break;
        qvl_model_truncate(s->m, 0);
        qvl_sampler_clear_history(s->sampler);
    }
    free(ids);
    qvl_text_stream_flush(&s->out.stream);
    if (st != QVL_OK) return st;
    if (s->out.print_text) fputc('\n', stdout);
    if (s->a->print_ids) {
        for (size_t i = 0; i < s->out.n_ids; i++) printf(i ? " %d" : "%d", s->out.ids[i]);
        printf("\n");
    }
    fflush(stdout);
    clearerr(stdout);
    chat_turn *t = &cs->turns[cs->n_turns - 1];
    /* Special tokens stay out of the kept text: a rebuilt prompt re-tokenizes it. */
    return qvl_tokenizer_decode(s->tok, s->out.ids, s->out.n_ids, true, &t->reply, NULL, err);
}

/* ---- one message ------------------------------------------------------------------------- */

/* Decode and encode the pictures of turn t not encoded yet; each one's time goes into the
 * timings summary. */
static qvl_status encode_turn(chat_state *cs, chat_turn *t, qvl_error *err) {
    run_session *s = cs->s;
    for (size_t p = 0; p < t->n_parts; p++) {
        run_images *im = &t->parts[p];
        if (im->n == 0 || im->feats.n_tokens == im->total_tokens) continue;
        double *grown = realloc(s->timings.image_seconds,
                                (s->timings.n_images + im->n + 1) * sizeof *grown);
        if (!grown) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        s->timings.image_seconds = grown;
        memset(grown + s->timings.n_images, 0, (im->n + 1) * sizeof *grown);
        run_timings part_timings = s->timings;
        part_timings.image_seconds = grown + s->timings.n_images;
        run_progress_begin(s->progress, "decoding %zu image(s)", im->n);
        qvl_status st = run_images_decode(im, err);
        run_progress_end(s->progress);
        if (st == QVL_OK) st = run_encode_images(s->m, im, s->progress, &part_timings, err);
        free(im->pixels);
        im->pixels = NULL;
        if (st != QVL_OK) return st;
        s->timings.n_images += im->n;
    }
    return QVL_OK;
}

/* Move pending pictures into a new turn for text. */
static qvl_status push_turn(chat_state *cs, const char *text, qvl_error *err) {
    if (cs->n_turns == cs->cap_turns) {
        size_t cap = cs->cap_turns ? 2 * cs->cap_turns : 8;
        chat_turn *grown = realloc(cs->turns, cap * sizeof *grown);
        if (!grown) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        cs->turns = grown;
        cs->cap_turns = cap;
    }
    chat_turn *t = &cs->turns[cs->n_turns];
    *t = cs->pending;
    memset(&cs->pending, 0, sizeof cs->pending);
    if (!(t->user = strdup(text))) {
        cs->pending = *t;
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    cs->n_turns++;
    return QVL_OK;
}

/* The new turn's prompt: only its own tokens after the cache when that holds the conversation,
 * else the whole conversation from scratch (what is dropped to make it fit is in *from). */
static qvl_status turn_prompt(chat_state *cs, int32_t **ids, int64_t *n, size_t *from,
                              bool *fits, qvl_error *err) {
    run_session *s = cs->s;
    const size_t cur = cs->n_turns - 1;
    *from = SIZE_MAX; /* continue the cache */
    if (cs->cache_ok && cur > 0 && qvl_model_n_past(s->m) > 0) {
        qvl_chat *chat = NULL;
        char *text = NULL;
        run_images im = {0};
        size_t index = 0; /* the message index of the new user message */
        qvl_status st = build_chat(cs, 0, &chat, err);
        if (st == QVL_OK) {
            index = qvl_chat_count(chat) - 1;
            st = qvl_chat_render_continuation(chat, index, true, &text, NULL, err);
        }
        if (st == QVL_OK) st = join_turns(cs, cur, cs->n_turns, false, &im, err);
        if (st == QVL_OK) st = run_encode_text(s->tok, text, &im, ids, n, err);
        run_images_free(&im);
        free(text);
        qvl_chat_free(chat);
        if (st != QVL_OK) return st;
        if (qvl_model_n_past(s->m) + *n < qvl_model_ctx(s->m)) {
            *fits = true;
            return QVL_OK;
        }
        free(*ids);
        *ids = NULL;
    }
    return plan_rebuild(cs, false, 0, from, ids, n, fits, err);
}

/* One user message: returns QVL_OK also for the user's mistakes (told in one line, the
 * conversation unchanged); an error only for what ends the chat. */
static qvl_status send_message(chat_state *cs, const char *text, qvl_error *err) {
    qvl_status st = push_turn(cs, text, err);
    if (st != QVL_OK) return st;
    int32_t *ids = NULL;
    int64_t n = 0;
    size_t from = 0;
    bool fits = false;
    st = turn_prompt(cs, &ids, &n, &from, &fits, err);
    if (st == QVL_OK && !fits)
        st = qvl_fail(err, QVL_E_LIMIT, "the message is %lld tokens with the system prompt but "
                      "the context holds %lld: it is not sent (raise --ctx (-c)%s)", (long long)n,
                      (long long)qvl_model_ctx(cs->s->m),
                      cs->turns[cs->n_turns - 1].n_parts ? " or lower --image-max-tokens" : "");
    if (st == QVL_OK) st = encode_turn(cs, &cs->turns[cs->n_turns - 1], err);
    if (st != QVL_OK) {
        /* Nothing reached the cache yet: the message (and its pictures) is not kept. */
        free(ids);
        turn_free(&cs->turns[--cs->n_turns]);
        if (st == QVL_E_NOMEM) return st;
        fprintf(stderr, "qvl chat: %s\n", err->msg);
        return QVL_OK;
    }
    run_images im = {0};
    if (from != SIZE_MAX) { /* from scratch */
        drop_oldest(cs, from);
        st = join_turns(cs, 0, cs->n_turns, true, &im, err);
        qvl_model_truncate(cs->s->m, 0);
        qvl_sampler_clear_history(cs->s->sampler);
    } else {
        st = join_turns(cs, cs->n_turns - 1, cs->n_turns, true, &im, err);
    }
    if (st != QVL_OK) {
        free(ids);
        return st;
    }
    /* The sampler keeps its history across turns: the penalties see the whole conversation, as
     * they would if it were sent again as one prompt. */
    return answer(cs, ids, n, &im, err);
}

/* ---- commands ------------------------------------------------------------------------------ */

static void clear_chat(chat_state *cs) {
    for (size_t i = 0; i < cs->n_turns; i++) turn_free(&cs->turns[i]);
    cs->n_turns = 0;
    turn_free(&cs->pending);
    qvl_model_truncate(cs->s->m, 0);
    qvl_sampler_clear_history(cs->s->sampler);
    cs->cache_ok = true;
}

/* /image PATH: sized from the file's header now (as --image is), decoded when sent. */
static qvl_status attach_image(chat_state *cs, const char *arg, qvl_error *err) {
    while (*arg == ' ' || *arg == '\t') arg++;
    size_t len = strlen(arg);
    while (len > 0 && (arg[len - 1] == ' ' || arg[len - 1] == '\t')) len--;
    if (len >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len - 1] == arg[0]) {
        arg++; /* a quoted path, as a terminal pastes a dropped file */
        len -= 2;
    }
    if (len == 0) {
        fprintf(stderr, "qvl chat: /image needs a PATH\n");
        return QVL_OK;
    }
    chat_turn *p = &cs->pending;
    run_images *parts = realloc(p->parts, (p->n_parts + 1) * sizeof *parts);
    if (parts) p->parts = parts;
    char **owned = parts ? realloc(p->owned, (p->n_parts + 1) * sizeof *owned) : NULL;
    if (owned) p->owned = owned;
    char *path = owned ? strndup(arg, len) : NULL;
    const char **paths = path ? calloc(1, sizeof *paths) : NULL;
    if (!paths) {
        free(path);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    run_images *im = &p->parts[p->n_parts];
    memset(im, 0, sizeof *im);
    paths[0] = path;
    im->paths = paths;
    im->n = 1;
    im->quiet = cs->s->a->quiet;
    qvl_status st = run_images_plan(cs->s->a->model, &cs->s->a->bounds, im, err);
    int64_t attached = im->total_tokens;
    for (size_t i = 0; i < p->n_parts; i++) attached += p->parts[i].total_tokens;
    const int64_t ctx = qvl_model_ctx(cs->s->m);
    if (st == QVL_OK && attached >= ctx)
        st = qvl_fail(err, QVL_E_LIMIT, "%s: %lld tokens%s do not fit the context of %lld: not "
                      "attached (lower --image-max-tokens or raise --ctx (-c))", path,
                      (long long)im->total_tokens,
                      p->n_parts ? " with the pictures attached already" : "", (long long)ctx);
    if (st != QVL_OK) {
        run_images_free(im);
        free(path);
        if (st == QVL_E_NOMEM) return st;
        fprintf(stderr, "qvl chat: %s\n", err->msg);
        return QVL_OK;
    }
    p->owned[p->n_parts++] = path;
    return QVL_OK;
}

/* A line starting with '/': a command. Returns false for /exit. */
static bool command(chat_state *cs, const char *line, qvl_status *st, qvl_error *err) {
    const char *arg = line + strcspn(line, " \t");
    size_t name = (size_t)(arg - line);
    *st = QVL_OK;
    if ((name == 5 && strncmp(line, "/exit", 5) == 0) || (name == 5 && strncmp(line, "/quit", 5) == 0))
        return false;
    if (name == 5 && strncmp(line, "/help", 5) == 0) {
        print_help();
    } else if (name == 6 && strncmp(line, "/clear", 6) == 0) {
        clear_chat(cs);
        fprintf(stderr, "qvl chat: the conversation is cleared\n");
    } else if (name == 6 && strncmp(line, "/image", 6) == 0) {
        *st = attach_image(cs, arg, err);
    } else {
        fprintf(stderr, "qvl chat: unknown command %.*s (/help lists the commands; start with // "
                "to send a line beginning with /)\n", (int)(name > 64 ? 64 : name), line);
    }
    return true;
}

int run_chat_loop(run_session *s, run_images *im) {
    qvl_error err = {0};
    chat_state cs = {.s = s, .cache_ok = true};
    chat_input *in = chat_input_open();
    if (!in) {
        fprintf(stderr, "qvl chat: out of memory\n");
        return 1;
    }
    if (im && im->n > 0) { /* the --image pictures, encoded already, go with the first message */
        cs.pending.parts = malloc(sizeof *cs.pending.parts);
        cs.pending.owned = calloc(1, sizeof *cs.pending.owned);
        if (cs.pending.parts && cs.pending.owned) {
            cs.pending.parts[0] = *im;
            memset(im, 0, sizeof *im);
            free(cs.pending.parts[0].pixels);
            cs.pending.parts[0].pixels = NULL;
            cs.pending.n_parts = 1;
        } else {
            turn_free(&cs.pending);
            chat_input_close(in);
            fprintf(stderr, "qvl chat: out of memory\n");
            return 1;
        }
    }
    const bool tty = isatty(STDIN_FILENO);
    int rc = 0;
    for (;;) {
        const char *line = NULL;
        chat_read r = chat_input_read(in, &line);
        if (r == CHAT_EOF || r == CHAT_INTERRUPT) {
            if (tty) fputc('\n', stderr); /* leave the "> " line */
            rc = r == CHAT_INTERRUPT ? 130 : 0;
            break;
        }
        if (r == CHAT_ERROR) {
            say("%s", "reading the input failed");
            rc = 1;
            break;
        }
        if (line[0] == '\0') continue;
        qvl_status st = QVL_OK;
        if (line[0] == '/' && line[1] != '/') {
            if (!command(&cs, line, &st, &err)) break;
        } else {
            st = send_message(&cs, line[0] == '/' ? line + 1 : line, &err);
        }
        if (st != QVL_OK) {
            say("%s", err.msg);
            rc = 1;
            break;
        }
    }
    for (size_t i = 0; i < cs.n_turns; i++) turn_free(&cs.turns[i]);
    free(cs.turns);
    turn_free(&cs.pending);
    chat_input_close(in);
    return rc;
}
