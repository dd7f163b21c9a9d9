/* A scratch directory for a test program: made under $TMPDIR (else /tmp) before the tests,
 * removed with everything in it after them (cmocka group setup/teardown). */
#ifndef QVL_TEST_SCRATCH_DIR_H
#define QVL_TEST_SCRATCH_DIR_H

#include <stddef.h>

/* The directory's path ("" before scratch_dir_make). */
extern char scratch_dir[256];

/* mkdtemp of <tmp>/<prefix>-XXXXXX; 0 on success (cmocka setup convention). */
int scratch_dir_make(const char *prefix);
/* Removes the directory and its contents; 0 on success. */
int scratch_dir_remove(void);
/* buf = <scratch_dir>/<name>; asserts that it fits. */
void scratch_path(char *buf, size_t cap, const char *name);

#endif
