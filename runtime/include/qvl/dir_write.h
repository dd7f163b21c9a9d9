/* A directory written as a whole (qvl quantize --out): its files go into a fresh temporary
 * directory beside it, which takes the real name only when everything is written, so no
 * half-written model ever appears under that name and a failure leaves an existing one as it
 * was (docs/hostile-input.md, "Files qvl writes"). */
#ifndef QVL_DIR_WRITE_H
#define QVL_DIR_WRITE_H

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_new_dir {
    char *path; /* where it goes, without trailing slashes */
    char *tmp;  /* the temporary directory beside it, where the files are written */
} qvl_new_dir;

/* Creates the temporary directory beside path (mode 0755 less the umask). */
qvl_status qvl_new_dir_open(const char *path, qvl_new_dir *d, qvl_error *err);
/* Moves it to its path. An existing directory there is exchanged with it in one step
 * (renameat2 RENAME_EXCHANGE; where the file system cannot, it is moved aside first and moved
 * back if the new one cannot take its place), then the old one's files are removed: only
 * files directly in it, never through a link or into a subdirectory. Frees d. */
qvl_status qvl_new_dir_commit(qvl_new_dir *d, qvl_error *err);
/* Removes the temporary directory and the files written into it. Frees d; safe on a zeroed or
 * failed d. */
void qvl_new_dir_abandon(qvl_new_dir *d);

#ifdef __cplusplus
}
#endif
#endif
