/* A directory written under a temporary name and moved into place whole (see dir_write.h). */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE, getentropy */
#include "qvl/dir_write.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/log.h"

#define TEMP_NAME_TRIES 64

/* base + ".qvl-" + tag + 12 random hex digits, not existing when made. */
static char *fresh_name(const char *base, const char *tag) {
    size_t cap = strlen(base) + strlen(tag) + sizeof ".qvl-000000000000";
    char *name = malloc(cap);
    if (!name) return NULL;
    uint64_t r = 0;
    if (getentropy(&r, sizeof r) != 0) r = (uint64_t)getpid() << 16;
    snprintf(name, cap, "%s.qvl-%s%012llx", base, tag, (unsigned long long)(r & 0xffffffffffffull));
    return name;
}

/* Removes the files directly in dir, then dir itself: unlinkat removes a link, not what it
 * points at, and refuses a subdirectory, which then stays (with dir). */
static bool remove_flat(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return false;
    }
    bool all = true;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (unlinkat(fd, e->d_name, 0) != 0) all = false;
    }
    closedir(d);
    return rmdir(dir) == 0 && all;
}

qvl_status qvl_new_dir_open(const char *path, qvl_new_dir *d, qvl_error *err) {
    *d = (qvl_new_dir){0};
    size_t n = path ? strlen(path) : 0;
    while (n > 1 && path[n - 1] == '/') n--;
    const char *base = path;
    for (size_t i = 0; i < n; i++)
        if (path[i] == '/') base = path + i + 1;
    size_t base_len = n - (size_t)(base - path);
    if (n == 0 || base_len == 0 || (base_len == 1 && base[0] == '.') ||
        (base_len == 2 && base[0] == '.' && base[1] == '.'))
        return qvl_fail(err, QVL_E_INVALID, "%s: name the directory itself (not /, . or ..)",
                        path ? path : "");
    if (!(d->path = strndup(path, n))) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < TEMP_NAME_TRIES; i++) {
        free(d->tmp);
        if (!(d->tmp = fresh_name(d->path, ""))) break;
        if (mkdir(d->tmp, 0755) == 0) return QVL_OK;
        if (errno != EEXIST) break;
    }
    int e = errno;
    qvl_new_dir_abandon(d);
    return qvl_fail(err, QVL_E_IO, "%s: cannot create a directory beside it: %s", path,
                    strerror(e));
}

/* Without RENAME_EXCHANGE: the old directory moves aside, the new one in, and the old one back
 * if that fails. *old: the name the old one has now (to remove). */
static qvl_status swap_by_two_renames(qvl_new_dir *d, char **old, qvl_error *err) {
    char *aside = fresh_name(d->path, "old-");
    qvl_status s = QVL_OK;
    if (!aside) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (rename(d->path, aside) != 0) {
        s = qvl_fail(err, QVL_E_IO, "%s: cannot move the old directory aside: %s", d->path,
                     strerror(errno));
    } else if (rename(d->tmp, d->path) != 0) {
        int e = errno;
        if (rename(aside, d->path) != 0)
            s = qvl_fail(err, QVL_E_IO, "%s: cannot move the new directory into place (%s); the "
                         "old one is at %s", d->path, strerror(e), aside);
        else
            s = qvl_fail(err, QVL_E_IO, "%s: cannot move the new directory into place: %s",
                         d->path, strerror(e));
    }
    if (s == QVL_OK) *old = aside;
    else free(aside);
    return s;
}

qvl_status qvl_new_dir_commit(qvl_new_dir *d, qvl_error *err) {
    struct stat sb;
    qvl_status s = QVL_OK;
    char *old = NULL; /* the replaced directory's name after the swap */
    if (lstat(d->path, &sb) != 0) {
        if (errno != ENOENT || rename(d->tmp, d->path) != 0)
            s = qvl_fail(err, QVL_E_IO, "%s: cannot move the new directory into place: %s",
                         d->path, strerror(errno));
        else {
            free(d->tmp);
            d->tmp = NULL;
        }
    } else if (!S_ISDIR(sb.st_mode)) {
        s = qvl_fail(err, QVL_E_IO, "%s: became %s while being written: not replacing it",
                     d->path, S_ISLNK(sb.st_mode) ? "a symbolic link" : "something else");
    } else if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->path, RENAME_EXCHANGE) == 0) {
        old = d->tmp; /* the two names swapped: tmp now holds the old directory */
        d->tmp = NULL;
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        if ((s = swap_by_two_renames(d, &old, err)) == QVL_OK) {
            free(d->tmp); /* renamed into place: nothing to remove */
            d->tmp = NULL;
        }
    } else {
        s = qvl_fail(err, QVL_E_IO, "%s: cannot exchange it with the new directory: %s", d->path,
                     strerror(errno));
    }
    if (old && !remove_flat(old))
        QVL_LOG_W("%s replaced; the old directory, not entirely removed, is at %s", d->path, old);
    free(old);
    qvl_new_dir_abandon(d);
    return s;
}

void qvl_new_dir_abandon(qvl_new_dir *d) {
    if (!d) return;
    if (d->tmp) (void)remove_flat(d->tmp);
    free(d->tmp);
    free(d->path);
    *d = (qvl_new_dir){0};
}
