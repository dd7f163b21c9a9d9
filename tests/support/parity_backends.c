/* The parity tests' backend list: see parity_backends.h. */
#include "parity_backends.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/registry.h"

static const char *const default_backends[] = {"reference", "cpu_avx2", "cuda_sm61"};

void parity_backends_get(parity_backends *l) {
    memset(l, 0, sizeof *l);
    const char *env = getenv("QVL_PARITY_BACKENDS");
    if (!env || !*env) {
        for (size_t b = 0; b < sizeof default_backends / sizeof default_backends[0]; b++)
            snprintf(l->names[l->n++], sizeof l->names[0], "%s", default_backends[b]);
        return;
    }
    l->strict = true;
    for (const char *p = env; *p; p += *p == ',') {
        size_t len = strcspn(p, ",");
        if (len >= sizeof l->names[0] || (len > 0 && l->n == 8))
            fail_msg("QVL_PARITY_BACKENDS='%s': too many or too long names", env);
        if (len > 0) snprintf(l->names[l->n++], sizeof l->names[0], "%.*s", (int)len, p);
        p += len;
    }
    if (l->n == 0) fail_msg("QVL_PARITY_BACKENDS='%s' names no backend", env);
}

bool parity_backend_loads(const parity_backends *l, size_t b) {
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    if (qvl_backend_open(NULL, l->names[b], &lb, &err) != QVL_OK) {
        if (l->strict || b == 0) fail_msg("backend %s does not load: %s", l->names[b], err.msg);
        printf("skipping backend %s: %s\n", l->names[b], err.msg);
        return false;
    }
    qvl_backend_unload(lb);
    return true;
}

const char *parity_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *parity_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}
