/* Roofline probes: a streaming read over a buffer much larger than the caches, and an FMA loop,
 * each on the same number of threads the model runs with. Every thread's result feeds a sum
 * that is returned, so the compiler cannot drop the work. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench_probe.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FMA_ITERS ((uint64_t)50 * 1000 * 1000)
#define SCALAR_CHAINS 8
#ifdef QVL_BENCH_AVX2
#define FMA_FLOPS_AVX2 bench_fma_flops_avx2(FMA_ITERS)
#define I8_OPS_AVX2 bench_i8_ops_avx2(FMA_ITERS)
#else
#define FMA_FLOPS_AVX2 0.0 /* never used: avx2 stays false */
#define I8_OPS_AVX2 0.0
#endif

/* The same access pattern as the AVX2 version (see there): READ_STREAMS interleaved streams. */
uint64_t bench_read_sum_scalar(const void *p, size_t bytes) {
    const unsigned char *base = p;
    size_t sub = bytes / READ_STREAMS / 64 * 64;
    uint64_t acc[READ_STREAMS] = {0};
    for (size_t off = 0; off < sub; off += 64)
        for (int k = 0; k < READ_STREAMS; k++) {
            const uint64_t *w = (const uint64_t *)(base + (size_t)k * sub + off);
            acc[k] += w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7];
        }
    uint64_t sum = 0;
    for (int k = 0; k < READ_STREAMS; k++) sum += acc[k];
    for (size_t i = sub * READ_STREAMS; i < bytes; i++) sum += base[i];
    return sum;
}

/* Whatever the compiler makes of multiply-add chains without -mfma (a multiply and an add). */
float bench_fma_scalar(uint64_t iters) {
    float acc[SCALAR_CHAINS];
    for (int k = 0; k < SCALAR_CHAINS; k++) acc[k] = (float)k;
    for (uint64_t i = 0; i < iters; i++)
        for (int k = 0; k < SCALAR_CHAINS; k++) acc[k] = acc[k] * 0.999999f + 1e-6f;
    float s = 0;
    for (int k = 0; k < SCALAR_CHAINS; k++) s += acc[k];
    return s;
}

double bench_fma_flops_scalar(uint64_t iters) { return (double)iters * SCALAR_CHAINS * 2; }

double bench_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort_times(double *t, int n) { qsort(t, (size_t)n, sizeof *t, cmp_double); }

/* Threads wait here until every one of them exists, so that they all start together. */
typedef struct start_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 wait, 1 go, 2 give up (not all threads could be started) */
} start_gate;

/* What a probe thread runs. */
enum { PROBE_READ, PROBE_FMA, PROBE_I8, PROBE_KINDS };

typedef struct probe_job {
    start_gate *gate;
    bool avx2;
    int what; /* PROBE_* */
    const unsigned char *data;
    size_t bytes;
    uint64_t result;
} probe_job;

static void *probe_thread(void *arg) {
    probe_job *j = arg;
    pthread_mutex_lock(&j->gate->mu);
    while (j->gate->state == 0) pthread_cond_wait(&j->gate->cv, &j->gate->mu);
    int state = j->gate->state;
    pthread_mutex_unlock(&j->gate->mu);
    if (state != 1) return NULL;
#ifdef QVL_BENCH_AVX2
    if (j->avx2) {
        j->result = j->what == PROBE_FMA  ? (uint64_t)(bench_fma_avx2(FMA_ITERS) * 1000.0f)
                    : j->what == PROBE_I8 ? (uint64_t)bench_i8_avx2(FMA_ITERS)
                                          : bench_read_sum_avx2(j->data, j->bytes);
        return NULL;
    }
#endif
    j->result = j->what == PROBE_FMA ? (uint64_t)(bench_fma_scalar(FMA_ITERS) * 1000.0f)
                                     : bench_read_sum_scalar(j->data, j->bytes);
    return NULL;
}

/* One pass on all threads; returns its wall time (< 0 when threads cannot be started). */
static void open_gate(start_gate *g, int state) {
    pthread_mutex_lock(&g->mu);
    g->state = state;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static double run_pass(probe_job *jobs, int threads, uint64_t *sink) {
    start_gate gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    int started = 0;
    for (; tid && started < threads; started++) {
        jobs[started].gate = &gate;
        if (pthread_create(&tid[started], NULL, probe_thread, &jobs[started]) != 0) break;
    }
    open_gate(&gate, started == threads ? 1 : 2);
    double t0 = bench_now_seconds();
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    double dt = bench_now_seconds() - t0;
    free(tid);
    if (started < threads) return -1;
    for (int i = 0; i < threads; i++) *sink += jobs[i].result;
    return dt;
}

int bench_probe_run(size_t bytes, int threads, int passes, bench_probe *out) {
    memset(out, 0, sizeof *out);
    if (threads < 1) threads = 1;
    if (passes < 1) passes = 1;
    bool avx2 = false;
#ifdef QVL_BENCH_AVX2
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    out->kind = avx2 ? "avx2-fma" : "scalar";
    out->threads = threads;

    /* Each thread reads its own 128-byte aligned slice. */
    size_t slice = bytes / (size_t)threads / 128 * 128;
    if (slice == 0) slice = 128;
    out->bytes = slice * (size_t)threads;
    unsigned char *buf = aligned_alloc(4096, out->bytes);
    probe_job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!buf || !jobs) {
        fprintf(stderr, "qvl-bench: cannot allocate %zu bytes for the memory probe\n", out->bytes);
        free(buf);
        free(jobs);
        return -1;
    }
    memset(buf, 1, out->bytes); /* touch every page before timing */
    uint64_t sink = 0;
    int rc = 0;
    /* the int8 probe needs AVX2: the scalar build's quantised kernels have no such step */
    for (int what = 0; what < (avx2 ? PROBE_KINDS : PROBE_I8) && rc == 0; what++) {
        for (int i = 0; i < threads; i++)
            jobs[i] = (probe_job){.avx2 = avx2, .what = what, .data = buf + (size_t)i * slice,
                                  .bytes = slice};
        for (int p = 0; p < passes; p++) {
            double dt = run_pass(jobs, threads, &sink);
            if (dt < 0) {
                fprintf(stderr, "qvl-bench: cannot start %d probe threads\n", threads);
                rc = -1;
                break;
            }
            if (dt <= 0) continue;
            double work = what == PROBE_READ ? (double)out->bytes
                          : what == PROBE_I8 ? threads * I8_OPS_AVX2
                          : threads * (avx2 ? FMA_FLOPS_AVX2 : bench_fma_flops_scalar(FMA_ITERS));
            double rate = work / dt / 1e9;
            double *best = what == PROBE_READ ? &out->gbs : what == PROBE_FMA ? &out->gflops
                                                                              : &out->giops;
            if (rate > *best) *best = rate;
        }
    }
    out->checksum = sink; /* the work's result leaves the function: none of it can be dropped */
    free(buf);
    free(jobs);
    return rc;
}
