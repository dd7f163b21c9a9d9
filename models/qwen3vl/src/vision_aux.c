/* Host-side inputs of the vision graph that depend only on the image grids (docs/MODEL.md,
 * "Vision encoder"): the four bilinear taps into the learned position table, the (row, col) of
 * every patch for the 2-D rope, and the attention segment bounds. Patches are in merge-window
 * order (docs/MODEL.md, "Patch order"). */
#include <stdint.h>

#include "qvl/checked.h"
#include "qvl/qwen3vl_graph.h"

/* torch.linspace(0, end, steps) in float32, element i (torch's scalar formula: the first half
 * counts up from the start, the second half down from the end, so the last value is exact). */
static float linspace_f32(float end, int64_t steps, int64_t i) {
    if (steps <= 1) return 0.0f;
    float step = end / (float)(steps - 1);
    if (i < steps / 2) return step * (float)i;
    return end - step * (float)(steps - i - 1);
}

/* Grid row/col of the patch at window-order index s within one frame of an h x w grid. */
static void window_to_grid(int64_t s, int64_t w, int64_t m, int64_t *row, int64_t *col) {
    int64_t win = s / (m * m), u = s % (m * m);
    int64_t wins_per_row = w / m;
    *row = (win / wins_per_row) * m + u / m;
    *col = (win % wins_per_row) * m + u % m;
}

static int64_t isqrt64(int64_t n) {
    int64_t r = 0;
    while ((r + 1) * (r + 1) <= n) r++;
    return r;
}

qvl_status qvl_qwen3vl_vision_aux(const qvl_qwen3vl_config *cfg, size_t n_images,
                                  const qvl_image_grid *grids, int32_t *pos_idx, float *pos_w,
                                  int32_t *rope_pos, int32_t *segments, qvl_error *err) {
    if (!cfg || !cfg->has_vision)
        return qvl_fail(err, QVL_E_INVALID, "vision aux: the config has no vision_config");
    if (n_images == 0 || !grids) return qvl_fail(err, QVL_E_INVALID, "vision aux: no images");
    if (!pos_idx || !pos_w || !rope_pos || !segments)
        return qvl_fail(err, QVL_E_INVALID, "vision aux: output arrays missing");
    const int64_t m = cfg->vision.spatial_merge_size;

    /* Check every grid and the totals before writing anything. */
    int64_t S = 0;
    for (size_t i = 0; i < n_images; i++) {
        const qvl_image_grid *g = &grids[i];
        if (g->t < 1 || g->h < 1 || g->w < 1 || g->h % m != 0 || g->w % m != 0)
            return qvl_fail(err, QVL_E_INVALID,
                            "vision aux: image %zu: grid %lldx%lldx%lld must be positive with h "
                            "and w multiples of spatial_merge_size %lld",
                            i, (long long)g->t, (long long)g->h, (long long)g->w, (long long)m);
        int64_t n = 0;
        if (!qvl_mul_i64(g->t, g->h, &n) || !qvl_mul_i64(n, g->w, &n) || !qvl_add_i64(S, n, &S) ||
            S > INT32_MAX)
            return qvl_fail(err, QVL_E_LIMIT, "vision aux: too many patches (image %zu)", i);
    }

    const int64_t side = isqrt64(cfg->vision.num_position_embeddings);
    const float end = (float)(side - 1);
    int64_t base = 0; /* first patch of the current frame */
    size_t seg = 0;
    segments[seg++] = 0;
    for (size_t i = 0; i < n_images; i++) {
        const int64_t h = grids[i].h, w = grids[i].w, hw = h * w;
        for (int64_t tg = 0; tg < grids[i].t; tg++) {
            for (int64_t s = 0; s < hw; s++) {
                int64_t row, col;
                window_to_grid(s, w, m, &row, &col);
                const int64_t at = base + s;
                rope_pos[at] = (int32_t)row;
                rope_pos[S + at] = (int32_t)col;

                float y = linspace_f32(end, h, row), x = linspace_f32(end, w, col);
                int64_t y0 = (int64_t)y, x0 = (int64_t)x; /* non-negative: truncation = floor */
                int64_t y1 = y0 + 1 < side ? y0 + 1 : side - 1;
                int64_t x1 = x0 + 1 < side ? x0 + 1 : side - 1;
                float dy = y - (float)y0, dx = x - (float)x0;
                pos_idx[0 * S + at] = (int32_t)(y0 * side + x0);
                pos_idx[1 * S + at] = (int32_t)(y0 * side + x1);
                pos_idx[2 * S + at] = (int32_t)(y1 * side + x0);
                pos_idx[3 * S + at] = (int32_t)(y1 * side + x1);
                pos_w[0 * S + at] = (1.0f - dy) * (1.0f - dx);
                pos_w[1 * S + at] = (1.0f - dy) * dx;
                pos_w[2 * S + at] = dy * (1.0f - dx);
                pos_w[3 * S + at] = dy * dx;
            }
            base += hw;
            segments[seg++] = (int32_t)base;
        }
    }
    return QVL_OK;
}
