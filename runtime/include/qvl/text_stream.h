/* Streaming generated text without splitting UTF-8 characters.
 *
 * Tokens are byte sequences; one character may straddle two tokens. The stream holds back the
 * bytes of an unfinished character until the rest arrives, emits only complete characters, and
 * replaces bytes that can never form a valid character with U+FFFD. */
#ifndef QVL_TEXT_STREAM_H
#define QVL_TEXT_STREAM_H

#include <stddef.h>

typedef void (*qvl_text_emit_fn)(const char *text, size_t len, void *user);

typedef struct qvl_text_stream {
    unsigned char pending[4]; /* start of an unfinished character */
    size_t n_pending;
    qvl_text_emit_fn emit;
    void *user;
} qvl_text_stream;

void qvl_text_stream_init(qvl_text_stream *s, qvl_text_emit_fn emit, void *user);
void qvl_text_stream_feed(qvl_text_stream *s, const char *bytes, size_t len);
/* End of text: an unfinished character becomes U+FFFD. */
void qvl_text_stream_flush(qvl_text_stream *s);

#endif
