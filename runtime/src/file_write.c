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

qvl_status qvl_file_copy(const char *from, const char *to, size_t max_bytes, qvl_error *err) {
    /* O_NONBLOCK: a FIFO under the name fails the regular-file check instead of blocking */
    int in = open(from, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (in < 0)
        return qvl_fail(err, errno == ENOENT ? QVL_E_NOT_FOUND : QVL_E_IO, "%s: cannot open: %s",
                        from, strerror(errno));
    struct stat sb;
    if (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(in);
        return qvl_fail(err, QVL_E_IO, "%s: not a regular file", from);
    }
    if ((unsigned long long)sb.st_size > max_bytes) {
        close(in);
        return qvl_fail(err, QVL_E_LIMIT, "%s: %lld bytes, more than the %zu allowed", from,
                        (long long)sb.st_size, max_bytes);
    }
    qvl_new_file out;
    qvl_status s = qvl_new_file_open(to, &out, err);
    if (s != QVL_OK) {
        close(in);
        return s;
    }
    char buf[1 << 16];
    size_t total = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            s = qvl_fail(err, QVL_E_IO, "%s: read failed: %s", from, strerror(errno));
            break;
        }
        total += (size_t)r;
        if (total > max_bytes) { /* grew while being copied */
            s = qvl_fail(err, QVL_E_LIMIT, "%s: more than the %zu bytes allowed", from, max_bytes);
            break;
        }
        if (r == 0 || (s = qvl_new_file_write(&out, buf, (size_t)r, err)) != QVL_OK) break;
    }
    close(in);
    if (s == QVL_OK) return qvl_new_file_commit(&out, err);
    qvl_new_file_abandon(&out);
    return s;
}
