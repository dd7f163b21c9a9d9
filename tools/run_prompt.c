/* From the user's text to prompt ids: <image> markers, tokenizing, image pad expansion. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "qvl/mm_prompt.h"
#include "qvl/tokenizer.h"
#include "run_session.h"

static const char image_marker[] = "<image>";

size_t run_count_markers(const char *text) {
    size_t n = 0;
    for (const char *p = strstr(text, image_marker); p; p = strstr(p + 1, image_marker)) n++;
    return n;
}

qvl_status run_add_user_message(qvl_chat *chat, const char *text, size_t n_images,
                                qvl_error *err) {
    /* Without pictures "<image>" is just text. */
    size_t n_markers = n_images > 0 ? run_count_markers(text) : 0;
    qvl_status st = qvl_chat_add(chat, QVL_CHAT_USER, NULL, err);
    if (st != QVL_OK) return st;
    if (n_markers == 0) {
        for (size_t i = 0; st == QVL_OK && i < n_images; i++) st = qvl_chat_add_image(chat, err);
        return st == QVL_OK ? qvl_chat_add_text(chat, text, err) : st;
    }
    if (n_markers != n_images)
        return qvl_fail(err, QVL_E_INVALID, "the prompt has %zu <image> markers but %zu --image "
                        "files were given", n_markers, n_images);
    const char *p = text;
    for (const char *q = strstr(p, image_marker); st == QVL_OK && q; q = strstr(p, image_marker)) {
        if (q > p) {
            char *part = strndup(p, (size_t)(q - p));
            if (!part) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
            st = qvl_chat_add_text(chat, part, err);
            free(part);
        }
        if (st == QVL_OK) st = qvl_chat_add_image(chat, err);
        p = q + strlen(image_marker);
    }
    if (st == QVL_OK && *p) st = qvl_chat_add_text(chat, p, err);
    return st;
}

/* The chat template writes each picture as "<|vision_start|><|image_pad|><|vision_end|>" (one pad
 * a picture, expanded later to its features' count), so the prompt must hold exactly one pad
 * per picture. A pad the user typed as text has no features to stand for: transformers refuses
 * that mismatch ("Image features and image tokens do not match") when pictures are given, and
 * without pictures the pad would reach the model as an ordinary embedding of a token it only
 * ever saw in place of pixels. Refused either way, naming the token. The pad's id is the
 * config's image_token_id when pictures are planned, else the tokenizer's id for the string the
 * template writes (-1 when it has none: nothing to check). */
static qvl_status check_typed_pads(const qvl_tokenizer *tok, const int32_t *ids, int64_t n,
                                   const run_images *im, qvl_error *err) {
    static const char pad_text[] = "<|image_pad|>";
    const size_t n_images = im ? im->n - im->n_videos : 0;
    const int32_t pad = im && im->n > 0 ? im->pad_id : qvl_tokenizer_token_id(tok, pad_text);
    /* A video pad with no video: the same mistake (with videos run_videos_fit counts them). */
    static const char vpad_text[] = "<|video_pad|>";
    const int32_t vpad = im && im->n > 0 ? im->video_pad_id : qvl_tokenizer_token_id(tok, vpad_text);
    int64_t vhave = 0;
    for (int64_t i = 0; vpad >= 0 && (!im || im->n_videos == 0) && i < n; i++)
        vhave += ids[i] == vpad;
    if (vhave > 0)
        return qvl_fail(err, QVL_E_INVALID,
                        "the prompt holds %lld %s token(s) (id %d) typed as text, with no video "
                        "for them: give a video with --video or --video-frames, never the pad token itself",
                        (long long)vhave, vpad_text, (int)vpad);
    if (pad < 0) return QVL_OK;
    int64_t have = 0;
    for (int64_t i = 0; i < n; i++) have += ids[i] == pad;
    if (have <= (int64_t)n_images) return QVL_OK;
    return qvl_fail(err, QVL_E_INVALID,
                    "the prompt holds %lld %s token(s) (id %d) typed as text, with no picture "
                    "for them: attach pictures (--image, /image in a chat; <image> places them), "
                    "never the pad token itself",
                    (long long)(have - (int64_t)n_images), pad_text, (int)pad);
}

qvl_status run_add_user_media(qvl_chat *chat, const char *text, const run_images *im,
                              qvl_error *err) {
    if (run_count_markers(text) > 0)
        return qvl_fail(err, QVL_E_INVALID, "<image> markers do not go with --video-frames or --video: the "
                        "pictures and videos go before the text, in the order given");
    qvl_status st = qvl_chat_add(chat, QVL_CHAT_USER, NULL, err);
    for (size_t i = 0; st == QVL_OK && i < im->n; i++)
        st = im->is_video[i] ? qvl_chat_add_video(chat, err) : qvl_chat_add_image(chat, err);
    return st == QVL_OK ? qvl_chat_add_text(chat, text, err) : st;
}

qvl_status run_encode_text(qvl_tokenizer *tok, const char *text, const run_images *im,
                           int32_t **ids, int64_t *n, qvl_error *err) {
    size_t count = 0;
    qvl_status st = qvl_tokenizer_encode(tok, text, strlen(text), ids, &count, err);
    *n = (int64_t)count;
    if (st == QVL_OK && count == 0) {
        free(*ids);
        *ids = NULL;
        return qvl_fail(err, QVL_E_INVALID, "the prompt is empty");
    }
    if (st == QVL_OK) st = check_typed_pads(tok, *ids, *n, im, err);
    if (st != QVL_OK || !im || im->n == 0) {
        if (st != QVL_OK) {
            free(*ids);
            *ids = NULL;
        }
        return st;
    }
    /* The pictures' pads now; the videos' after their token budget (run_videos_fit). */
    int64_t *counts = malloc((im->n + 1) * sizeof *counts);
    size_t n_images = 0;
    for (size_t i = 0; counts && i < im->n; i++)
        if (!im->is_video[i]) counts[n_images++] = im->tokens[i];
    int32_t *expanded = NULL;
    int64_t n_expanded = 0;
    st = counts ? qvl_expand_image_pads(*ids, *n, im->pad_id, counts, n_images, &expanded,
                                        &n_expanded, err)
                : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    free(counts);
    free(*ids);
    *ids = expanded;
    *n = n_expanded;
    return st;
}
