/* What the cuda_sm61 backend promises beyond agreeing with the reference op by op (which
 * qvl-backend-ops checks for every op, tests/conformance/: conformance_cuda_sm61):
 *  - describe(): device memory (not host), sizes; uploads and downloads at odd offsets;
 *  - small uploads are queued in a pinned ring without waiting, and stay ordered with kernels;
 *  - host memory it hands out (page-locked) moves directly, in and out, at any size;
 *  - the int8 (__dp4a) path of q8_0 decode GEMVs is exact for activations int8 blocks hold;
 *  - every tile shape of the prefill GEMM (forced through QVL_CUDA_GEMM_TILE), split K;
 *  - the element-wise kernels' grid-stride loop past one grid; the attention head-size limit
 *    is refused by supports();
 *  - run_graph: a decode step captured once and replayed with new ids / positions / at,
 *    neighbouring launches grouped only when independent, and the graphs option.
 * Cases compare with the reference as the suite does (host tensors mirrored into device
 * buffers), with the tolerances this backend's tests always used:
 *     |cuda - ref| <= tol * max(1, max|ref|)
 *   exact for data movement; 1e-5 for element-wise ops, norms and rotations (the device's
 *   expf/sinf/cosf within 2 ulp, f32 sums); 1e-4 for dot products (matmul, norm_linear,
 *   mlp_residual, attention), plus for q8_0 weights the bound of the activation quantisation
 *   the decode path does (q8_bound: each activation rounded to its 32-block's scale
 *   d = max|x|/127, moving output (m, n) by at most sum_k |w[n,k]| d(m,k)/2).
 *
 * Without a usable CUDA device (CI) the whole test skips (exit 77) with one line saying why.
 *
 * The mirrored-storage harness every case shares (one node run on both backends and compared)
 * is cuda_mirror.c, linked into this one program (scripts/gpu-check.sh runs it by name, and
 * again under compute-sanitizer); the host tensor helpers are in support/test_tensors.c. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cuda_mirror.h"
#include "qvl/backend.h"
#include "qvl/dtype.h"
#include "test_backend.h"
#include "test_tensors.h"

static const qvl_dtype w_dtypes[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};

static void test_describe(void **state) {
    (void)state;
    qvl_device_info info;
    assert_int_equal(cu.iface->describe(cu.be, &info), QVL_OK);
    assert_true(strlen(info.name) > 0);
    assert_false(info.host_memory);
    assert_true(info.memory_total > 0);
    assert_true(info.memory_free <= info.memory_total);
    printf("cuda_sm61 device: %s, %.1f GiB (%.1f GiB free)\n", info.name,
           (double)info.memory_total / (1 << 30), (double)info.memory_free / (1 << 30));
    /* up/download round trip at an odd offset and size */
    qvl_buffer b;
    qvl_error err = {0};
    assert_int_equal(cu.iface->buffer_alloc(cu.be, 1001, &b, &err), QVL_OK);
    unsigned char in[999], out[999];
    for (int i = 0; i < 999; i++) in[i] = (unsigned char)(i * 7 + 3);
    assert_int_equal(cu.iface->upload(cu.be, (char *)b.data + 1, in, sizeof in, &err), QVL_OK);
    assert_int_equal(cu.iface->download(cu.be, out, (char *)b.data + 1, sizeof out, &err), QVL_OK);
    assert_memory_equal(in, out, sizeof in);
    cu.iface->buffer_free(cu.be, &b);
}

/* Host memory from the backend (extensions QVL_EXT_HOST_ALLOC / _FREE): transfers into and out
 * of it, whole and at an odd offset inside it, of every size class the copy path has (below
 * the staging split, pipelined pieces, past the staging buffer); blocks run out and come back. */
static void test_host_memory(void **state) {
    (void)state;
    qvl_backend_host_alloc_fn alloc =
        (qvl_backend_host_alloc_fn)cu.iface->get_proc_address(QVL_EXT_HOST_ALLOC);
    qvl_backend_host_free_fn hfree =
        (qvl_backend_host_free_fn)cu.iface->get_proc_address(QVL_EXT_HOST_FREE);
    assert_non_null(alloc);
    assert_non_null(hfree);
    const size_t sizes[] = {999, (size_t)3 << 20, ((size_t)40 << 20) + 5};
    qvl_error err = {0};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        unsigned char *src = alloc(cu.be, n + 1), *dst = alloc(cu.be, n + 1);
        assert_non_null(src);
        assert_non_null(dst);
        for (size_t i = 0; i <= n; i++) src[i] = (unsigned char)(i * 131 + k);
        qvl_buffer b;
        assert_int_equal(cu.iface->buffer_alloc(cu.be, n + 1, &b, &err), QVL_OK);
        assert_int_equal(cu.iface->upload(cu.be, b.data, src, n + 1, &err), QVL_OK);
        memset(dst, 0, n + 1);
        assert_int_equal(cu.iface->download(cu.be, dst, b.data, n + 1, &err), QVL_OK);
        assert_memory_equal(src, dst, n + 1);
        memset(dst, 0, n + 1); /* inside the block at an offset, and its last byte untouched */
        assert_int_equal(cu.iface->download(cu.be, dst + 1, (char *)b.data + 1, n - 1, &err),
                         QVL_OK);
        assert_memory_equal(src + 1, dst + 1, n - 1);
        assert_int_equal(dst[0], 0);
        assert_int_equal(dst[n], 0);
        cu.iface->buffer_free(cu.be, &b);
        hfree(cu.be, src);
        hfree(cu.be, dst);
    }
    void *held[64];
    int got = 0;
    while (got < 64 && (held[got] = alloc(cu.be, 4096)) != NULL) got++;
    assert_true(got > 0 && got < 64); /* a few blocks per instance, then NULL (malloc's then) */
    hfree(cu.be, held[0]);
    void *again = alloc(cu.be, 4096);
    assert_non_null(again);
    hfree(cu.be, again);
    hfree(cu.be, NULL);
    for (int i = 1; i < got; i++) hfree(cu.be, held[i]);
}

/* Small uploads are queued without waiting (a pinned ring, reused once the stream has been
 * waited for): many of them, more than the ring holds between two waits, each from the same
 * host variable changed right after the call, several to the same place; a kernel run between
 * them (GET_ROWS reading the ids as uploaded so far); then one download must show the last
 * value written to every element. */
static void test_small_uploads(void **state) {
    (void)state;
    enum { N = 1000, WRITES = 20000 }; /* 20000 slices of 16 bytes: the ring (64 KiB) wraps */
    qvl_buffer b;
    qvl_error err = {0};
    assert_int_equal(cu.iface->buffer_alloc(cu.be, N * sizeof(int32_t), &b, &err), QVL_OK);
    static int32_t want[N];
    int32_t v = 0;
    for (int i = 0; i < WRITES; i++) {
        int e = (int)(((unsigned)i * 7919u) % N);
        v = i * 3 + 1;
        want[e] = v;
        assert_int_equal(cu.iface->upload(cu.be, (int32_t *)b.data + e, &v, sizeof v, &err),
                         QVL_OK);
        v = -1; /* the caller may reuse its memory at once */
    }
    static int32_t got[N];
    assert_int_equal(cu.iface->download(cu.be, got, b.data, sizeof got, &err), QVL_OK);
    for (int e = 0; e < N; e++)
        if (want[e] != 0 && got[e] != want[e])
            fail_msg("element %d: %d after the queued uploads, want %d", e, got[e], want[e]);
    cu.iface->buffer_free(cu.be, &b);

    /* a kernel between queued uploads sees exactly the uploads made before it (the ids are
     * uploaded one by one here, not through check_op's whole-tensor upload) */
    int64_t V = 16, D = 8;
    tt *table = rnd(QVL_F32, 2, SHAPE(V, D), -1, 1);
    tt *ids = i32_of(3, (const int32_t[]){0, 0, 0});
    tt *out = mk(QVL_F32, 2, SHAPE(3, D));
    to_device(table->store);
    to_device(out->store);
    to_device(ids->store);
    qvl_tensor dt = dev_of(table), di = dev_of(ids), dout = dev_of(out);
    const qvl_tensor *hs[QVL_MAX_SRC] = {&table->h, &ids->h}, *ds[QVL_MAX_SRC] = {&dt, &di};
    qvl_node hn = tt_node(QVL_OP_GET_ROWS, NULL, &out->h, hs);
    qvl_node dn = tt_node(QVL_OP_GET_ROWS, NULL, &dout, ds);
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k < 3; k++) {
            int32_t id = (int32_t)((step * 5 + k * 3) % V);
            ((int32_t *)ids->h.data)[k] = id;
            assert_int_equal(cu.iface->upload(cu.be, (int32_t *)di.data + k, &id, sizeof id, &err),
                             QVL_OK);
        }
        assert_int_equal(qvl_test_kernel(&ref, QVL_OP_GET_ROWS)(ref.be, &hn, &err), QVL_OK);
        assert_int_equal(qvl_test_kernel(&cu, QVL_OP_GET_ROWS)(cu.be, &dn, &err), QVL_OK);
        compare_store("get_rows after queued uploads", out->store, &out->h, TOL_EXACT);
    }
}

/* The int8 path of q8_0 decode GEMVs (activations quantised to int8 blocks, __dp4a): with
 * activations that int8 blocks hold exactly (integers in [-127, 127], 127 in every block, so
 * the block scale is 1) it must give the f32 dot product (q8_bound adds nothing: no activation
 * is rounded); with random activations it stays within the rounding q8_bound computes.
 * Weights also as a view of every other row. */
static void test_matmul_q8_dp4a(void **state) {
    (void)state;
    const int64_t Ms[] = {1, 3, 8};
    for (size_t mi = 0; mi < 3; mi++) {
        int64_t M = Ms[mi], K = 2048, N = 97;
        tt *a = mk(QVL_F32, 2, SHAPE(M, K));
        float *av = a->h.data;
        for (int64_t i = 0; i < M * K; i++)
            av[i] = i % 32 == 5 ? (i % 64 == 5 ? 127.0f : -127.0f) : (float)irand(-127, 127);
        tt *wbig = rnd(QVL_Q8_0, 2, SHAPE(2 * N, K), 0, 0);
        tt *w = view(wbig, 2, SHAPE(N, K), SHAPE(2 * K, 1), K); /* odd rows */
        tt *bias = rnd(QVL_F32, 1, SHAPE(N), -1, 1);
        tt *out = mk(QVL_F32, 2, SHAPE(M, N));
        check_op(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias), TOL_DOT);
        tt *ar = rnd(QVL_F32, 2, SHAPE(M, K), -3, 3);
        tt *out2 = mk(QVL_F32, 2, SHAPE(M, N));
        check_op(QVL_OP_MATMUL, NULL, out2, SRC(ar, w, NULL), TOL_DOT);
    }
}

/* Prefill-sized matmuls on the register-tiled GEMM (cu_gemm.cu): every weight dtype on every
 * tile shape (forced through QVL_CUDA_GEMM_TILE, then chosen by the backend), partial tiles
 * at both edges, K not a multiple of the 16-wide step (q8_0: whole blocks) and K of about
 * 1000 (few tiles, long K: split across blocks and summed), weights as every other row of a
 * bigger matrix, bias; a as padded rows, as a 3-D view (the fast path), shifted by one
 * element (misaligned: the generic kernel); MLP_RESIDUAL (residual in the epilogue) and
 * NORM_LINEAR (projections into column ranges) on many rows, also with K split. */
static void test_matmul_gemm(void **state) {
    (void)state;
    static const char *tiles[] = {"128x128", "128x64", "64x64", NULL};
    const char *env = getenv("QVL_CUDA_GEMM_TILE");
    char saved[32] = "";
    if (env) snprintf(saved, sizeof saved, "%s", env);
    for (size_t ti = 0; ti < 4; ti++) {
        if (tiles[ti]) assert_int_equal(setenv("QVL_CUDA_GEMM_TILE", tiles[ti], 1), 0);
        else unsetenv("QVL_CUDA_GEMM_TILE");
        for (size_t wi = 0; wi < 4; wi++) {
            qvl_dtype wd = w_dtypes[wi];
            int64_t M = 150 + 7 * (int64_t)ti, N = 133 + (int64_t)wi;
            int64_t K = wd == QVL_Q8_0 ? 96 : 40, K2 = wd == QVL_Q8_0 ? 1024 : 1000;
            tt *a = rnd(QVL_F32, 2, SHAPE(M, K), -1, 1);
            tt *wbig = rnd(wd, 2, SHAPE(2 * N, K), -1, 1);
            tt *w = view(wbig, 2, SHAPE(N, K), SHAPE(2 * K, 1), K); /* odd rows */
            tt *bias = rnd(wi % 2 ? QVL_BF16 : QVL_F32, 1, SHAPE(N), -1, 1);
            tt *out = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out, SRC(a, w, bias), TOL_DOT);

            tt *abig = rnd(QVL_F32, 2, SHAPE(M, K2 + 4), -1, 1);
            tt *w2 = rnd(wd, 2, SHAPE(N, K2), -1, 1);
            tt *pad = view(abig, 2, SHAPE(M, K2), SHAPE(K2 + 4, 1), 0);
            tt *out2 = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out2, SRC(pad, w2, NULL), TOL_DOT);
            int64_t M2 = M / 2;
            tt *a3 = view(abig, 3, SHAPE(2, M2, K2), SHAPE(M2 * (K2 + 4), K2 + 4, 1), 4);
            tt *out3 = mk(QVL_F32, 3, SHAPE(2, M2, N));
            check_op(QVL_OP_MATMUL, NULL, out3, SRC(a3, w2, bias), TOL_DOT);
            tt *odd = view(abig, 2, SHAPE(M, K2), SHAPE(K2 + 4, 1), 1);
            tt *out4 = mk(QVL_F32, 2, SHAPE(M, N));
            check_op(QVL_OP_MATMUL, NULL, out4, SRC(odd, w2, NULL), TOL_DOT);
        }
        int64_t M = 140, F = 1024, Dm = 136, D = 512, Ns[3] = {72, 40, 40};
        qvl_params pm = {.mlp = {.act = QVL_ACT_SILU}};
        tt *res = rnd(QVL_F32, 2, SHAPE(M, Dm), -2, 2);
        tt *ga = rnd(QVL_F32, 2, SHAPE(M, F), -3, 3), *up = rnd(QVL_F32, 2, SHAPE(M, F), -1, 1);
        tt *wdown = rnd(w_dtypes[ti], 2, SHAPE(Dm, F), -0.1f, 0.1f);
        tt *bd = rnd(QVL_F32, 1, SHAPE(Dm), -1, 1), *o = mk(QVL_F32, 2, SHAPE(M, Dm));
        check_op(QVL_OP_MLP_RESIDUAL, &pm, o, SRC(res, ga, wdown, up, bd), TOL_DOT);
        qvl_params pn = {.norm_linear = {.norm = QVL_NORM_RMS, .eps = 1e-6f, .n_proj = 3}};
        tt *x = rnd(QVL_F32, 2, SHAPE(M, D), -2, 3);
        tt *g = rnd(QVL_BF16, 1, SHAPE(D), 0.5, 1.5);
        tt *src[QVL_MAX_SRC] = {x, g, NULL};
        for (int i = 0; i < 3; i++) {
            src[3 + 2 * i] = rnd(w_dtypes[(ti + (size_t)i) % 4], 2, SHAPE(Ns[i], D), -1, 1);
            src[4 + 2 * i] = i == 1 ? rnd(QVL_F32, 1, SHAPE(Ns[i]), -1, 1) : NULL;
        }
        tt *on = mk(QVL_F32, 2, SHAPE(M, 152));
        check_op(QVL_OP_NORM_LINEAR, &pn, on, src, TOL_DOT);
    }
    if (env) setenv("QVL_CUDA_GEMM_TILE", saved, 1);
    else unsetenv("QVL_CUDA_GEMM_TILE");
}

/* More elements than one grid covers (65535 blocks x 256 threads): the grid-stride loop of
 * the element-wise kernels. */
static void test_grid_stride(void **state) {
    (void)state;
    tt *x = rnd(QVL_F32, 2, SHAPE(4100, 4100), -4, 4);
    tt *out = mk(QVL_F32, 2, SHAPE(4100, 4100));
    check_op(QVL_OP_SILU, NULL, out, SRC(x), TOL_EW);
}

/* A head size above the attention kernels' limit is refused honestly by supports(). */
static void test_head_size_limit(void **state) {
    (void)state;
    qvl_params p = {.attention = {.scale = 0.5f, .mask = QVL_MASK_NONE}};
    tt *qb = mk(QVL_F32, 3, SHAPE(1, 1, 1024)), *ob = mk(QVL_F32, 3, SHAPE(1, 1, 1024));
    qvl_tensor dq = qb->h, dout = ob->h;
    qvl_node n = {.op = QVL_OP_ATTENTION, .params = p, .n_src = 4, .src = {&dq, &dq, &dq},
                  .dst = &dout};
    assert_int_not_equal(qvl_test_supports(&cu, &n, NULL), QVL_OK);
}

/* ---- run_graph: capture and replay of a decode step ---------------------------------------- */

/* Cache rows [from, L) of a k/v cache filled with NaN: rows not written yet, which attention
 * with CAUSAL_AT must never read (one NaN read would poison the output). */
static void poison_rows(tt *t, int64_t from) {
    const qvl_tensor_desc *d = &t->h.desc;
    int64_t row = d->shape[1] * d->shape[2];
    for (int64_t e = from * row; e < d->shape[0] * row; e++) {
        if (d->dtype == QVL_F32) ((float *)t->h.data)[e] = NAN;
        else if (d->dtype == QVL_F16) ((uint16_t *)t->h.data)[e] = qvl_f32_to_f16(NAN);
        else ((uint16_t *)t->h.data)[e] = qvl_f32_to_bf16(NAN);
    }
}

/* What the executor does: run_graph, or the nodes one by one when it declines. Returns
 * run_graph's answer. */
static qvl_status run_seq(const qvl_node *const *nodes, size_t n) {
    qvl_error err = {0};
    qvl_status s = cu.iface->run_graph(cu.be, nodes, n, &err);
    if (s == QVL_E_UNSUPPORTED) {
        for (size_t k = 0; k < n; k++)
            if (qvl_test_kernel(&cu, nodes[k]->op)(cu.be, nodes[k], &err) != QVL_OK)
                fail_msg("cuda_sm61 %s: %s", qvl_op_name(nodes[k]->op), err.msg);
    } else if (s != QVL_OK) {
        fail_msg("run_graph: %s", err.msg);
    }
    if (cu.iface->synchronize(cu.be, &err) != QVL_OK) fail_msg("synchronize: %s", err.msg);
    return s;
}

/* Captured graphs the backend holds, as describe() reports them ("..., N CUDA graphs"). */
static size_t graphs_held(void) {
    qvl_device_info info;
    assert_int_equal(cu.iface->describe(cu.be, &info), QVL_OK);
    const char *p = strstr(info.name, "scratch, ");
    size_t g = 0;
    assert_non_null(p);
    assert_int_equal(sscanf(p + strlen("scratch, "), "%zu", &g), 1);
    return g;
}

#define SEQ 8
typedef struct seq {
    qvl_node h[SEQ], d[SEQ];
    const qvl_node *dp[SEQ];
    qvl_tensor dsrc[SEQ][QVL_MAX_SRC], ddst[SEQ];
    int n;
} seq;

static void seq_add(seq *q, qvl_op op, const qvl_params *p, tt *dst, tt *const *src) {
    const qvl_tensor *hs[QVL_MAX_SRC] = {0}, *ds[QVL_MAX_SRC] = {0};
    int k = q->n++;
    for (int i = 0; i < QVL_MAX_SRC; i++) {
        if (!src[i]) continue;
        hs[i] = &src[i]->h;
        q->dsrc[k][i] = dev_of(src[i]);
        ds[i] = &q->dsrc[k][i];
    }
    q->ddst[k] = dev_of(dst);
    q->h[k] = tt_node(op, p, &dst->h, hs);
    q->d[k] = tt_node(op, p, &q->ddst[k], ds);
    q->dp[k] = &q->d[k];
}

/* One step of sq: its nodes on the reference one by one, then on cuda_sm61 as the executor
 * runs them (run_seq); returns run_seq's answer. */
static qvl_status run_step(seq *sq) {
    qvl_error err = {0};
    for (int k = 0; k < sq->n; k++)
        if (qvl_test_kernel(&ref, sq->h[k].op)(ref.be, &sq->h[k], &err) != QVL_OK)
            fail_msg("reference %s: %s", qvl_op_name(sq->h[k].op), err.msg);
    return run_seq(sq->dp, (size_t)sq->n);
}

/* A decode step as the model builds it (embedding lookup, qkv projection, q and k normalised
 * and rotated, two KV-cache writes at `at`, attention over the cache up to `at`), run for
 * several tokens with only the data of ids, pos and at changing: the first run goes node by
 * node, the second is captured, the rest replay; a different output address is a new
 * signature and is captured anew. Every step matches the reference. */
static void graph_replay_case(int64_t D, int64_t R, int at0) {
    int64_t V = 40, Dm = 48, H = 4, Hkv = 2, QKV = (H + 2 * Hkv) * D;
    tt *table = rnd(QVL_F16, 2, SHAPE(V, Dm), -1, 1);
    tt *ids = i32_of(1, (const int32_t[]){0});
    tt *x = mk(QVL_F32, 2, SHAPE(1, Dm));
    tt *w = rnd(QVL_BF16, 2, SHAPE(QKV, Dm), -0.5, 0.5);
    tt *qkv = mk(QVL_F32, 2, SHAPE(1, QKV));
    tt *q = view(qkv, 3, SHAPE(1, H, D), SHAPE(QKV, D, 1), 0);
    tt *kn = view(qkv, 3, SHAPE(1, Hkv, D), SHAPE(QKV, D, 1), H * D);
    tt *vn = view(qkv, 3, SHAPE(1, Hkv, D), SHAPE(QKV, D, 1), (H + Hkv) * D);
    tt *ck = rnd(QVL_F32, 3, SHAPE(R, Hkv, D), -1, 1), *cv = rnd(QVL_F32, 3, SHAPE(R, Hkv, D), -1, 1);
    poison_rows(ck, at0); /* not written yet: reading an unwritten row would show */
    poison_rows(cv, at0);
    tt *ck_all = view(ck, 3, SHAPE(R, Hkv, D), SHAPE(Hkv * D, D, 1), 0);
    tt *cv_all = view(cv, 3, SHAPE(R, Hkv, D), SHAPE(Hkv * D, D, 1), 0);
    tt *at = i32_of(1, (const int32_t[]){0});
    tt *outs[2] = {mk(QVL_F32, 3, SHAPE(1, H, D)), mk(QVL_F32, 3, SHAPE(1, H, D))};
    qvl_params pa = {.attention = {.scale = 0.25f, .mask = QVL_MASK_CAUSAL_AT}};
    /* q and k normalised and rotated (NORM_ROPE), as the fused text graph does: the two
     * NORM_ROPE nodes and the two cache writes are neighbours, which run_graph launches as
     * pairs. */
    tt *pos = mk(QVL_I32, 2, SHAPE(3, 1));
    tt *gq = rnd(QVL_BF16, 1, SHAPE(D), 0.5, 1.5), *gk = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *qr = mk(QVL_F32, 3, SHAPE(1, H, D)), *kr = mk(QVL_F32, 3, SHAPE(1, Hkv, D));
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_MROPE_INTERLEAVED, .theta = 1e4f,
                                   .sections = {(int32_t)D / 8, (int32_t)D * 3 / 16,
                                                (int32_t)D * 3 / 16},
                                   .eps = 1e-6f}};

    const tt *all[] = {table, ids, x, w, qkv, ck, cv, at, outs[0], outs[1], pos, gq, gk, qr, kr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq seqs[2];
    for (int v = 0; v < 2; v++) {
        memset(&seqs[v], 0, sizeof seqs[v]);
        seq_add(&seqs[v], QVL_OP_GET_ROWS, NULL, x, SRC(table, ids));
        seq_add(&seqs[v], QVL_OP_MATMUL, NULL, qkv, SRC(x, w));
        seq_add(&seqs[v], QVL_OP_NORM_ROPE, &pr, qr, SRC(q, pos, gq));
        seq_add(&seqs[v], QVL_OP_NORM_ROPE, &pr, kr, SRC(kn, pos, gk));
        seq_add(&seqs[v], QVL_OP_STORE_ROWS_AT, NULL, ck_all, SRC(ck, kr, at));
        seq_add(&seqs[v], QVL_OP_STORE_ROWS_AT, NULL, cv_all, SRC(cv, vn, at));
        seq_add(&seqs[v], QVL_OP_ATTENTION, &pa, outs[v], SRC(qr, ck_all, cv_all, at));
    }

    const char *env = getenv("QVL_CUDA_GRAPHS");
    bool graphs_on = !(env && strcmp(env, "0") == 0);
    size_t held0 = graphs_held();
    for (int step = 0; step < 10; step++) {
        int v = step < 5 ? 0 : 1; /* the second sequence from step 5 on */
        seq *sq = &seqs[v];
        ((int32_t *)ids->h.data)[0] = irand(0, (int)V - 1);
        ((int32_t *)at->h.data)[0] = at0 + step;
        for (int c = 0; c < 3; c++) ((int32_t *)pos->h.data)[c] = at0 + step + 3 * c;
        to_device(ids->store);
        to_device(at->store);
        to_device(pos->store);
        qvl_status s = run_step(sq);
        bool first = step == 0 || step == 5; /* a new signature: run node by node */
        if (graphs_on) assert_int_equal(s, first ? QVL_E_UNSUPPORTED : QVL_OK);
        else assert_int_equal(s, QVL_E_UNSUPPORTED);
        char what[64];
        snprintf(what, sizeof what, "graph step %d output", step);
        compare_store(what, outs[v]->store, &outs[v]->h, TOL_DOT);
        snprintf(what, sizeof what, "graph step %d k cache", step);
        compare_store(what, ck->store, &ck->h, TOL_DOT);
        snprintf(what, sizeof what, "graph step %d v cache", step);
        compare_store(what, cv->store, &cv->h, TOL_DOT);
        if (graphs_on && step == 2) assert_int_equal(graphs_held(), held0 + 1);
        if (graphs_on && step == 7) assert_int_equal(graphs_held(), held0 + 2);
    }
}

/* Heads of 16, and heads of 128 after 100 cached tokens (split-KV attention reading the
 * cache rows 4 elements per load). */
static void test_graph_replay(void **state) {
    (void)state;
    graph_replay_case(16, 24, 0);
    graph_replay_case(128, 160, 100);
}

/* Neighbouring NORM_ROPE / STORE_ROWS_AT nodes share a launch in run_graph only when neither
 * touches what the other writes: here the second rotation reads the first's output and the
 * two cache writes hit the same rows (the second must win), so nothing may be paired. */
static void test_graph_pairs_dependent(void **state) {
    (void)state;
    int64_t H = 2, D = 16, R = 6;
    tt *x = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *pos = mk(QVL_I32, 2, SHAPE(1, 1));
    tt *g = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *y1 = mk(QVL_F32, 3, SHAPE(1, H, D)), *y2 = mk(QVL_F32, 3, SHAPE(1, H, D));
    tt *c = mk(QVL_F32, 3, SHAPE(R, H, D)), *at = i32_of(1, (const int32_t[]){0});
    tt *c_all = view(c, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_NEOX, .theta = 1e4f, .eps = 1e-6f}};
    const tt *all[] = {x, pos, g, y1, y2, c, at};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq sq;
    memset(&sq, 0, sizeof sq);
    seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y1, SRC(x, pos, g));
    seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y2, SRC(y1, pos, g));
    seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, c_all, SRC(c, y1, at));
    seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, c_all, SRC(c, y2, at));
    for (int step = 0; step < 4; step++) { /* plain, captured, replayed twice */
        ((int32_t *)at->h.data)[0] = step;
        ((int32_t *)pos->h.data)[0] = 5 + 7 * step;
        to_device(at->store);
        to_device(pos->store);
        run_step(&sq);
        compare_store("dependent rotations", y2->store, &y2->h, TOL_NORM);
        compare_store("cache rows written twice", c->store, &c->h, TOL_NORM);
    }
}

/* A decode step's two rotations and two cache writes run as one launch in run_graph when the
 * first write copies one rotation's output and the second touches nothing else; here (a) the
 * first write copies the first rotation (not the second, as in the model), and (b) both writes
 * hit the same rows of one cache (the second must win), which must not be grouped. */
static void test_graph_rope_store_group(void **state) {
    (void)state;
    int64_t H = 2, D = 16, R = 6;
    tt *x = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *x2 = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2);
    tt *v = rnd(QVL_F32, 3, SHAPE(1, H, D), -2, 2), *pos = mk(QVL_I32, 2, SHAPE(1, 1));
    tt *g = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
    tt *y1 = mk(QVL_F32, 3, SHAPE(1, H, D)), *y2 = mk(QVL_F32, 3, SHAPE(1, H, D));
    tt *c1 = mk(QVL_F32, 3, SHAPE(R, H, D)), *c2 = mk(QVL_F32, 3, SHAPE(R, H, D));
    tt *at = i32_of(1, (const int32_t[]){0});
    tt *c1_all = view(c1, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    tt *c2_all = view(c2, 3, SHAPE(R, H, D), SHAPE(H * D, D, 1), 0);
    qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_NEOX, .theta = 1e4f, .eps = 1e-6f}};
    const tt *all[] = {x, x2, v, pos, g, y1, y2, c1, c2, at};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
    static seq sq[2];
    for (int variant = 0; variant < 2; variant++) {
        memset(&sq[variant], 0, sizeof sq[variant]);
        seq_add(&sq[variant], QVL_OP_NORM_ROPE, &pr, y1, SRC(x, pos, g));
        seq_add(&sq[variant], QVL_OP_NORM_ROPE, &pr, y2, SRC(x2, pos, g));
        if (variant == 0) {
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, y1, at));
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c2_all, SRC(c2, v, at));
        } else {
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, y2, at));
            seq_add(&sq[variant], QVL_OP_STORE_ROWS_AT, NULL, c1_all, SRC(c1, v, at));
        }
    }
    for (int variant = 0; variant < 2; variant++)
        for (int step = 0; step < 4; step++) { /* plain, captured, replayed twice */
            ((int32_t *)at->h.data)[0] = step + variant;
            ((int32_t *)pos->h.data)[0] = 3 + 11 * step;
            to_device(at->store);
            to_device(pos->store);
            run_step(&sq[variant]);
            compare_store("rotation 1", y1->store, &y1->h, TOL_NORM);
            compare_store("rotation 2", y2->store, &y2->h, TOL_NORM);
            compare_store("cache 1", c1->store, &c1->h, TOL_NORM);
            compare_store("cache 2", c2->store, &c2->h, TOL_NORM);
        }
}

/* A decode step's rotations and cache writes as the model orders them, for one sequence
 * (STORE_ROWS_AT) and for a batch over pooled caches (STORE_SLOT_ROWS: each row at its own slot
 * and row), into f16 and q8_0 caches: whatever run_graph launches together
 * (cu_launch_groups.c), every step (plain, captured, replayed with new places) matches the
 * reference; a q8_0 cache within one quantisation step (amax / 127 of a block) of it, as the
 * rotations may differ in the last bits. Variants: pooled f16, pooled q8_0, one sequence q8_0
 * (where the rotation that wrote its own cache rows wrote nothing into a q8_0 K cache). */
static void test_graph_slot_store_group(void **state) {
    (void)state;
    int64_t N = 3, H = 2, D = 32, S = 4, L = 8;
    for (int variant = 0; variant < 3; variant++) {
        bool pooled = variant < 2;
        qvl_dtype cdt = variant ? QVL_Q8_0 : QVL_F16;
        tt *x = rnd(QVL_F32, 3, SHAPE(N, H, D), -2, 2), *x2 = rnd(QVL_F32, 3, SHAPE(N, H, D), -2, 2);
        tt *v = rnd(QVL_F32, 3, SHAPE(N, H, D), -2, 2), *pos = mk(QVL_I32, 2, SHAPE(1, N));
        tt *g = rnd(QVL_F32, 1, SHAPE(D), 0.5, 1.5);
        tt *y1 = mk(QVL_F32, 3, SHAPE(N, H, D)), *y2 = mk(QVL_F32, 3, SHAPE(N, H, D));
        tt *kc = pooled ? mk(cdt, 4, SHAPE(S, L, H, D)) : mk(cdt, 3, SHAPE(L, H, D));
        tt *vc = pooled ? mk(cdt, 4, SHAPE(S, L, H, D)) : mk(cdt, 3, SHAPE(L, H, D));
        tt *slot = i32_of(N, (const int32_t[]){0, 0, 0});
        tt *at = pooled ? i32_of(N, (const int32_t[]){0, 0, 0}) : i32_of(1, (const int32_t[]){0});
        qvl_params pr = {.norm_rope = {.mode = QVL_ROPE_NEOX, .theta = 1e4f, .eps = 1e-6f}};
        const tt *all[] = {x, x2, v, pos, g, y1, y2, kc, vc, slot, at};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) to_device(all[i]->store);
        static seq sq;
        memset(&sq, 0, sizeof sq);
        seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y1, SRC(x, pos, g));
        seq_add(&sq, QVL_OP_NORM_ROPE, &pr, y2, SRC(x2, pos, g));
        if (pooled) {
            seq_add(&sq, QVL_OP_STORE_SLOT_ROWS, NULL, kc, SRC(kc, y2, slot, at));
            seq_add(&sq, QVL_OP_STORE_SLOT_ROWS, NULL, vc, SRC(vc, v, slot, at));
        } else {
            seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, kc, SRC(kc, y2, at));
            seq_add(&sq, QVL_OP_STORE_ROWS_AT, NULL, vc, SRC(vc, v, at));
        }
        double tol = cdt == QVL_Q8_0 ? 1.0 / 127 : TOL_NORM;
        for (int step = 0; step < 4; step++) {
            for (int64_t i = 0; i < N; i++) { /* distinct slots, rows moving on each step */
                ((int32_t *)slot->h.data)[i] = (int32_t)((i + step) % S);
                if (pooled) ((int32_t *)at->h.data)[i] = (int32_t)((2 * i + step) % L);
                ((int32_t *)pos->h.data)[i] = (int32_t)(3 + 5 * i + 11 * step);
            }
            if (!pooled) ((int32_t *)at->h.data)[0] = step + 1; /* rows step+1 .. step+N */
            to_device(slot->store);
            to_device(at->store);
            to_device(pos->store);
            run_step(&sq);
            compare_store("rotation q", y1->store, &y1->h, TOL_NORM);
            compare_store("rotation k", y2->store, &y2->h, TOL_NORM);
            compare_store("k cache", kc->store, &kc->h, tol);
            compare_store("v cache", vc->store, &vc->h, tol);
        }
    }
}

/* Option graphs: 0 turns capture off (run_graph declines, the executor launches node by
 * node); anything but 0 or 1 is refused at init. */
static void test_graph_option(void **state) {
    (void)state;
    const char *keys[] = {"graphs"}, *off[] = {"0"}, *bad[] = {"2"};
    qvl_options o_off = {1, keys, off}, o_bad = {1, keys, bad};
    qvl_backend *be = NULL;
    qvl_error err = {0};
    assert_int_equal(cu.iface->init(&o_bad, &be, &err), QVL_E_INVALID);
    assert_null(be);
    assert_non_null(strstr(err.msg, "graphs"));
    if (getenv("QVL_CUDA_GRAPHS")) return; /* the environment overrides the option */
    assert_int_equal(cu.iface->init(&o_off, &be, &err), QVL_OK);
    qvl_node nodes[1];
    const qvl_node *np[1] = {&nodes[0]};
    memset(nodes, 0, sizeof nodes);
    nodes[0].op = QVL_OP_SILU;
    for (int i = 0; i < 3; i++)
        assert_int_equal(cu.iface->run_graph(be, np, 1, &err), QVL_E_UNSUPPORTED);
    cu.iface->release(be);
}

#define T(fn) cmocka_unit_test_teardown(fn, free_all)

int main(void) {
    char why[sizeof(((qvl_error *)0)->msg) + 64];
    if (!cuda_available(why, sizeof why)) {
        printf("test_cuda_backend: skipped, cuda_sm61 is unavailable here: %s\n", why);
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    tt_seed(2024u);
    const struct CMUnitTest tests[] = {
        T(test_describe),
        T(test_small_uploads),
        T(test_host_memory),
        T(test_matmul_q8_dp4a),
        T(test_matmul_gemm),
        T(test_grid_stride),
        T(test_head_size_limit),
        T(test_graph_replay),
        T(test_graph_pairs_dependent),
        T(test_graph_rope_store_group),
        T(test_graph_slot_store_group),
        T(test_graph_option),
    };
    return cmocka_run_group_tests(tests, open_backends, close_backends);
}
