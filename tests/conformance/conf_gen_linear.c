/* Cases of the matmul-like ops: MATMUL (2-D weights with and without bias, 3-D weight
 * batches shared by groups of a's batches), NORM_LINEAR (1..3 projections, rms and layer
 * norm, biases, output activations) and MLP_RESIDUAL (silu gated, gelu tanh/erf, none).
 * Every weight dtype the contract allows (q8_0 with whole 32-element blocks per row, q4_k and
 * q6_k with whole 256-element super-blocks), activations and weights as strided views (for
 * the block dtypes only those tensor.h's layout rule allows: rows of a bigger matrix, windows
 * of wider rows that start at a block, heads-first 3-D views). Each op's fixed cases are its
 * float/q8_0 edge shapes, then its q4_k/q6_k edge shapes, then batched-decode rows (M = 2 ..
 * 16, every dtype), then (NORM_LINEAR) its output activations, then random ones of every
 * dtype. */
#include "conf.h"

/* ---- MATMUL ---- */

enum {
    MM_BIAS = 1,       /* with a bias */
    MM_A_PAD = 2,      /* a's rows padded (row stride > K), at an offset */
    MM_A_T = 4,        /* a transposed (column stride != 1) */
    MM_W_ODD = 8,      /* w = every other row of a bigger matrix */
    MM_W_SHIFT = 16,   /* w one element into its storage (misaligned rows; not block dtypes) */
    MM_A_3D = 32,      /* a as a 3-D view [2, M/2, K] of padded rows */
    MM_W_WIN = 64,     /* w = columns [blk, blk + K) of rows 2 blocks wider (blk: 1 or a block) */
};

/* Shapes that cross the blocking of known kernels and end part-way through each block:
 * cpu_avx2's GEMM (6-row tiles, 16-column panels, K blocks of 256, row blocks of 144,
 * 128-column chunks per thread) and GEMV (chunks of rows, 8 or 4 row streams; 2-8 rows in
 * tiles of 2 weight rows, K chunks from 5 rows);
 * cuda_sm61's 64x64 / 128x128 tiles, its K step of 16, split-K over ~1000, decode GEMVs with
 * 16-byte loads (K a multiple of 8) and without. K is rounded up to whole blocks for q8_0. */
static const struct { int64_t M, K, N; int flags; } mm_edges[] = {
    {150, 600, 290, MM_BIAS},       {4, 300, 17, MM_A_PAD},
    {5, 257, 130, MM_BIAS | MM_A_T}, {13, 1024, 144, 0},
    {7, 9, 3, MM_BIAS},             {1, 64, 300, 0},
    {2, 96, 301, MM_BIAS},          {3, 32, 519, MM_W_ODD},
    {1, 2048, 1030, MM_BIAS},       {1, 256, 33, MM_W_SHIFT},
    {3, 264, 41, MM_BIAS | MM_W_SHIFT}, {40, 70, 50, MM_A_T},
    {130, 77, 72, MM_BIAS},         {8, 2048, 97, MM_W_ODD},
    {157, 1000, 136, MM_A_PAD | MM_BIAS}, {152, 1000, 133, MM_A_3D | MM_BIAS},
    {8, 2048, 200, MM_A_PAD | MM_W_ODD}, {1, 1, 1, 0},
    {6, 4104, 45, MM_BIAS}, /* 16-bit GEMV with K in tiles of 2048: two and a part */
    /* cpu_avx2's batched GEMV from 5 rows: K chunks of 576 at 7 rows (576, 576, 80: a last
     * 16-step alone, then 8 past the blocks), 35 weight rows (blocks of 16, tiles of 2) */
    {7, 1240, 35, MM_BIAS},
};
#define N_MM_EDGES ((int)(sizeof mm_edges / sizeof mm_edges[0]))
#define N_MM_2D_EDGE_CASES (N_MM_EDGES * 4)

/* q4_k / q6_k shapes, K whole super-blocks: decode GEMVs (M of 1 or 2, N from 1 to 1030, K up to
 * the model's 6144-wide down projection), GEMM tiles (M of 6, 13, 40, 150), bias, and every
 * weight view the layout rule allows; decode rows too long for cuda_sm61's shared memory, taken
 * in chunks of K (8 x 6144: 16 + 8 super-blocks; 5 x 12288: two of 24, bias once). Each runs
 * with q4_k and q6_k. */
static const struct { int64_t M, K, N; int flags; } mm_kq_edges[] = {
    {1, 256, 33, 0},                 {1, 2048, 1030, MM_BIAS},
    {1, 6144, 64, MM_W_WIN},         {2, 256, 1, 0},
    {3, 512, 41, MM_BIAS | MM_W_ODD}, {6, 768, 16, MM_A_PAD},
    {7, 256, 17, MM_A_T | MM_W_WIN},  {13, 1024, 144, MM_BIAS},
    {150, 768, 130, MM_BIAS},        {152, 512, 97, MM_A_3D | MM_BIAS | MM_W_WIN},
    {40, 2048, 200, MM_A_PAD | MM_W_ODD}, {8, 6144, 70, MM_BIAS | MM_W_ODD},
    {5, 12288, 33, MM_BIAS | MM_A_PAD},
};
#define N_MM_KQ_EDGES ((int)(sizeof mm_kq_edges / sizeof mm_kq_edges[0]))
#define N_MM_FIXED_CASES (N_MM_2D_EDGE_CASES + 2 * N_MM_KQ_EDGES + N_ROWS_CASES)

/* A server's busy slots decoding together: M = 2 .. 16 rows (CONF_ROWS_MAX) of the model's
 * K = 2048 against every weight dtype, with and without bias. cuda_sm61's fused kernels take 8
 * rows at most (float rows outgrow their shared memory from M = 6 on), so both its fused and
 * plain GEMVs run;
 * N = 131 ends part-way through a block of warps. Case i: M = 2 + i / 6, dtype i % 6. */
#define CONF_ROWS_MAX 16
#define N_ROWS_CASES ((CONF_ROWS_MAX - 1) * 6)
static const qvl_dtype rows_dtypes[6] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0, QVL_Q4_K, QVL_Q6_K};

static const qvl_dtype w_dtypes[4] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
static const qvl_dtype kq_dtypes[2] = {QVL_Q4_K, QVL_Q6_K};

static bool is_kquant(qvl_dtype dt) { return dt == QVL_Q4_K || dt == QVL_Q6_K; }

/* K rounded up to whole blocks of wd. */
static int64_t whole_blocks(qvl_dtype wd, int64_t K) {
    int64_t b = (int64_t)qvl_dtype_block_elems(wd);
    return (K + b - 1) / b * b;
}

/* a [M, K] f32 with the layout flags ask for. */
static int mm_activation(conf_case *c, int64_t M, int64_t K, int flags) {
    if (flags & MM_A_T) {
        int b = conf_rand(c, QVL_F32, 2, CONF_SHAPE(K, M), -1, 1);
        return conf_view(c, b, 2, CONF_SHAPE(M, K), CONF_SHAPE(1, M), 0);
    }
    if (flags & (MM_A_PAD | MM_A_3D)) {
        int b = conf_rand(c, QVL_F32, 2, CONF_SHAPE(M, K + 4), -1, 1);
        if (flags & MM_A_3D)
            return conf_view(c, b, 3, CONF_SHAPE(2, M / 2, K), CONF_SHAPE(M / 2 * (K + 4), K + 4, 1), 4);
        return conf_view(c, b, 2, CONF_SHAPE(M, K), CONF_SHAPE(K + 4, 1), 1);
    }
    return conf_rand(c, QVL_F32, 2, CONF_SHAPE(M, K), -1, 1);
}

/* w [N, K] of dtype wd with the layout flags ask for. */
static int mm_weight(conf_case *c, qvl_dtype wd, int64_t N, int64_t K, int flags) {
    if (flags & MM_W_ODD) {
        int b = conf_rand(c, wd, 2, CONF_SHAPE(2 * N, K), -1, 1);
        return conf_view(c, b, 2, CONF_SHAPE(N, K), CONF_SHAPE(2 * K, 1), K);
    }
    if ((flags & MM_W_SHIFT) && !qvl_dtype_is_quant(wd)) {
        int b = conf_rand(c, wd, 2, CONF_SHAPE(N + 1, K), -1, 1);
        return conf_view(c, b, 2, CONF_SHAPE(N, K), CONF_SHAPE(K, 1), 1);
    }
    if (flags & MM_W_WIN) {
        int64_t blk = (int64_t)qvl_dtype_block_elems(wd), wide = K + 2 * blk;
        int b = conf_rand(c, wd, 2, CONF_SHAPE(N, wide), -1, 1);
        return conf_view(c, b, 2, CONF_SHAPE(N, K), CONF_SHAPE(wide, 1), blk);
    }
    return conf_rand(c, wd, 2, CONF_SHAPE(N, K), -1, 1);
}

static void mm_2d(conf_case *c, qvl_dtype wd, int64_t M, int64_t K, int64_t N, int flags) {
    K = whole_blocks(wd, K);
    if (flags & MM_A_3D) M = M / 2 * 2;
    conf_describe(c, " 2-D w %s M=%lld K=%lld N=%lld flags=%d", qvl_dtype_name(wd), (long long)M,
                  (long long)K, (long long)N, flags);
    c->src[0] = mm_activation(c, M, K, flags);
    c->src[1] = mm_weight(c, wd, N, K, flags);
    if (flags & MM_BIAS) c->src[2] = conf_rand(c, conf_small_dtype(c->rng), 1, &N, -1, 1);
    if (flags & MM_A_3D) conf_out(c, QVL_F32, 3, CONF_SHAPE(2, M / 2, N));
    else conf_out(c, QVL_F32, 2, CONF_SHAPE(M, N));
}

/* Batched: a [B, M, K] against w [Bw, N, K], B = Bw * group; a and w as the unfused
 * attention makes them (heads-first views of [N, H, D] rows, v^T of a [L, H, D] cache). */
static void mm_3d(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t Bw = conf_irand(r, 1, 3), group = conf_irand(r, 1, 3), B = Bw * group;
    int64_t M = conf_size(r, 40), K = conf_size(r, 70), N = conf_size(r, 70);
    int layout = i % 3;
    qvl_dtype wd = conf_weight_dtype(r, layout == 0);
    if (layout < 2 && conf_irand(r, 0, 3) == 0) wd = conf_kquant_dtype(r); /* v^T splits blocks */
    if (wd == QVL_Q8_0) K = 32 * conf_irand(r, 1, 3);
    if (is_kquant(wd)) K = QVL_QK_K * conf_irand(r, 1, 2);
    conf_describe(c, " 3-D w %s B=%lld Bw=%lld M=%lld K=%lld N=%lld layout %d", qvl_dtype_name(wd),
                  (long long)B, (long long)Bw, (long long)M, (long long)K, (long long)N, layout);
    if (layout == 0) { /* contiguous */
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(B, M, K), -1, 1);
        c->src[1] = conf_rand(c, wd, 3, CONF_SHAPE(Bw, N, K), -1, 1);
    } else if (layout == 1) { /* scores: q [M, B, K] read as [B, M, K], k [N, Bw, K] as [Bw, N, K] */
        int q = conf_rand(c, QVL_F32, 3, CONF_SHAPE(M, B, K), -1, 1);
        int k = conf_rand(c, wd, 3, CONF_SHAPE(N, Bw, K), -1, 1);
        c->src[0] = conf_view(c, q, 3, CONF_SHAPE(B, M, K), CONF_SHAPE(K, B * K, 1), 0);
        c->src[1] = conf_view(c, k, 3, CONF_SHAPE(Bw, N, K), CONF_SHAPE(K, Bw * K, 1), 0);
    } else { /* values: p [B, M, L=K] against v^T, v [L, Bw, N] read as [Bw, N, L] */
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(B, M, K), 0, 1);
        int v = conf_rand(c, wd, 3, CONF_SHAPE(K, Bw, N), -1, 1);
        c->src[1] = conf_view(c, v, 3, CONF_SHAPE(Bw, N, K), CONF_SHAPE(N, 1, Bw * N), 0);
    }
    conf_out(c, QVL_F32, 3, CONF_SHAPE(B, M, N));
}

void conf_gen_matmul(conf_case *c, int i) {
    conf_rng *r = c->rng;
    if (i < N_MM_2D_EDGE_CASES) {
        int e = i / 4;
        mm_2d(c, w_dtypes[i % 4], mm_edges[e].M, mm_edges[e].K, mm_edges[e].N, mm_edges[e].flags);
        return;
    }
    if (i < N_MM_2D_EDGE_CASES + 2 * N_MM_KQ_EDGES) {
        int k = i - N_MM_2D_EDGE_CASES, e = k / 2;
        mm_2d(c, kq_dtypes[k % 2], mm_kq_edges[e].M, mm_kq_edges[e].K, mm_kq_edges[e].N,
              mm_kq_edges[e].flags);
        return;
    }
    if (i < N_MM_FIXED_CASES) {
        int k = i - N_MM_2D_EDGE_CASES - 2 * N_MM_KQ_EDGES;
        mm_2d(c, rows_dtypes[k % 6], 2 + k / 6, 2048, 131, (k / 6) % 2 ? MM_BIAS : 0);
        return;
    }
    if (i % 4 == 0) {
        mm_3d(c, i / 4);
        return;
    }
    static const qvl_dtype any[6] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0, QVL_Q4_K, QVL_Q6_K};
    qvl_dtype wd = i % 4 == 3 ? any[conf_irand(r, 0, 5)] : w_dtypes[i % 4 - 1];
    int64_t M = conf_size(r, 40), K = conf_size(r, 300), N = conf_size(r, 80);
    int flags = (int)conf_irand(r, 0, 127);
    if (is_kquant(wd)) K = QVL_QK_K * conf_irand(r, 1, 3);
    if ((flags & MM_A_3D) && M < 2) M = 2;
    if ((flags & MM_A_T) && (flags & MM_A_3D)) flags &= ~MM_A_T;
    mm_2d(c, wd, M, K, N, flags);
}

/* ---- NORM_LINEAR ---- */

/* Decode- and prefill-sized layer inputs (rows in shared memory or not, projections wide
 * enough for several thread chunks each, widths not multiples of 16) and small odd ones. */
static const struct { int64_t M, D, N[3]; int n_proj; } nl_edges[] = {
    {1, 2048, {256, 64, 64}, 3}, {3, 2048, {256, 64, 64}, 3}, {8, 2048, {256, 64, 64}, 3},
    {1, 96, {301, 77, 530}, 3},  {7, 64, {301, 77, 530}, 3},  {2, 160, {301, 77, 0}, 2},
    {150, 300, {13, 7, 29}, 3},  {140, 512, {72, 40, 40}, 3}, {1, 37, {13, 0, 0}, 1},
};
#define N_NL_EDGES ((int)(sizeof nl_edges / sizeof nl_edges[0]))

/* q4_k / q6_k projections (D whole super-blocks): the model's decode and prefill QKV with
 * q6_k v as Q4_K_M mixes them (one row, and a batched step of 4: cuda_sm61 may group the mixed
 * three), q4_k / q6_k next to float and q8_0 projections, one block; 8 decode rows of the
 * longest D that cuda_sm61 fuses after an RMS norm (4608) and of one it does not (5120).
 * Each runs twice: rms then layer norm, q4_k and q6_k swapped. */
static const struct { int64_t M, D, N[3]; int n_proj; qvl_dtype wd[3]; } nl_kq_edges[] = {
    {1, 2048, {256, 64, 64}, 3, {QVL_Q4_K, QVL_Q4_K, QVL_Q6_K}},
    {3, 2048, {256, 64, 64}, 3, {QVL_Q4_K, QVL_Q4_K, QVL_Q4_K}},
    {4, 2048, {256, 64, 64}, 3, {QVL_Q4_K, QVL_Q4_K, QVL_Q6_K}},
    {8, 512, {301, 77, 130}, 3, {QVL_Q6_K, QVL_Q4_K, QVL_F16}},
    {7, 256, {13, 0, 0}, 1, {QVL_Q4_K}},
    {150, 768, {72, 40, 40}, 3, {QVL_Q6_K, QVL_Q8_0, QVL_Q6_K}},
    {2, 256, {301, 77, 0}, 2, {QVL_Q4_K, QVL_BF16}},
    {8, 4608, {40, 24, 24}, 3, {QVL_Q4_K, QVL_Q4_K, QVL_Q6_K}},
    {6, 5120, {33, 0, 0}, 1, {QVL_Q6_K}},
};
#define N_NL_KQ_EDGES ((int)(sizeof nl_kq_edges / sizeof nl_kq_edges[0]))

/* Output activations (params.act): a vision fc1 (many rows, the GEMM; 1040 columns end
 * part-way through a thread's chunk), one too shallow to split K (a GPU GEMM applies the
 * activation after its own stores; 300 rows end inside a tile), decode rows (the GEMV), and
 * two and three projections (the activation covers every column). Each runs 8 times: gelu_tanh and gelu_erf, rms and
 * layer norm, with a bias on every projection and with none; they come after the decode rows
 * (N_NL_ACT_CASES, a multiple of 8 so that the random cases keep their i % 8). */
static const struct { int64_t M, D, N[3]; int n_proj; } nl_act_edges[] = {
    {100, 256, {1040, 0, 0}, 1}, {300, 128, {256, 0, 0}, 1}, {1, 96, {301, 0, 0}, 1},
    {5, 64, {77, 130, 0}, 2},    {20, 37, {13, 29, 7}, 3},
};
#define N_NL_ACT_CASES ((int)(sizeof nl_act_edges / sizeof nl_act_edges[0]) * 8)

/* NL_BIAS_RANDOM: each projection's bias present or not at random; else all or none. */
enum { NL_BIAS_NONE = 0, NL_BIAS_ALL = 1, NL_BIAS_RANDOM = 2 };

static void norm_linear_case(conf_case *c, int64_t M, int64_t D, const int64_t *N, int n_proj,
                             int norm, const qvl_dtype *wd, int act, int bias) {
    conf_rng *r = c->rng;
    bool any_q8 = false, any_kq = false;
    for (int j = 0; j < n_proj; j++) {
        any_q8 |= wd[j] == QVL_Q8_0;
        any_kq |= is_kquant(wd[j]);
    }
    if (any_q8) D = (D + 31) / 32 * 32;
    if (any_kq) D = whole_blocks(QVL_Q4_K, D);
    c->params.norm_linear =
        (qvl_norm_linear_params){.norm = norm, .eps = 1e-6f, .n_proj = n_proj, .act = act};
    conf_describe(c, " %s M=%lld D=%lld", norm == QVL_NORM_RMS ? "rms" : "layer", (long long)M,
                  (long long)D);
    if (act != QVL_ACT_NONE) conf_describe(c, " act %s", qvl_act_name(act));
    c->src[0] = conf_input(c, 2, CONF_SHAPE(M, D), -2, 3);
    c->src[1] = conf_rand(c, conf_small_dtype(r), 1, &D, 0.5f, 1.5f);
    if (norm == QVL_NORM_LAYER && conf_irand(r, 0, 2) > 0)
        c->src[2] = conf_rand(c, conf_small_dtype(r), 1, &D, -1, 1);
    int64_t total = 0;
    for (int j = 0; j < n_proj; j++) {
        if (is_kquant(wd[j]) && conf_irand(r, 0, 2) == 0) { /* columns [256, 256 + D) */
            int b = conf_rand(c, wd[j], 2, CONF_SHAPE(N[j], D + 2 * QVL_QK_K), -0.5f, 0.5f);
            c->src[3 + 2 * j] =
                conf_view(c, b, 2, CONF_SHAPE(N[j], D), CONF_SHAPE(D + 2 * QVL_QK_K, 1), QVL_QK_K);
            conf_describe(c, " (w%d a window)", j + 1);
        } else {
            c->src[3 + 2 * j] = conf_rand(c, wd[j], 2, CONF_SHAPE(N[j], D), -0.5f, 0.5f);
        }
        if (bias == NL_BIAS_RANDOM ? conf_irand(r, 0, 1) != 0 : bias == NL_BIAS_ALL)
            c->src[4 + 2 * j] = conf_rand(c, conf_small_dtype(r), 1, &N[j], -1, 1);
        conf_describe(c, " w%d %s [%lld]%s", j + 1, qvl_dtype_name(wd[j]), (long long)N[j],
                      c->src[4 + 2 * j] >= 0 ? "+b" : "");
        total += N[j];
    }
    conf_out(c, QVL_F32, 2, CONF_SHAPE(M, total));
}

void conf_gen_norm_linear(conf_case *c, int i) {
    conf_rng *r = c->rng;
    qvl_dtype wd[3];
    const int rows0 = N_NL_EDGES * 4 + N_NL_KQ_EDGES * 2;
    if (i >= rows0 && i < rows0 + N_ROWS_CASES) { /* decode rows: the model's QKV, rms norm */
        int k = i - rows0;
        const int64_t N[3] = {256, 64, 72};
        for (int j = 0; j < 3; j++) wd[j] = rows_dtypes[k % 6];
        norm_linear_case(c, 2 + k / 6, 2048, N, 3, QVL_NORM_RMS, wd, QVL_ACT_NONE,
                         NL_BIAS_RANDOM);
        return;
    }
    const int act0 = rows0 + N_ROWS_CASES;
    if (i >= act0 && i < act0 + N_NL_ACT_CASES) { /* output activations */
        int k = i - act0, e = k / 8;
        for (int j = 0; j < 3; j++) wd[j] = w_dtypes[(k + j + e) % 4];
        norm_linear_case(c, nl_act_edges[e].M, nl_act_edges[e].D, nl_act_edges[e].N,
                         nl_act_edges[e].n_proj, k % 2 ? QVL_NORM_LAYER : QVL_NORM_RMS, wd,
                         (k / 2) % 2 ? QVL_ACT_GELU_ERF : QVL_ACT_GELU_TANH,
                         (k / 4) % 2 ? NL_BIAS_NONE : NL_BIAS_ALL);
        return;
    }
    if (i >= act0) i -= N_ROWS_CASES + N_NL_ACT_CASES;
    else if (i >= rows0) i -= N_ROWS_CASES;
    if (i < N_NL_EDGES * 4) {
        int e = i / 4;
        for (int j = 0; j < 3; j++) wd[j] = w_dtypes[(i + j * (i / N_NL_EDGES)) % 4];
        norm_linear_case(c, nl_edges[e].M, nl_edges[e].D, nl_edges[e].N, nl_edges[e].n_proj,
                         i % 2 ? QVL_NORM_LAYER : QVL_NORM_RMS, wd, QVL_ACT_NONE,
                         NL_BIAS_RANDOM);
        return;
    }
    if (i < N_NL_EDGES * 4 + N_NL_KQ_EDGES * 2) {
        int k = i - N_NL_EDGES * 4, e = k / 2;
        for (int j = 0; j < 3; j++) {
            wd[j] = nl_kq_edges[e].wd[j];
            if (k % 2 && is_kquant(wd[j])) wd[j] = wd[j] == QVL_Q4_K ? QVL_Q6_K : QVL_Q4_K;
        }
        norm_linear_case(c, nl_kq_edges[e].M, nl_kq_edges[e].D, nl_kq_edges[e].N,
                         nl_kq_edges[e].n_proj, k % 2 ? QVL_NORM_LAYER : QVL_NORM_RMS, wd,
                         QVL_ACT_NONE, NL_BIAS_RANDOM);
        return;
    }
    int n_proj = (int)conf_irand(r, 1, 3);
    int64_t N[3];
    for (int j = 0; j < 3; j++) {
        wd[j] = conf_weight_dtype(r, true);
        N[j] = conf_size(r, 70);
    }
    int64_t M = conf_size(r, 20), D = conf_size(r, 200);
    int norm = (int)conf_irand(r, 0, 1);
    if (i % 8 == 7) /* one in eight random cases has a q4_k or q6_k first projection */
        wd[0] = conf_kquant_dtype(r);
    /* one in three random cases has an output activation */
    int act = i % 6 == 1 ? QVL_ACT_GELU_TANH : i % 6 == 4 ? QVL_ACT_GELU_ERF : QVL_ACT_NONE;
    norm_linear_case(c, M, D, N, n_proj, norm, wd, act, NL_BIAS_RANDOM);
}

/* ---- MLP_RESIDUAL ---- */

static const struct { int64_t M, D, F; } mlp_edges[] = {
    {1, 96, 6144}, {3, 96, 1536}, {1, 96, 1280}, {150, 150, 520}, {20, 40, 300}, {140, 136, 1024},
    {1, 13, 37},
};
#define N_MLP_EDGES ((int)(sizeof mlp_edges / sizeof mlp_edges[0]))

/* q4_k / q6_k down projections (F whole super-blocks): a decode MLP as long as the model's
 * (F 6144; D kept small for the run time), a vision-sized one, prefill rows, one block, and 7
 * decode rows of F 9728 (an 8B's; taken in chunks of K on cuda_sm61). Each runs with q4_k and
 * q6_k, the activation turning with the case. */
static const struct { int64_t M, D, F; } mlp_kq_edges[] = {
    {1, 320, 6144}, {3, 96, 1536}, {150, 150, 512}, {20, 40, 256}, {1, 13, 768}, {8, 64, 4096},
    {7, 48, 9728},
};
#define N_MLP_KQ_EDGES ((int)(sizeof mlp_kq_edges / sizeof mlp_kq_edges[0]))

/* The activations in the order the cases below pick them by index. */
static const int mlp_acts[4] = {QVL_ACT_SILU, QVL_ACT_GELU_TANH, QVL_ACT_GELU_ERF, QVL_ACT_NONE};

static void mlp_case(conf_case *c, int64_t M, int64_t D, int64_t F, int act, qvl_dtype wd,
                     bool bias) {
    conf_rng *r = c->rng;
    F = whole_blocks(wd, F);
    c->params.mlp.act = act;
    conf_describe(c, " %s w %s M=%lld D=%lld F=%lld%s", qvl_act_name(act), qvl_dtype_name(wd),
                  (long long)M, (long long)D, (long long)F, bias ? " +bias" : "");
    c->src[0] = conf_input(c, 2, CONF_SHAPE(M, D), -2, 2);
    if (conf_irand(r, 0, 1)) { /* a and up: the two halves of one fused gate|up row */
        int gu = conf_rand(c, QVL_F32, 2, CONF_SHAPE(M, 2 * F), -3, 3);
        c->src[1] = conf_view(c, gu, 2, CONF_SHAPE(M, F), CONF_SHAPE(2 * F, 1), 0);
        if (act == QVL_ACT_SILU)
            c->src[3] = conf_view(c, gu, 2, CONF_SHAPE(M, F), CONF_SHAPE(2 * F, 1), F);
    } else {
        c->src[1] = conf_input(c, 2, CONF_SHAPE(M, F), -3, 3);
        if (act == QVL_ACT_SILU) c->src[3] = conf_input(c, 2, CONF_SHAPE(M, F), -2, 2);
    }
    c->src[2] = conf_rand(c, wd, 2, CONF_SHAPE(D, F), -0.1f, 0.1f);
    if (bias) c->src[4] = conf_rand(c, conf_small_dtype(r), 1, &D, -1, 1);
    conf_out(c, QVL_F32, 2, CONF_SHAPE(M, D));
}

void conf_gen_mlp_residual(conf_case *c, int i) {
    conf_rng *r = c->rng;
    const int rows0 = N_MLP_EDGES * 4 + N_MLP_KQ_EDGES * 2;
    if (i >= rows0 && i < rows0 + N_ROWS_CASES) { /* decode rows: the model's down projection */
        int k = i - rows0;
        mlp_case(c, 2 + k / 6, 40, 6144, mlp_acts[k % 4], rows_dtypes[k % 6], k % 3 != 0);
        return;
    }
    if (i >= rows0) i -= N_ROWS_CASES;
    if (i < N_MLP_EDGES * 4) {
        const int e = i / 4;
        mlp_case(c, mlp_edges[e].M, mlp_edges[e].D, mlp_edges[e].F, mlp_acts[i % 4],
                 w_dtypes[(i + e) % 4], i % 3 != 0);
        return;
    }
    if (i < N_MLP_EDGES * 4 + N_MLP_KQ_EDGES * 2) {
        int k = i - N_MLP_EDGES * 4, e = k / 2;
        mlp_case(c, mlp_kq_edges[e].M, mlp_kq_edges[e].D, mlp_kq_edges[e].F,
                 mlp_acts[(k + k / 2) % 4], kq_dtypes[k % 2],
                 k % 3 != 0); /* every activation with each dtype */
        return;
    }
    int64_t M = conf_size(r, 20), D = conf_size(r, 60), F = conf_size(r, 200);
    int act = mlp_acts[conf_irand(r, 0, 3)];
    qvl_dtype wd = conf_weight_dtype(r, true);
    bool bias = conf_irand(r, 0, 1);
    if (i % 8 == 7) wd = conf_kquant_dtype(r); /* one in eight random cases */
    mlp_case(c, M, D, F, act, wd, bias);
}
