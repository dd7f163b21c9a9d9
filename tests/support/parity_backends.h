/* The backends the parity tests (test_parity.c, test_vision_parity.c) run on. By default
 * reference, cpu_avx2 and cuda_sm61, of which only the reference must load (the others are
 * skipped where their hardware is absent). $QVL_PARITY_BACKENDS (names, comma separated; ctest
 * sets it with a $QVL_PLUGINS file, e.g. for the minimal backend) replaces the list, and then
 * every one named must load and run every case. Failures go through cmocka (fail_msg). */
#ifndef QVL_PARITY_BACKENDS_H
#define QVL_PARITY_BACKENDS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct parity_backends {
    char names[8][64];
    size_t n;
    bool strict; /* named by $QVL_PARITY_BACKENDS: each must load and run every case */
} parity_backends;

/* The list, from $QVL_PARITY_BACKENDS or the default. */
void parity_backends_get(parity_backends *l);
/* $name, or NULL when it is unset or empty (the parity tests' switches: KV type, split). */
const char *parity_env(const char *name);
/* The whole file (NUL-terminated, *len its size when len is not NULL), or NULL when it cannot
 * be read. The caller frees it. */
char *parity_read_file(const char *path, size_t *len);
/* Whether backend b of l loads here; the test fails when it must (strict, or the first). */
bool parity_backend_loads(const parity_backends *l, size_t b);

#endif
