/* The prompt builder over the model's chat module (qvl/chat.h): one place to switch templates
 * when a model brings its own. */
#include "qvl/engine_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "qvl/chat.h"

struct qvl_prompt {
    qvl_chat *chat;
};

const char *const qvl_prompt_vision_tokens[] = {"<|image_pad|>", "<|vision_start|>",
                                                "<|vision_end|>", "<|video_pad|>", NULL};

size_t qvl_prompt_vision_token_count(const char *token, size_t n_pictures, size_t n_videos) {
    if (strcmp(token, "<|video_pad|>") == 0) return n_videos;
    if (strcmp(token, "<|image_pad|>") == 0) return n_pictures;
    return n_pictures + n_videos; /* <|vision_start|>, <|vision_end|> */
}

qvl_status qvl_prompt_create(qvl_prompt **out, qvl_error *err) {
    *out = NULL;
    qvl_prompt *p = malloc(sizeof *p);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = qvl_chat_create(&p->chat, err);
    if (st != QVL_OK) {
        free(p);
        return st;
    }
    *out = p;
    return QVL_OK;
}

void qvl_prompt_free(qvl_prompt *p) {
    if (!p) return;
    qvl_chat_free(p->chat);
    free(p);
}

static qvl_chat_role chat_role(qvl_prompt_role r) {
    return r == QVL_ROLE_SYSTEM ? QVL_CHAT_SYSTEM
         : r == QVL_ROLE_USER   ? QVL_CHAT_USER
         : r == QVL_ROLE_TOOL   ? QVL_CHAT_TOOL
                                : QVL_CHAT_ASSISTANT;
}

qvl_status qvl_prompt_add(qvl_prompt *p, qvl_prompt_role role, const char *text, qvl_error *err) {
    return qvl_chat_add(p->chat, chat_role(role), text, err);
}

qvl_status qvl_prompt_add_text(qvl_prompt *p, const char *text, qvl_error *err) {
    return qvl_chat_add_text(p->chat, text, err);
}

qvl_status qvl_prompt_add_picture(qvl_prompt *p, qvl_error *err) {
    return qvl_chat_add_image(p->chat, err);
}

qvl_status qvl_prompt_add_video(qvl_prompt *p, qvl_error *err) {
    return qvl_chat_add_video(p->chat, err);
}

qvl_status qvl_prompt_set_tools(qvl_prompt *p, const char *tools_json_lines, qvl_error *err) {
    return qvl_chat_set_tools(p->chat, tools_json_lines, err);
}

qvl_status qvl_prompt_add_tool_call(qvl_prompt *p, const char *name, const char *arguments,
                                    qvl_error *err) {
    return qvl_chat_add_tool_call(p->chat, name, arguments, err);
}

qvl_status qvl_prompt_render(const qvl_prompt *p, bool add_generation_prompt, char **out,
                             size_t *len, qvl_error *err) {
    return qvl_chat_render(p->chat, add_generation_prompt, out, len, err);
}
