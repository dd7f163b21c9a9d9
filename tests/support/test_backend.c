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

void qvl_test_backend_close(qvl_test_backend *tb) {
    if (tb->iface && tb->be) tb->iface->release(tb->be);
    if (tb->dl) dlclose(tb->dl);
    memset(tb, 0, sizeof *tb);
}
