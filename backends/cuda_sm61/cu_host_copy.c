/* Host-side copies of large transfers, spread over a few threads.
 *
 * A transfer through pinned staging is a host memcpy plus the DMA. One core copies pageable
 * memory at a fraction of what the memory bus and the PCIe link carry, so for a picture's
 * pixels (about 19 MB at 1024x768) and its features (four blocks of about 6 MB) the memcpy
 * took longer than the DMA. The cores are otherwise idle while the device waits for its input
 * (or the host for the device's output), so the copy is cut into pieces for a few threads,
 * and with the hooks the DMA of one piece runs while the others are copied. Threads are made
 * per copy: that costs tens of microseconds, small beside a copy of megabytes, and keeps no
 * threads alive in a plugin that may be unloaded. */
#include "cu_host_copy.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define CU_HOST_COPY_SPLIT ((size_t)2 << 20) /* smaller copies stay on the caller's thread */
#define CU_HOST_COPY_PART ((size_t)1 << 20)  /* no thread gets less than this */
#define CU_HOST_COPY_THREADS 4               /* threads at most (the caller is one) */

typedef struct copy_worker {
    unsigned char *dst;
    const unsigned char *src;
    size_t bytes, piece, first, step;
    const cu_copy_hooks *hooks;
    int result;
} copy_worker;

static void *copy_worker_run(void *arg) {
    copy_worker *w = arg;
    const cu_copy_hooks *h = w->hooks;
    if (h && h->thread_start) h->thread_start(h->ctx);
    size_t n = (w->bytes + w->piece - 1) / w->piece;
    for (size_t i = w->first; i < n; i += w->step) {
        size_t off = i * w->piece, len = w->bytes - off < w->piece ? w->bytes - off : w->piece;
        if (h && h->before && (w->result = h->before(h->ctx, off, len)) != 0) break;
        memcpy(w->dst + off, w->src + off, len);
        if (h && h->after && (w->result = h->after(h->ctx, off, len)) != 0) break;
    }
    return NULL;
}

static size_t copy_threads_for(size_t bytes) {
    if (bytes < CU_HOST_COPY_SPLIT) return 1;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t threads = cpus > 1 ? (size_t)cpus : 1;
    if (threads > CU_HOST_COPY_THREADS) threads = CU_HOST_COPY_THREADS;
    if (threads > bytes / CU_HOST_COPY_PART) threads = bytes / CU_HOST_COPY_PART;
    return threads < 1 ? 1 : threads;
}

int cu_host_copy_pieces(void *dst, const void *src, size_t bytes, size_t piece,
                        const cu_copy_hooks *hooks) {
    if (bytes == 0) return 0;
    if (piece == 0) piece = bytes;
    size_t pieces = (bytes + piece - 1) / piece, threads = copy_threads_for(bytes);
    if (threads > pieces) threads = pieces;
    copy_worker w[CU_HOST_COPY_THREADS];
    pthread_t thread[CU_HOST_COPY_THREADS];
    bool started[CU_HOST_COPY_THREADS] = {false};
    for (size_t t = 0; t < threads; t++)
        w[t] = (copy_worker){dst, src, bytes, piece, t, threads, hooks, 0};
    for (size_t t = 1; t < threads; t++)
        started[t] = pthread_create(&thread[t], NULL, copy_worker_run, &w[t]) == 0;
    copy_worker_run(&w[0]);
    for (size_t t = 1; t < threads; t++) {
        if (started[t]) pthread_join(thread[t], NULL);
        else copy_worker_run(&w[t]); /* no thread: the caller copies its pieces too */
    }
    for (size_t t = 0; t < threads; t++)
        if (w[t].result) return w[t].result;
    return 0;
}

void cu_host_copy(void *dst, const void *src, size_t bytes) {
    size_t threads = copy_threads_for(bytes);
    /* one run of bytes per thread, in whole cache lines */
    size_t piece = threads > 1 ? ((bytes + threads - 1) / threads + 63) & ~(size_t)63 : bytes;
    cu_host_copy_pieces(dst, src, bytes, piece, NULL);
}
