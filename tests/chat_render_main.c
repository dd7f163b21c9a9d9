/* qvl-chat-render: prints qvl's rendering (qvl/chat.h) of a conversation given as JSON, so that
 * tests/chat_template_test.py can compare it byte for byte with the model's own Jinja template.
 *
 *     qvl-chat-render FILE.json
 *
 * FILE.json: {"messages": [...], "add_generation_prompt": bool, "add_vision_id": bool}, the
 * messages as transformers' apply_chat_template takes them: role system/user/assistant; content
 * a string or a list of parts {"type": "text", "text"}, {"type": "image"}, {"type": "video"}.
 * The rendering goes to stdout without a trailing newline; exit 1 with one line on stderr for
 * a conversation qvl refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qvl/chat.h"

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) { free(buf); buf = NULL; break; }
            buf = b;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static int role_of(const char *s, qvl_chat_role *out) {
    if (!strcmp(s, "system")) *out = QVL_CHAT_SYSTEM;
    else if (!strcmp(s, "user")) *out = QVL_CHAT_USER;
    else if (!strcmp(s, "assistant")) *out = QVL_CHAT_ASSISTANT;
    else return 0;
    return 1;
}

/* One message: a new message, then its parts in order. */
static qvl_status add_message(qvl_chat *chat, const cJSON *msg, qvl_error *err) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
    qvl_chat_role r;
    if (!cJSON_IsString(role) || !role_of(role->valuestring, &r))
        return qvl_fail(err, QVL_E_INVALID, "a message needs role system, user or assistant");
    if (cJSON_IsString(content)) return qvl_chat_add(chat, r, content->valuestring, err);
    if (!cJSON_IsArray(content)) return qvl_fail(err, QVL_E_INVALID, "content: string or list");
    qvl_status st = qvl_chat_add(chat, r, NULL, err);
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        if (st != QVL_OK) break;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const char *t = cJSON_IsString(type) ? type->valuestring : "";
        if (!strcmp(t, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            st = cJSON_IsString(text) ? qvl_chat_add_text(chat, text->valuestring, err)
                                      : qvl_fail(err, QVL_E_INVALID, "a text part needs text");
        } else if (!strcmp(t, "image")) {
            st = qvl_chat_add_image(chat, err);
        } else if (!strcmp(t, "video")) {
            st = qvl_chat_add_video(chat, err);
        } else {
            st = qvl_fail(err, QVL_E_INVALID, "unknown part type '%s'", t);
        }
    }
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: qvl-chat-render FILE.json\n");
        return 2;
    }
    char *text = read_all(argv[1]);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) {
        fprintf(stderr, "qvl-chat-render: cannot read JSON from %s\n", argv[1]);
        return 2;
    }
    qvl_error err = {0};
    qvl_chat *chat = NULL;
    char *out = NULL;
    size_t len = 0;
    qvl_status st = qvl_chat_create(&chat, &err);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages"), *m;
    if (st == QVL_OK && !cJSON_IsArray(msgs)) st = qvl_fail(&err, QVL_E_INVALID, "no messages");
    if (st == QVL_OK)
        qvl_chat_set_add_vision_id(
            chat, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_vision_id")));
    cJSON_ArrayForEach(m, msgs) {
        if (st != QVL_OK) break;
        st = add_message(chat, m, &err);
    }
    const bool gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt"));
    if (st == QVL_OK) st = qvl_chat_render(chat, gen, &out, &len, &err);
    int rc = 0;
    if (st == QVL_OK) {
        rc = fwrite(out, 1, len, stdout) == len ? 0 : 1;
    } else {
        fprintf(stderr, "qvl-chat-render: %s\n", err.msg);
        rc = 1;
    }
    free(out);
    qvl_chat_free(chat);
    cJSON_Delete(root);
    return rc;
}
