/* Roofline probes for qvl-bench: what this machine's memory and FMA units can do at most, measured
 * in the same run as the model so that achieved figures can be read as a fraction of them. */
#ifndef QVL_BENCH_PROBE_H
#define QVL_BENCH_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct bench_probe {
    double gbs;        /* best streaming-read bandwidth over the passes, 1e9 bytes/s */
    double gflops;     /* best FMA rate over the passes, 1e9 flop/s (an FMA counts 2) */
    /* Best int8 dot-product rate, 1e9 ops/s (a u8 x s8 multiply-add counts 2), run as the
     * quantised weights' kernels run it (bench_i8_avx2); 0: not measured (no AVX2, or a
     * device probe, which measures fp32 FMA only). */
    double giops;
    const char *kind;  /* "avx2-fma" or "scalar": which FMA loop ran */
    bool device;       /* the backend's own probe of its device, not this host's CPU */
    int threads;
    size_t bytes;      /* buffer the read probe streamed through */
    uint64_t checksum; /* sum of what the threads computed (keeps the loops alive) */
} bench_probe;

/* Reads a buffer of `bytes` (far larger than the last-level cache) with `threads` threads,
 * `passes` times, and runs the FMA loop on as many threads. Returns 0, or -1 with a message
 * on stderr when memory or threads are not available. */
int bench_probe_run(size_t bytes, int threads, int passes, bench_probe *out);

/* Streams each thread reads at once (see bench_read_sum_avx2). */
#define READ_STREAMS 8

/* Monotonic seconds, and times sorted ascending (t[n / 2] the median): the kernel benches'
 * shared timing. */
double bench_now_seconds(void);
void bench_sort_times(double *t, int n);

/* The kernels, one thread's share each; the AVX2 ones live in bench_probe_avx2.c (compiled
 * with -mavx2 -mfma) and are only called when the CPU reports AVX2 and FMA. */
uint64_t bench_read_sum_scalar(const void *p, size_t bytes);
float bench_fma_scalar(uint64_t iters);
uint64_t bench_read_sum_avx2(const void *p, size_t bytes);
float bench_fma_avx2(uint64_t iters);
/* Floating-point operations one call of bench_fma_*(iters) performs. */
double bench_fma_flops_scalar(uint64_t iters);
double bench_fma_flops_avx2(uint64_t iters);
/* The inner step of cpu_avx2's q8_0/q4_k/q6_k matmuls (u8 x s8 products summed to i16 pairs by
 * maddubs, to i32 by madd, accumulated), and the multiply-adds x 2 one call performs. */
uint32_t bench_i8_avx2(uint64_t iters);
double bench_i8_ops_avx2(uint64_t iters);

#endif
