/* Fuzz target: the safetensors reader (8-byte length, JSON header, data mapping).
 * The reader maps a path, so each input is written to one memfd that is reopened through
 * /proc/self/fd: no disk traffic per input. Every tensor the reader hands out is read in full,
 * so a pointer or size that reaches past the mapping shows up as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "fuzz_file.h"
#include "qvl/safetensors.h"

static fuzz_file input_file = FUZZ_FILE_INIT;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_as_file(&input_file, "qvl-fuzz-safetensors", data, size);
    if (!path) {
        perror("fuzz_safetensors: memfd");
        abort(); /* the harness itself failed: not a finding in the reader */
    }
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_safetensors_open(path, &st, &err);
    if (s != QVL_OK) {
        fuzz_check_error(s, &err);
        FUZZ_CHECK(st == NULL);
        return 0;
    }
    size_t n = qvl_safetensors_count(st);
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++) {
        const qvl_st_tensor *t = qvl_safetensors_at(st, i);
        FUZZ_CHECK(t && t->name && t->ndim >= 0 && t->ndim <= QVL_ST_MAX_DIMS);
        FUZZ_CHECK(t->dtype == QVL_F32 || t->dtype == QVL_F16 || t->dtype == QVL_BF16);
        FUZZ_CHECK(qvl_safetensors_find(st, t->name) == t);
        const unsigned char *p = t->data;
        for (size_t b = 0; b < t->nbytes; b++) sum += p[b]; /* touch every byte */
    }
    FUZZ_CHECK(qvl_safetensors_at(st, n) == NULL);
    (void)qvl_safetensors_metadata(st, "format");
    (void)qvl_safetensors_find(st, "");
    qvl_safetensors_close(st);
    volatile unsigned sink = sum;
    (void)sink;
    return 0;
}
