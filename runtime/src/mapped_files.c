/* The SIGBUS handler for mapped model files (see mapped_files.h). The handler may run at any
 * moment on any thread: it only reads the slot table (each slot published with release
 * stores, read with acquire loads) and calls async-signal-safe functions (write, _exit). */
#define _GNU_SOURCE /* SA_SIGINFO fields */
#include "qvl/mapped_files.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 64 /* a sharded 2B model has a handful of files */
#define MSG_BYTES 600

typedef struct map_slot {
    atomic_uintptr_t start; /* 0: free */
    atomic_size_t len;
    char msg[MSG_BYTES]; /* written before start is published */
    size_t msg_len;
} map_slot;

static map_slot slots[SLOTS];
static atomic_flag installing = ATOMIC_FLAG_INIT;
static atomic_int installed;

static void on_sigbus(int sig, siginfo_t *info, void *uctx) {
    (void)uctx;
    uintptr_t a = (uintptr_t)info->si_addr;
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t s = atomic_load_explicit(&slots[i].start, memory_order_acquire);
        size_t n = atomic_load_explicit(&slots[i].len, memory_order_relaxed);
        if (s && a >= s && a - s < n) {
            ssize_t w = write(STDERR_FILENO, slots[i].msg, slots[i].msg_len);
            (void)w;
            _exit(1);
        }
    }
    /* not one of ours: the default action (core dump and the usual status) */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install(void) {
    if (atomic_load(&installed) || atomic_flag_test_and_set(&installing)) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL) == 0) atomic_store(&installed, 1);
    atomic_flag_clear(&installing);
}

int qvl_mapped_register(const void *addr, size_t len, const char *path) {
    if (!addr || !len) return -1;
    install();
    for (int i = 0; i < SLOTS; i++) {
        uintptr_t expect = 0;
        /* claim the slot with a placeholder address no access can hit */
        if (!atomic_compare_exchange_strong(&slots[i].start, &expect, (uintptr_t)1)) continue;
        int n = snprintf(slots[i].msg, sizeof slots[i].msg,
                         "qvl: %s changed on disk while in use (truncated or overwritten): the "
                         "weights mapped from it are gone; replace model files with mv, not cp, "
                         "while qvl runs\n",
                         path ? path : "a model file");
        slots[i].msg_len = n < 0 ? 0 : (size_t)n < sizeof slots[i].msg ? (size_t)n
                                                                        : sizeof slots[i].msg - 1;
        atomic_store_explicit(&slots[i].len, len, memory_order_relaxed);
        atomic_store_explicit(&slots[i].start, (uintptr_t)addr, memory_order_release);
        return i;
    }
    return -1;
}

void qvl_mapped_forget(int slot) {
    if (slot < 0 || slot >= SLOTS) return;
    atomic_store_explicit(&slots[slot].start, 0, memory_order_release);
}

qvl_status qvl_mapped_open(const char *path, unsigned char **map, size_t *size, int *slot,
                           qvl_error *err) {
    *map = NULL;
    *size = 0;
    *slot = -1;
    /* O_NONBLOCK: a FIFO planted under a model file's name must fail the regular-file check
     * below instead of blocking open() forever; it changes nothing for regular files. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return qvl_fail(err, errno == ENOENT ? QVL_E_NOT_FOUND : QVL_E_IO, "%s: cannot open: %s",
                        path, strerror(errno));
    struct stat sb;
    qvl_status s = QVL_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        s = qvl_fail(err, QVL_E_IO, "%s: not a regular file", path);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        s = qvl_fail(err, QVL_E_LIMIT, "%s: file too large to map", path);
    if (s != QVL_OK || sb.st_size == 0) {
        close(fd);
        return s;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) s = qvl_fail(err, QVL_E_IO, "%s: cannot map: %s", path, strerror(errno));
    close(fd);
    if (s != QVL_OK) return s;
    *map = m;
    *size = (size_t)sb.st_size;
    *slot = qvl_mapped_register(m, *size, path);
    return QVL_OK;
}
