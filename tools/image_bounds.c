/* A picture's size window from the image processor's file and the --image-* / --*-pixels flags
 * (image_bounds.h): shared by qvl run and qvl-bench so both resize a picture alike. */
#include "image_bounds.h"

#include <stdint.h>
#include <stdio.h>

#include "qvl/log.h"

/* One side of the size window and where it came from, for messages. */
typedef struct bound {
    int64_t px;
    bool from_user;
    char what[128];
} bound;

static void describe_tokens(bound *b, const char *flag, bool is_default, int64_t tokens,
                            int64_t px) {
    snprintf(b->what, sizeof b->what, "%s%s %lld (%lld pixels)", is_default ? "the default " : "",
             flag, (long long)tokens, (long long)px);
}

static qvl_status token_pixels(const qvl_preprocess_config *pc, const char *flag, int64_t tokens,
                               int64_t *px, qvl_error *err) {
    *px = qvl_preprocess_tokens_to_pixels(pc, tokens);
    if (*px < 1) return qvl_fail(err, QVL_E_INVALID, "%s %lld is too large", flag, (long long)tokens);
    return QVL_OK;
}

/* Flags replace the file's bound; with no flag for the largest size the processor's maximum is
 * capped at the default token budget (the processor alone allows 16.7 Mpixel: 16384 tokens). */
qvl_status image_bounds_resolve(const run_image_bounds *b, const char *source,
                               qvl_preprocess_config *pc, char *cap_what, size_t cap_size,
                               qvl_error *err) {
    bound lo = {0}, hi = {0};
    int64_t px;
    qvl_status st;
    if (b->max_pixels_set || b->max_tokens_set) {
        hi.px = INT64_MAX;
        hi.from_user = true;
        if (b->max_pixels_set) {
            hi.px = b->max_pixels;
            snprintf(hi.what, sizeof hi.what, "--max-pixels %lld", (long long)b->max_pixels);
        }
        if (b->max_tokens_set) {
            if ((st = token_pixels(pc, "--image-max-tokens", b->max_tokens, &px, err))) return st;
            if (px < hi.px) {
                hi.px = px;
                describe_tokens(&hi, "--image-max-tokens", false, b->max_tokens, px);
            }
        }
    } else {
        hi.px = pc->max_pixels;
        snprintf(hi.what, sizeof hi.what, "%s's max pixels %lld", source, (long long)hi.px);
        if ((st = token_pixels(pc, "--image-max-tokens", RUN_IMAGE_MAX_TOKENS_DEFAULT, &px, err)))
            return st;
        if (px < hi.px) {
            hi.px = px;
            describe_tokens(&hi, "--image-max-tokens", true, RUN_IMAGE_MAX_TOKENS_DEFAULT, px);
        }
    }
    if (b->min_pixels_set || b->min_tokens_set) {
        lo.px = 0;
        lo.from_user = true;
        if (b->min_pixels_set) {
            lo.px = b->min_pixels;
            snprintf(lo.what, sizeof lo.what, "--min-pixels %lld", (long long)b->min_pixels);
        }
        if (b->min_tokens_set) {
            if ((st = token_pixels(pc, "--image-min-tokens", b->min_tokens, &px, err))) return st;
            if (px > lo.px) {
                lo.px = px;
                describe_tokens(&lo, "--image-min-tokens", false, b->min_tokens, px);
            }
        }
    } else {
        lo.px = pc->min_pixels;
        snprintf(lo.what, sizeof lo.what, "%s's min pixels %lld", source, (long long)lo.px);
    }
    /* A bound the user gave wins over one they did not: the other follows it. */
    if (lo.px > hi.px && hi.from_user && !lo.from_user) {
        QVL_LOG_I("%s is below %s: the minimum follows it", hi.what, lo.what);
        lo.px = hi.px;
    } else if (lo.px > hi.px && lo.from_user && !hi.from_user) {
        QVL_LOG_I("%s exceeds %s: the maximum follows it", lo.what, hi.what);
        hi.px = lo.px;
        snprintf(hi.what, sizeof hi.what, "%s", lo.what);
    } else if (lo.px > hi.px) {
        return qvl_fail(err, QVL_E_INVALID, "%s exceeds %s", lo.what, hi.what);
    }
    pc->min_pixels = lo.px;
    pc->max_pixels = hi.px;
    snprintf(cap_what, cap_size, "%s", hi.what);
    return QVL_OK;
}
