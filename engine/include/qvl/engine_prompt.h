/* A conversation rendered the way the loaded model's chat template renders it. The engine
 * owns the template (today Qwen3-VL's ChatML, written in the model's chat module), so a front
 * end builds prompts through here and never sees the model's headers.
 *
 * Messages are added in order; a picture or video part stands where its placeholder goes, and
 * the pictures and videos are supplied in the same order with the request (qvl/engine_job.h). */
#ifndef QVL_ENGINE_PROMPT_H
#define QVL_ENGINE_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_prompt_role {
    QVL_ROLE_SYSTEM = 0, /* only as the first message */
    QVL_ROLE_USER,
    QVL_ROLE_ASSISTANT,
    QVL_ROLE_TOOL,       /* a function's result (OpenAI's role "tool") */
} qvl_prompt_role;

typedef struct qvl_prompt qvl_prompt;

qvl_status qvl_prompt_create(qvl_prompt **out, qvl_error *err);
void qvl_prompt_free(qvl_prompt *p);
/* A new message with one text part (NULL or "": none yet). */
qvl_status qvl_prompt_add(qvl_prompt *p, qvl_prompt_role role, const char *text, qvl_error *err);
/* A text part after the last message's parts. */
qvl_status qvl_prompt_add_text(qvl_prompt *p, const char *text, qvl_error *err);
/* A picture part in the last message (a user message), else a new user message holding it. */
qvl_status qvl_prompt_add_picture(qvl_prompt *p, qvl_error *err);
/* The same for a video: one placeholder, which the engine replaces with the video's frame
 * groups (qvl/engine_video.h). */
qvl_status qvl_prompt_add_video(qvl_prompt *p, qvl_error *err);
/* The functions the model may call, each as the template's tojson writes it (Python's
 * json.dumps with ", " and ": "), one per line; NULL: none. The template lists them in the
 * first (system) turn. */
qvl_status qvl_prompt_set_tools(qvl_prompt *p, const char *tools_json_lines, qvl_error *err);
/* A call the assistant made, after the last (assistant) message's text: the function's name
 * and its arguments' JSON text as the model wrote them. */
qvl_status qvl_prompt_add_tool_call(qvl_prompt *p, const char *name, const char *arguments,
                                    qvl_error *err);
/* The whole conversation, and the assistant's turn opened when add_generation_prompt. */
qvl_status qvl_prompt_render(const qvl_prompt *p, bool add_generation_prompt, char **out,
                             size_t *len, qvl_error *err);

/* The special tokens that stand for pictures and videos in a rendered prompt: only the
 * template writes them (a front end refuses them in text its users typed). NULL-terminated. */
extern const char *const qvl_prompt_vision_tokens[];
/* How many times the rendered prompt of n_pictures pictures and n_videos videos holds vision
 * token `token` (from the list above) when no text spelled it (before the engine writes each
 * video's groups). */
size_t qvl_prompt_vision_token_count(const char *token, size_t n_pictures, size_t n_videos);

#ifdef __cplusplus
}
#endif
#endif
