/* Cases of the batched decode step's ops over pooled caches: STORE_SLOT_ROWS and
 * ATTENTION_SLOTS. Each row owns a different slot (one row per sequence), in a shuffled order;
 * some slots belong to no row. For ATTENTION_SLOTS every cache row a query may not read holds
 * NaN (past at[i] in its slot, and all of the slots no row uses): one such read poisons the
 * output. */
#include <math.h>

#include "conf.h"

/* n distinct slots of [0, S) in random order, and a random at in [0, R) for each. */
static void rows_and_places(conf_case *c, int64_t n, int64_t S, int64_t R, int32_t *slot,
                            int32_t *at, bool last_row) {
    int32_t all[64];
    for (int64_t s = 0; s < S; s++) all[s] = (int32_t)s;
    for (int64_t s = S - 1; s > 0; s--) { /* Fisher-Yates */
        int64_t j = conf_irand(c->rng, 0, s);
        int32_t t = all[s];
        all[s] = all[j];
        all[j] = t;
    }
    for (int64_t i = 0; i < n; i++) {
        slot[i] = all[i];
        at[i] = (int32_t)(last_row && i == 0 ? R - 1 : conf_irand(c->rng, 0, R - 1));
        conf_describe(c, "%s%d@%d", i ? "," : " rows ", (int)slot[i], (int)at[i]);
    }
}

void conf_gen_store_slot_rows(conf_case *c, int i) {
    conf_rng *r = c->rng;
    int64_t S = conf_irand(r, 1, 6), N = conf_irand(r, 1, S), R = conf_irand(r, 1, 12);
    int64_t H = conf_irand(r, 1, 3), D = conf_size(r, 40);
    qvl_dtype dt = conf_small_dtype(r);
    if (i % 5 == 4) {
        dt = QVL_Q8_0;
        D = (D + QVL_Q8_0_BLOCK - 1) / QVL_Q8_0_BLOCK * QVL_Q8_0_BLOCK;
    }
    conf_describe(c, " pool %s [%lld, %lld, %lld, %lld]", qvl_dtype_name(dt), (long long)S,
                  (long long)R, (long long)H, (long long)D);
    int pool = conf_rand(c, dt, 4, CONF_SHAPE(S, R, H, D), -1, 1);
    int32_t slot[64], at[64];
    rows_and_places(c, N, S, R, slot, at, i == 1);
    c->src[0] = pool;
    c->src[1] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(N, H, D), -50, 50);
    c->src[2] = conf_i32(c, N, slot);
    c->src[3] = conf_i32(c, N, at);
    c->dst = conf_view(c, pool, 4, c->t[pool].desc.shape, c->t[pool].desc.stride, 0);
    c->check = pool;
}

typedef struct slots_shape {
    int64_t N, S, L, Hq, Hkv, D;
    qvl_dtype kv;
} slots_shape;

/* The 2B's decode step (16 query heads over 8 kv heads of 128) at 1, 4 and 8 sequences and
 * long caches (cuda_sm61's decode kernel, split and unsplit), odd head sizes (its general
 * kernel, cpu_avx2's), q8_0 pools. */
static const slots_shape slots_edges[] = {
    {1, 1, 37, 4, 2, 64, QVL_F16},       {4, 5, 600, 16, 8, 128, QVL_F16},
    {8, 9, 300, 16, 8, 128, QVL_BF16},   {2, 3, 2048, 16, 8, 128, QVL_F32},
    {3, 4, 100, 6, 2, 40, QVL_F32},      {4, 4, 2000, 16, 8, 128, QVL_Q8_0},
    {5, 8, 200, 4, 1, 96, QVL_Q8_0},     {2, 2, 1, 2, 2, 16, QVL_F16},
};
#define N_SLOTS_EDGES ((int)(sizeof slots_edges / sizeof slots_edges[0]))

/* Every element of pool rows [from, L) of slot s set to NaN. */
static void poison_slot(conf_case *c, int t, int64_t s, int64_t from) {
    const qvl_tensor_desc *d = &c->t[t].desc;
    int64_t row = d->shape[2] * d->shape[3], L = d->shape[1];
    for (int64_t e = (s * L + from) * row; e < (s + 1) * L * row; e++) conf_set(c, t, e, NAN);
}

void conf_gen_attention_slots(conf_case *c, int i) {
    conf_rng *r = c->rng;
    slots_shape s;
    if (i < N_SLOTS_EDGES) {
        s = slots_edges[i];
    } else {
        static const int64_t heads[] = {8, 16, 32, 40, 64, 128};
        s.S = conf_irand(r, 1, 6);
        s.N = conf_irand(r, 1, s.S);
        s.L = conf_irand(r, 1, 300);
        s.Hkv = conf_irand(r, 1, 3);
        s.Hq = s.Hkv * conf_irand(r, 1, 3);
        s.D = heads[conf_irand(r, 0, 5)];
        s.kv = s.D % QVL_Q8_0_BLOCK == 0 && conf_irand(r, 0, 3) == 0 ? QVL_Q8_0 : conf_small_dtype(r);
    }
    float range = conf_irand(r, 0, 4) ? 2.0f : 20.0f;
    c->params.attention.scale = 1.0f / sqrtf((float)s.D);
    c->params.attention.mask = QVL_MASK_CAUSAL_AT;
    conf_describe(c, " N=%lld S=%lld L=%lld Hq=%lld Hkv=%lld D=%lld kv %s range %g",
                  (long long)s.N, (long long)s.S, (long long)s.L, (long long)s.Hq,
                  (long long)s.Hkv, (long long)s.D, qvl_dtype_name(s.kv), (double)range);
    c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(s.N, s.Hq, s.D), -range, range);
    c->src[1] = conf_rand(c, s.kv, 4, CONF_SHAPE(s.S, s.L, s.Hkv, s.D), -range, range);
    c->src[2] = conf_rand(c, s.kv, 4, CONF_SHAPE(s.S, s.L, s.Hkv, s.D), -1, 1);
    int32_t slot[64], at[64];
    rows_and_places(c, s.N, s.S, s.L, slot, at, i == 1);
    bool used[64] = {false};
    for (int64_t k = 0; k < s.N; k++) {
        used[slot[k]] = true;
        poison_slot(c, c->src[1], slot[k], at[k] + 1);
        poison_slot(c, c->src[2], slot[k], at[k] + 1);
    }
    for (int64_t k = 0; k < s.S; k++)
        if (!used[k]) {
            poison_slot(c, c->src[1], k, 0);
            poison_slot(c, c->src[2], k, 0);
        }
    c->src[3] = conf_i32(c, s.N, slot);
    c->src[4] = conf_i32(c, s.N, at);
    conf_out(c, QVL_F32, 3, CONF_SHAPE(s.N, s.Hq, s.D));
}
