#include "test_backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int qvl_test_backend_open(const char *path, const qvl_options *opts, qvl_test_backend *out) {
    memset(out, 0, sizeof *out);
    out->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!out->dl) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return -1;
    }
    qvl_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(out->dl, QVL_BACKEND_ENTRY_SYMBOL);
    out->iface = entry ? entry() : NULL;
    if (!out->iface || out->iface->abi != QVL_BACKEND_ABI) {
        fprintf(stderr, "%s: not a qvl backend of ABI %u\n", path, QVL_BACKEND_ABI);
        dlclose(out->dl);
        out->dl = NULL;
        return -1;
    }
    qvl_error err = {0};
    if (out->iface->init(opts, &out->be, &err) != QVL_OK) {
        fprintf(stderr, "%s: init failed: %s\n", path, err.msg);
        dlclose(out->dl);
        out->dl = NULL;
        return -1;
    }
    return 0;
}

int qvl_test_each_backend(const char *const *paths, size_t n,
                          void (*check)(const qvl_test_backend *tb)) {
    int ran = 0;
    for (size_t b = 0; b < n; b++) {
        qvl_test_backend tb;
        if (qvl_test_backend_open(paths[b], NULL, &tb) != 0) {
            if (b == 0) return -1;
            printf("skipping %s (does not initialise here)\n", paths[b]);
            continue;
        }
        check(&tb);
        qvl_test_backend_close(&tb);
        ran++;
    }
    return ran;
}

qvl_status qvl_test_run_node(const qvl_test_backend *tb, qvl_op op, const qvl_params *p,
                             qvl_tensor *const *src, uint32_t n_src, qvl_tensor *dst,
                             qvl_error *err) {
    qvl_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    if (p) n.params = *p;
    n.n_src = qvl_op_max_inputs(op);
    for (uint32_t i = 0; i < n_src && i < QVL_MAX_SRC; i++) n.src[i] = src[i];
    n.dst = dst;
    n.name = qvl_op_name(op);
    if (qvl_test_supports(tb, &n, NULL) != QVL_OK) return QVL_E_UNSUPPORTED;
    return qvl_test_kernel(tb, op)(tb->be, &n, err);
}

qvl_status qvl_test_supports(const qvl_test_backend *tb, const qvl_node *node, qvl_error *err) {
    return qvl_backend_check(tb->iface, tb->be, node, err);
}

qvl_kernel_fn qvl_test_kernel(const qvl_test_backend *tb, qvl_op op) {
    return qvl_backend_kernel(tb->iface, op);
}

void qvl_test_backend_close(qvl_test_backend *tb) {
    if (tb->iface && tb->be) tb->iface->release(tb->be);
    if (tb->dl) dlclose(tb->dl);
    memset(tb, 0, sizeof *tb);
}

qvl_backend_iface qvl_test_declared_iface(const char *name, const qvl_op_impl *ops,
                                          qvl_status (*accepts)(qvl_backend *be,
                                                                const qvl_node *node,
                                                                qvl_error *err)) {
    qvl_backend_iface f;
    memset(&f, 0, sizeof f);
    f.abi = QVL_BACKEND_ABI;
    f.name = name;
    f.n_ops = QVL_OP_COUNT;
    f.ops = ops;
    f.accepts = accepts;
    return f;
}
