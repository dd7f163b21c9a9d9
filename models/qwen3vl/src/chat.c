/* Qwen3-VL ChatML rendering: a hand translation of chat_template.jinja. */
#include "qvl/chat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>\n"
#define IMAGE_TOKENS "<|vision_start|><|image_pad|><|vision_end|>"
#define VIDEO_TOKENS "<|vision_start|><|video_pad|><|vision_end|>"

typedef enum part_kind { PART_TEXT, PART_IMAGE, PART_VIDEO, PART_TOOL_CALL } part_kind;

typedef struct chat_part {
    part_kind kind;
    char *text; /* PART_TEXT; PART_TOOL_CALL: the whole <tool_call> block */
} chat_part;

typedef struct chat_message {
    qvl_chat_role role;
    chat_part *parts;
    size_t n_parts, cap_parts;
} chat_message;

struct qvl_chat {
    chat_message *msgs;
    size_t n_msgs, cap_msgs;
    size_t n_images, n_videos;
    bool add_vision_id;
    char *tools; /* NULL: none */
};

/* Grow *items (of elem bytes each) so that it holds at least need elements. */
static qvl_status grow(void **items, size_t *cap, size_t need, size_t elem, qvl_error *err) {
    if (need <= *cap) return QVL_OK;
    size_t new_cap = *cap ? *cap : 4;
    while (new_cap < need) {
        if (!qvl_mul_size(new_cap, 2, &new_cap))
            return qvl_fail(err, QVL_E_LIMIT, "chat: too many entries");
    }
    size_t bytes;
    if (!qvl_mul_size(new_cap, elem, &bytes))
        return qvl_fail(err, QVL_E_LIMIT, "chat: too many entries");
    void *p = realloc(*items, bytes);
    if (!p) return qvl_fail(err, QVL_E_NOMEM, "chat: out of memory growing to %zu entries", new_cap);
    *items = p;
    *cap = new_cap;
    return QVL_OK;
}

static const char *role_name(qvl_chat_role role) {
    switch (role) {
    case QVL_CHAT_SYSTEM: return "system";
    case QVL_CHAT_USER: return "user";
    case QVL_CHAT_ASSISTANT: return "assistant";
    case QVL_CHAT_TOOL: return "tool";
    }
    return "?";
}

qvl_status qvl_chat_create(qvl_chat **out, qvl_error *err) {
    if (!out) return qvl_fail(err, QVL_E_INVALID, "chat: NULL output pointer");
    *out = calloc(1, sizeof **out);
    if (!*out) return qvl_fail(err, QVL_E_NOMEM, "chat: out of memory");
    return QVL_OK;
}

void qvl_chat_free(qvl_chat *chat) {
    if (!chat) return;
    for (size_t i = 0; i < chat->n_msgs; i++) {
        for (size_t j = 0; j < chat->msgs[i].n_parts; j++) free(chat->msgs[i].parts[j].text);
        free(chat->msgs[i].parts);
    }
    free(chat->msgs);
    free(chat->tools);
    free(chat);
}

static qvl_status append_part(chat_message *m, part_kind kind, const char *text, qvl_error *err) {
    qvl_status s = grow((void **)&m->parts, &m->cap_parts, m->n_parts + 1, sizeof *m->parts, err);
    if (s != QVL_OK) return s;
    chat_part p = {kind, NULL};
    if (kind == PART_TEXT || kind == PART_TOOL_CALL) {
        size_t n = strlen(text);
        p.text = malloc(n + 1);
        if (!p.text) return qvl_fail(err, QVL_E_NOMEM, "chat: out of memory copying %zu bytes of text", n);
        memcpy(p.text, text, n + 1);
    }
    m->parts[m->n_parts++] = p;
    return QVL_OK;
}

qvl_status qvl_chat_add(qvl_chat *chat, qvl_chat_role role, const char *text, qvl_error *err) {
    if (!chat) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat");
    if (role != QVL_CHAT_SYSTEM && role != QVL_CHAT_USER && role != QVL_CHAT_ASSISTANT &&
        role != QVL_CHAT_TOOL)
        return qvl_fail(err, QVL_E_INVALID, "chat: unknown role %d", (int)role);
    /* The template renders a system turn only from messages[0]; refuse rather than drop. */
    if (role == QVL_CHAT_SYSTEM && chat->n_msgs > 0)
        return qvl_fail(err, QVL_E_INVALID,
                        "chat: a system message must be the first message (this would be message %zu)",
                        chat->n_msgs);
    qvl_status s = grow((void **)&chat->msgs, &chat->cap_msgs, chat->n_msgs + 1, sizeof *chat->msgs, err);
    if (s != QVL_OK) return s;
    chat_message *m = &chat->msgs[chat->n_msgs];
    *m = (chat_message){.role = role};
    if (text && text[0]) {
        s = append_part(m, PART_TEXT, text, err);
        if (s != QVL_OK) return s; /* m is not counted yet; nothing to undo */
    }
    chat->n_msgs++;
    return QVL_OK;
}

qvl_status qvl_chat_add_text(qvl_chat *chat, const char *text, qvl_error *err) {
    if (!chat || !text) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat or text");
    if (chat->n_msgs == 0) return qvl_fail(err, QVL_E_INVALID, "chat: no message to add text to");
    return append_part(&chat->msgs[chat->n_msgs - 1], PART_TEXT, text, err);
}

qvl_status qvl_chat_add_image(qvl_chat *chat, qvl_error *err) {
    if (!chat) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat");
    if (chat->n_msgs == 0 || chat->msgs[chat->n_msgs - 1].role != QVL_CHAT_USER) {
        qvl_status s = qvl_chat_add(chat, QVL_CHAT_USER, NULL, err);
        if (s != QVL_OK) return s;
    }
    qvl_status s = append_part(&chat->msgs[chat->n_msgs - 1], PART_IMAGE, NULL, err);
    if (s == QVL_OK) chat->n_images++;
    return s;
}

qvl_status qvl_chat_add_video(qvl_chat *chat, qvl_error *err) {
    if (!chat) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat");
    if (chat->n_msgs == 0 || chat->msgs[chat->n_msgs - 1].role != QVL_CHAT_USER) {
        qvl_status s = qvl_chat_add(chat, QVL_CHAT_USER, NULL, err);
        if (s != QVL_OK) return s;
    }
    qvl_status s = append_part(&chat->msgs[chat->n_msgs - 1], PART_VIDEO, NULL, err);
    if (s == QVL_OK) chat->n_videos++;
    return s;
}

qvl_status qvl_chat_set_tools(qvl_chat *chat, const char *tools, qvl_error *err) {
    if (!chat) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat");
    free(chat->tools);
    chat->tools = NULL;
    if (!tools || !tools[0]) return QVL_OK;
    size_t n = strlen(tools);
    chat->tools = malloc(n + 1);
    if (!chat->tools) return qvl_fail(err, QVL_E_NOMEM, "chat: out of memory copying the tools");
    memcpy(chat->tools, tools, n + 1);
    return QVL_OK;
}

qvl_status qvl_chat_add_tool_call(qvl_chat *chat, const char *name, const char *arguments,
                                  qvl_error *err) {
    if (!chat || !name || !arguments)
        return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat, name or arguments");
    if (chat->n_msgs == 0 || chat->msgs[chat->n_msgs - 1].role != QVL_CHAT_ASSISTANT)
        return qvl_fail(err, QVL_E_INVALID, "chat: a tool call belongs to an assistant message");
    static const char head[] = "<tool_call>\n{\"name\": \"", mid[] = "\", \"arguments\": ",
                      tail[] = "}\n</tool_call>";
    size_t n = sizeof head + strlen(name) + sizeof mid + strlen(arguments) + sizeof tail;
    char *block = malloc(n);
    if (!block) return qvl_fail(err, QVL_E_NOMEM, "chat: out of memory for a tool call");
    snprintf(block, n, "%s%s%s%s%s", head, name, mid, arguments, tail);
    qvl_status s = append_part(&chat->msgs[chat->n_msgs - 1], PART_TOOL_CALL, block, err);
    free(block);
    return s;
}

void qvl_chat_set_add_vision_id(qvl_chat *chat, bool on) {
    if (chat) chat->add_vision_id = on;
}

size_t qvl_chat_count(const qvl_chat *chat) { return chat ? chat->n_msgs : 0; }
size_t qvl_chat_image_count(const qvl_chat *chat) { return chat ? chat->n_images : 0; }

qvl_chat_role qvl_chat_role_of(const qvl_chat *chat, size_t index) {
    return chat && index < chat->n_msgs ? chat->msgs[index].role : QVL_CHAT_USER;
}

/* ---- rendering -------------------------------------------------------------------------- */

typedef struct strbuf {
    char *data;
    size_t len, cap;
    qvl_status status; /* first failure; later appends are no-ops */
    qvl_error *err;
} strbuf;

static void sb_append(strbuf *sb, const char *s, size_t n) {
    if (sb->status != QVL_OK) return;
    size_t need;
    if (!qvl_add_size(sb->len, n, &need) || !qvl_add_size(need, 1, &need)) {
        sb->status = qvl_fail(sb->err, QVL_E_LIMIT, "chat: rendered prompt too long");
        return;
    }
    if (need > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 256;
        while (cap < need) {
            if (!qvl_mul_size(cap, 2, &cap)) {
                cap = need;
                break;
            }
        }
        char *p = realloc(sb->data, cap);
        if (!p) {
            sb->status = qvl_fail(sb->err, QVL_E_NOMEM, "chat: out of memory rendering %zu bytes", need);
            return;
        }
        sb->data = p;
        sb->cap = cap;
    }
    memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

static void sb_puts(strbuf *sb, const char *s) { sb_append(sb, s, strlen(s)); }

/* One message as the template's loop body renders it; *image_no and *video_no count images
 * and videos so far. */
static bool has_text(const chat_message *m) {
    for (size_t j = 0; j < m->n_parts; j++)
        if (m->parts[j].kind == PART_TEXT && m->parts[j].text[0]) return true;
    return false;
}

/* A tool message: its results join the neighbouring tool messages' user turn. */
static void render_tool(strbuf *sb, const qvl_chat *chat, size_t index) {
    const chat_message *m = &chat->msgs[index];
    if (index == 0 || chat->msgs[index - 1].role != QVL_CHAT_TOOL) sb_puts(sb, IM_START "user");
    sb_puts(sb, "\n<tool_response>\n");
    for (size_t j = 0; j < m->n_parts; j++)
        if (m->parts[j].kind == PART_TEXT) sb_puts(sb, m->parts[j].text);
    sb_puts(sb, "\n</tool_response>");
    if (index + 1 == chat->n_msgs || chat->msgs[index + 1].role != QVL_CHAT_TOOL) sb_puts(sb, IM_END);
}

static void render_message(strbuf *sb, const qvl_chat *chat, size_t index, size_t *image_no,
                           size_t *video_no) {
    const chat_message *m = &chat->msgs[index];
    /* The template renders the system turn before its loop, from messages[0] only. */
    if (m->role == QVL_CHAT_SYSTEM && index != 0) return;
    if (m->role == QVL_CHAT_TOOL) {
        render_tool(sb, chat, index);
        return;
    }
    bool text_before = has_text(m); /* the template's `message.content` test */
    size_t calls = 0;
    sb_puts(sb, IM_START);
    sb_puts(sb, role_name(m->role));
    sb_puts(sb, "\n");
    for (size_t j = 0; j < m->n_parts; j++) {
        const chat_part *p = &m->parts[j];
        if (p->kind == PART_TEXT) {
            sb_puts(sb, p->text);
        } else if (p->kind == PART_TOOL_CALL) {
            if (calls++ > 0 || text_before) sb_puts(sb, "\n");
            sb_puts(sb, p->text);
        } else if (m->role == QVL_CHAT_USER && p->kind == PART_VIDEO) {
            ++*video_no;
            if (chat->add_vision_id) {
                char label[48];
                snprintf(label, sizeof label, "Video %zu: ", *video_no);
                sb_puts(sb, label);
            }
            sb_puts(sb, VIDEO_TOKENS);
        } else if (m->role == QVL_CHAT_USER) { /* images only exist in user turns */
            ++*image_no;
            if (chat->add_vision_id) {
                char label[48];
                snprintf(label, sizeof label, "Picture %zu: ", *image_no);
                sb_puts(sb, label);
            }
            sb_puts(sb, IMAGE_TOKENS);
        }
    }
    sb_puts(sb, IM_END);
}

static size_t parts_before(const qvl_chat *chat, size_t first, part_kind kind) {
    size_t n = 0;
    for (size_t i = 0; i < first; i++)
        for (size_t j = 0; j < chat->msgs[i].n_parts; j++)
            if (chat->msgs[i].role == QVL_CHAT_USER && chat->msgs[i].parts[j].kind == kind) n++;
    return n;
}

/* The template's tools branch: the system turn that lists the tools. */
static void render_tools_header(strbuf *sb, const qvl_chat *chat) {
    sb_puts(sb, IM_START "system\n");
    if (chat->n_msgs > 0 && chat->msgs[0].role == QVL_CHAT_SYSTEM) {
        const chat_message *m = &chat->msgs[0];
        for (size_t j = 0; j < m->n_parts; j++)
            if (m->parts[j].kind == PART_TEXT) sb_puts(sb, m->parts[j].text);
        sb_puts(sb, "\n\n");
    }
    sb_puts(sb, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n"
                "<tools>\n");
    sb_puts(sb, chat->tools);
    sb_puts(sb, "\n</tools>\n\nFor each function call, return a json object with function name "
                "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
                IM_END);
}

static qvl_status render_range(const qvl_chat *chat, const char *prefix, size_t first,
                               bool add_generation_prompt, char **out, size_t *len, qvl_error *err) {
    strbuf sb = {.status = QVL_OK, .err = err};
    sb_puts(&sb, ""); /* always hand back a string, even an empty one */
    if (prefix) sb_puts(&sb, prefix);
    size_t image_no = parts_before(chat, first, PART_IMAGE);
    size_t video_no = parts_before(chat, first, PART_VIDEO);
    size_t i = first;
    if (first == 0 && chat->tools) {
        render_tools_header(&sb, chat);
        if (chat->n_msgs > 0 && chat->msgs[0].role == QVL_CHAT_SYSTEM) i = 1;
    }
    for (; i < chat->n_msgs; i++)
        render_message(&sb, chat, i, &image_no, &video_no);
    if (add_generation_prompt) sb_puts(&sb, IM_START "assistant\n");
    if (sb.status != QVL_OK) {
        free(sb.data);
        return sb.status;
    }
    *out = sb.data;
    if (len) *len = sb.len;
    return QVL_OK;
}

qvl_status qvl_chat_render(const qvl_chat *chat, bool add_generation_prompt, char **out,
                           size_t *len, qvl_error *err) {
    if (!chat || !out) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat or output");
    if (chat->n_msgs == 0) return qvl_fail(err, QVL_E_INVALID, "chat: nothing to render: no messages");
    return render_range(chat, NULL, 0, add_generation_prompt, out, len, err);
}

qvl_status qvl_chat_render_since(const qvl_chat *chat, size_t first, bool add_generation_prompt,
                                 char **out, size_t *len, qvl_error *err) {
    if (!chat || !out) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat or output");
    if (first > chat->n_msgs)
        return qvl_fail(err, QVL_E_INVALID, "chat: render from message %zu, but the chat has %zu",
                        first, chat->n_msgs);
    return render_range(chat, NULL, first, add_generation_prompt, out, len, err);
}

qvl_status qvl_chat_render_continuation(const qvl_chat *chat, size_t first,
                                        bool add_generation_prompt, char **out, size_t *len,
                                        qvl_error *err) {
    if (!chat || !out) return qvl_fail(err, QVL_E_INVALID, "chat: NULL chat or output");
    if (first == 0 || first > chat->n_msgs)
        return qvl_fail(err, QVL_E_INVALID,
                        "chat: continuation from message %zu: needs 1 <= first <= %zu (the generated "
                        "reply is message first - 1)",
                        first, chat->n_msgs);
    if (chat->msgs[first - 1].role != QVL_CHAT_ASSISTANT)
        return qvl_fail(err, QVL_E_INVALID,
                        "chat: continuation from message %zu: message %zu is a %s message, not the "
                        "assistant's generated reply",
                        first, first - 1, role_name(chat->msgs[first - 1].role));
    /* Close the reply whose <|im_end|> stopped generation but was never fed to the model. */
    return render_range(chat, IM_END, first, add_generation_prompt, out, len, err);
}
