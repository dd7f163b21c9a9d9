/* qvl chat: one message per line, the KV cache reused across turns. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_session.h"

static int chat_fail(const qvl_error *err) {
    fprintf(stderr, "qvl chat: %s\n", err->msg);
    return 1;
}

int run_chat_loop(run_session *s, const run_images *im) {
    qvl_error err = {0};
    qvl_chat *chat = NULL;
    if (qvl_chat_create(&chat, &err) != QVL_OK) return chat_fail(&err);
    if (s->a->system && qvl_chat_add(chat, QVL_CHAT_SYSTEM, s->a->system, &err) != QVL_OK) {
        qvl_chat_free(chat);
        return chat_fail(&err);
    }
    bool interactive = isatty(STDIN_FILENO);
    char *line = NULL;
    size_t line_cap = 0;
    bool first_turn = true;
    int rc = 0;
    for (;;) {
        if (interactive) fprintf(stderr, "> ");
        ssize_t len = getline(&line, &line_cap, stdin);
        if (len < 0) {
            if (interactive) fputc('\n', stderr); /* Ctrl-D: leave the "> " line */
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) break;
        size_t user_index = qvl_chat_count(chat);
        char *text = NULL;
        /* The pictures go with the first message. */
        const run_images *turn_images = first_turn && im && im->n > 0 ? im : NULL;
        qvl_status st = run_add_user_message(chat, line, turn_images ? im->n : 0, &err);
        if (st == QVL_OK)
            st = first_turn ? qvl_chat_render(chat, true, &text, NULL, &err)
                            : qvl_chat_render_continuation(chat, user_index, true, &text, NULL, &err);
        int32_t *ids = NULL;
        int64_t n = 0;
        if (st == QVL_OK) st = run_encode_text(s->tok, text, turn_images, &ids, &n, &err);
        free(text);
        /* The sampler keeps its history across turns: the penalties see the whole
         * conversation, as they would if it were sent again as one prompt. */
        if (st == QVL_OK) st = run_answer(s, ids, n, true, turn_images, &err);
        free(ids);
        char *reply = NULL;
        if (st == QVL_OK)
            st = qvl_tokenizer_decode(s->tok, s->out.ids, s->out.n_ids, false, &reply, NULL, &err);
        if (st == QVL_OK) st = qvl_chat_add(chat, QVL_CHAT_ASSISTANT, reply, &err);
        free(reply);
        if (st != QVL_OK) {
            rc = chat_fail(&err);
            break;
        }
        first_turn = false;
    }
    free(line);
    qvl_chat_free(chat);
    return rc;
}
