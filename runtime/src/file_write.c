/* Files written under a temporary name and renamed into place (see file_write.h). */
#define _GNU_SOURCE /* mkostemp */
#include "qvl/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

qvl_status qvl_new_file_open(const char *path, qvl_new_file *f, qvl_error *err) {
    f->fd = -1;
    f->tmp = NULL;
    f->path = path ? strdup(path) : NULL;
    size_t n = path ? strlen(path) : 0;
    if (f->path) f->tmp = malloc(n + sizeof ".qvl-XXXXXX");
    if (!f->path || !f->tmp) {
        qvl_new_file_abandon(f);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path ? path : "(no path)");
    }
    memcpy(f->tmp, path, n);
    memcpy(f->tmp + n, ".qvl-XXXXXX", sizeof ".qvl-XXXXXX");
    /* mkostemp creates with O_EXCL: it never opens an existing file or follows a symlink */
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        qvl_new_file_abandon(f);
        return qvl_fail(err, QVL_E_IO, "%s: cannot create: %s", path, strerror(e));
    }
    (void)fchmod(f->fd, 0644); /* mkostemp makes 0600; a model directory is meant to be read */
    return QVL_OK;
}

qvl_status qvl_new_file_write(qvl_new_file *f, const void *buf, size_t n, qvl_error *err) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return qvl_fail(err, QVL_E_IO, "%s: write failed: %s", f->path,
                            w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return QVL_OK;
}

qvl_status qvl_new_file_commit(qvl_new_file *f, qvl_error *err) {
    qvl_status s = QVL_OK;
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0)
        s = qvl_fail(err, QVL_E_IO, "%s: close failed: %s", f->path, strerror(errno));
    else if (rename(f->tmp, f->path) != 0)
        s = qvl_fail(err, QVL_E_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    else {
        free(f->tmp); /* renamed: nothing to remove */
        f->tmp = NULL;
    }
    qvl_new_file_abandon(f);
    return s;
}

void qvl_new_file_abandon(qvl_new_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    f->fd = -1;
    f->tmp = NULL;
    f->path = NULL;
}
