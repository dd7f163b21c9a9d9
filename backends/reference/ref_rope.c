/* ROPE: rotary position embedding, rotate-half pairing (j, j + D/2), three ways of choosing
 * each pair's angle (see qvl_rope_params in ops.h). NORM_ROPE: each head RMS-normalised
 * exactly as RMS_NORM does (ref_rms_norm_row), then rotated as ROPE does.
 *
 * Angles are computed in f32 the way Hugging Face does: inv_freq = 1 / theta^(exponent) with
 * the exponent and the power in f32, angle = (float)position * inv_freq, then cosf/sinf. */
#include <math.h>
#include <stdlib.h>

#include "ref_ops.h"
#include "ref_math.h"

/* Interleaved MRoPE: which position row (0 = t, 1 = h, 2 = w) drives pair j. */
static int mrope_owner(int64_t j, const int32_t sections[4]) {
    if (j % 3 == 1 && j < 3 * (int64_t)sections[1]) return 1;
    if (j % 3 == 2 && j < 3 * (int64_t)sections[2]) return 2;
    return 0;
}

/* For pair k of a head of D dims: its frequency and which row of pos it reads. */
static void pair_frequency(const qvl_rope_params *p, int64_t D, int64_t k, float *freq,
                           int *pos_row) {
    if (p->mode == QVL_ROPE_VISION_2D) {
        int64_t Q = D / 4; /* first Q pairs follow the patch row, the next Q the column */
        *freq = 1.0f / powf(p->theta, (float)(k % Q) / (float)Q);
        *pos_row = k < Q ? 0 : 1;
    } else {
        *freq = 1.0f / powf(p->theta, (float)(2 * k) / (float)D);
        *pos_row = p->mode == QVL_ROPE_MROPE_INTERLEAVED ? mrope_owner(k, p->sections) : 0;
    }
}

/* Inputs: 0 x [N, H, D], 1 pos [C, N] i32. */

/* Inputs: 0 x, 1 pos as ROPE's, 2 gamma [D]. */

/* Rotates every head of x (RMS-normalised first with gamma32 when it is not NULL). */
static qvl_status run_rope(const qvl_node *n, const qvl_rope_params *p, const qvl_tensor *gamma,
                           float eps, qvl_error *err) {
    const qvl_tensor *x = n->src[0], *pos = n->src[1];
    int64_t N = x->desc.shape[0], H = x->desc.shape[1], D = x->desc.shape[2], half = D / 2;
    float *freq = ref_scratch(half), *cos_a = ref_scratch(half), *sin_a = ref_scratch(half);
    float *row = ref_scratch(D), *g32 = gamma ? ref_scratch(D) : NULL;
    int *pos_row = malloc((size_t)half * sizeof *pos_row);
    qvl_status s = QVL_OK;
    if (!freq || !cos_a || !sin_a || !row || !pos_row || (gamma && !g32)) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for head size %lld", (long long)D);
        goto done;
    }
    if (gamma) qvl_tensor_read_row(gamma, 0, g32);
    for (int64_t k = 0; k < half; k++) pair_frequency(p, D, k, &freq[k], &pos_row[k]);

    float *out = n->dst->data;
    for (int64_t t = 0; t < N; t++) {
        for (int64_t k = 0; k < half; k++) {
            int32_t position = qvl_elem_get_i32(pos, pos_row[k] * pos->desc.stride[0] +
                                                    t * pos->desc.stride[1]);
            float angle = (float)position * freq[k];
            cos_a[k] = cosf(angle);
            sin_a[k] = sinf(angle);
        }
        for (int64_t h = 0; h < H; h++) {
            qvl_elem_gather(x, t * x->desc.stride[0] + h * x->desc.stride[1], x->desc.stride[2], D, row);
            if (gamma) ref_rms_norm_row(row, row, g32, D, eps);
            float *o = out + (t * H + h) * D;
            for (int64_t k = 0; k < half; k++) {
                o[k] = row[k] * cos_a[k] - row[k + half] * sin_a[k];
                o[k + half] = row[k + half] * cos_a[k] + row[k] * sin_a[k];
            }
        }
    }
done:
    free(freq);
    free(cos_a);
    free(sin_a);
    free(row);
    free(g32);
    free(pos_row);
    return s;
}

qvl_status ref_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : run_rope(n, &n->params.rope, NULL, 0.0f, err);
}

qvl_status ref_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    qvl_rope_params rope = qvl_norm_rope_rope(&n->params.norm_rope);
    return run_rope(n, &rope, n->src[2], n->params.norm_rope.eps, err);
}
