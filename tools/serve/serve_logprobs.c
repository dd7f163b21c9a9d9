/* The logprobs object (serve_logprobs.h). */
#include "serve_logprobs.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the well-formed UTF-8 character at b[0, n), or 0 (NUL counts as ill-formed: the
 * text goes through cJSON as a C string). */
static size_t utf8_char(const unsigned char *b, size_t n) {
    const unsigned c = b[0];
    if (c == 0) return 0;
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;        /* no overlong forms */
        if (c == 0xED) hi = 0x9F;        /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;        /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || b[1] < lo || b[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (b[i] < 0x80 || b[i] > 0xBF) return 0;
    return len;
}

/* bytes as text: well-formed characters copied, every other byte U+FFFD. */
static char *as_text(const char *bytes, size_t n) {
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    const unsigned char *b = (const unsigned char *)bytes;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_char(b + i, n - i);
        if (k == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        } else {
            memcpy(out + o, b + i, k);
            o += k;
            i += k;
        }
    }
    out[o] = '\0';
    return out;
}

/* {"token", "logprob", "bytes"} of token id into obj. */
static bool add_token(qvl_engine *e, cJSON *obj, int32_t id, float logprob) {
    const char *bytes = "";
    size_t len = 0;
    if (!qvl_engine_token_bytes(e, id, &bytes, &len)) len = 0;
    char *text = as_text(bytes, len); /* as serve_token_text, but the bytes are needed too */
    bool ok = text && cJSON_AddStringToObject(obj, "token", text);
    /* OpenAI writes -9999.0 for a probability that underflows */
    ok = ok && cJSON_AddNumberToObject(obj, "logprob", isfinite(logprob) ? logprob : -9999.0);
    cJSON *arr = ok ? serve_bytes_json(bytes, len) : NULL;
    ok = arr && cJSON_AddItemToObject(obj, "bytes", arr);
    if (!ok) cJSON_Delete(arr);
    free(text);
    return ok;
}

cJSON *serve_bytes_json(const char *bytes, size_t n) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *v = cJSON_CreateNumber((unsigned char)bytes[i]);
        if (!v || !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

bool serve_utf8_whole(const char *bytes, size_t n) {
    const unsigned char *b = (const unsigned char *)bytes;
    for (size_t i = 0; i < n;) {
        const size_t k = utf8_char(b + i, n - i);
        if (k == 0) return false;
        i += k;
    }
    return true;
}

char *serve_token_text(qvl_engine *e, int32_t id) {
    const char *bytes = "";
    size_t len = 0;
    if (!qvl_engine_token_bytes(e, id, &bytes, &len)) len = 0;
    return as_text(bytes, len);
}

/* Appends a number, or a string (taken) to arr. */
static bool push_number(cJSON *arr, double v) {
    cJSON *x = cJSON_CreateNumber(v);
    if (x && cJSON_AddItemToArray(arr, x)) return true;
    cJSON_Delete(x);
    return false;
}

cJSON *serve_logprobs_legacy_json(qvl_engine *e, const qvl_token_logprob *lp, size_t n,
                                  size_t offset) {
    cJSON *root = cJSON_CreateObject();
    cJSON *tokens = root ? cJSON_AddArrayToObject(root, "tokens") : NULL;
    cJSON *lps = tokens ? cJSON_AddArrayToObject(root, "token_logprobs") : NULL;
    cJSON *tops = lps ? cJSON_AddArrayToObject(root, "top_logprobs") : NULL;
    cJSON *offsets = tops ? cJSON_AddArrayToObject(root, "text_offset") : NULL;
    bool ok = offsets != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        char *text = serve_token_text(e, lp[i].id);
        cJSON *t = text ? cJSON_CreateString(text) : NULL;
        free(text);
        ok = t && cJSON_AddItemToArray(tokens, t);
        if (!ok) cJSON_Delete(t);
        ok = ok && push_number(lps, isfinite(lp[i].logprob) ? lp[i].logprob : -9999.0) &&
             push_number(offsets, (double)(i == 0 ? offset : lp[i - 1].end));
        cJSON *top = ok ? cJSON_CreateObject() : NULL;
        ok = top && cJSON_AddItemToArray(tops, top);
        if (!ok) cJSON_Delete(top);
        for (int k = 0; ok && k < lp[i].n_top; k++) {
            char *alt = serve_token_text(e, lp[i].top_id[k]);
            const float v = lp[i].top_logprob[k];
            ok = alt && cJSON_AddNumberToObject(top, alt, isfinite(v) ? v : -9999.0);
            free(alt);
        }
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *serve_logprobs_json(qvl_engine *e, const qvl_token_logprob *lp, size_t n) {
    cJSON *root = cJSON_CreateObject();
    cJSON *content = root ? cJSON_AddArrayToObject(root, "content") : NULL;
    bool ok = content && cJSON_AddNullToObject(root, "refusal");
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        ok = t && cJSON_AddItemToArray(content, t);
        if (!ok) {
            cJSON_Delete(t);
            break;
        }
        cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
        ok = top && add_token(e, t, lp[i].id, lp[i].logprob);
        for (int k = 0; ok && k < lp[i].n_top; k++) {
            cJSON *a = cJSON_CreateObject();
            ok = a && cJSON_AddItemToArray(top, a);
            if (!ok) cJSON_Delete(a);
            ok = ok && add_token(e, a, lp[i].top_id[k], lp[i].top_logprob[k]);
        }
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

cJSON *serve_logprobs_of(qvl_engine *e, serve_api api, const qvl_token_logprob *lp, size_t n,
                         size_t offset) {
    return api == SERVE_API_TEXT ? serve_logprobs_legacy_json(e, lp, n, offset)
                                 : serve_logprobs_json(e, lp, n);
}
