/* Image placeholders in token sequences: expansion and 3-D positions
 * (docs/MODEL.md, "Prompt" and "Multimodal positions"). */
#include "qvl/mm_prompt.h"

#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"

qvl_status qvl_expand_image_pads(const int32_t *ids, int64_t n, int32_t pad_id,
                                 const int64_t *counts, size_t n_images, int32_t **out,
                                 int64_t *n_out, qvl_error *err) {
    *out = NULL;
    *n_out = 0;
    if (n < 0 || (n > 0 && !ids) || (n_images > 0 && !counts))
        return qvl_fail(err, QVL_E_INVALID, "image pads: no ids or counts");
    size_t found = 0;
    int64_t total = n;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != pad_id) continue;
        if (found < n_images) {
            if (counts[found] < 1 || !qvl_add_i64(total, counts[found] - 1, &total) ||
                total > INT32_MAX)
                return qvl_fail(err, QVL_E_LIMIT, "image pads: image %zu: bad token count %lld",
                                found + 1, (long long)counts[found]);
        }
        found++;
    }
    if (found != n_images)
        return qvl_fail(err, QVL_E_INVALID,
                        "the prompt has %zu image placeholders but %zu images were given", found,
                        n_images);
    int32_t *r = malloc((size_t)(total ? total : 1) * sizeof *r);
    if (!r) return qvl_fail(err, QVL_E_NOMEM, "image pads: out of memory");
    int64_t o = 0;
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] != pad_id) {
            r[o++] = ids[i];
            continue;
        }
        for (int64_t j = 0; j < counts[k]; j++) r[o++] = pad_id;
        k++;
    }
    *out = r;
    *n_out = o;
    return QVL_OK;
}

qvl_status qvl_mrope_positions(const int32_t *ids, int64_t n, int32_t pad_id,
                               const qvl_image_grid *grids, size_t n_images, int64_t merge,
                               int64_t start, int32_t *pos, int64_t *next, qvl_error *err) {
    return qvl_mrope_positions_media(ids, n, pad_id, -1, grids, NULL, n_images, merge, start, pos,
                                     next, err);
}

/* What the next pad run must be: media item `item`, frame group `group` of it. */
typedef struct run_cursor {
    size_t item;
    int64_t group;
} run_cursor;

qvl_status qvl_mrope_positions_media(const int32_t *ids, int64_t n, int32_t image_pad,
                                     int32_t video_pad, const qvl_image_grid *grids,
                                     const bool *is_video, size_t n_media, int64_t merge,
                                     int64_t start, int32_t *pos, int64_t *next, qvl_error *err) {
    if (n < 0 || (n > 0 && (!ids || !pos)) || (n_media > 0 && !grids) || merge < 1)
        return qvl_fail(err, QVL_E_INVALID, "positions: bad arguments");
    for (size_t i = 0; i < n_media; i++) {
        const qvl_image_grid *g = &grids[i];
        const bool video = is_video && is_video[i];
        if (g->t < 1 || (!video && g->t != 1) || g->h < merge || g->w < merge || g->h % merge ||
            g->w % merge)
            return qvl_fail(err, QVL_E_INVALID,
                            "positions: %s %zu: grid %lldx%lldx%lld is not %s of whole merge "
                            "windows", video ? "video" : "image", i + 1, (long long)g->t,
                            (long long)g->h, (long long)g->w,
                            video ? "frame groups" : "a still image");
    }
    /* Each frame group of a video is a run of its own, placed as a still image of the video's
     * h x w (get_rope_index splits video grids per group: the timestamps separate them). */
    int64_t cur = start, base = 0, k = 0, hp = 0, wp = 0;
    int32_t run_pad = -1;
    run_cursor rc = {0, 0};
    for (int64_t i = 0; i < n; i++) {
        int64_t t, h, w;
        const bool is_pad = ids[i] == image_pad || (video_pad >= 0 && ids[i] == video_pad);
        if (is_pad && k > 0 && ids[i] != run_pad)
            return qvl_fail(err, QVL_E_INVALID, "positions: token %lld: an image and a video pad "
                            "run touch", (long long)i);
        if (is_pad) {
            if (k == 0) { /* the first pad of the next run */
                if (rc.item >= n_media)
                    return qvl_fail(err, QVL_E_INVALID,
                                    "positions: pad at %lld but only %zu images/videos",
                                    (long long)i, n_media);
                const bool video = is_video && is_video[rc.item];
                const int32_t want = video ? video_pad : image_pad;
                if (ids[i] != want)
                    return qvl_fail(err, QVL_E_INVALID, "positions: token %lld: %s pad where %s "
                                    "%zu belongs", (long long)i,
                                    ids[i] == image_pad ? "an image" : "a video",
                                    video ? "video" : "image", rc.item + 1);
                const qvl_image_grid *g = &grids[rc.item];
                hp = g->h / merge;
                wp = g->w / merge;
                base = cur;
                run_pad = ids[i];
            }
            t = base;
            h = base + k / wp;
            w = base + k % wp;
            if (++k == hp * wp) {
                cur = base + (hp > wp ? hp : wp);
                k = 0;
                if (++rc.group == grids[rc.item].t) {
                    rc.item++;
                    rc.group = 0;
                }
            }
        } else {
            if (k != 0)
                return qvl_fail(err, QVL_E_INVALID,
                                "positions: item %zu has %lld pad tokens in a run, expected %lld",
                                rc.item + 1, (long long)k, (long long)(hp * wp));
            t = h = w = cur++;
        }
        if (h > INT32_MAX || w > INT32_MAX)
            return qvl_fail(err, QVL_E_LIMIT, "positions: position overflows int32");
        pos[i] = (int32_t)t;
        pos[n + i] = (int32_t)h;
        pos[2 * n + i] = (int32_t)w;
    }
    if (k != 0)
        return qvl_fail(err, QVL_E_INVALID,
                        "positions: item %zu has %lld pad tokens in a run, expected %lld",
                        rc.item + 1, (long long)k, (long long)(hp * wp));
    if (rc.item != n_media || rc.group != 0)
        return qvl_fail(err, QVL_E_INVALID,
                        "positions: %zu images/videos given, the tokens hold %zu%s", n_media,
                        rc.item, rc.group ? " and part of another" : "");
    if (next) *next = cur;
    return QVL_OK;
}
