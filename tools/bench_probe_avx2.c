/* The AVX2/FMA probe kernels. This file alone is compiled with -mavx2 -mfma; bench_probe.c
 * calls it only after __builtin_cpu_supports says the CPU has both. */
#include <immintrin.h>

#include "bench_probe.h"

#define FMA_CHAINS 12 /* independent chains: more than latency (4) x ports (2) keep both busy */

/* Sum of 64-bit words, read as READ_STREAMS interleaved streams of whole cache lines: one
 * sequential stream per core is limited by how many misses its prefetcher keeps in flight,
 * while a GEMV reads several weight rows at once; several streams measure what such a kernel
 * can get. One accumulator per stream hides the add latency. */
uint64_t bench_read_sum_avx2(const void *p, size_t bytes) {
    const unsigned char *base = p;
    size_t sub = bytes / READ_STREAMS / 64 * 64;
    __m256i acc[READ_STREAMS];
    for (int k = 0; k < READ_STREAMS; k++) acc[k] = _mm256_setzero_si256();
    for (size_t off = 0; off < sub; off += 64)
        for (int k = 0; k < READ_STREAMS; k++) {
            const __m256i *v = (const __m256i *)(base + (size_t)k * sub + off);
            acc[k] = _mm256_add_epi64(acc[k], _mm256_add_epi64(_mm256_load_si256(v),
                                                               _mm256_load_si256(v + 1)));
        }
    __m256i s = acc[0];
    for (int k = 1; k < READ_STREAMS; k++) s = _mm256_add_epi64(s, acc[k]);
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, s);
    uint64_t sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (size_t i = sub * READ_STREAMS; i < bytes; i++) sum += base[i];
    return sum;
}

/* acc = acc * a + b on FMA_CHAINS vectors of 8 floats; a < 1 keeps the values finite. The
 * chains are named variables so that they stay in registers. */
float bench_fma_avx2(uint64_t iters) {
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
    __m256 c0 = _mm256_set1_ps(0.0f), c1 = _mm256_set1_ps(1.0f), c2 = _mm256_set1_ps(2.0f),
           c3 = _mm256_set1_ps(3.0f), c4 = _mm256_set1_ps(4.0f), c5 = _mm256_set1_ps(5.0f),
           c6 = _mm256_set1_ps(6.0f), c7 = _mm256_set1_ps(7.0f), c8 = _mm256_set1_ps(8.0f),
           c9 = _mm256_set1_ps(9.0f), c10 = _mm256_set1_ps(10.0f), c11 = _mm256_set1_ps(11.0f);
    for (uint64_t i = 0; i < iters; i++) {
        c0 = _mm256_fmadd_ps(c0, a, b);
        c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b);
        c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b);
        c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b);
        c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b);
        c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b);
        c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

double bench_fma_flops_avx2(uint64_t iters) { return (double)iters * FMA_CHAINS * 8 * 2; }

#define I8_CHAINS 4 /* 8 multiplies in flight keep the two vector multiply ports busy, and
                      * a, ones, 4 inputs, 4 sums and 2 temporaries stay in registers */

/* The inputs pass through an empty asm each iteration so the compiler cannot hoist the
 * products out of the loop (the kernels load fresh blocks; here the bytes stay put, which
 * keeps the probe in registers: it measures the arithmetic, not the loads). */
uint32_t bench_i8_avx2(uint64_t iters) {
    const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i b0 = _mm256_set1_epi8(1), b1 = _mm256_set1_epi8(2), b2 = _mm256_set1_epi8(-3),
            b3 = _mm256_set1_epi8(4);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    for (uint64_t i = 0; i < iters; i++) {
        __asm__ volatile("" : "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones));
        c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b2), ones));
        c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b3), ones));
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3));
    uint32_t lanes[8]; /* the sums wrap (as the vector adds did): unsigned, so that is defined */
    _mm256_storeu_si256((__m256i *)lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

/* 32 byte products per maddubs, 2 ops each. */
double bench_i8_ops_avx2(uint64_t iters) { return (double)iters * I8_CHAINS * 32 * 2; }
