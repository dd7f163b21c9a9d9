/* qvl chat: one message per line, on the engine with one slot (chat_session.h).
 *
 * The conversation is kept as turns (a user message with its pictures, and the reply). Each
 * message submits the whole conversation rendered by the model's template; the slot's cache
 * holds the previous submission and its answer, so the engine prefills only what differs.
 * When the conversation does not fit, the oldest turns are dropped (the system message stays)
 * until the rest takes at most half the context: the same idea as llama.cpp's context shift,
 * but submitted again rather than re-rotated, so every position stays what one prompt would
 * give. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_input.h"
#include "chat_state.h"
#include "chat_videos.h"
#include "run_grammar.h"

void chat_turn_free(chat_turn *t) {
    for (size_t i = 0; i < t->n_pics; i++) chat_picture_free(&t->pics[i]);
    free(t->pics);
    free(t->user);
    free(t->reply);
    memset(t, 0, sizeof *t);
}

void chat_drop_oldest(chat_state *cs, size_t n) {
    if (n == 0) return;
    for (size_t i = 0; i < n; i++) chat_turn_free(&cs->turns[i]);
    memmove(cs->turns, cs->turns + n, (cs->n_turns - n) * sizeof *cs->turns);
    cs->n_turns -= n;
    fprintf(stderr, "qvl chat: the context of %lld tokens is full: the %zu oldest exchange%s "
            "dropped%s\n", (long long)qvl_engine_ctx(cs->engine), n, n == 1 ? " is" : "s are",
            cs->a->system ? " (the system prompt is kept)" : "");
}

static void print_help(void) {
    fprintf(stderr,
            "  /image PATH   attach a picture to the next message (repeatable)\n"
            "  /video PATH[@FPS]  attach a video: a directory of frames (name order) or a comma\n"
            "                list of frame files, at FPS frames per second (default 24)\n"
            "  /clear        forget the conversation (and the attached pictures)\n"
            "  /help         this list\n"
            "  /exit         end the chat (also /quit, Ctrl-D, Ctrl-C at the prompt)\n"
            "  Ctrl-C while answering stops the answer; a line starting with // sends it with "
            "one / less\n");
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

/* One user message: QVL_OK also for the user's mistakes (told in one line, the conversation
 * unchanged); an error only for what ends the chat. */
static qvl_status send_message(chat_state *cs, const char *text, qvl_error *err) {
    qvl_status st = push_turn(cs, text, err);
    if (st != QVL_OK) return st;
    bool sent = false;
    st = chat_send(cs, &sent, err);
    if (st == QVL_OK && !sent) chat_turn_free(&cs->turns[--cs->n_turns]); /* not kept */
    return st;
}

static void clear_chat(chat_state *cs) {
    for (size_t i = 0; i < cs->n_turns; i++) chat_turn_free(&cs->turns[i]);
    cs->n_turns = 0;
    chat_turn_free(&cs->pending);
}

/* A picture (or a video) for the next message, sized from the file's header now (decoded
 * when sent). QVL_OK also when it is refused (told in one line). */
static qvl_status attach(chat_state *cs, const char *path, bool video, qvl_error *err) {
    chat_turn *p = &cs->pending;
    qvl_error e = {0};
    qvl_status st = QVL_OK;
    if (!cs->rules || (video && !cs->video_rules))
        st = qvl_fail(&e, QVL_E_UNSUPPORTED, "%s: the model takes no %s: not attached", path,
                      video ? "videos" : "pictures (no vision encoder)");
    chat_picture pic;
    int64_t before = 0; /* tokens of what is attached already */
    for (size_t i = 0; i < p->n_pics; i++) before += p->pics[i].n_tokens;
    const int64_t budget = qvl_engine_ctx(cs->engine) - 2 - before;
    if (st == QVL_OK && video)
        st = chat_video_plan(cs->video_rules, path, p->n_pics + 1, cs->a->quiet, budget, &pic, &e);
    else if (st == QVL_OK)
        st = chat_picture_plan(cs->rules, path, p->n_pics + 1, cs->a->quiet, cs->cap_what, &pic,
                               &e);
    if (st == QVL_OK) {
        int64_t attached = pic.n_tokens;
        for (size_t i = 0; i < p->n_pics; i++) attached += p->pics[i].n_tokens;
        const int64_t ctx = qvl_engine_ctx(cs->engine);
        if (attached >= ctx) {
            st = qvl_fail(&e, QVL_E_LIMIT, "%s: %lld tokens%s do not fit the context of %lld: "
                          "not attached (lower --image-max-tokens or raise --ctx (-c))", path,
                          (long long)pic.n_tokens,
                          p->n_pics ? " with the pictures attached already" : "", (long long)ctx);
            chat_picture_free(&pic);
        }
    }
    if (st == QVL_OK) {
        chat_picture *grown = realloc(p->pics, (p->n_pics + 1) * sizeof *grown);
        if (!grown) {
            chat_picture_free(&pic);
            return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        }
        p->pics = grown;
        p->pics[p->n_pics++] = pic;
        return QVL_OK;
    }
    if (st == QVL_E_NOMEM) {
        *err = e;
        return st;
    }
    fprintf(stderr, "qvl chat: %s\n", e.msg);
    return QVL_OK;
}

/* /image PATH or /video PATH[@FPS] (quoted as a terminal pastes a dropped file, or not). */
static qvl_status attach_command(chat_state *cs, const char *arg, bool video, qvl_error *err) {
    while (*arg == ' ' || *arg == '\t') arg++;
    size_t len = strlen(arg);
    while (len > 0 && (arg[len - 1] == ' ' || arg[len - 1] == '\t')) len--;
    if (len >= 2 && (arg[0] == '\'' || arg[0] == '"') && arg[len - 1] == arg[0]) {
        arg++;
        len -= 2;
    }
    if (len == 0) {
        fprintf(stderr, "qvl chat: /%s needs a PATH\n", video ? "video" : "image");
        return QVL_OK;
    }
    char *path = strndup(arg, len);
    if (!path) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = attach(cs, path, video, err);
    free(path);
    return st;
}

/* A line starting with '/': a command. Returns false for /exit. */
static bool command(chat_state *cs, const char *line, qvl_status *st, qvl_error *err) {
    const char *arg = line + strcspn(line, " \t");
    size_t name = (size_t)(arg - line);
    *st = QVL_OK;
    if (name == 5 && (strncmp(line, "/exit", 5) == 0 || strncmp(line, "/quit", 5) == 0))
        return false;
    if (name == 5 && strncmp(line, "/help", 5) == 0) {
        print_help();
    } else if (name == 6 && strncmp(line, "/clear", 6) == 0) {
        clear_chat(cs);
        fprintf(stderr, "qvl chat: the conversation is cleared\n");
    } else if (name == 6 && strncmp(line, "/image", 6) == 0) {
        *st = attach_command(cs, arg, false, err);
    } else if (name == 6 && strncmp(line, "/video", 6) == 0) {
        *st = attach_command(cs, arg, true, err);
    } else {
        fprintf(stderr, "qvl chat: unknown command %.*s (/help lists the commands; start with // "
                "to send a line beginning with /)\n", (int)(name > 64 ? 64 : name), line);
    }
    return true;
}

/* The --image files: planned now, all with the first message, and together they must fit. */
static qvl_status attach_initial(chat_state *cs, const char *const *images, size_t n,
                                 qvl_error *err) {
    if (n == 0) return QVL_OK;
    if (!cs->rules)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "%s: the model has no vision encoder", images[0]);
    if (!(cs->pending.pics = calloc(n, sizeof *cs->pending.pics)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        qvl_status st = chat_picture_plan(cs->rules, images[i], i + 1, cs->a->quiet, cs->cap_what,
                                          &cs->pending.pics[i], err);
        if (st != QVL_OK) return st;
        cs->pending.n_pics++;
        total += cs->pending.pics[i].n_tokens;
    }
    const int64_t ctx = qvl_engine_ctx(cs->engine);
    if (total >= ctx)
        return qvl_fail(err, QVL_E_LIMIT, "the %zu image(s) take %lld tokens but the context "
                        "holds %lld: raise --ctx (-c) or lower --image-max-tokens", n,
                        (long long)total, (long long)ctx);
    return QVL_OK;
}

static int loop(chat_state *cs) {
    qvl_error err = {0};
    chat_input *in = chat_input_open();
    if (!in) {
        fprintf(stderr, "qvl chat: out of memory\n");
        return 1;
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
            fprintf(stderr, "qvl chat: reading the input failed\n");
            rc = 1;
            break;
        }
        if (line[0] == '\0') continue;
        qvl_status st = QVL_OK;
        if (line[0] == '/' && line[1] != '/') {
            if (!command(cs, line, &st, &err)) break;
        } else {
            st = send_message(cs, line[0] == '/' ? line + 1 : line, &err);
        }
        if (st != QVL_OK) {
            fprintf(stderr, "qvl chat: %s\n", err.msg);
            rc = 1;
            break;
        }
    }
    chat_input_close(in);
    return rc;
}

int run_chat(const run_args *a, const chat_flags *seen, const char *const *images,
             size_t n_images, double start) {
    chat_state cs = {.a = a, .seen = seen};
    cs.timings.start = start;
    cs.seed = seen->seed ? (uint64_t)a->seed : (uint64_t)time(NULL) ^ (uint64_t)getpid();
    qvl_error err = {0};
    qvl_status st = QVL_OK;
    /* A bad grammar costs one line and no model loading. */
    st = run_grammar_text(a, &cs.grammar, &err);
    if (st == QVL_OK) cs.progress = run_progress_create(!a->quiet && isatty(STDERR_FILENO));
    if (st == QVL_OK && !cs.progress) st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = chat_engine_open(&cs, &err);
    if (st == QVL_OK) st = attach_initial(&cs, images, n_images, &err);
    int rc;
    if (st == QVL_OK) {
        rc = loop(&cs);
        if (!a->quiet && (a->verbose || isatty(STDERR_FILENO))) run_timings_print(&cs.timings, NULL);
    } else {
        fprintf(stderr, "qvl chat: %s\n", err.msg);
        rc = 1;
    }
    clear_chat(&cs);
    free(cs.turns);
    free(cs.ids);
    free(cs.text);
    free(cs.grammar);
    qvl_engine_free(cs.engine);
    qvl_picture_rules_free(cs.rules);
    run_progress_free(cs.progress);
    return rc;
}
