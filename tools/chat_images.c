/* Joining the pictures of several messages (chat_images.h). */
#include "chat_images.h"

#include <stdlib.h>
#include <string.h>

/* Features in qvl_image_features' layout: the merger rows of all parts in order, then each
 * deepstack set as one block holding that set's rows of all parts in order. */
static qvl_status join_features(run_images *const *parts, size_t n_parts, run_images *out,
                                qvl_error *err) {
    int64_t rows = 0, hidden = -1;
    int32_t sets = -1;
    for (size_t p = 0; p < n_parts; p++) {
        const qvl_image_features *f = &parts[p]->feats;
        if (parts[p]->n == 0) continue;
        if (f->n_tokens != parts[p]->total_tokens)
            return qvl_fail(err, QVL_E_INVALID, "a picture of the conversation is not encoded");
        if (hidden >= 0 && (f->hidden != hidden || f->n_deepstack != sets))
            return qvl_fail(err, QVL_E_SHAPE, "feature shapes differ between pictures");
        hidden = f->hidden;
        sets = f->n_deepstack;
        rows += f->n_tokens;
    }
    qvl_image_features *o = &out->feats;
    memset(o, 0, sizeof *o);
    if (rows == 0) return QVL_OK;
    o->embeds = malloc((size_t)(rows * hidden) * sizeof *o->embeds);
    o->deepstack = sets > 0 ? malloc((size_t)(sets * rows * hidden) * sizeof *o->deepstack) : NULL;
    if (!o->embeds || (sets > 0 && !o->deepstack)) {
        qvl_image_features_free(o);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for the pictures' features");
    }
    o->n_tokens = rows;
    o->hidden = hidden;
    o->n_deepstack = sets;
    int64_t at = 0;
    for (size_t p = 0; p < n_parts; p++) {
        const qvl_image_features *f = &parts[p]->feats;
        if (parts[p]->n == 0) continue;
        const size_t bytes = (size_t)(f->n_tokens * hidden) * sizeof(float);
        memcpy(o->embeds + at * hidden, f->embeds, bytes);
        for (int32_t k = 0; k < sets; k++)
            memcpy(o->deepstack + (k * rows + at) * hidden, f->deepstack + k * f->n_tokens * hidden,
                   bytes);
        o->seconds += f->seconds;
        at += f->n_tokens;
    }
    return QVL_OK;
}

qvl_status chat_images_join(run_images *const *parts, size_t n_parts, bool with_features,
                            run_images *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    size_t n = 0;
    for (size_t p = 0; p < n_parts; p++) n += parts[p]->n;
    if (n == 0) return QVL_OK;
    out->grids = malloc(n * sizeof *out->grids);
    out->tokens = malloc(n * sizeof *out->tokens);
    if (!out->grids || !out->tokens) {
        run_images_free(out);
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    for (size_t p = 0; p < n_parts; p++) {
        const run_images *im = parts[p];
        if (im->n == 0) continue;
        if (out->n == 0) {
            out->pad_id = im->pad_id;
            out->pc = im->pc;
        }
        memcpy(out->grids + out->n, im->grids, im->n * sizeof *im->grids);
        memcpy(out->tokens + out->n, im->tokens, im->n * sizeof *im->tokens);
        out->n += im->n;
        out->total_tokens += im->total_tokens;
    }
    qvl_status st = with_features ? join_features(parts, n_parts, out, err) : QVL_OK;
    if (st != QVL_OK) run_images_free(out);
    return st;
}
