/* Cases of ROPE and NORM_ROPE in their three modes (text MRoPE interleaved, vision 2-D,
 * plain NeoX): x a [N, H, D] slice of fused q/k/v rows (as the graphs make it) or contiguous,
 * positions up to 4000, head sizes from 2 (4 for vision) to 128, MRoPE sections that cover
 * all, part or none of the pairs. */
#include "conf.h"

static const struct { int64_t N, H, D; } rope_edges[] = {
    {5, 3, 16}, {7, 2, 38}, {6, 2, 24}, {3, 4, 64}, {13, 3, 40}, {3, 16, 128}, {1, 1, 4}, {1, 2, 2},
};
#define N_ROPE_EDGES ((int)(sizeof rope_edges / sizeof rope_edges[0]))

/* Fills the ROPE half of the parameters for head size D and returns the position rows C. */
static int64_t rope_params(conf_rng *r, int mode, int64_t D, int32_t *mode_out, float *theta,
                           int32_t *sections) {
    static const float thetas[] = {1e4f, 1e6f, 5e6f};
    *mode_out = mode;
    *theta = thetas[conf_irand(r, 0, 2)];
    sections[0] = sections[1] = sections[2] = 0;
    if (mode == QVL_ROPE_MROPE_INTERLEAVED) {
        /* Qwen3-VL uses 24/20/20 of 64 pairs: here random splits of at most D/2 pairs */
        int64_t left = D / 2;
        for (int k = 0; k < 3; k++) {
            sections[k] = (int32_t)conf_irand(r, 0, left);
            left -= sections[k];
        }
    }
    return mode == QVL_ROPE_MROPE_INTERLEAVED ? 3 : mode == QVL_ROPE_VISION_2D ? 2 : 1;
}

static void rope_case(conf_case *c, int i, bool with_norm) {
    conf_rng *r = c->rng;
    int mode = i % 3;
    int64_t N, H, D;
    if (i < N_ROPE_EDGES * 3) {
        N = rope_edges[i / 3].N;
        H = rope_edges[i / 3].H;
        D = rope_edges[i / 3].D;
    } else {
        N = conf_size(r, 20);
        H = conf_irand(r, 1, 5);
        D = 2 * conf_irand(r, 1, 40);
    }
    if (mode == QVL_ROPE_VISION_2D) D = (D + 3) / 4 * 4;
    int64_t C;
    if (with_norm) {
        qvl_norm_rope_params *p = &c->params.norm_rope;
        C = rope_params(r, mode, D, &p->mode, &p->theta, p->sections);
        p->eps = 1e-6f;
    } else {
        qvl_rope_params *p = &c->params.rope;
        C = rope_params(r, mode, D, &p->mode, &p->theta, p->sections);
    }
    conf_describe(c, " mode %d x [%lld, %lld, %lld]", mode, (long long)N, (long long)H, (long long)D);
    if (conf_irand(r, 0, 2) > 0) { /* q or k inside a fused [N, (H + 2H) D] row */
        int64_t W = 3 * H * D;
        int qkv = conf_rand(c, QVL_F32, 2, CONF_SHAPE(N, W), -2, 2);
        c->src[0] = conf_view(c, qkv, 3, CONF_SHAPE(N, H, D), CONF_SHAPE(W, D, 1), H * D);
        conf_describe(c, " in qkv rows");
    } else {
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(N, H, D), -2, 2);
    }
    c->src[1] = conf_rand(c, QVL_I32, 2, CONF_SHAPE(C, N), 0, 4000);
    if (with_norm) {
        c->src[2] = conf_rand(c, conf_small_dtype(r), 1, &D, 0.5f, 1.5f);
        conf_describe(c, " gamma %s", qvl_dtype_name(c->t[c->src[2]].desc.dtype));
    }
    conf_out(c, QVL_F32, 3, CONF_SHAPE(N, H, D));
}

void conf_gen_rope(conf_case *c, int i) { rope_case(c, i, false); }
void conf_gen_norm_rope(conf_case *c, int i) { rope_case(c, i, true); }
