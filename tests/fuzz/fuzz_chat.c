/* Fuzz target: chat rendering of arbitrary conversations. The input is a list of records
 * separated by 0x01 bytes; a record's first byte picks the operation (add a system, user or
 * assistant message with the rest as text, append text, add an image, toggle "Picture N: "),
 * and the last byte of the input picks where render_since cuts. Properties checked, as
 * documented in qvl/chat.h: render_since(k) is the tail of the full rendering, and the
 * continuation after an assistant message starts with "<|im_end|>\n" followed by
 * render_since(k). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "qvl/chat.h"

static bool ends_with(const char *s, size_t n, const char *tail, size_t m) {
    return m <= n && memcmp(s + n - m, tail, m) == 0;
}

static void apply(qvl_chat *chat, const uint8_t *rec, size_t len) {
    if (len == 0) return;
    /* Texts are C strings: the record without its op byte, cut at a NUL. */
    char *text = malloc(len);
    if (!text) return;
    memcpy(text, rec + 1, len - 1);
    text[len - 1] = '\0';
    qvl_error err = {0};
    qvl_status s = QVL_OK;
    switch (rec[0] % 6) {
    case 0: s = qvl_chat_add(chat, QVL_CHAT_SYSTEM, text, &err); break;
    case 1: s = qvl_chat_add(chat, QVL_CHAT_USER, text, &err); break;
    case 2: s = qvl_chat_add(chat, QVL_CHAT_ASSISTANT, len > 1 ? text : NULL, &err); break;
    case 3: s = qvl_chat_add_text(chat, text, &err); break;
    case 4: s = qvl_chat_add_image(chat, &err); break;
    case 5: qvl_chat_set_add_vision_id(chat, len > 1 && (rec[1] & 1)); break;
    }
    if (s != QVL_OK) fuzz_check_error(s, &err);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    qvl_chat *chat = NULL;
    qvl_error err = {0};
    if (qvl_chat_create(&chat, &err) != QVL_OK) return 0;
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i == size || data[i] == 0x01) {
            apply(chat, data + start, i - start);
            start = i + 1;
        }
    }
    size_t count = qvl_chat_count(chat);
    for (size_t i = 0; i < count; i++) {
        qvl_chat_role r = qvl_chat_role_of(chat, i);
        FUZZ_CHECK(r == QVL_CHAT_SYSTEM || r == QVL_CHAT_USER || r == QVL_CHAT_ASSISTANT);
        if (r == QVL_CHAT_SYSTEM) FUZZ_CHECK(i == 0);
    }
    bool gen = size > 0 && (data[size - 1] & 0x80);
    char *all = NULL;
    size_t all_len = 0;
    qvl_status s = qvl_chat_render(chat, gen, &all, &all_len, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(count == 0);
        qvl_chat_free(chat);
        return 0;
    }
    FUZZ_CHECK(strlen(all) == all_len);
    size_t cut = size > 0 ? data[size - 1] % (count + 2) : 0; /* count + 1 must be refused */
    char *tail = NULL;
    size_t tail_len = 0;
    s = qvl_chat_render_since(chat, cut, gen, &tail, &tail_len, &err);
    if (cut > count) {
        fuzz_check_error(s, &err);
    } else {
        FUZZ_CHECK(s == QVL_OK);
        FUZZ_CHECK(ends_with(all, all_len, tail, tail_len));
        if (cut >= 1 && qvl_chat_role_of(chat, cut - 1) == QVL_CHAT_ASSISTANT) {
            char *cont = NULL;
            size_t cont_len = 0;
            FUZZ_CHECK(qvl_chat_render_continuation(chat, cut, gen, &cont, &cont_len, &err) == QVL_OK);
            static const char im_end[] = "<|im_end|>\n";
            FUZZ_CHECK(cont_len == sizeof im_end - 1 + tail_len);
            FUZZ_CHECK(memcmp(cont, im_end, sizeof im_end - 1) == 0);
            FUZZ_CHECK(memcmp(cont + sizeof im_end - 1, tail, tail_len) == 0);
            free(cont);
        }
        free(tail);
    }
    free(all);
    qvl_chat_free(chat);
    return 0;
}
