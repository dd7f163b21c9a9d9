/* Writing files that readers and other users cannot corrupt: a new file is written under a
 * fresh temporary name in the destination's directory (created exclusively, so a symlink or
 * an existing file there is never opened) and renamed over the destination when complete.
 * rename replaces a symlink planted at the destination instead of following it, and a reader
 * of the old file keeps its mapping intact. */
#ifndef QVL_FILE_WRITE_H
#define QVL_FILE_WRITE_H

#include <stddef.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_new_file {
    int fd;
    char *tmp;  /* the temporary name, beside path */
    char *path; /* where it goes on commit */
} qvl_new_file;

/* Creates the temporary file for path (mode 0644). */
qvl_status qvl_new_file_open(const char *path, qvl_new_file *f, qvl_error *err);
/* All of buf, retrying short writes. */
qvl_status qvl_new_file_write(qvl_new_file *f, const void *buf, size_t n, qvl_error *err);
/* Closes and renames it to its path; on failure the temporary file is removed. Frees f. */
qvl_status qvl_new_file_commit(qvl_new_file *f, qvl_error *err);
/* Closes and removes it (after an error). Frees f; safe on a zeroed or failed f. */
void qvl_new_file_abandon(qvl_new_file *f);

/* Copies the regular file `from` (at most max_bytes) to `to` as a new file, as above. */
qvl_status qvl_file_copy(const char *from, const char *to, size_t max_bytes, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
