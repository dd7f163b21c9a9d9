/* UTF-8 aware streaming: emit whole characters only. */
#include "qvl/text_stream.h"

#include <string.h>

static const char replacement[] = "\xEF\xBF\xBD";

void qvl_text_stream_init(qvl_text_stream *s, qvl_text_emit_fn emit, void *user) {
    memset(s, 0, sizeof *s);
    s->emit = emit;
    s->user = user;
}

/* Length of the sequence a lead byte starts, 0 for a byte that cannot start one. */
static size_t utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Is b a valid continuation at position i (1-based) of a sequence led by lead? Encodes the
 * overlong/surrogate/range rules of RFC 3629 for the second byte. */
static int utf8_cont_ok(unsigned char lead, size_t i, unsigned char b) {
    if ((b & 0xC0) != 0x80) return 0;
    if (i != 1) return 1;
    if (lead == 0xE0) return b >= 0xA0;
    if (lead == 0xED) return b <= 0x9F;
    if (lead == 0xF0) return b >= 0x90;
    if (lead == 0xF4) return b <= 0x8F;
    return 1;
}

static void emit_replacement(qvl_text_stream *s) { s->emit(replacement, 3, s->user); }

/* Feed one byte through the pending-character state machine. Complete ASCII runs are emitted
 * by the caller in bulk; this handles everything else. */
static void feed_byte(qvl_text_stream *s, unsigned char b) {
    if (s->n_pending > 0) {
        unsigned char lead = s->pending[0];
        if (utf8_cont_ok(lead, s->n_pending, b)) {
            s->pending[s->n_pending++] = b;
            if (s->n_pending == utf8_seq_len(lead)) {
                s->emit((const char *)s->pending, s->n_pending, s->user);
                s->n_pending = 0;
            }
            return;
        }
        /* The pending character can never finish: replace it and look at b afresh. */
        emit_replacement(s);
        s->n_pending = 0;
    }
    size_t len = utf8_seq_len(b);
    if (len == 1) {
        s->emit((const char *)&b, 1, s->user);
    } else if (len == 0) {
        emit_replacement(s);
    } else {
        s->pending[0] = b;
        s->n_pending = 1;
    }
}

void qvl_text_stream_feed(qvl_text_stream *s, const char *bytes, size_t len) {
    const unsigned char *p = (const unsigned char *)bytes;
    size_t i = 0;
    while (i < len) {
        if (s->n_pending == 0 && p[i] < 0x80) { /* a run of ASCII goes out in one call */
            size_t j = i;
            while (j < len && p[j] < 0x80) j++;
            s->emit((const char *)p + i, j - i, s->user);
            i = j;
            continue;
        }
        feed_byte(s, p[i++]);
    }
}

void qvl_text_stream_flush(qvl_text_stream *s) {
    if (s->n_pending > 0) emit_replacement(s);
    s->n_pending = 0;
}
