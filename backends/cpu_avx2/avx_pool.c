/* The thread pool (see avx_pool.h). A run bumps a generation counter under the mutex and
 * broadcasts; each worker runs the job for its id and counts itself done; the caller runs
 * share 0 and then waits for the count. Workers spin briefly before sleeping, because ops
 * follow each other within microseconds during decoding. */
#define _POSIX_C_SOURCE 200809L
#include "avx_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define AVX_SPIN_ROUNDS 20000

struct avx_pool {
    int n;
    pthread_t *threads;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    atomic_uint generation;
    atomic_int pending;
    int stop;
    avx_job_fn fn;
    void *ctx;
};

typedef struct worker_arg {
    avx_pool *p;
    int tid;
} worker_arg;

static worker_arg *args_of(avx_pool *p);

static void *worker_main(void *arg) {
    worker_arg *w = arg;
    avx_pool *p = w->p;
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
               spins < AVX_SPIN_ROUNDS)
            spins++;
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->generation) == seen && !p->stop) pthread_cond_wait(&p->wake, &p->mu);
        int stop = p->stop;
        seen = atomic_load(&p->generation);
        avx_job_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        if (stop) return NULL;
        fn(ctx, w->tid, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* The per-worker arguments live right after the pthread_t array. */
static worker_arg *args_of(avx_pool *p) {
    return (worker_arg *)(p->threads + p->n);
}

avx_pool *avx_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    avx_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t) + sizeof(worker_arg));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->generation, 0u);
    atomic_init(&p->pending, 0);
    worker_arg *args = args_of(p);
    for (int t = 1; t < n_threads; t++) {
        args[t].p = p;
        args[t].tid = t;
        if (pthread_create(&p->threads[t], NULL, worker_main, &args[t]) != 0) {
            avx_pool_destroy(p);
            return NULL;
        }
        p->started = t;
    }
    return p;
}

void avx_pool_destroy(avx_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add(&p->generation, 1u);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t <= p->started; t++) pthread_join(p->threads[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int avx_pool_size(const avx_pool *p) {
    return p ? p->n : 1;
}

void avx_pool_run(avx_pool *p, avx_job_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    atomic_fetch_add_explicit(&p->generation, 1u, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < AVX_SPIN_ROUNDS)
        spins++;
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void avx_split(int64_t n, int tid, int nth, int64_t align, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * tid / nth, b = units * (tid + 1) / nth;
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}
