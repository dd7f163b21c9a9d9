/* cuda_sm61's answer to the scratch extension (QVL_EXT_SCRATCH), which placement adds up
 * before loading a model: for each node below, asked before it runs, the scratch it names is
 * exactly what running it then grows (the budget's free memory drops by that much), in a fresh
 * instance each (scratch starts empty):
 *  - NORM_LINEAR over many rows with f32 weights: the normed rows (slot A);
 *  - NORM_LINEAR with q8_0 weights: the int8 rows (slot Q8);
 *  - MLP_RESIDUAL with silu over many rows: the activations (slot B);
 *  - MATMUL with q8_0 weights over a few rows: the int8 rows;
 *  - ATTENTION of one query over many keys: the split-KV partials (slot C);
 *  - NORM_LINEAR of one row (the fused GEMV): none.
 * Without a usable CUDA device (CI) the test skips (exit 77) with one line saying why. */
#include <dlfcn.h>
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

static const qvl_backend_iface *iface;

#define MAX_T 8

/* One node's tensors on the device, zero-filled. */
typedef struct case_mem {
    qvl_backend *be;
    qvl_buffer buf[MAX_T];
    qvl_tensor t[MAX_T];
    int n;
} case_mem;

static qvl_tensor *tensor(case_mem *c, qvl_dtype dt, int ndim, const int64_t *shape) {
    assert_true(c->n < MAX_T);
    qvl_tensor *t = &c->t[c->n];
    assert_true(qvl_desc_init(&t->desc, dt, ndim, shape));
    size_t bytes = 0;
    assert_true(qvl_desc_span_bytes(&t->desc, &bytes));
    qvl_error err = {0};
    assert_int_equal(iface->buffer_alloc(c->be, bytes, &c->buf[c->n], &err), QVL_OK);
    void *zeros = calloc(1, bytes);
    assert_non_null(zeros);
    assert_int_equal(iface->upload(c->be, c->buf[c->n].data, zeros, bytes, &err), QVL_OK);
    free(zeros);
    t->data = c->buf[c->n].data;
    c->n++;
    return t;
}

static void case_begin(case_mem *c) {
    memset(c, 0, sizeof *c);
    const char *keys[] = {"memory_limit_mib"}, *vals[] = {"4096"};
    qvl_options o = {1, keys, vals};
    qvl_error err = {0};
    assert_int_equal(iface->init(&o, &c->be, &err), QVL_OK);
}

/* Asks, runs, and compares: returns the scratch the node grew. */
static size_t run_case(case_mem *c, qvl_node *node, const char *what) {
    qvl_backend_scratch_fn ask = (qvl_backend_scratch_fn)iface->get_proc_address(QVL_EXT_SCRATCH);
    assert_non_null(ask);
    size_t slots[QVL_SCRATCH_SLOTS] = {0}, planned = 0;
    ask(c->be, node, slots);
    for (int i = 0; i < QVL_SCRATCH_SLOTS; i++) planned += slots[i];
    qvl_device_info before, after;
    assert_int_equal(iface->describe(c->be, &before), QVL_OK);
    qvl_error err = {0};
    if (iface->ops[node->op].kernel(c->be, node, &err) != QVL_OK) fail_msg("%s: %s", what, err.msg);
    assert_int_equal(iface->synchronize(c->be, &err), QVL_OK);
    assert_int_equal(iface->describe(c->be, &after), QVL_OK);
    size_t grown = (size_t)(before.memory_free - after.memory_free);
    if (grown != planned) fail_msg("%s: planned %zu bytes of scratch, grew %zu", what, planned, grown);
    for (int i = 0; i < c->n; i++) iface->buffer_free(c->be, &c->buf[i]);
    iface->release(c->be);
    return grown;
}

static qvl_node node_of(qvl_op op, qvl_tensor *dst) {
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_src = qvl_op_max_inputs(op);
    n.dst = dst;
    n.name = qvl_op_name(op);
    return n;
}

static size_t norm_linear(int64_t M, qvl_dtype wdt) {
    case_mem c;
    case_begin(&c);
    const int64_t D = 256, N = 256;
    qvl_node n = node_of(QVL_OP_NORM_LINEAR, tensor(&c, QVL_F32, 2, (int64_t[]){M, N}));
    n.src[0] = tensor(&c, QVL_F32, 2, (int64_t[]){M, D});
    n.src[1] = tensor(&c, QVL_F32, 1, (int64_t[]){D});
    n.src[3] = tensor(&c, wdt, 2, (int64_t[]){N, D});
    n.params.norm_linear = (qvl_norm_linear_params){.norm = QVL_NORM_RMS, .eps = 1e-6f,
                                                    .n_proj = 1};
    return run_case(&c, &n, "norm_linear");
}

static void test_norm_linear(void **state) {
    (void)state;
    assert_true(norm_linear(512, QVL_F32) > 0);  /* the normed rows */
    assert_true(norm_linear(512, QVL_Q8_0) > 0); /* the int8 rows */
    assert_int_equal(norm_linear(1, QVL_F32), 0); /* the fused GEMV holds none */
}

static void test_mlp_residual(void **state) {
    (void)state;
    case_mem c;
    case_begin(&c);
    const int64_t M = 512, D = 256, F = 768;
    qvl_node n = node_of(QVL_OP_MLP_RESIDUAL, tensor(&c, QVL_F32, 2, (int64_t[]){M, D}));
    n.src[0] = tensor(&c, QVL_F32, 2, (int64_t[]){M, D});
    n.src[1] = tensor(&c, QVL_F32, 2, (int64_t[]){M, F});
    n.src[2] = tensor(&c, QVL_F32, 2, (int64_t[]){D, F});
    n.src[3] = tensor(&c, QVL_F32, 2, (int64_t[]){M, F});
    n.params.mlp.act = QVL_ACT_SILU;
    assert_true(run_case(&c, &n, "mlp_residual") > 0);
}

static void test_matmul_q8(void **state) {
    (void)state;
    case_mem c;
    case_begin(&c);
    const int64_t M = 8, K = 256 * 1024, N = 1;
    qvl_node n = node_of(QVL_OP_MATMUL, tensor(&c, QVL_F32, 2, (int64_t[]){M, N}));
    n.src[0] = tensor(&c, QVL_F32, 2, (int64_t[]){M, K});
    n.src[1] = tensor(&c, QVL_Q8_0, 2, (int64_t[]){N, K});
    assert_true(run_case(&c, &n, "matmul q8_0") > 0);
}

static void test_attention_split(void **state) {
    (void)state;
    case_mem c;
    case_begin(&c);
    const int64_t N = 1, Hq = 16, Hkv = 2, D = 64, L = 8192;
    qvl_node n = node_of(QVL_OP_ATTENTION, tensor(&c, QVL_F32, 3, (int64_t[]){N, Hq, D}));
    n.src[0] = tensor(&c, QVL_F32, 3, (int64_t[]){N, Hq, D});
    n.src[1] = tensor(&c, QVL_F16, 3, (int64_t[]){L, Hkv, D});
    n.src[2] = tensor(&c, QVL_F16, 3, (int64_t[]){L, Hkv, D});
    n.params.attention = (qvl_attention_params){.scale = 0.125f, .mask = QVL_MASK_NONE};
    assert_true(run_case(&c, &n, "attention") > 0);
}

int main(void) {
    void *dl = dlopen(QVL_CUDA_SO, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        printf("test_cuda_scratch_plan: skipped, cannot load %s: %s\n", QVL_CUDA_SO, dlerror());
        return 77;
    }
    qvl_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(dl, QVL_BACKEND_ENTRY_SYMBOL);
    iface = entry ? entry() : NULL;
    if (!iface || iface->abi != QVL_BACKEND_ABI) {
        printf("test_cuda_scratch_plan: %s is not a qvl backend\n", QVL_CUDA_SO);
        dlclose(dl);
        return 1;
    }
    qvl_backend *be = NULL;
    qvl_error err = {0};
    if (iface->init(NULL, &be, &err) != QVL_OK) {
        printf("test_cuda_scratch_plan: skipped, cuda_sm61 is unavailable here: %s\n", err.msg);
        dlclose(dl);
        return 77;
    }
    iface->release(be);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_norm_linear),
        cmocka_unit_test(test_mlp_residual),
        cmocka_unit_test(test_matmul_q8),
        cmocka_unit_test(test_attention_split),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dlclose(dl);
    return rc;
}
