/* qvl_read_file: whole regular files, bounded (see qvl/file.h). */
#define _POSIX_C_SOURCE 200809L

#include "qvl/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_name(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

static qvl_status too_large(const char *path, size_t max_bytes, qvl_error *err) {
    return qvl_fail(err, QVL_E_LIMIT, "%s: larger than the limit of %zu bytes", path, max_bytes);
}

qvl_status qvl_read_file(const char *path, size_t max_bytes, qvl_status if_missing, char **out,
                         size_t *out_len, qvl_error *err) {
    *out = NULL;
    *out_len = 0;
    if (!path || !path[0]) return qvl_fail(err, QVL_E_INVALID, "read file: empty path");
    /* stat first so a device is never even opened (opening some has side effects), then
     * O_NONBLOCK so a FIFO swapped in meanwhile cannot block open(); fstat decides. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return qvl_fail(err, QVL_E_IO, "%s: not a regular file (%s)", path, kind_name(sb.st_mode));
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return qvl_fail(err, e == ENOENT ? if_missing : QVL_E_IO, "%s: cannot open: %s", path,
                        strerror(e));
    }
    qvl_status st = QVL_OK;
    char *buf = NULL;
    size_t len = 0;
    if (fstat(fd, &sb) != 0) {
        st = qvl_fail(err, QVL_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = qvl_fail(err, QVL_E_IO, "%s: not a regular file (%s)", path, kind_name(sb.st_mode));
        goto done;
    }
    if (sb.st_size < 0 || (unsigned long long)sb.st_size > max_bytes) {
        st = too_large(path, max_bytes, err);
        goto done;
    }
    /* The size is a hint: a file may grow or shrink while read, and /proc files say 0. One byte
     * past the limit is enough to know it is too large. */
    size_t cap = (size_t)sb.st_size + 1;
    if (cap < 4096) cap = max_bytes < 4096 ? max_bytes + 1 : 4096;
    buf = malloc(cap + 1);
    if (!buf) {
        st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for %zu bytes", path, cap);
        goto done;
    }
    for (;;) {
        if (len == cap) {
            if (cap > max_bytes) {
                st = too_large(path, max_bytes, err);
                break;
            }
            size_t grown = cap > max_bytes / 2 ? max_bytes + 1 : cap * 2;
            char *p = realloc(buf, grown + 1);
            if (!p) {
                st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for %zu bytes", path, grown);
                break;
            }
            buf = p;
            cap = grown;
        }
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            st = qvl_fail(err, QVL_E_IO, "%s: cannot read: %s", path, strerror(errno));
            break;
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    if (st == QVL_OK && len > max_bytes) st = too_large(path, max_bytes, err);
done:
    close(fd);
    if (st != QVL_OK) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return QVL_OK;
}
