/* Host-side copies of large transfers, spread over a few threads (cu_host_copy.c). */
#ifndef QVL_CU_HOST_COPY_H
#define QVL_CU_HOST_COPY_H

#include <stddef.h>

/* memcpy(dst, src, bytes) for non-overlapping ranges; from CU_HOST_COPY_SPLIT bytes on, the
 * range is copied by helper threads and the caller at once. */
void cu_host_copy(void *dst, const void *src, size_t bytes);

/* What cu_host_copy_pieces calls around each piece, on the thread that copies it: a staged
 * transfer starts a piece's DMA as soon as it is copied (after), or copies a piece once its
 * DMA has arrived (before). A nonzero result stops that thread and is returned. Any of the
 * functions may be NULL. */
typedef struct cu_copy_hooks {
    void *ctx;
    void (*thread_start)(void *ctx); /* once on each thread that copies, before its pieces */
    int (*before)(void *ctx, size_t off, size_t len);
    int (*after)(void *ctx, size_t off, size_t len);
} cu_copy_hooks;

/* The copy as pieces [off, off + len) of `piece` bytes (the last may be shorter), dealt to the
 * threads in turn (piece i to thread i % threads), so that pieces finish roughly in order.
 * Returns 0, or the first nonzero hook result (by thread). */
int cu_host_copy_pieces(void *dst, const void *src, size_t bytes, size_t piece,
                        const cu_copy_hooks *hooks);

#endif
