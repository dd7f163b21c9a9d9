/* Host-side copies of large transfers, spread over a few threads (cu_host_copy.c). */
#ifndef QVL_CU_HOST_COPY_H
#define QVL_CU_HOST_COPY_H

#include <stddef.h>

/* memcpy(dst, src, bytes) for non-overlapping ranges; from CU_HOST_COPY_SPLIT bytes on, the
 * range is cut into parts copied by helper threads and the caller at once. */
void cu_host_copy(void *dst, const void *src, size_t bytes);

#endif
