/* The fuzz input as a file, for parsers that open a path: one memfd per process (named after
 * the target), rewritten for every input and read back through /proc/self/fd. */
#ifndef QVL_FUZZ_FILE_H
#define QVL_FUZZ_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct fuzz_file {
    int fd; /* -1 until first used */
    char path[64];
} fuzz_file;

#define FUZZ_FILE_INIT {-1, {0}}

/* Writes data to f's memfd; returns its path, or NULL when the memfd cannot be made or
 * written. */
static inline const char *fuzz_as_file(fuzz_file *f, const char *name, const uint8_t *data,
                                       size_t size) {
    if (f->fd < 0) {
        f->fd = memfd_create(name, MFD_CLOEXEC);
        if (f->fd < 0) return NULL;
        snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    }
    if (ftruncate(f->fd, 0) != 0) return NULL;
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(f->fd, data + done, size - done, (off_t)done);
        if (w <= 0) return NULL;
        done += (size_t)w;
    }
    return f->path;
}

#endif
