/* STORE_ROWS_AT, MASK_CAUSAL_AT and ATTENTION with mask CAUSAL_AT: the ops that read the KV
 * length from data so one decode graph serves every step. Each is checked against its
 * static-position twin (STORE_ROWS, MASK_CAUSAL, ATTENTION with CAUSAL) on the same data, on
 * every host-memory backend built here (reference, cpu_avx2 when the CPU has AVX2). Cache rows
 * past the written ones hold NaN: the attention must never read them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/backend.h"
#include "qvl/ops.h"
#include "test_backend.h"

static const char *const so_paths[] = {QVL_REFERENCE_SO, QVL_CPU_AVX2_SO};

typedef struct tensor_buf {
    qvl_tensor t;
    float *f; /* f32 data (NULL for i32 tensors) */
} tensor_buf;

static qvl_tensor mk(qvl_dtype dt, int ndim, const int64_t *shape, void *data) {
    qvl_tensor t;
    memset(&t, 0, sizeof t);
    assert_true(qvl_desc_init(&t.desc, dt, ndim, shape));
    t.data = data;
    return t;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static qvl_status run(const qvl_test_backend *tb, qvl_op op, const qvl_params *p,
                      qvl_tensor *const *src, uint32_t n_src, qvl_tensor *dst, qvl_error *err) {
    return qvl_test_run_node(tb, op, p, src, n_src, dst, err);
}

static void test_infer(void **state) {
    (void)state;
    assert_true(QVL_OP_STORE_ROWS_AT > QVL_OP_ADD_ROWS && QVL_OP_MASK_CAUSAL_AT > QVL_OP_ADD_ROWS);
    const int64_t cache_shape[3] = {10, 2, 4}, src_shape[3] = {3, 2, 4}, at_shape[1] = {1};
    const int64_t two[1] = {2}, big_src[3] = {11, 2, 4};
    qvl_tensor_desc cache, src, at, at2, big, out;
    assert_true(qvl_desc_init(&cache, QVL_F32, 3, cache_shape));
    assert_true(qvl_desc_init(&src, QVL_F32, 3, src_shape));
    assert_true(qvl_desc_init(&at, QVL_I32, 1, at_shape));
    assert_true(qvl_desc_init(&at2, QVL_I32, 1, two));
    assert_true(qvl_desc_init(&big, QVL_F32, 3, big_src));
    qvl_error err = {0};
    qvl_params p;
    memset(&p, 0, sizeof p);
    const qvl_tensor_desc *in[3] = {&cache, &src, &at};
    assert_int_equal(qvl_op_infer(QVL_OP_STORE_ROWS_AT, &p, 3, in, &out, &err), QVL_OK);
    assert_true(qvl_desc_same_shape(&out, &cache)); /* an alias of the whole cache */
    in[2] = &at2;
    assert_int_equal(qvl_op_infer(QVL_OP_STORE_ROWS_AT, &p, 3, in, &out, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "input 2 (at)"));
    in[2] = &at;
    in[1] = &big;
    assert_int_equal(qvl_op_infer(QVL_OP_STORE_ROWS_AT, &p, 3, in, &out, &err), QVL_E_SHAPE);
    in[1] = &src;
    assert_int_equal(qvl_op_infer(QVL_OP_STORE_ROWS_AT, &p, 2, in, &out, &err), QVL_E_INVALID);

    /* attention: q [3, 4, 4] over a cache of 10 rows, `at` in slot 3 */
    const int64_t q_shape[3] = {3, 4, 4};
    qvl_tensor_desc q;
    assert_true(qvl_desc_init(&q, QVL_F32, 3, q_shape));
    const qvl_tensor_desc *a_in[4] = {&q, &cache, &cache, &at};
    p.attention.scale = 0.5f;
    p.attention.mask = QVL_MASK_CAUSAL_AT;
    assert_int_equal(qvl_op_infer(QVL_OP_ATTENTION, &p, 4, a_in, &out, &err), QVL_OK);
    assert_true(qvl_desc_same_shape(&out, &q));
    a_in[3] = NULL;
    assert_int_equal(qvl_op_infer(QVL_OP_ATTENTION, &p, 4, a_in, &out, &err), QVL_E_INVALID);
    a_in[3] = &at;
    p.attention.mask = QVL_MASK_CAUSAL; /* a static causal mask takes no fourth input */
    assert_int_equal(qvl_op_infer(QVL_OP_ATTENTION, &p, 4, a_in, &out, &err), QVL_E_INVALID);
}

/* STORE_ROWS_AT writes exactly where STORE_ROWS with the same offset does, in every cache
 * dtype; an `at` that does not fit fails and writes nothing. */
static void check_store(const qvl_test_backend *tb, qvl_dtype dt) {
    const int64_t R = 9, H = 3, D = 5;
    for (int64_t n_rows = 1; n_rows <= 3; n_rows++) {
        for (int64_t at = 0; at + n_rows <= R; at += 2) {
            const int64_t cshape[3] = {R, H, D}, sshape[3] = {n_rows, H, D}, ashape[1] = {1};
            size_t cbytes = (size_t)(R * H * D) * qvl_dtype_block_bytes(dt);
            unsigned char *c1 = malloc(cbytes), *c2 = malloc(cbytes);
            float *sv = malloc((size_t)(n_rows * H * D) * sizeof *sv);
            for (size_t i = 0; i < cbytes; i++) c1[i] = c2[i] = (unsigned char)(i * 7 + 3);
            for (int64_t i = 0; i < n_rows * H * D; i++) sv[i] = frand();
            int32_t atv = (int32_t)at;
            qvl_tensor cache1 = mk(dt, 3, cshape, c1), cache2 = mk(dt, 3, cshape, c2);
            qvl_tensor src = mk(QVL_F32, 3, sshape, sv), att = mk(QVL_I32, 1, ashape, &atv);
            qvl_tensor out1 = cache1, out2 = cache2;
            out1.desc.shape[0] = at + n_rows; /* STORE_ROWS: the rows written so far */
            qvl_params p;
            memset(&p, 0, sizeof p);
            p.store.offset = at;
            qvl_error err = {0};
            qvl_tensor *s1[2] = {&cache1, &src}, *s2[3] = {&cache2, &src, &att};
            assert_true(qvl_desc_init(&out1.desc, dt, 3, (int64_t[3]){at + n_rows, H, D}));
            assert_int_equal(run(tb, QVL_OP_STORE_ROWS, &p, s1, 2, &out1, &err), QVL_OK);
            memset(&p, 0, sizeof p);
            assert_int_equal(run(tb, QVL_OP_STORE_ROWS_AT, &p, s2, 3, &out2, &err), QVL_OK);
            assert_memory_equal(c1, c2, cbytes);
            free(c1);
            free(c2);
            free(sv);
        }
    }
    /* Out of range: an error naming `at`, the cache untouched. */
    const int64_t cshape[3] = {4, 1, 2}, sshape[3] = {2, 1, 2}, ashape[1] = {1};
    float cv[8] = {1, 2, 3, 4, 5, 6, 7, 8}, keep[8], sv[4] = {9, 9, 9, 9};
    memcpy(keep, cv, sizeof cv);
    const int32_t bad[3] = {3, -1, 1 << 30};
    for (int i = 0; i < 3; i++) {
        int32_t atv = bad[i];
        qvl_tensor cache = mk(QVL_F32, 3, cshape, cv), src = mk(QVL_F32, 3, sshape, sv),
                   att = mk(QVL_I32, 1, ashape, &atv), out = cache;
        qvl_tensor *s[3] = {&cache, &src, &att};
        qvl_error err = {0};
        assert_int_equal(run(tb, QVL_OP_STORE_ROWS_AT, NULL, s, 3, &out, &err), QVL_E_INVALID);
        assert_non_null(strstr(err.msg, "at = "));
        assert_memory_equal(cv, keep, sizeof cv);
    }
}

/* MASK_CAUSAL_AT equals MASK_CAUSAL with n_past = at. */
static void check_mask(const qvl_test_backend *tb) {
    const int64_t B = 2, N = 3, L = 7;
    const int64_t shape[3] = {B, N, L}, ashape[1] = {1};
    float sv[2 * 3 * 7], o1[2 * 3 * 7], o2[2 * 3 * 7];
    for (int i = 0; i < 42; i++) sv[i] = frand();
    for (int32_t at = 0; at + N <= L; at++) {
        qvl_tensor s = mk(QVL_F32, 3, shape, sv), out1 = mk(QVL_F32, 3, shape, o1),
                   out2 = mk(QVL_F32, 3, shape, o2), att = mk(QVL_I32, 1, ashape, &at);
        qvl_params p;
        memset(&p, 0, sizeof p);
        p.mask.n_past = at;
        qvl_error err = {0};
        qvl_tensor *s1[1] = {&s}, *s2[2] = {&s, &att};
        assert_int_equal(run(tb, QVL_OP_MASK_CAUSAL, &p, s1, 1, &out1, &err), QVL_OK);
        assert_int_equal(run(tb, QVL_OP_MASK_CAUSAL_AT, NULL, s2, 2, &out2, &err), QVL_OK);
        for (int i = 0; i < 42; i++) {
            if (isinf(o1[i])) assert_true(isinf(o2[i]) && o2[i] < 0);
            else assert_float_equal(o1[i], o2[i], 0);
        }
    }
}

/* ATTENTION with CAUSAL_AT over a cache of capacity R (rows >= at + N are NaN) equals
 * ATTENTION with CAUSAL and n_past = at over the first at + N rows. */
static void check_attention(const qvl_test_backend *tb, qvl_dtype kv_dt) {
    /* Query counts on both sides of the CPU backend's switch to its blocked path (8) and of its
     * 256-query blocks; a capacity past its 256-key chunks. */
    const int64_t R = 300, Hq = 6, Hkv = 2, D = 9;
    const int64_t counts[] = {1, 4, 9, 40, 300};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        const int64_t N = counts[c];
        for (int64_t at = 0; at + N <= R; at += 53) {
            const int64_t qshape[3] = {N, Hq, D}, cshape[3] = {R, Hkv, D}, ashape[1] = {1};
            const int64_t L = at + N, pshape[3] = {L, Hkv, D};
            size_t es = qvl_dtype_block_bytes(kv_dt), cn = (size_t)(R * Hkv * D);
            float *qv = malloc((size_t)(N * Hq * D) * sizeof *qv), *tmp = malloc(cn * sizeof *tmp);
            unsigned char *kv = malloc(cn * es), *vv = malloc(cn * es);
            float *o1 = malloc((size_t)(N * Hq * D) * sizeof *o1), *o2 = malloc((size_t)(N * Hq * D) * sizeof *o2);
            for (int64_t i = 0; i < N * Hq * D; i++) qv[i] = 3 * frand();
            for (int pass = 0; pass < 2; pass++) {
                unsigned char *dstp = pass ? vv : kv;
                for (size_t i = 0; i < cn; i++)
                    tmp[i] = i < (size_t)(L * Hkv * D) ? frand() : NAN; /* unwritten rows */
                qvl_from_f32(kv_dt, tmp, dstp, (int64_t)cn);
            }
            int32_t atv = (int32_t)at;
            qvl_tensor q = mk(QVL_F32, 3, qshape, qv), kc = mk(kv_dt, 3, cshape, kv),
                       vc = mk(kv_dt, 3, cshape, vv), kp = mk(kv_dt, 3, pshape, kv),
                       vp = mk(kv_dt, 3, pshape, vv), att = mk(QVL_I32, 1, ashape, &atv),
                       out1 = mk(QVL_F32, 3, qshape, o1), out2 = mk(QVL_F32, 3, qshape, o2);
            qvl_params p;
            memset(&p, 0, sizeof p);
            p.attention.scale = 1.0f / sqrtf((float)D);
            p.attention.mask = QVL_MASK_CAUSAL;
            p.attention.n_past = at;
            qvl_error err = {0};
            qvl_tensor *s1[3] = {&q, &kp, &vp}, *s2[4] = {&q, &kc, &vc, &att};
            assert_int_equal(run(tb, QVL_OP_ATTENTION, &p, s1, 3, &out1, &err), QVL_OK);
            p.attention.mask = QVL_MASK_CAUSAL_AT;
            p.attention.n_past = 0;
            assert_int_equal(run(tb, QVL_OP_ATTENTION, &p, s2, 4, &out2, &err), QVL_OK);
            for (int64_t i = 0; i < N * Hq * D; i++) {
                assert_true(isfinite(o2[i]));
                assert_float_equal(o1[i], o2[i], 1e-6 * (1 + fabs(o1[i])));
            }
            /* at + N past the capacity: refused, not read out of bounds */
            atv = (int32_t)(R - N + 1);
            assert_int_equal(run(tb, QVL_OP_ATTENTION, &p, s2, 4, &out2, &err), QVL_E_INVALID);
            free(qv);
            free(tmp);
            free(kv);
            free(vv);
            free(o1);
            free(o2);
        }
    }
}

static void check_all(const qvl_test_backend *tb) {
    check_store(tb, QVL_F32);
    check_store(tb, QVL_F16);
    check_store(tb, QVL_BF16);
    check_mask(tb);
    check_attention(tb, QVL_F32);
    check_attention(tb, QVL_F16);
}

static void test_backends(void **state) {
    (void)state;
    int ran = qvl_test_each_backend(so_paths, sizeof so_paths / sizeof so_paths[0], check_all);
    if (ran < 0) fail_msg("the reference backend does not load");
    assert_true(ran >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infer),
        cmocka_unit_test(test_backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
