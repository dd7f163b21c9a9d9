/* Cases of ATTENTION (masks none, causal, segments, causal_at; grouped kv heads; f32, f16,
 * bf16 and q8_0 caches) and of the masks alone (MASK_CAUSAL, MASK_SEGMENTS, MASK_CAUSAL_AT). For
 * CAUSAL_AT the cache rows at and past at + N hold NaN: rows not written yet, which ops.h says
 * are never read (one NaN read poisons the output). */
#include <math.h>

#include "conf.h"

/* Segment bounds [G+1] for n positions: 0 = b0 <= b1 <= ... <= bG = n (empty segments
 * allowed), G random in 1..4. Returns the tensor. */
static int random_segments(conf_case *c, int64_t n) {
    int32_t b[5];
    int64_t G = conf_irand(c->rng, 1, 4);
    b[0] = 0;
    for (int64_t g = 1; g < G; g++) b[g] = (int32_t)conf_irand(c->rng, b[g - 1], n);
    b[G] = (int32_t)n;
    conf_describe(c, " seg");
    for (int64_t g = 0; g <= G; g++) conf_describe(c, "%s%d", g ? "," : " ", (int)b[g]);
    return conf_i32(c, G + 1, b);
}

/* Rows [from, L) of a [L, H, D] cache (through its descriptor) set to NaN. */
static void poison_rows(conf_case *c, int t, int64_t from) {
    const qvl_tensor_desc *d = &c->t[t].desc;
    int64_t row = d->shape[1] * d->shape[2];
    for (int64_t e = from * row; e < d->shape[0] * row; e++) conf_set(c, t, e, NAN);
}

/* ---- ATTENTION ---- */

typedef struct att_shape {
    int64_t N, L, Hq, Hkv, D;
    int mask;
    int64_t past; /* n_past (causal) or at (causal_at) */
    qvl_dtype kv;
    float range; /* q and k values in +-range: 20 gives scores in the hundreds */
} att_shape;

/* Decode, prefill and vision shapes past the blocks of known kernels: cpu_avx2's key chunks
 * of 256 and query tiles of 6, cuda_sm61's split-KV decode, flash (head sizes 64 and 128) and
 * tiled kernels; odd head sizes; long caches mostly idle or mostly busy. */
static const att_shape att_edges[] = {
    {1, 37, 4, 2, 64, QVL_MASK_CAUSAL, 36, QVL_F16, 2},
    {7, 7, 2, 1, 16, QVL_MASK_CAUSAL, 0, QVL_F32, 2},
    {5, 12, 6, 2, 128, QVL_MASK_CAUSAL, 7, QVL_BF16, 2},
    {11, 11, 3, 3, 40, QVL_MASK_NONE, 0, QVL_F32, 2},
    {11, 11, 2, 2, 72, QVL_MASK_SEGMENTS, 0, QVL_F16, 2},
    {2, 300, 2, 1, 33, QVL_MASK_NONE, 0, QVL_F32, 2},
    {1, 1000, 2, 1, 64, QVL_MASK_NONE, 0, QVL_F16, 2},
    {1, 2000, 4, 2, 128, QVL_MASK_CAUSAL, 1999, QVL_F32, 2},
    {1, 2000, 4, 2, 128, QVL_MASK_CAUSAL_AT, 700, QVL_BF16, 2},
    {1, 600, 16, 8, 128, QVL_MASK_CAUSAL, 517, QVL_F16, 2},
    {130, 130, 3, 3, 64, QVL_MASK_NONE, 0, QVL_F32, 2},
    {100, 300, 4, 2, 40, QVL_MASK_CAUSAL, 200, QVL_F16, 2},
    {150, 150, 2, 2, 64, QVL_MASK_SEGMENTS, 0, QVL_BF16, 2},
    {150, 150, 4, 2, 128, QVL_MASK_SEGMENTS, 0, QVL_F16, 2},
    {77, 200, 4, 2, 128, QVL_MASK_CAUSAL, 123, QVL_F32, 2},
    {17, 17, 2, 1, 128, QVL_MASK_NONE, 0, QVL_BF16, 2},
    {1, 4096, 2, 1, 128, QVL_MASK_CAUSAL_AT, 3000, QVL_F32, 2},
    {1, 4096, 16, 8, 128, QVL_MASK_CAUSAL_AT, 100, QVL_F16, 2},
    {2, 2048, 8, 2, 64, QVL_MASK_CAUSAL_AT, 1500, QVL_BF16, 2},
    {80, 400, 4, 2, 64, QVL_MASK_CAUSAL_AT, 250, QVL_F16, 2},
    {45, 300, 4, 1, 128, QVL_MASK_CAUSAL_AT, 190, QVL_BF16, 2},
    {3, 300, 2, 2, 40, QVL_MASK_CAUSAL_AT, 0, QVL_F32, 2},
    {1, 100, 6, 2, 20, QVL_MASK_CAUSAL, 99, QVL_F32, 1},
    {80, 80, 4, 2, 64, QVL_MASK_SEGMENTS, 0, QVL_F32, 20},
    {9, 40, 4, 4, 64, QVL_MASK_CAUSAL, 31, QVL_F32, 20},
    {301, 600, 4, 2, 40, QVL_MASK_CAUSAL, 299, QVL_F32, 1},
    {1100, 1100, 1, 1, 64, QVL_MASK_SEGMENTS, 0, QVL_F32, 1},
    {13, 700, 2, 2, 24, QVL_MASK_NONE, 0, QVL_BF16, 1},
    {20, 700, 2, 2, 64, QVL_MASK_NONE, 0, QVL_F32, 20},
    {40, 600, 2, 1, 128, QVL_MASK_CAUSAL, 560, QVL_F32, 20},
    /* cuda_sm61's decode kernel serves 4, 2 or 1 query heads of a kv head per block: 8 per kv
     * head (two blocks of 4), 3 (blocks of 1), 1, and a few queries under segments */
    {1, 1000, 16, 2, 128, QVL_MASK_CAUSAL_AT, 900, QVL_F16, 2},
    {1, 300, 4, 1, 128, QVL_MASK_CAUSAL, 299, QVL_BF16, 20},
    {2, 500, 6, 2, 128, QVL_MASK_CAUSAL, 400, QVL_F32, 2},
    {1, 700, 3, 3, 128, QVL_MASK_NONE, 0, QVL_F16, 2},
    {4, 4, 4, 2, 128, QVL_MASK_SEGMENTS, 0, QVL_BF16, 2},
    /* cuda_sm61's flash kernel for f32 heads of 64 (warps owning 16 queries, tiles of 64
     * keys): a block with one valid query, segments inside blocks, causal and causal_at
     * tiles half hidden, scores in the hundreds, many tiles */
    {33, 33, 2, 2, 64, QVL_MASK_NONE, 0, QVL_F32, 2},
    {200, 200, 4, 2, 64, QVL_MASK_SEGMENTS, 0, QVL_F32, 2},
    {100, 300, 4, 2, 64, QVL_MASK_CAUSAL, 200, QVL_F32, 20},
    {70, 500, 2, 1, 64, QVL_MASK_CAUSAL_AT, 400, QVL_F32, 2},
    {65, 1000, 2, 2, 64, QVL_MASK_NONE, 0, QVL_F32, 20},
    /* cpu_avx2's tiled path (f32 score tiles of 6 queries x 16 keys, chunks of 256 keys)
     * with scores in the hundreds: segments cutting tiles and chunks, head sizes that are not
     * multiples of 16, a last chunk and a last tile part full */
    {523, 523, 2, 2, 64, QVL_MASK_SEGMENTS, 0, QVL_F32, 20},
    {301, 301, 3, 1, 40, QVL_MASK_SEGMENTS, 0, QVL_BF16, 20},
    {97, 97, 2, 2, 33, QVL_MASK_NONE, 0, QVL_F16, 20},
    {530, 530, 2, 2, 80, QVL_MASK_NONE, 0, QVL_F32, 20},
    /* q8_0 caches: decode (split and unsplit), prefill through the flash (64, 128), tiled
     * (<= 64) and general kernels, grouped heads, segments */
    {1, 300, 4, 2, 128, QVL_MASK_CAUSAL_AT, 200, QVL_Q8_0, 2},
    {1, 4096, 16, 8, 128, QVL_MASK_CAUSAL_AT, 3000, QVL_Q8_0, 2},
    {1, 37, 4, 2, 64, QVL_MASK_CAUSAL, 36, QVL_Q8_0, 2},
    {40, 200, 4, 2, 128, QVL_MASK_CAUSAL, 150, QVL_Q8_0, 2},
    {130, 130, 4, 1, 64, QVL_MASK_CAUSAL, 0, QVL_Q8_0, 2},
    {70, 70, 2, 2, 32, QVL_MASK_CAUSAL, 0, QVL_Q8_0, 20},
    {3, 100, 6, 2, 96, QVL_MASK_CAUSAL_AT, 50, QVL_Q8_0, 2},
    {11, 11, 2, 2, 64, QVL_MASK_SEGMENTS, 0, QVL_Q8_0, 2},
    {80, 400, 4, 2, 128, QVL_MASK_CAUSAL_AT, 250, QVL_Q8_0, 20},
    {1, 2000, 8, 1, 128, QVL_MASK_CAUSAL_AT, 1800, QVL_Q8_0, 2},
};
#define N_ATT_EDGES ((int)(sizeof att_edges / sizeof att_edges[0]))

static att_shape random_att(conf_rng *r) {
    static const int64_t heads[] = {8, 16, 24, 33, 40, 64, 72, 128};
    att_shape s;
    int64_t Hkv = conf_irand(r, 1, 3);
    s.Hkv = Hkv;
    s.Hq = Hkv * conf_irand(r, 1, 3);
    s.D = conf_irand(r, 0, 3) ? heads[conf_irand(r, 0, 7)] : 2 * conf_irand(r, 1, 40);
    s.mask = (int)conf_irand(r, 0, 3);
    s.N = conf_size(r, 40);
    s.L = s.mask == QVL_MASK_SEGMENTS ? s.N : s.N + conf_irand(r, 0, 300);
    s.past = s.mask == QVL_MASK_CAUSAL || s.mask == QVL_MASK_CAUSAL_AT ? conf_irand(r, 0, s.L - s.N) : 0;
    s.kv = conf_small_dtype(r);
    if (s.D % QVL_Q8_0_BLOCK == 0 && (s.N + s.L) % 4 == 0) s.kv = QVL_Q8_0; /* no extra draw */
    s.range = conf_irand(r, 0, 4) ? 2.0f : 20.0f;
    return s;
}

void conf_gen_attention(conf_case *c, int i) {
    conf_rng *r = c->rng;
    att_shape s = i < N_ATT_EDGES ? att_edges[i] : random_att(r);
    static const char *const masks[] = {"none", "causal", "segments", "causal_at"};
    c->params.attention.scale = 1.0f / sqrtf((float)s.D);
    c->params.attention.mask = s.mask;
    c->params.attention.n_past = s.mask == QVL_MASK_CAUSAL ? s.past : 0;
    conf_describe(c, " %s N=%lld L=%lld Hq=%lld Hkv=%lld D=%lld past=%lld kv %s range %g",
                  masks[s.mask], (long long)s.N, (long long)s.L, (long long)s.Hq, (long long)s.Hkv,
                  (long long)s.D, (long long)s.past, qvl_dtype_name(s.kv), (double)s.range);
    /* q as a slice of a wider row at an offset (the fused qkv output) */
    int64_t W = s.Hq * s.D + 3;
    int qrow = conf_rand(c, QVL_F32, 2, CONF_SHAPE(s.N, W), -s.range, s.range);
    c->src[0] = conf_view(c, qrow, 3, CONF_SHAPE(s.N, s.Hq, s.D), CONF_SHAPE(W, s.D, 1), 3);
    if (conf_irand(r, 0, 3) == 0) { /* k and v rows a 4-element load cannot take */
        /* q8_0: views start on a block, rows a block or two wider than the heads */
        int64_t pad = s.kv == QVL_Q8_0 ? QVL_Q8_0_BLOCK : 1;
        int64_t row = s.Hkv * s.D + 2 * pad;
        int kb = conf_rand(c, s.kv, 2, CONF_SHAPE(s.L, row), -s.range, s.range);
        int vb = conf_rand(c, s.kv, 2, CONF_SHAPE(s.L, row), -1, 1);
        c->src[1] = conf_view(c, kb, 3, CONF_SHAPE(s.L, s.Hkv, s.D), CONF_SHAPE(row, s.D, 1), pad);
        c->src[2] = conf_view(c, vb, 3, CONF_SHAPE(s.L, s.Hkv, s.D), CONF_SHAPE(row, s.D, 1), 2 * pad);
        conf_describe(c, " kv strided");
    } else {
        c->src[1] = conf_rand(c, s.kv, 3, CONF_SHAPE(s.L, s.Hkv, s.D), -s.range, s.range);
        c->src[2] = conf_rand(c, s.kv, 3, CONF_SHAPE(s.L, s.Hkv, s.D), -1, 1);
    }
    if (s.mask == QVL_MASK_SEGMENTS) c->src[3] = random_segments(c, s.N);
    if (s.mask == QVL_MASK_CAUSAL_AT) {
        int32_t at = (int32_t)s.past;
        c->src[3] = conf_i32(c, 1, &at);
        poison_rows(c, c->src[1], s.past + s.N);
        poison_rows(c, c->src[2], s.past + s.N);
    }
    conf_out(c, QVL_F32, 3, CONF_SHAPE(s.N, s.Hq, s.D));
}

/* ---- the masks alone ---- */

/* Scores [..., N, L] (2 to 4 dims), often a strided view. */
static int scores(conf_case *c, int64_t N, int64_t L, int *nd_out, int64_t *shape) {
    int nd = (int)conf_irand(c->rng, 2, 4);
    for (int k = 0; k < nd - 2; k++) shape[k] = conf_irand(c->rng, 1, 3);
    shape[nd - 2] = N;
    shape[nd - 1] = L;
    *nd_out = nd;
    conf_describe(c, " %dd N=%lld L=%lld", nd, (long long)N, (long long)L);
    return conf_input(c, nd, shape, -3, 3);
}

void conf_gen_mask_causal(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t N = i == 0 ? 1 : conf_size(r, 20), L = N + (i == 1 ? 0 : conf_irand(r, 0, 30));
    c->params.mask.n_past = conf_irand(r, 0, L - N);
    conf_describe(c, " n_past=%lld", (long long)c->params.mask.n_past);
    int64_t shape[QVL_MAX_DIMS];
    int nd;
    c->src[0] = scores(c, N, L, &nd, shape);
    conf_out(c, QVL_F32, nd, shape);
}

void conf_gen_mask_segments(conf_case *c, int i) {
    int64_t N = i == 0 ? 1 : conf_size(c->rng, 40), shape[QVL_MAX_DIMS];
    int nd;
    c->src[0] = scores(c, N, N, &nd, shape);
    c->src[1] = random_segments(c, N);
    conf_out(c, QVL_F32, nd, shape);
}

void conf_gen_mask_causal_at(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t N = i == 0 ? 1 : conf_size(r, 20), L = N + conf_irand(r, 0, 30), shape[QVL_MAX_DIMS];
    /* any at >= 0: past L - N every key is visible */
    int32_t at = (int32_t)(i == 1 ? L + 5 : conf_irand(r, 0, L - N + 2));
    conf_describe(c, " at=%d", (int)at);
    int nd;
    c->src[0] = scores(c, N, L, &nd, shape);
    c->src[1] = conf_i32(c, 1, &at);
    conf_out(c, QVL_F32, nd, shape);
}
