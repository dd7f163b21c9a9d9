/* NORM_ROPE, the fused q_norm/k_norm + rotation: the op's checks, and on every host-memory
 * backend built here (reference, cpu_avx2 when the CPU has AVX2) the fused kernel equals the
 * backend's own RMS_NORM followed by its ROPE on the same data, exactly: the fusion must not
 * change a single bit of what the unfused graph computes. All three rope modes, gamma as f32
 * and as bf16 (as published), x as a strided view (a slice of a q/k/v row, as in the model). */
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
#include "qvl/dtype.h"
#include "qvl/ops.h"
#include "test_backend.h"

static const char *const so_paths[] = {QVL_REFERENCE_SO, QVL_CPU_AVX2_SO};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

static qvl_tensor mk(qvl_dtype dt, int ndim, const int64_t *shape, void *data) {
    qvl_tensor t;
    memset(&t, 0, sizeof t);
    assert_true(qvl_desc_init(&t.desc, dt, ndim, shape));
    t.data = data;
    return t;
}

static qvl_status run(const qvl_test_backend *tb, qvl_op op, const qvl_params *p,
                      qvl_tensor *const *src, qvl_tensor *dst) {
    qvl_error err = {0};
    qvl_status s = qvl_test_run_node(tb, op, p, src, 3, dst, &err);
    if (s != QVL_OK) print_message("%s: %s\n", qvl_op_name(op), err.msg);
    return s;
}

static qvl_params norm_rope_params(int mode, float eps) {
    qvl_params p;
    memset(&p, 0, sizeof p);
    p.norm_rope.mode = mode;
    p.norm_rope.theta = mode == QVL_ROPE_VISION_2D ? 1e4f : 5e6f;
    p.norm_rope.sections[0] = 4;
    p.norm_rope.sections[1] = 2;
    p.norm_rope.sections[2] = 2;
    p.norm_rope.eps = eps;
    return p;
}

static void test_infer(void **state) {
    (void)state;
    const int64_t xs[3] = {3, 2, 16}, ps[2] = {3, 3}, gs[1] = {16}, g_bad[1] = {8};
    qvl_tensor_desc x, pos, g, gb, out;
    assert_true(qvl_desc_init(&x, QVL_F32, 3, xs));
    assert_true(qvl_desc_init(&pos, QVL_I32, 2, ps));
    assert_true(qvl_desc_init(&g, QVL_BF16, 1, gs));
    assert_true(qvl_desc_init(&gb, QVL_F32, 1, g_bad));
    qvl_params p = norm_rope_params(QVL_ROPE_MROPE_INTERLEAVED, 1e-6f);
    qvl_error err = {0};
    const qvl_tensor_desc *in[3] = {&x, &pos, &g};
    assert_int_equal(qvl_op_infer(QVL_OP_NORM_ROPE, &p, 3, in, &out, &err), QVL_OK);
    assert_true(qvl_desc_same_shape(&out, &x));
    assert_int_equal(out.dtype, QVL_F32);
    in[2] = &gb;
    assert_int_equal(qvl_op_infer(QVL_OP_NORM_ROPE, &p, 3, in, &out, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "input 2 (gamma)"));
    in[2] = NULL;
    assert_int_equal(qvl_op_infer(QVL_OP_NORM_ROPE, &p, 3, in, &out, &err), QVL_E_INVALID);
    in[2] = &g;
    p.norm_rope.eps = -1.0f;
    assert_int_equal(qvl_op_infer(QVL_OP_NORM_ROPE, &p, 3, in, &out, &err), QVL_E_INVALID);
    p = norm_rope_params(QVL_ROPE_VISION_2D, 1e-6f); /* wants pos [2, N] */
    assert_int_equal(qvl_op_infer(QVL_OP_NORM_ROPE, &p, 3, in, &out, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "input 1 (pos)"));
}

/* x: a [N, H, D] view into rows of width W (> H*D) at an offset, like a head slice of q/k/v. */
static void check_mode(const qvl_test_backend *tb, int mode, qvl_dtype gdt) {
    enum { N = 5, H = 3, D = 16, W = 64, OFF = 8 };
    float *xbuf = malloc(sizeof(float) * N * W), *ref = malloc(sizeof(float) * N * H * D);
    float *normed = malloc(sizeof(float) * N * H * D), *fused = malloc(sizeof(float) * N * H * D);
    uint16_t gq[D];
    float g32[D];
    int32_t posv[3 * N];
    assert_non_null(xbuf);
    assert_non_null(ref);
    assert_non_null(normed);
    assert_non_null(fused);
    for (int i = 0; i < N * W; i++) xbuf[i] = frand();
    for (int i = 0; i < D; i++) {
        g32[i] = 0.5f + 0.25f * frand();
        gq[i] = qvl_f32_to_bf16(g32[i]);
    }
    for (int i = 0; i < 3 * N; i++) posv[i] = 7 + 311 * (i % 5) + i;
    int64_t C = mode == QVL_ROPE_MROPE_INTERLEAVED ? 3 : mode == QVL_ROPE_VISION_2D ? 2 : 1;
    qvl_tensor x = mk(QVL_F32, 3, (const int64_t[]){N, H, D}, xbuf + OFF);
    x.desc.stride[0] = W;
    qvl_tensor pos = mk(QVL_I32, 2, (const int64_t[]){C, N}, posv);
    qvl_tensor g = mk(gdt, 1, (const int64_t[]){D}, gdt == QVL_BF16 ? (void *)gq : (void *)g32);
    qvl_tensor tn = mk(QVL_F32, 3, (const int64_t[]){N, H, D}, normed);
    qvl_tensor tr = mk(QVL_F32, 3, (const int64_t[]){N, H, D}, ref);
    qvl_tensor tf = mk(QVL_F32, 3, (const int64_t[]){N, H, D}, fused);

    qvl_params p = norm_rope_params(mode, 1e-6f), pn, pr;
    memset(&pn, 0, sizeof pn);
    pn.norm.eps = p.norm_rope.eps;
    pr.rope = qvl_norm_rope_rope(&p.norm_rope);
    assert_int_equal(run(tb, QVL_OP_RMS_NORM, &pn, (qvl_tensor *[]){&x, &g, NULL}, &tn), QVL_OK);
    assert_int_equal(run(tb, QVL_OP_ROPE, &pr, (qvl_tensor *[]){&tn, &pos, NULL}, &tr), QVL_OK);
    assert_int_equal(run(tb, QVL_OP_NORM_ROPE, &p, (qvl_tensor *[]){&x, &pos, &g}, &tf), QVL_OK);
    for (int i = 0; i < N * H * D; i++) {
        if (memcmp(&ref[i], &fused[i], sizeof(float)) != 0)
            fail_msg("%s mode %d gamma %s: element %d is %.9g fused, %.9g unfused", tb->iface->name,
                     mode, qvl_dtype_name(gdt), i, (double)fused[i], (double)ref[i]);
    }
    free(xbuf);
    free(ref);
    free(normed);
    free(fused);
}

static void check_all(const qvl_test_backend *tb) {
    for (int mode = 0; mode < 3; mode++) {
        check_mode(tb, mode, QVL_F32);
        check_mode(tb, mode, QVL_BF16);
    }
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
