/* Copying a model directory's auxiliary files without following links out of it (see
 * qvl/model_copy.h). */
#define _GNU_SOURCE /* O_NOFOLLOW, realpath */
#include "qvl/model_copy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/file.h"
#include "qvl/file_write.h"

/* Whether the resolved path `p` lies strictly inside the resolved directory `dir`. */
static bool is_inside(const char *p, const char *dir) {
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/') return p[0] == '/' && p[1] != '\0';
    return strncmp(p, dir, n) == 0 && p[n] == '/' && p[n + 1] != '\0';
}

/* For a resolved directory .../<repo>/snapshots/<revision>, .../<repo>/blobs; else NULL. */
static char *hf_blobs_dir(const char *real_dir) {
    const char *rev = strrchr(real_dir, '/');
    if (!rev || rev == real_dir) return NULL;
    static const char snap[] = "/snapshots";
    size_t parent_len = (size_t)(rev - real_dir), snap_len = sizeof snap - 1;
    if (parent_len < snap_len || memcmp(rev - snap_len, snap, snap_len) != 0) return NULL;
    size_t repo_len = parent_len - snap_len;
    if (repo_len == 0) return NULL; /* /snapshots/<rev>: no repository directory above */
    char *blobs = malloc(repo_len + sizeof "/blobs");
    if (!blobs) return NULL;
    memcpy(blobs, real_dir, repo_len);
    memcpy(blobs + repo_len, "/blobs", sizeof "/blobs");
    return blobs;
}

static qvl_status check_and_copy(const char *dir, const char *from, const char *to,
                                 size_t max_bytes, qvl_error *err) {
    char *real_dir = realpath(dir, NULL), *real = realpath(from, NULL), *blobs = NULL;
    qvl_status s = QVL_OK;
    if (!real_dir) s = qvl_fail(err, QVL_E_IO, "%s: cannot resolve: %s", dir, strerror(errno));
    else if (!real)
        s = qvl_fail(err, QVL_E_IO, "%s: cannot resolve (a symbolic link to nothing?): %s", from,
                     strerror(errno));
    else if (!is_inside(real, real_dir) &&
             !((blobs = hf_blobs_dir(real_dir)) && is_inside(real, blobs)))
        s = qvl_fail(err, QVL_E_INVALID, "%s leads to %s, outside the model directory: refusing "
                     "to copy it (copy the file itself into the directory)", from, real);
    if (s == QVL_OK) {
        /* real has no link left in it; O_NOFOLLOW refuses one swapped in since, O_NONBLOCK
         * keeps a FIFO from blocking before the regular-file check */
        int in = open(real, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (in < 0) s = qvl_fail(err, QVL_E_IO, "%s: cannot open: %s", from, strerror(errno));
        else s = qvl_file_copy_fd(in, from, to, max_bytes, err);
    }
    free(blobs);
    free(real);
    free(real_dir);
    return s;
}

qvl_status qvl_model_file_copy(const char *dir, const char *name, const char *to,
                               size_t max_bytes, bool *copied, qvl_error *err) {
    *copied = false;
    char *from = qvl_path_join(dir, name);
    if (!from) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    struct stat sb;
    qvl_status s = QVL_OK;
    if (lstat(from, &sb) != 0) {
        if (errno != ENOENT) s = qvl_fail(err, QVL_E_IO, "%s: %s", from, strerror(errno));
    } else if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode)) {
        s = qvl_fail(err, QVL_E_IO, "%s: %s, not a regular file: refusing to copy it", from,
                     qvl_file_kind(sb.st_mode));
    } else if ((s = check_and_copy(dir, from, to, max_bytes, err)) == QVL_OK) {
        *copied = true;
    }
    free(from);
    return s;
}
