/* Errors every backend must have.
 *
 * Data-dependent errors: indices, segment bounds and KV positions are data, so supports()
 * accepts these nodes and the kernel meets the bad value at run time. It must return an error
 * naming the backend and the op (not crash, not read or write out of bounds). Where ops.h
 * lets a backend that cannot check (a GPU kernel, which learns `at` only on the device) run
 * instead, a backend whose buffers are not host memory may return QVL_OK, and then
 * STORE_ROWS_AT must have written nothing, SET_ROWS / ADD_ROWS must have left the bad row as x
 * has it. The oracle must fail them all.
 *
 * Malformed nodes (shapes that do not fit, a dtype no kernel reads): supports() says no, and
 * a kernel handed one anyway refuses it with the oracle's status and a message naming the
 * backend and the op; it never trusts that the node was checked elsewhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

typedef enum { MUST_FAIL, MAY_SKIP_WRITE, MAY_SKIP_ROW, MAY_RUN, MALFORMED } err_rule;

typedef struct err_case {
    conf_case c;
    err_rule device_rule; /* for backends without host memory; host ones must fail */
} err_case;

static void bad_get_rows(conf_case *c, int32_t id) {
    conf_describe(c, " id %d of 5", (int)id);
    c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(5, 8), -1, 1);
    c->src[1] = conf_i32(c, 2, (const int32_t[]){1, id});
    conf_out(c, QVL_F32, 2, CONF_SHAPE(2, 8));
}

static void bad_scatter(conf_case *c, int32_t idx) {
    conf_describe(c, " index %d of 11 rows", (int)idx);
    c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(11, 37), -1, 1);
    c->src[1] = conf_i32(c, 6, (const int32_t[]){0, 1, 2, idx, 4, 5});
    c->src[2] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(6, 37), -1, 1);
    conf_out(c, QVL_F32, 2, CONF_SHAPE(11, 37));
}

static void bad_segments(conf_case *c, int which) {
    static const int32_t not_n[3] = {0, 5, 8}, decreasing[4] = {0, 6, 5, 9};
    conf_describe(c, which ? " bounds 0,6,5,9 decrease" : " bounds 0,5,8 do not end at N = 9");
    c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(2, 9, 9), -3, 3);
    c->src[1] = which ? conf_i32(c, 4, decreasing) : conf_i32(c, 3, not_n);
    conf_out(c, QVL_F32, 3, CONF_SHAPE(2, 9, 9));
}

static void bad_store_at(conf_case *c, int32_t at) {
    conf_describe(c, " at %d, 2 rows into 10", (int)at);
    int cache = conf_rand(c, QVL_F32, 2, CONF_SHAPE(10, 6), -1, 1);
    c->src[0] = cache;
    c->src[1] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(2, 6), -1, 1);
    c->src[2] = conf_i32(c, 1, &at);
    c->dst = conf_view(c, cache, 2, CONF_SHAPE(10, 6), CONF_SHAPE(6, 1), 0);
    c->check = cache;
}

/* One row into a pool of 3 slots of 10 rows [3, 10, 2, 32] at (slot, at), or attention of
 * one query over such pools (keys [0, at] of the slot): one of them out of range. */
static void bad_slot_row(conf_case *c, int32_t slot, int32_t at) {
    conf_describe(c, " slot %d at %d, pools of 3 x 10 rows", (int)slot, (int)at);
    int pool = conf_rand(c, QVL_F16, 4, CONF_SHAPE(3, 10, 2, 32), -1, 1);
    if (c->op == QVL_OP_STORE_SLOT_ROWS) {
        c->src[0] = pool;
        c->src[1] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(1, 2, 32), -1, 1);
        c->src[2] = conf_i32(c, 1, &slot);
        c->src[3] = conf_i32(c, 1, &at);
        c->dst = conf_view(c, pool, 4, CONF_SHAPE(3, 10, 2, 32), CONF_SHAPE(640, 64, 32, 1), 0);
        c->check = pool;
        return;
    }
    c->params.attention.scale = 0.25f;
    c->params.attention.mask = QVL_MASK_CAUSAL_AT;
    c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(1, 4, 32), -1, 1);
    c->src[1] = pool;
    c->src[2] = conf_rand(c, QVL_F16, 4, CONF_SHAPE(3, 10, 2, 32), -1, 1);
    c->src[3] = conf_i32(c, 1, &slot);
    c->src[4] = conf_i32(c, 1, &at);
    conf_out(c, QVL_F32, 3, CONF_SHAPE(1, 4, 32));
}

/* bad_store_at into a q8_0 cache [10, 64] (rows of two blocks). */
static void bad_store_at_q8_0(conf_case *c, int32_t at) {
    conf_describe(c, " at %d, 2 rows into a q8_0 cache of 10", (int)at);
    int cache = conf_rand(c, QVL_Q8_0, 2, CONF_SHAPE(10, 64), -1, 1);
    c->src[0] = cache;
    c->src[1] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(2, 64), -1, 1);
    c->src[2] = conf_i32(c, 1, &at);
    c->dst = conf_view(c, cache, 2, CONF_SHAPE(10, 64), CONF_SHAPE(64, 1), 0);
    c->check = cache;
}

static void bad_attention_at(conf_case *c, int32_t at) {
    conf_describe(c, " causal_at at %d, 2 queries, 31 keys", (int)at);
    c->params.attention = (qvl_attention_params){.scale = 0.2f, .mask = QVL_MASK_CAUSAL_AT};
    c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(2, 2, 32), -1, 1);
    c->src[1] = conf_rand(c, QVL_F16, 3, CONF_SHAPE(31, 2, 32), -1, 1);
    c->src[2] = c->src[1];
    c->src[3] = conf_i32(c, 1, &at);
    conf_out(c, QVL_F32, 3, CONF_SHAPE(2, 2, 32));
}

/* a [3, 8] times a weight [4, w_k] of dtype w_dt into [3, 4]: malformed cases 0 and 1 break
 * the weight one way each. */
static void bad_matmul(conf_case *c, qvl_dtype w_dt, int64_t w_k) {
    c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(3, 8), -1, 1);
    c->src[1] = conf_rand(c, w_dt, 2, CONF_SHAPE(4, w_k), -1, 1);
    conf_out(c, QVL_F32, 2, CONF_SHAPE(3, 4));
}

/* Malformed node m (0..11). */
static void malformed(conf_case *c, int m) {
    switch (m) {
    case 0:
        conf_describe(c, " a K = 8, w K = 9");
        bad_matmul(c, QVL_F32, 9);
        break;
    case 1:
        conf_describe(c, " an i32 weight");
        bad_matmul(c, QVL_I32, 8);
        break;
    case 2:
        conf_describe(c, " b [4] onto a [3, 7, 5]");
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(3, 7, 5), -1, 1);
        c->src[1] = conf_rand(c, QVL_F32, 1, CONF_SHAPE(4), -1, 1);
        conf_out(c, QVL_F32, 3, CONF_SHAPE(3, 7, 5));
        break;
    case 3:
        conf_describe(c, " gamma [15] for rows of 16");
        c->params.norm.eps = 1e-6f;
        c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(5, 16), -1, 1);
        c->src[1] = conf_rand(c, QVL_F32, 1, CONF_SHAPE(15), 0.5f, 1.5f);
        conf_out(c, QVL_F32, 2, CONF_SHAPE(5, 16));
        break;
    case 4:
        conf_describe(c, " vision mode, head size 6 (not quarters)");
        c->params.rope = (qvl_rope_params){.mode = QVL_ROPE_VISION_2D, .theta = 1e4f};
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(2, 1, 6), -1, 1);
        c->src[1] = conf_rand(c, QVL_I32, 2, CONF_SHAPE(2, 2), 0, 5);
        conf_out(c, QVL_F32, 3, CONF_SHAPE(2, 1, 6));
        break;
    case 5:
        conf_describe(c, " 3 kv heads for 2 query heads");
        c->params.attention = (qvl_attention_params){.scale = 0.5f, .mask = QVL_MASK_NONE};
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(4, 2, 8), -1, 1);
        c->src[1] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(4, 3, 8), -1, 1);
        c->src[2] = c->src[1];
        conf_out(c, QVL_F32, 3, CONF_SHAPE(4, 2, 8));
        break;
    case 6:
        conf_describe(c, " up given with gelu_tanh");
        c->params.mlp.act = QVL_ACT_GELU_TANH;
        c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(2, 8), -1, 1);
        c->src[1] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(2, 8), -1, 1);
        c->src[2] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(8, 8), -1, 1);
        c->src[3] = c->src[1];
        conf_out(c, QVL_F32, 2, CONF_SHAPE(2, 8));
        break;
    case 7: {
        /* rows of 128 values: half a super-block (a view of a [4, 256] q4_k matrix) */
        conf_describe(c, " a q4_k weight with rows of 128 (half a super-block)");
        c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(3, 128), -1, 1);
        int w = conf_rand(c, QVL_Q4_K, 2, CONF_SHAPE(4, 256), -1, 1);
        c->src[1] = conf_view(c, w, 2, CONF_SHAPE(4, 128), CONF_SHAPE(256, 1), 0);
        conf_out(c, QVL_F32, 2, CONF_SHAPE(3, 4));
        break;
    }
    case 9: {
        /* a q8_0 cache whose rows are half a block: [1, 16] of a [1, 32] cache (one row, so the
         * layout rule of tensor.h holds and only the whole-block rule refuses it) */
        conf_describe(c, " rows of 16 into a q8_0 cache (half a block)");
        int cache = conf_rand(c, QVL_Q8_0, 2, CONF_SHAPE(1, 32), -1, 1);
        int dst = conf_view(c, cache, 2, CONF_SHAPE(1, 16), CONF_SHAPE(32, 1), 0);
        c->params.store.offset = 0;
        c->src[0] = dst;
        c->src[1] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(1, 16), -1, 1);
        c->dst = conf_view(c, cache, 2, CONF_SHAPE(1, 16), CONF_SHAPE(32, 1), 0);
        c->check = cache;
        break;
    }
    case 10: {
        conf_describe(c, " q8_0 k and v with head size 16 (half a block)");
        c->params.attention = (qvl_attention_params){.scale = 0.5f, .mask = QVL_MASK_NONE};
        c->src[0] = conf_rand(c, QVL_F32, 3, CONF_SHAPE(1, 1, 16), -1, 1);
        int kv = conf_rand(c, QVL_Q8_0, 3, CONF_SHAPE(1, 1, 32), -1, 1);
        c->src[1] = conf_view(c, kv, 3, CONF_SHAPE(1, 1, 16), CONF_SHAPE(32, 32, 1), 0);
        c->src[2] = c->src[1];
        conf_out(c, QVL_F32, 3, CONF_SHAPE(1, 1, 16));
        break;
    }
    case 11:
        conf_describe(c, " output activation 7 (no such activation)");
        c->params.norm_linear =
            (qvl_norm_linear_params){.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 1, .act = 7};
        c->src[0] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(3, 16), -1, 1);
        c->src[1] = conf_rand(c, QVL_F32, 1, CONF_SHAPE(16), 0.5f, 1.5f);
        c->src[3] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(8, 16), -1, 1);
        conf_out(c, QVL_F32, 2, CONF_SHAPE(3, 8));
        break;
    default: {
        conf_describe(c, " 2 rows at 3 into 4");
        int cache = conf_rand(c, QVL_F32, 2, CONF_SHAPE(4, 3), -1, 1);
        c->params.store.offset = 3;
        c->src[0] = cache;
        c->src[1] = conf_rand(c, QVL_F32, 2, CONF_SHAPE(2, 3), -1, 1);
        c->dst = conf_view(c, cache, 2, CONF_SHAPE(4, 3), CONF_SHAPE(3, 1), 0);
        c->check = cache;
        break;
    }
    }
}

/* Builds error case k into e; false past the last. */
static bool build(err_case *e, int k, conf_rng *r) {
    static const int32_t bad_ids[] = {5, -1};
    static const int32_t bad_idx[] = {11, -1};
    static const int32_t bad_at_store[] = {-1, 9, 10, 1 << 30};
    static const int32_t bad_at_att[] = {-7, 30, 31, 1 << 30};
    e->device_rule = MUST_FAIL;
    if (k < 2) {
        conf_case_init(&e->c, QVL_OP_GET_ROWS, r);
        bad_get_rows(&e->c, bad_ids[k]);
    } else if (k < 6) {
        conf_case_init(&e->c, k < 4 ? QVL_OP_SET_ROWS : QVL_OP_ADD_ROWS, r);
        bad_scatter(&e->c, bad_idx[k % 2]);
        e->device_rule = MAY_SKIP_ROW;
    } else if (k < 8) {
        conf_case_init(&e->c, QVL_OP_MASK_SEGMENTS, r);
        bad_segments(&e->c, k - 6);
    } else if (k < 12) {
        conf_case_init(&e->c, QVL_OP_STORE_ROWS_AT, r);
        bad_store_at(&e->c, bad_at_store[k - 8]);
        e->device_rule = MAY_SKIP_WRITE;
    } else if (k < 16) {
        conf_case_init(&e->c, QVL_OP_ATTENTION, r);
        bad_attention_at(&e->c, bad_at_att[k - 12]);
        e->device_rule = MAY_RUN; /* it must still never read past L (compute-sanitizer) */
    } else if (k < 28) {
        static const qvl_op ops[12] = {QVL_OP_MATMUL, QVL_OP_MATMUL, QVL_OP_MUL, QVL_OP_RMS_NORM,
                                       QVL_OP_ROPE, QVL_OP_ATTENTION, QVL_OP_MLP_RESIDUAL,
                                       QVL_OP_MATMUL, QVL_OP_STORE_ROWS, QVL_OP_STORE_ROWS,
                                       QVL_OP_ATTENTION, QVL_OP_NORM_LINEAR};
        conf_case_init(&e->c, ops[k - 16], r);
        malformed(&e->c, k - 16);
        e->device_rule = MALFORMED;
    } else if (k < 30) {
        conf_case_init(&e->c, QVL_OP_STORE_ROWS_AT, r);
        bad_store_at_q8_0(&e->c, k == 28 ? -1 : 9);
        e->device_rule = MAY_SKIP_WRITE;
    } else if (k < 38) {
        static const int32_t bad[4][2] = {{-1, 0}, {3, 0}, {0, -1}, {1, 10}}; /* slot, at */
        bool store = k < 34;
        conf_case_init(&e->c, store ? QVL_OP_STORE_SLOT_ROWS : QVL_OP_ATTENTION_SLOTS, r);
        bad_slot_row(&e->c, bad[(k - 30) % 4][0], bad[(k - 30) % 4][1]);
        e->device_rule = store ? MAY_SKIP_WRITE : MAY_RUN;
    } else {
        return false;
    }
    return true;
}

/* Host pointer of contiguous tensor i of c (every tensor of the scatter cases is one). */
static const void *host_of(const conf_case *c, int i) {
    return c->st[c->t[i].storage].host + c->t[i].byte_off;
}

/* SET_ROWS / ADD_ROWS run by a backend that skips an out-of-range row: x with every valid row
 * replaced (or added to) in k order, the bad one as x has it. */
static bool skipped_row_only(const conf_case *c, const unsigned char *out) {
    const qvl_tensor_desc *xd = &c->t[c->src[0]].desc, *id = &c->t[c->src[1]].desc;
    const int64_t N = xd->shape[0], D = xd->shape[1], K = id->shape[0];
    const float *x = host_of(c, c->src[0]), *src = host_of(c, c->src[2]);
    const int32_t *idx = host_of(c, c->src[1]);
    float *want = malloc((size_t)(N * D) * sizeof *want);
    if (!want) return false;
    memcpy(want, x, (size_t)(N * D) * sizeof *want);
    for (int64_t k = 0; k < K; k++) {
        if (idx[k] < 0 || idx[k] >= N) continue;
        for (int64_t d = 0; d < D; d++) {
            float *w = &want[(int64_t)idx[k] * D + d];
            *w = c->op == QVL_OP_ADD_ROWS ? *w + src[k * D + d] : src[k * D + d];
        }
    }
    bool same = memcmp(want, out, (size_t)(N * D) * sizeof *want) == 0;
    free(want);
    return same;
}

/* Did tb handle the bad case as the rules say? On false, why is in msg. */
static bool judge(const qvl_test_backend *tb, const err_case *e, qvl_status want, char *msg,
                  size_t size, bool *unsupported, qvl_status *got) {
    const conf_case *c = &e->c;
    qvl_device_info info;
    memset(&info, 0, sizeof info);
    bool host = tb->iface->describe(tb->be, &info) == QVL_OK && info.host_memory;
    unsigned char *out = NULL;
    qvl_status ks;
    qvl_error err = {0};
    bool malformed_node = e->device_rule == MALFORMED, supported = false;
    conf_outcome o = conf_run_kernel(tb, c, !malformed_node, &supported, &out, &ks, &err);
    *got = ks;
    *unsupported = o == CONF_UNSUPPORTED;
    if (o == CONF_UNSUPPORTED) return true; /* malformed: no kernel for the op at all */
    if (malformed_node && supported) {
        free(out);
        snprintf(msg, size, "supports() accepts the malformed node");
        return false;
    }
    if (o == CONF_FAILED && ks == QVL_OK) {
        snprintf(msg, size, "buffer or synchronize failed: %s", err.msg);
        return false;
    }
    if (o == CONF_FAILED) {
        if (!strstr(err.msg, tb->iface->name) || !strstr(err.msg, qvl_op_name(c->op))) {
            snprintf(msg, size, "the error should name %s and %s: \"%s\"", tb->iface->name,
                     qvl_op_name(c->op), err.msg);
            return false;
        }
        if (malformed_node && want != QVL_OK && ks != want) {
            snprintf(msg, size, "status %d (%s), the oracle's is %d", (int)ks, err.msg, (int)want);
            return false;
        }
        return true;
    }
    bool ok = !host && e->device_rule != MUST_FAIL;
    if (ok && e->device_rule == MAY_SKIP_WRITE) {
        const conf_storage *cs = &c->st[c->t[c->check].storage];
        ok = memcmp(out, cs->host, cs->bytes) == 0;
        if (!ok) snprintf(msg, size, "ran without an error and changed the cache");
    } else if (ok && e->device_rule == MAY_SKIP_ROW) {
        ok = skipped_row_only(c, out);
        if (!ok) snprintf(msg, size, "ran without an error and did not leave the bad row as x");
    } else if (!ok) {
        snprintf(msg, size, "ran without an error");
    }
    free(out);
    return ok;
}

void conf_check_errors(const qvl_test_backend *oracle, const qvl_test_backend *tb, qvl_op only,
                       bool verbose, conf_tally *tally) {
    conf_rng r;
    conf_rng_seed(&r, 99);
    err_case e;
    for (int k = 0; build(&e, k, &r); k++) {
        conf_case *c = &e.c;
        if (only != QVL_OP_COUNT && c->op != only) {
            conf_case_free(c);
            continue;
        }
        char msg[1200] = "";
        bool unsupported = false, malformed_node = e.device_rule == MALFORMED;
        conf_tally *t = &tally[c->op];
        qvl_error cerr = {0};
        qvl_status oracle_status = QVL_OK, status;
        if (conf_contract_ok(c, &cerr) == malformed_node) {
            printf("FAIL %s (error case): the op contract %s it%s%s\n", c->what,
                   malformed_node ? "accepts" : "refuses", malformed_node ? "" : ": ",
                   malformed_node ? "" : cerr.msg);
            t->failed++;
        } else if (!judge(oracle, &e, QVL_OK, msg, sizeof msg, &unsupported, &oracle_status) ||
                   unsupported) {
            printf("FAIL %s (error case): the oracle %s: %s\n", c->what, oracle->iface->name,
                   unsupported ? "has no kernel for it" : msg);
            t->failed++;
        } else if (!judge(tb, &e, oracle_status, msg, sizeof msg, &unsupported, &status)) {
            printf("FAIL %s (error case): %s\n", c->what, msg);
            t->failed++;
        } else if (unsupported) {
            if (verbose) printf("unsupported %s (error case)\n", c->what);
            t->unsupported++;
        } else {
            if (verbose) printf("ok %s (error case)\n", c->what);
            t->passed++;
        }
        conf_case_free(c);
    }
}
