/* Every file qvl writes goes through qvl_new_file, which applies one rule to what is already at
 * the destination (docs/hostile-input.md, "Files qvl writes"):
 *
 *  - nothing there: a new file is written under a fresh temporary name beside it (created
 *    exclusively, so nothing planted there is opened) and renamed into place when complete, so
 *    a half-written file never appears under the real name;
 *  - a regular file: replaced the same way (a reader of the old file keeps an intact mapping);
 *    the new file's permissions are never wider than the old one's;
 *  - a FIFO or character device (/dev/null, /dev/stdout, a terminal, a pipe): opened and written
 *    as it is, never renamed over, never created and never truncated;
 *  - a symbolic link: followed. The rule applies to what it points at: a link to a regular file
 *    has that file replaced (the temporary file sits beside the link's final target, so the link
 *    stays a link), a link to a FIFO or device is written into; a link to nothing is refused;
 *  - anything else (a directory, a block device, a socket): refused.
 *
 * New files get the requested mode less the process umask. */
#ifndef QVL_FILE_WRITE_H
#define QVL_FILE_WRITE_H

#include <stddef.h>
#include <sys/types.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_new_file {
    int fd;
    char *tmp;  /* the temporary name beside target; NULL when writing into a stream in place */
    char *path; /* the name the caller gave (for messages) */
    char *target; /* what tmp is renamed to: path, or the regular file its symlink resolves to */
} qvl_new_file;

/* Opens path for writing under the rule above, new files with mode 0644 (less the umask). */
qvl_status qvl_new_file_open(const char *path, qvl_new_file *f, qvl_error *err);
/* The same with the permission bits a new file gets (before the umask). */
qvl_status qvl_new_file_open_mode(const char *path, mode_t mode, qvl_new_file *f, qvl_error *err);
/* All of buf, retrying short writes. */
qvl_status qvl_new_file_write(qvl_new_file *f, const void *buf, size_t n, qvl_error *err);
/* Closes and renames it to its target (a stream is only closed); on failure the temporary file
 * is removed. Frees f. */
qvl_status qvl_new_file_commit(qvl_new_file *f, qvl_error *err);
/* Closes and removes the temporary file (after an error; what went into a stream stays
 * written). Frees f; safe on a failed f or one initialised as {.fd = -1}. */
void qvl_new_file_abandon(qvl_new_file *f);

/* Copies the regular file `from` (at most max_bytes) to `to` as above, with from's permission
 * bits (never wider than the source's). FIFOs and devices are not read. */
qvl_status qvl_file_copy(const char *from, const char *to, size_t max_bytes, qvl_error *err);
/* The same from a file already open for reading (`from` names it in messages); closes in. */
qvl_status qvl_file_copy_fd(int in, const char *from, const char *to, size_t max_bytes,
                            qvl_error *err);

/* "a directory", "a block device", ... for messages about a file's type. */
const char *qvl_file_kind(mode_t mode);

#ifdef __cplusplus
}
#endif
#endif
