/* qvl chat's pictures (chat_pictures.h). */
#define _POSIX_C_SOURCE 200809L

#include "chat_pictures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"
#include "qvl/image.h"
#include "qvl/log.h"
#include "chat_videos.h"

/* One side of the size window and where it came from, for messages. */
typedef struct bound {
    int64_t px;
    bool from_user;
    char what[128];
} bound;

static qvl_status token_pixels(const qvl_picture_rules *r, const char *flag, int64_t tokens,
                               bool is_default, bound *b, qvl_error *err) {
    int64_t px = qvl_picture_tokens_to_pixels(r, tokens);
    if (px < 1) return qvl_fail(err, QVL_E_INVALID, "%s %lld is too large", flag, (long long)tokens);
    b->px = px;
    snprintf(b->what, sizeof b->what, "%s%s %lld (%lld pixels)", is_default ? "the default " : "",
             flag, (long long)tokens, (long long)px);
    return QVL_OK;
}

qvl_status chat_picture_rules(const qvl_picture_rules *base, const run_image_bounds *b,
                              qvl_picture_rules **out, char *cap_what, size_t cap_size,
                              qvl_error *err) {
    int64_t model_min = 0, model_max = 0;
    qvl_picture_window(base, &model_min, &model_max);
    bound lo = {0}, hi = {0}, t = {0};
    qvl_status st;
    if (b->max_pixels_set || b->max_tokens_set) {
        hi.px = INT64_MAX;
        hi.from_user = true;
        if (b->max_pixels_set) {
            hi.px = b->max_pixels;
            snprintf(hi.what, sizeof hi.what, "--max-pixels %lld", (long long)b->max_pixels);
        }
        if (b->max_tokens_set) {
            if ((st = token_pixels(base, "--image-max-tokens", b->max_tokens, false, &t, err)))
                return st;
            if (t.px < hi.px) {
                t.from_user = true;
                hi = t;
            }
        }
    } else {
        hi.px = model_max;
        snprintf(hi.what, sizeof hi.what, "the model's max pixels %lld", (long long)hi.px);
        if ((st = token_pixels(base, "--image-max-tokens", RUN_IMAGE_MAX_TOKENS_DEFAULT, true, &t,
                               err)))
            return st;
        if (t.px < hi.px) hi = t;
    }
    if (b->min_pixels_set || b->min_tokens_set) {
        lo.px = 0;
        lo.from_user = true;
        if (b->min_pixels_set) {
            lo.px = b->min_pixels;
            snprintf(lo.what, sizeof lo.what, "--min-pixels %lld", (long long)b->min_pixels);
        }
        if (b->min_tokens_set) {
            if ((st = token_pixels(base, "--image-min-tokens", b->min_tokens, false, &t, err)))
                return st;
            if (t.px > lo.px) {
                t.from_user = true;
                lo = t;
            }
        }
    } else {
        lo.px = model_min;
        snprintf(lo.what, sizeof lo.what, "the model's min pixels %lld", (long long)lo.px);
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
    if (!(*out = qvl_picture_rules_with_window(base, lo.px, hi.px)))
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    snprintf(cap_what, cap_size, "%s", hi.what);
    return QVL_OK;
}

qvl_status chat_picture_plan(const qvl_picture_rules *r, const char *path, size_t number,
                             bool quiet, const char *cap_what, chat_picture *out,
                             qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (!(out->path = strdup(path))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_status st = qvl_read_file(path, (size_t)INT32_MAX, QVL_E_IO, &out->file, &out->file_size,
                                  err);
    if (st == QVL_OK)
        st = qvl_image_probe(out->file, out->file_size, path, &out->width, &out->height, err);
    qvl_picture_plan plan;
    if (st == QVL_OK) {
        st = qvl_picture_plan_for(r, out->width, out->height, 0, &plan, err);
        if (st != QVL_OK) qvl_error_prefix(err, "%s", path);
    }
    if (st != QVL_OK) {
        chat_picture_free(out);
        return st;
    }
    out->n_tokens = plan.n_tokens;
    if (quiet) return QVL_OK;
    /* The same window without its upper bound tells whether the bound scaled it down. */
    int64_t lo = 0, hi = 0;
    qvl_picture_window(r, &lo, &hi);
    qvl_picture_rules *uncapped = qvl_picture_rules_with_window(r, lo, INT64_MAX);
    qvl_picture_plan full;
    qvl_error ignore = {0};
    const bool capped = uncapped &&
                        qvl_picture_plan_for(uncapped, out->width, out->height, 0, &full,
                                             &ignore) == QVL_OK &&
                        full.n_tokens > out->n_tokens;
    qvl_picture_rules_free(uncapped);
    fprintf(stderr, "image %zu: %dx%d -> %lld tokens%s%s%s\n", number, out->width, out->height,
            (long long)out->n_tokens, capped ? " (scaled down to fit " : "",
            capped ? cap_what : "", capped ? ")" : "");
    return QVL_OK;
}

qvl_status chat_picture_make(const qvl_picture_rules *r, const qvl_video_rules *vr,
                             chat_picture *p, qvl_error *err) {
    if (p->made) return QVL_OK;
    if (p->is_video) return chat_video_make(vr, p, err);
    qvl_image img;
    qvl_status st = qvl_image_decode(p->file, p->file_size, p->path, &img, err);
    if (st == QVL_OK) st = qvl_picture_make(r, &img, &p->pic, err); /* frees img */
    if (st == QVL_OK && p->pic.n_tokens != p->n_tokens) {
        qvl_picture_free(&p->pic);
        st = qvl_fail(err, QVL_E_MISMATCH, "%s: the preprocessed picture differs from its plan",
                      p->path);
    }
    if (st != QVL_OK) return st;
    free(p->file);
    p->file = NULL;
    p->file_size = 0;
    p->made = true;
    return QVL_OK;
}

void chat_picture_free(chat_picture *p) {
    if (p->made) qvl_picture_free(&p->pic);
    for (size_t i = 0; p->frames && i < p->n_frames; i++) free(p->frames[i]);
    free(p->frames);
    free(p->kept);
    free(p->text);
    free(p->file);
    free(p->path);
    memset(p, 0, sizeof *p);
}
