/* The test programs' scratch directory (test_scratch_dir.h). */
#define _XOPEN_SOURCE 700
#include "test_scratch_dir.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

char scratch_dir[256];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int scratch_dir_make(const char *prefix) {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch_dir, sizeof scratch_dir, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    return mkdtemp(scratch_dir) ? 0 : -1;
}

int scratch_dir_remove(void) { return nftw(scratch_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

void scratch_path(char *buf, size_t cap, const char *name) {
    int k = snprintf(buf, cap, "%s/%s", scratch_dir, name);
    assert_true(k > 0 && (size_t)k < cap);
}
