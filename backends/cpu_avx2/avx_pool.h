/* A persistent thread pool: threads are created once at init and wait on a condition
 * variable between ops, so no thread is created per op. The caller takes part as thread 0. */
#ifndef QVL_AVX_POOL_H
#define QVL_AVX_POOL_H

#include <stdint.h>

typedef struct avx_pool avx_pool;

/* A job: run by every thread tid in [0, nth) once per avx_pool_run. */
typedef void (*avx_job_fn)(void *ctx, int tid, int nth);

/* n_threads >= 1 in total (the caller included). Returns NULL when threads cannot start. */
avx_pool *avx_pool_create(int n_threads);
void avx_pool_destroy(avx_pool *p);
int avx_pool_size(const avx_pool *p);
/* Runs fn on every thread and returns when all have finished. Not reentrant. */
void avx_pool_run(avx_pool *p, avx_job_fn fn, void *ctx);

/* Thread tid's share [*lo, *hi) of [0, n), boundaries on multiples of `align` (so that
 * threads never write the same cache line when align covers 64 bytes of output). */
void avx_split(int64_t n, int tid, int nth, int64_t align, int64_t *lo, int64_t *hi);

#endif
