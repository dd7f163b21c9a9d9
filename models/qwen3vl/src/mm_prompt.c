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
    if (n < 0 || (n > 0 && (!ids || !pos)) || (n_images > 0 && !grids) || merge < 1)
        return qvl_fail(err, QVL_E_INVALID, "positions: bad arguments");
    int64_t cur = start, base = 0, k = 0, hp = 0, wp = 0;
    size_t img = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t t, h, w;
        if (ids[i] == pad_id) {
            if (k == 0) { /* the first pad of the next image */
                if (img >= n_images)
                    return qvl_fail(err, QVL_E_INVALID,
                                    "positions: image pad at %lld but only %zu images", (long long)i,
                                    n_images);
                const qvl_image_grid *g = &grids[img];
                if (g->t != 1 || g->h < merge || g->w < merge || g->h % merge || g->w % merge)
                    return qvl_fail(err, QVL_E_INVALID,
                                    "positions: image %zu: grid %lldx%lldx%lld is not a still image "
                                    "of whole merge windows", img + 1, (long long)g->t,
                                    (long long)g->h, (long long)g->w);
                hp = g->h / merge;
                wp = g->w / merge;
                base = cur;
            }
            t = base;
            h = base + k / wp;
            w = base + k % wp;
            if (++k == hp * wp) {
                cur = base + (hp > wp ? hp : wp);
                k = 0;
                img++;
            }
        } else {
            if (k != 0)
                return qvl_fail(err, QVL_E_INVALID,
                                "positions: image %zu has %lld pad tokens, expected %lld", img + 1,
                                (long long)k, (long long)(hp * wp));
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
                        "positions: image %zu has %lld pad tokens, expected %lld", img + 1,
                        (long long)k, (long long)(hp * wp));
    if (img != n_images)
        return qvl_fail(err, QVL_E_INVALID, "positions: %zu images given, %zu in the tokens",
                        n_images, img);
    if (next) *next = cur;
    return QVL_OK;
}
