/* Qwen3-VL chat prompts: a list of messages rendered to the ChatML string that the model's
 * chat_template.jinja produces (docs/MODEL.md, "Prompt"), without a Jinja engine.
 *
 * What the template does, and so what this module does:
 *   - a system message, only as the first message: "<|im_start|>system\n{text}<|im_end|>\n"
 *     (there is no default system prompt);
 *   - a user message: "<|im_start|>user\n" + its parts concatenated with no separator
 *     (text as is; image -> "<|vision_start|><|image_pad|><|vision_end|>", video ->
 *     "<|vision_start|><|video_pad|><|vision_end|>") + "<|im_end|>\n";
 *   - an assistant message: "<|im_start|>assistant\n{text}<|im_end|>\n"; the Instruct template
 *     copies the text verbatim (a "<think>...</think>" inside it is kept, not stripped);
 *   - add_generation_prompt: "<|im_start|>assistant\n".
 * With add_vision_id the template writes "Picture N: " before each image and "Video N: " before
 * each video (N counts images, or videos, over the whole conversation, from 1).
 *
 * Differences from running the template, both about inputs the template mishandles:
 *   - a system message that is not the first message is refused by qvl_chat_add (the template
 *     silently drops it);
 *   - rendering an empty chat is an error (the template fails on messages[0]).
 *
 * Tools (the template's `tools` branch), rendered as the template does:
 *   - with tools set, the first turn is "<|im_start|>system\n" + (the system message's text +
 *     "\n\n" when messages[0] is one) + the "# Tools" preamble with each tool's JSON on its own
 *     line inside <tools></tools> + the <tool_call> instructions + "<|im_end|>\n". The caller
 *     passes each tool already as `tool | tojson` writes it (Python's json.dumps);
 *   - a tool message (a function's result): "\n<tool_response>\n{text}\n</tool_response>",
 *     consecutive ones inside one "<|im_start|>user" ... "<|im_end|>\n" turn;
 *   - an assistant message's tool calls after its text, each "<tool_call>\n{\"name\": \"NAME\",
 *     \"arguments\": ARGS}\n</tool_call>", "\n" before each but a first with no text before it.
 *
 * Text is copied verbatim: special-token strings inside user text reach the tokenizer as they
 * would with the template. Rendered strings are NUL-terminated and allocated with malloc: free
 * them with free(). */
#ifndef QVL_CHAT_H
#define QVL_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_chat_role {
    QVL_CHAT_SYSTEM = 0,
    QVL_CHAT_USER,
    QVL_CHAT_ASSISTANT,
    QVL_CHAT_TOOL, /* a tool's result, answering the assistant's tool call */
} qvl_chat_role;

typedef struct qvl_chat qvl_chat;

qvl_status qvl_chat_create(qvl_chat **out, qvl_error *err);
void qvl_chat_free(qvl_chat *chat);

/* Start a new message with one text part (text may be NULL or "": a message with no text
 * part yet). A system message is only accepted as the first message. */
qvl_status qvl_chat_add(qvl_chat *chat, qvl_chat_role role, const char *text, qvl_error *err);

/* Append a text part to the last message (error when the chat is empty). Useful after
 * qvl_chat_add_image to put the question after the picture. */
qvl_status qvl_chat_add_text(qvl_chat *chat, const char *text, qvl_error *err);

/* Append an image part to the last message when it is a user message, else start a new user
 * message holding the image. Images are numbered in the order they are added; that is the
 * order in which the caller must supply the pictures' features. */
qvl_status qvl_chat_add_image(qvl_chat *chat, qvl_error *err);

/* The same for a video part (qvl_video_expand_text later replaces its pad by the frame groups'
 * timestamps and pads). */
qvl_status qvl_chat_add_video(qvl_chat *chat, qvl_error *err);

/* The tools the model may call: each tool's JSON (as the template's tojson writes it), one per
 * line ("\n" between them). NULL or "": no tools. Copied. */
qvl_status qvl_chat_set_tools(qvl_chat *chat, const char *tools, qvl_error *err);
/* A tool call after the last message's text (an assistant message): name and the arguments'
 * JSON text, written as they are. */
qvl_status qvl_chat_add_tool_call(qvl_chat *chat, const char *name, const char *arguments,
                                  qvl_error *err);

/* "Picture N: " before each image, as the template's add_vision_id (default off). */
void qvl_chat_set_add_vision_id(qvl_chat *chat, bool on);

size_t qvl_chat_count(const qvl_chat *chat);        /* messages */
size_t qvl_chat_image_count(const qvl_chat *chat);  /* image parts, all messages */
qvl_chat_role qvl_chat_role_of(const qvl_chat *chat, size_t index); /* index < count */

/* The whole conversation as the template renders it. len (may be NULL) gets strlen(*out). */
qvl_status qvl_chat_render(const qvl_chat *chat, bool add_generation_prompt, char **out,
                           size_t *len, qvl_error *err);

/* Only the messages [first, count), rendered exactly as they appear inside the full
 * rendering (so render(all) == render(messages before first) + render_since(first), with
 * image numbering continuing across the cut). first == count gives just the generation prompt
 * (or ""). first > count is an error. */
qvl_status qvl_chat_render_since(const qvl_chat *chat, size_t first, bool add_generation_prompt,
                                 char **out, size_t *len, qvl_error *err);

/* Multi-turn reuse of a KV cache. After a generation the cache holds the previous prompt
 * (which ended with the generation prompt "<|im_start|>assistant\n") and the generated reply
 * tokens, but not the <|im_end|> that stopped generation (it was sampled, never fed back).
 * The caller then adds the reply text with qvl_chat_add(chat, QVL_CHAT_ASSISTANT, reply) at
 * index first - 1, adds the next user turn(s), and calls this with first = the index of the
 * first message after that reply. The result is what must be tokenized and appended to the
 * cache:
 *     "<|im_end|>\n" + render_since(first) [+ "<|im_start|>assistant\n"]
 * so that cached text + this string == qvl_chat_render(chat) of the whole conversation.
 * Message first - 1 must exist and be an assistant message. */
qvl_status qvl_chat_render_continuation(const qvl_chat *chat, size_t first,
                                        bool add_generation_prompt, char **out, size_t *len,
                                        qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
