/* Host-side copies of large transfers, spread over a few threads.
 *
 * A transfer through pinned staging is a host memcpy plus the DMA. One core copies pageable
 * memory at a fraction of what the memory bus and the PCIe link carry, so for a picture's
 * pixels (about 19 MB at 1024x768) and its features (four blocks of about 6 MB) the memcpy
 * took longer than the DMA. The cores are otherwise idle while the device waits for its input
 * (or the host for the device's output), so the copy is cut into parts for a few threads.
 * Threads are made per copy: that costs tens of microseconds, small beside a copy of megabytes,
 * and keeps no threads alive in a plugin that may be unloaded. */
#include "cu_host_copy.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#define CU_HOST_COPY_SPLIT ((size_t)2 << 20) /* smaller copies stay on the caller's thread */
#define CU_HOST_COPY_PART ((size_t)1 << 20)  /* no part smaller than this */
#define CU_HOST_COPY_THREADS 4               /* parts at most (the caller copies one) */

typedef struct copy_part {
    void *dst;
    const void *src;
    size_t bytes;
} copy_part;

static void *copy_part_run(void *arg) {
    copy_part *p = arg;
    memcpy(p->dst, p->src, p->bytes);
    return NULL;
}

static size_t copy_parts_for(size_t bytes) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t parts = cpus > 1 ? (size_t)cpus : 1;
    if (parts > CU_HOST_COPY_THREADS) parts = CU_HOST_COPY_THREADS;
    if (parts > bytes / CU_HOST_COPY_PART) parts = bytes / CU_HOST_COPY_PART;
    return parts < 1 ? 1 : parts;
}

void cu_host_copy(void *dst, const void *src, size_t bytes) {
    size_t parts = bytes < CU_HOST_COPY_SPLIT ? 1 : copy_parts_for(bytes);
    if (parts == 1) {
        memcpy(dst, src, bytes);
        return;
    }
    copy_part part[CU_HOST_COPY_THREADS];
    pthread_t thread[CU_HOST_COPY_THREADS];
    bool started[CU_HOST_COPY_THREADS] = {false};
    /* parts of whole cache lines; the last takes the rest */
    size_t each = (bytes / parts) & ~(size_t)63, at = 0;
    for (size_t i = 0; i < parts; i++) {
        part[i].dst = (char *)dst + at;
        part[i].src = (const char *)src + at;
        part[i].bytes = i + 1 < parts ? each : bytes - at;
        at += part[i].bytes;
    }
    for (size_t i = 1; i < parts; i++)
        started[i] = pthread_create(&thread[i], NULL, copy_part_run, &part[i]) == 0;
    copy_part_run(&part[0]);
    for (size_t i = 1; i < parts; i++) {
        if (started[i]) pthread_join(thread[i], NULL);
        else copy_part_run(&part[i]); /* no thread: the caller copies it too */
    }
}
