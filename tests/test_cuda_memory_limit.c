/* cuda_sm61's device-memory budget (option memory_limit_mib; the CLI's --gpu-mem-mib):
 *  - describe() reports the budget as the total, and as free the budget less what the
 *    instance holds (never more than the device really has free);
 *  - buffer_alloc past the budget fails with QVL_E_NOMEM and one line naming the size asked,
 *    the budget left and the option / flag to change; nothing is allocated then, and freeing
 *    gives the room back;
 *  - the scratch a kernel grows counts too: a matmul whose scratch does not fit fails the same
 *    way, and runs once the budget allows it;
 *  - anything but a positive whole number of MiB is refused at init with one line.
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

#define MIB ((uint64_t)1 << 20)

static const qvl_backend_iface *iface;

static qvl_status init_limit(const char *mib, qvl_backend **be, qvl_error *err) {
    const char *keys[] = {"memory_limit_mib"}, *vals[] = {mib};
    qvl_options o = {1, keys, vals};
    *be = NULL;
    return iface->init(&o, be, err);
}

static void test_describe_and_alloc(void **state) {
    (void)state;
    qvl_backend *be = NULL;
    qvl_error err = {0};
    assert_int_equal(init_limit("512", &be, &err), QVL_OK);
    qvl_device_info info;
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_total, 512 * MIB);
    uint64_t free0 = info.memory_free;
    assert_true(free0 > 256 * MIB); /* the fixed reserve for the context is well below half */
    assert_true(free0 < 512 * MIB); /* ... but is there */

    qvl_buffer a = {0}, b = {0}, c = {0};
    assert_int_equal(iface->buffer_alloc(be, 200 * MIB, &a, &err), QVL_OK);
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_total, 512 * MIB);
    assert_int_equal(info.memory_free, free0 - 200 * MIB);

    /* One byte more than is left: refused, one line, nothing allocated. */
    uint64_t left = info.memory_free;
    err.msg[0] = '\0';
    assert_int_equal(iface->buffer_alloc(be, (size_t)left + 1, &b, &err), QVL_E_NOMEM);
    assert_null(b.data);
    assert_non_null(strstr(err.msg, "cuda_sm61"));
    assert_non_null(strstr(err.msg, "memory_limit_mib / --gpu-mem-mib"));
    assert_non_null(strstr(err.msg, "512 MiB"));
    assert_null(strchr(err.msg, '\n'));
    char asked[32];
    snprintf(asked, sizeof asked, "%.1f MiB", (double)(left + 1) / (double)MIB);
    assert_non_null(strstr(err.msg, asked));
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_free, left);

    /* Exactly what is left fits. */
    assert_int_equal(iface->buffer_alloc(be, (size_t)left, &b, &err), QVL_OK);
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_free, 0);
    assert_int_equal(iface->buffer_alloc(be, 1, &c, &err), QVL_E_NOMEM);

    /* Freeing gives the room back. */
    iface->buffer_free(be, &a);
    iface->buffer_free(be, &b);
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_free, free0);
    assert_int_equal(iface->buffer_alloc(be, 300 * MIB, &c, &err), QVL_OK);
    iface->buffer_free(be, &c);
    iface->release(be);
}

/* A budget above the device's memory: the total says the budget, free never more than the
 * device has. */
static void test_budget_above_device(void **state) {
    (void)state;
    qvl_backend *be = NULL;
    qvl_error err = {0};
    assert_int_equal(init_limit("16777216", &be, &err), QVL_OK); /* 16 TiB */
    qvl_device_info info;
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    assert_int_equal(info.memory_total, (uint64_t)16777216 * MIB);
    assert_true(info.memory_free > 0);
    assert_true(info.memory_free < (uint64_t)16384 * 1024 * MIB);
    iface->release(be);
}

/* A matmul node whose int8 scratch (q8_0 weights, decode rows) does not fit the budget fails
 * with the budget's line; freeing a buffer lets the same node run. */
static void test_scratch_counts(void **state) {
    (void)state;
    qvl_backend *be = NULL;
    qvl_error err = {0};
    assert_int_equal(init_limit("160", &be, &err), QVL_OK);
    /* a [M, K] f32, w [N, K] q8_0: the decode path quantises a into int8 scratch of
     * M * K + M * K / 32 * 4 bytes = 2.25 MiB for M = 8 and K = 256 Ki. */
    const int64_t M = 8, K = 256 * 1024, N = 1;
    size_t a_bytes = (size_t)(M * K) * 4, w_bytes = (size_t)(N * K / 32) * 34;
    size_t o_bytes = (size_t)(M * N) * 4;
    qvl_buffer ba = {0}, bw = {0}, bo = {0}, filler = {0};
    assert_int_equal(iface->buffer_alloc(be, a_bytes, &ba, &err), QVL_OK);
    assert_int_equal(iface->buffer_alloc(be, w_bytes, &bw, &err), QVL_OK);
    assert_int_equal(iface->buffer_alloc(be, o_bytes, &bo, &err), QVL_OK);
    float *ha = calloc((size_t)(M * K), sizeof *ha);
    unsigned char *hw = calloc(w_bytes, 1);
    assert_non_null(ha);
    assert_non_null(hw);
    for (int64_t i = 0; i < M * K; i++) ha[i] = (float)(i % 7) - 3.0f;
    assert_int_equal(iface->upload(be, ba.data, ha, a_bytes, &err), QVL_OK);
    assert_int_equal(iface->upload(be, bw.data, hw, w_bytes, &err), QVL_OK);

    qvl_device_info info;
    assert_int_equal(iface->describe(be, &info), QVL_OK);
    size_t fill = (size_t)info.memory_free - (size_t)MIB; /* leaves 1 MiB: < the scratch */
    assert_int_equal(iface->buffer_alloc(be, fill, &filler, &err), QVL_OK);

    qvl_tensor ta = {.data = ba.data}, tw = {.data = bw.data}, to = {.data = bo.data};
    assert_true(qvl_desc_init(&ta.desc, QVL_F32, 2, (int64_t[]){M, K}));
    assert_true(qvl_desc_init(&tw.desc, QVL_Q8_0, 2, (int64_t[]){N, K}));
    assert_true(qvl_desc_init(&to.desc, QVL_F32, 2, (int64_t[]){M, N}));
    qvl_node node;
    memset(&node, 0, sizeof node);
    node.op = QVL_OP_MATMUL;
    node.name = "scratch_test";
    node.src[0] = &ta;
    node.src[1] = &tw;
    node.n_src = 2;
    node.dst = &to;
    qvl_kernel_fn k = iface->ops[QVL_OP_MATMUL].kernel;
    assert_non_null(k);
    err.msg[0] = '\0';
    assert_int_equal(k(be, &node, &err), QVL_E_NOMEM);
    assert_non_null(strstr(err.msg, "memory_limit_mib / --gpu-mem-mib"));
    assert_null(strchr(err.msg, '\n'));

    iface->buffer_free(be, &filler);
    assert_int_equal(k(be, &node, &err), QVL_OK);
    assert_int_equal(iface->synchronize(be, &err), QVL_OK);
    iface->buffer_free(be, &ba);
    iface->buffer_free(be, &bw);
    iface->buffer_free(be, &bo);
    free(ha);
    free(hw);
    iface->release(be);
}

static void test_bad_values(void **state) {
    (void)state;
    const char *bad[] = {"0", "-5", "abc", "1.5", "", " 12", "+12", "12MiB", "1e3",
                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        qvl_backend *be = NULL;
        qvl_error err = {0};
        assert_int_equal(init_limit(bad[i], &be, &err), QVL_E_INVALID);
        assert_null(be);
        assert_non_null(strstr(err.msg, "memory_limit_mib"));
        assert_null(strchr(err.msg, '\n'));
    }
}

int main(void) {
    void *dl = dlopen(QVL_CUDA_SO, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        printf("test_cuda_memory_limit: skipped, cannot load %s: %s\n", QVL_CUDA_SO, dlerror());
        return 77;
    }
    qvl_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(dl, QVL_BACKEND_ENTRY_SYMBOL);
    iface = entry ? entry() : NULL;
    if (!iface || iface->abi != QVL_BACKEND_ABI) {
        printf("test_cuda_memory_limit: %s is not a qvl backend\n", QVL_CUDA_SO);
        dlclose(dl);
        return 1;
    }
    qvl_backend *be = NULL;
    qvl_error err = {0};
    if (iface->init(NULL, &be, &err) != QVL_OK) {
        printf("test_cuda_memory_limit: skipped, cuda_sm61 is unavailable here: %s\n", err.msg);
        dlclose(dl);
        return 77;
    }
    iface->release(be);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_describe_and_alloc),
        cmocka_unit_test(test_budget_above_device),
        cmocka_unit_test(test_scratch_counts),
        cmocka_unit_test(test_bad_values),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dlclose(dl);
    return rc;
}
