/* Cases of the ops that move rows: GET_ROWS (every table dtype; q4_k / q6_k tables of whole
 * 256-element super-blocks; block tables contiguous, every other row, or a window of wider
 * rows), CONT (every dtype,
 * permuted and row-subset views), STORE_ROWS and STORE_ROWS_AT (f32 rows into f32, f16 and
 * bf16 caches: the whole cache is compared, so rows that must not be touched are checked too),
 * SET_ROWS and ADD_ROWS (repeated indices: the last wins / they add up in order).
 * A q8_0 cache (every fifth case of STORE_ROWS(_AT), head size rounded up to whole blocks) is
 * compared exactly too: ops.h fixes the quantiser's rounding, so every backend writes the
 * same bytes. */
#include "conf.h"

static const qvl_dtype all_weights[6] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0, QVL_Q4_K, QVL_Q6_K};

/* ---- GET_ROWS ---- */

/* q4_k / q6_k tables: one block per row, the model's 2048-wide embedding rows (one id, as in
 * decode), three blocks. Each with q4_k and q6_k. */
static const struct { int64_t V, D, N; } gr_kq_edges[] = {
    {50, 256, 7}, {9, 2048, 1}, {60, 768, 20},
};
#define N_GR_KQ_EDGES ((int)(sizeof gr_kq_edges / sizeof gr_kq_edges[0]))

/* Fixed cases 0..7: every float/q8_0 dtype at [50, 37] and [*, 2048]; then the q4_k / q6_k
 * edges; then random cases of all six dtypes. */
void conf_gen_get_rows(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int kq = i - 8;
    qvl_dtype dt = i < 8 ? all_weights[i % 4]
                 : kq < 2 * N_GR_KQ_EDGES ? all_weights[4 + kq % 2] : all_weights[i % 6];
    int64_t V = i < 4 ? 50 : conf_size(r, 60), D = i < 4 ? 37 : i < 8 ? 2048 : conf_size(r, 200);
    int64_t N = i < 4 ? 7 : i < 8 ? 1 : conf_size(r, 20);
    if (i >= 8 && kq < 2 * N_GR_KQ_EDGES) {
        V = gr_kq_edges[kq / 2].V;
        D = gr_kq_edges[kq / 2].D;
        N = gr_kq_edges[kq / 2].N;
    } else if (dt == QVL_Q4_K || dt == QVL_Q6_K) {
        D = QVL_QK_K * conf_irand(r, 1, 3);
    }
    if (dt == QVL_Q8_0) D = (D + 31) / 32 * 32;
    conf_describe(c, " table %s [%lld, %lld] N=%lld", qvl_dtype_name(dt), (long long)V, (long long)D,
                  (long long)N);
    int layout = (int)conf_irand(r, 0, 3);
    if (layout == 0) { /* the table as every other row of a bigger one */
        int big = conf_rand(c, dt, 2, CONF_SHAPE(2 * V, D), -2, 2);
        c->src[0] = conf_view(c, big, 2, CONF_SHAPE(V, D), CONF_SHAPE(2 * D, 1), D);
        conf_describe(c, " (odd rows)");
    } else if (layout == 1 && qvl_dtype_is_quant(dt)) {
        /* columns [blk, blk + D) of rows two blocks wider: a window that starts at a block */
        int64_t blk = (int64_t)qvl_dtype_block_elems(dt), W = D + 2 * blk;
        int big = conf_rand(c, dt, 2, CONF_SHAPE(V, W), -2, 2);
        c->src[0] = conf_view(c, big, 2, CONF_SHAPE(V, D), CONF_SHAPE(W, 1), blk);
        conf_describe(c, " (a window of wider rows)");
    } else {
        c->src[0] = conf_rand(c, dt, 2, CONF_SHAPE(V, D), -2, 2);
    }
    c->src[1] = conf_rand(c, QVL_I32, 1, &N, 0, (float)(V - 1));
    if (N > 1) conf_set(c, c->src[1], N - 1, (double)(V - 1)); /* the last row of the table */
    conf_out(c, QVL_F32, 2, CONF_SHAPE(N, D));
}

/* ---- CONT ---- */

void conf_gen_cont(conf_case *c, int i) {
    conf_rng *r = c->rng;
    static const qvl_dtype dts[5] = {QVL_F32, QVL_F16, QVL_BF16, QVL_I32, QVL_Q8_0};
    qvl_dtype dt = dts[i % 5];
    if (dt == QVL_Q8_0) { /* whole rows of blocks: every other row of a table */
        int64_t R = conf_size(r, 6), D = 32 * conf_irand(r, 1, 4);
        conf_describe(c, " q8_0 odd rows [%lld, %lld]", (long long)R, (long long)D);
        int big = conf_rand(c, dt, 2, CONF_SHAPE(2 * R, D), -1, 1);
        c->src[0] = conf_view(c, big, 2, CONF_SHAPE(R, D), CONF_SHAPE(2 * D, 1), D);
        conf_out(c, dt, 2, CONF_SHAPE(R, D));
        return;
    }
    /* a permuted view [B, C, A] of a contiguous [A, B, C] (all three dims moved) */
    int64_t A = conf_size(r, 9), B = conf_size(r, 9), C = conf_size(r, 40);
    conf_describe(c, " %s permuted [%lld, %lld, %lld]", qvl_dtype_name(dt), (long long)B,
                  (long long)C, (long long)A);
    int base = conf_rand(c, dt, 3, CONF_SHAPE(A, B, C), -100, 100);
    c->src[0] = conf_view(c, base, 3, CONF_SHAPE(B, C, A), CONF_SHAPE(C, 1, B * C), 0);
    conf_out(c, dt, 3, CONF_SHAPE(B, C, A));
}

/* ---- STORE_ROWS, STORE_ROWS_AT ---- */

/* A cache [R, H, D] of a random float dtype (q8_0 with q8: D rounded up to whole blocks)
 * holding random values, and the f32 rows [N, H, D] to write (often the k slice of fused
 * [N, 3, H, D] rows, with values far outside the cache's so that conversions round). Returns
 * the cache; *src_out the rows. */
static int cache_and_rows(conf_case *c, int64_t R, int64_t N, bool q8, int *src_out) {
    conf_rng *r = c->rng;
    int64_t H = conf_irand(r, 1, 3), D = conf_size(r, 40);
    qvl_dtype dt = conf_small_dtype(r);
    if (q8) {
        dt = QVL_Q8_0;
        D = (D + QVL_Q8_0_BLOCK - 1) / QVL_Q8_0_BLOCK * QVL_Q8_0_BLOCK;
    }
    conf_describe(c, " cache %s [%lld, %lld, %lld] rows %lld", qvl_dtype_name(dt), (long long)R,
                  (long long)H, (long long)D, (long long)N);
    int cache = conf_rand(c, dt, 3, CONF_SHAPE(R, H, D), -1, 1);
    if (conf_irand(r, 0, 1)) {
        int64_t W = 3 * H * D;
        int qkv = conf_rand(c, QVL_F32, 2, CONF_SHAPE(N, W), -50, 50);
        *src_out = conf_view(c, qkv, 3, CONF_SHAPE(N, H, D), CONF_SHAPE(W, D, 1), H * D);
    } else {
        *src_out = conf_rand(c, QVL_F32, 3, CONF_SHAPE(N, H, D), -50, 50);
    }
    return cache;
}

void conf_gen_store_rows(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t N = i == 0 ? 1 : conf_size(r, 8), R = N + conf_irand(r, 0, 10);
    int64_t off = conf_irand(r, 0, R - N);
    int src, cache = cache_and_rows(c, R, N, i % 5 == 4, &src);
    c->params.store.offset = off;
    conf_describe(c, " at %lld", (long long)off);
    const qvl_tensor_desc *cd = &c->t[cache].desc;
    int64_t shape[3] = {off + N, cd->shape[1], cd->shape[2]};
    c->src[0] = cache;
    c->src[1] = src;
    c->dst = conf_view(c, cache, 3, shape, cd->stride, 0); /* the alias: rows [0, off + N) */
    c->check = cache;
}

void conf_gen_store_rows_at(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t N = i == 0 ? 1 : conf_size(r, 8), R = N + conf_irand(r, 0, 10);
    int32_t at = (int32_t)(i == 1 ? R - N : conf_irand(r, 0, R - N));
    int src, cache = cache_and_rows(c, R, N, i % 5 == 4, &src);
    conf_describe(c, " at %d", (int)at);
    c->src[0] = cache;
    c->src[1] = src;
    c->src[2] = conf_i32(c, 1, &at);
    c->dst = conf_view(c, cache, 3, c->t[cache].desc.shape, c->t[cache].desc.stride, 0);
    c->check = cache;
}

/* ---- SET_ROWS, ADD_ROWS ---- */

static void scatter(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t N = i == 0 ? 1 : conf_size(r, 20), D = conf_size(r, 70), K = conf_irand(r, 1, 2 * N + 1);
    conf_describe(c, " x [%lld, %lld] K=%lld", (long long)N, (long long)D, (long long)K);
    c->src[0] = conf_input(c, 2, CONF_SHAPE(N, D), -2, 2);
    c->src[1] = conf_rand(c, QVL_I32, 1, &K, 0, (float)(N - 1)); /* K > N repeats indices */
    c->src[2] = conf_input(c, 2, CONF_SHAPE(K, D), -2, 2);
    conf_out(c, QVL_F32, 2, CONF_SHAPE(N, D));
}

void conf_gen_set_rows(conf_case *c, int i) { scatter(c, i); }
void conf_gen_add_rows(conf_case *c, int i) { scatter(c, i); }
