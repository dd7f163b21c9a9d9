/* Writing files under one rule for what is already at the destination (see file_write.h). */
#define _GNU_SOURCE /* getentropy, O_NOFOLLOW */
#include "qvl/file_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Names tried before giving up on a temporary file: each is random, so a collision means
 * someone keeps planting names beside the destination. */
#define TEMP_NAME_TRIES 64

const char *qvl_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "an unknown kind of file";
}

static uint64_t temp_suffix(unsigned attempt) {
    uint64_t r = 0;
    if (getentropy(&r, sizeof r) == 0) return r;
    /* no entropy source: still unique enough, as O_EXCL retries on a clash */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_nsec << 20) ^ ((uint64_t)getpid() << 8) ^ attempt;
}

/* A new file named target + ".qvl-" + 12 hex digits, created exclusively (O_EXCL never opens an
 * existing file and never follows a symlink) with mode less the umask (applied by open). */
static qvl_status create_temp(qvl_new_file *f, mode_t mode, qvl_error *err) {
    size_t n = strlen(f->target);
    f->tmp = malloc(n + sizeof ".qvl-000000000000");
    if (!f->tmp) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", f->path);
    for (unsigned i = 0; i < TEMP_NAME_TRIES; i++) {
        snprintf(f->tmp, n + sizeof ".qvl-000000000000", "%s.qvl-%012llx", f->target,
                 (unsigned long long)(temp_suffix(i) & 0xffffffffffffull));
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
        if (f->fd >= 0) return QVL_OK;
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(f->tmp);
    f->tmp = NULL;
    return qvl_fail(err, QVL_E_IO, "%s: cannot create: %s", f->path, strerror(e));
}

/* A FIFO or character device is written as it is: no O_CREAT (nothing appears if the name
 * went away), no O_TRUNC (a regular file swapped in is not harmed), and the opened file is
 * checked again. A FIFO's open waits for its reader, as a shell redirection does. */
static qvl_status open_stream(qvl_new_file *f, qvl_error *err) {
    f->fd = open(f->path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (f->fd < 0)
        return qvl_fail(err, QVL_E_IO, "%s: cannot open for writing: %s", f->path,
                        strerror(errno));
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || !(S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode)))
        return qvl_fail(err, QVL_E_IO, "%s: changed while being opened: refusing to write", f->path);
    return QVL_OK;
}

/* Permissions of the file being replaced: the new file never gets wider ones. */
static void narrow_mode(int fd, mode_t keep) {
    struct stat sb;
    if (fstat(fd, &sb) == 0 && (sb.st_mode & 0777 & ~keep)) (void)fchmod(fd, sb.st_mode & keep);
}

static qvl_status open_checked(const char *path, mode_t mode, qvl_new_file *f, qvl_error *err) {
    struct stat link_sb, sb;
    if (lstat(path, &link_sb) != 0) {
        if (errno != ENOENT)
            return qvl_fail(err, QVL_E_IO, "%s: cannot write: %s", path, strerror(errno));
        if (!(f->target = strdup(path))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
        return create_temp(f, mode, err);
    }
    if (stat(path, &sb) != 0) {
        if (S_ISLNK(link_sb.st_mode) && errno == ENOENT)
            return qvl_fail(err, QVL_E_IO, "%s: a symbolic link to nothing: refusing to create "
                            "its target", path);
        return qvl_fail(err, QVL_E_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    if (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode)) return open_stream(f, err);
    if (!S_ISREG(sb.st_mode))
        return qvl_fail(err, QVL_E_IO, "%s: %s, not a regular file, FIFO or character device: "
                        "refusing to write there", path, qvl_file_kind(sb.st_mode));
    /* Through a symlink the file it resolves to is replaced, and the link stays. */
    f->target = S_ISLNK(link_sb.st_mode) ? realpath(path, NULL) : strdup(path);
    if (!f->target)
        return qvl_fail(err, QVL_E_IO, "%s: cannot resolve: %s", path, strerror(errno));
    qvl_status s = create_temp(f, mode, err);
    if (s == QVL_OK) narrow_mode(f->fd, sb.st_mode & 0777);
    return s;
}

qvl_status qvl_new_file_open_mode(const char *path, mode_t mode, qvl_new_file *f, qvl_error *err) {
    *f = (qvl_new_file){.fd = -1};
    if (!path || !*path) return qvl_fail(err, QVL_E_INVALID, "no file name to write");
    if (!(f->path = strdup(path))) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", path);
    qvl_status s = open_checked(path, mode, f, err);
    if (s != QVL_OK) qvl_new_file_abandon(f);
    return s;
}

qvl_status qvl_new_file_open(const char *path, qvl_new_file *f, qvl_error *err) {
    return qvl_new_file_open_mode(path, 0644, f, err);
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
    struct stat sb;
    if (close(fd) != 0)
        s = qvl_fail(err, QVL_E_IO, "%s: close failed: %s", f->path, strerror(errno));
    else if (f->tmp && lstat(f->target, &sb) == 0 && !S_ISREG(sb.st_mode))
        /* something else took the name while the file was written: never rename over it */
        s = qvl_fail(err, QVL_E_IO, "%s: became %s while being written: not replacing it",
                     f->path, qvl_file_kind(sb.st_mode));
    else if (f->tmp && rename(f->tmp, f->target) != 0)
        s = qvl_fail(err, QVL_E_IO, "%s: cannot rename into place: %s", f->path, strerror(errno));
    else {
        free(f->tmp); /* renamed (or there was none): nothing to remove */
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
    free(f->target);
    *f = (qvl_new_file){.fd = -1};
}

qvl_status qvl_file_copy_fd(int in, const char *from, const char *to, size_t max_bytes,
                            qvl_error *err) {
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
    qvl_status s = qvl_new_file_open_mode(to, sb.st_mode & 0777, &out, err);
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

qvl_status qvl_file_copy(const char *from, const char *to, size_t max_bytes, qvl_error *err) {
    /* O_NONBLOCK: a FIFO under the name fails the regular-file check instead of blocking */
    int in = open(from, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (in < 0)
        return qvl_fail(err, errno == ENOENT ? QVL_E_NOT_FOUND : QVL_E_IO, "%s: cannot open: %s",
                        from, strerror(errno));
    return qvl_file_copy_fd(in, from, to, max_bytes, err);
}
