/* Weight conversion at load (--weights q8_0 and friends): chunks of whole blocks handed
 * to a few threads. Each chunk is copied to an aligned buffer first (a safetensors mapping may
 * place a tensor at any byte offset), widened to f32, then narrowed to the target dtype, so
 * the memory used on the side is a few small buffers per thread, not a copy of the tensor. */
#define _DEFAULT_SOURCE

#include "qvl/weight_convert.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK_ELEMS ((int64_t)1 << 16) /* a multiple of every block (32 for q8_0, 256 for q4_k) */
#define MAX_THREADS 16

typedef struct convert_job {
    qvl_dtype from, to;
    const unsigned char *src;
    unsigned char *dst;
    int64_t n, n_chunks;
    int64_t next_chunk; /* taken atomically: any number of threads share the work */
    int working;        /* threads that got their buffers: one is enough to finish */
    bool measure;       /* sum the squared error of the result and of the source (below) */
    pthread_mutex_t lock;
    double err2, ref2;
} convert_job;

static size_t bytes_of(qvl_dtype t, int64_t elems) {
    size_t b = 0;
    qvl_dtype_row_bytes(t, elems, &b); /* whole blocks by construction */
    return b;
}

/* The converted chunk read back against its f32 source: squared error and squared source, in
 * double (a tensor has millions of elements). */
static void measure_chunk(convert_job *j, const float *f32, const void *dst, int64_t count,
                          float *back) {
    qvl_to_f32(j->to, dst, back, count);
    double e = 0, r = 0;
    for (int64_t i = 0; i < count; i++) {
        double d = (double)back[i] - f32[i];
        e += d * d;
        r += (double)f32[i] * f32[i];
    }
    pthread_mutex_lock(&j->lock);
    j->err2 += e;
    j->ref2 += r;
    pthread_mutex_unlock(&j->lock);
}

static void *convert_chunks(void *arg) {
    convert_job *j = arg;
    float *f32 = malloc((size_t)CHUNK_ELEMS * sizeof *f32);
    float *back = j->measure ? malloc((size_t)CHUNK_ELEMS * sizeof *back) : NULL;
    void *aligned = malloc(bytes_of(j->from, CHUNK_ELEMS) + sizeof(float));
    if (f32 && aligned && (back || !j->measure)) {
        __atomic_fetch_add(&j->working, 1, __ATOMIC_RELAXED);
        int64_t c;
        while ((c = __atomic_fetch_add(&j->next_chunk, 1, __ATOMIC_RELAXED)) < j->n_chunks) {
            int64_t first = c * CHUNK_ELEMS;
            int64_t count = j->n - first < CHUNK_ELEMS ? j->n - first : CHUNK_ELEMS;
            memcpy(aligned, j->src + bytes_of(j->from, first), bytes_of(j->from, count));
            qvl_to_f32(j->from, aligned, f32, count);
            qvl_from_f32(j->to, f32, j->dst + bytes_of(j->to, first), count);
            if (j->measure) measure_chunk(j, f32, j->dst + bytes_of(j->to, first), count, back);
        }
    }
    free(f32);
    free(back);
    free(aligned);
    return NULL;
}

qvl_status qvl_convert_elements(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                int64_t n, int threads, qvl_error *err) {
    return qvl_convert_elements_measured(from, src, to, dst, n, threads, NULL, err);
}

qvl_status qvl_convert_elements_measured(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                         int64_t n, int threads, double *rel_rms, qvl_error *err) {
    double sums[2];
    qvl_status st = qvl_convert_elements_sums(from, src, to, dst, n, threads,
                                              rel_rms ? sums : NULL, err);
    if (st == QVL_OK && rel_rms) *rel_rms = sums[1] > 0 ? sqrt(sums[0] / sums[1]) : sqrt(sums[0]);
    return st;
}

qvl_status qvl_convert_elements_sums(qvl_dtype from, const void *src, qvl_dtype to, void *dst,
                                     int64_t n, int threads, double sums[2], qvl_error *err) {
    size_t unused;
    if (n < 0 || !qvl_dtype_row_bytes(from, n, &unused) || !qvl_dtype_row_bytes(to, n, &unused))
        return qvl_fail(err, QVL_E_SHAPE, "%lld elements are not whole blocks of %s and %s",
                        (long long)n, qvl_dtype_name(from), qvl_dtype_name(to));
    convert_job j = {.from = from, .to = to, .src = src, .dst = dst, .n = n,
                     .n_chunks = (n + CHUNK_ELEMS - 1) / CHUNK_ELEMS, .measure = sums != NULL};
    pthread_mutex_init(&j.lock, NULL);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > j.n_chunks) threads = (int)j.n_chunks;
    pthread_t tid[MAX_THREADS];
    int started = 0; /* helpers that could not start just leave more chunks to the others */
    while (started + 1 < threads && pthread_create(&tid[started], NULL, convert_chunks, &j) == 0)
        started++;
    convert_chunks(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    pthread_mutex_destroy(&j.lock);
    if (j.working == 0 && j.n_chunks > 0)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory converting weights");
    if (sums) {
        sums[0] = j.err2;
        sums[1] = j.ref2;
    }
    return QVL_OK;
}

void qvl_release_mapped_pages(const void *p, size_t bytes) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p) return;
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~((uintptr_t)page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

qvl_status qvl_convert_piece(const qvl_st_tensor *src, qvl_dtype to, uint64_t byte_offset,
                             void *dst, size_t nbytes, int threads, double sums[2], bool *last,
                             qvl_error *err) {
    const size_t bb = qvl_dtype_block_bytes(to), be = qvl_dtype_block_elems(to);
    const int64_t first = (int64_t)(byte_offset / bb * be), count = (int64_t)(nbytes / bb * be);
    size_t src_off = 0;
    if (!qvl_dtype_row_bytes(src->dtype, first, &src_off))
        return qvl_fail(err, QVL_E_SHAPE, "%s: chunk at element %lld is not whole %s blocks",
                        src->name, (long long)first, qvl_dtype_name(src->dtype));
    double piece[2];
    qvl_status st = qvl_convert_elements_sums(src->dtype, (const unsigned char *)src->data + src_off,
                                              to, dst, count, threads, piece, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "%s", src->name);
    sums[0] += piece[0];
    sums[1] += piece[1];
    int64_t n = 1;
    for (int i = 0; i < src->ndim; i++) n *= src->shape[i];
    size_t total = 0;
    qvl_dtype_row_bytes(to, n, &total);
    *last = byte_offset + nbytes == total;
    return QVL_OK;
}

void qvl_print_conversion(int name_width, const char *name, const qvl_st_tensor *src,
                          qvl_dtype to, const double sums[2]) {
    char shape[96];
    size_t len = (size_t)snprintf(shape, sizeof shape, "[");
    for (int i = 0; i < src->ndim && len < sizeof shape; i++)
        len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", i ? ", " : "",
                                (long long)src->shape[i]);
    if (len < sizeof shape) snprintf(shape + len, sizeof shape - len, "]");
    const double rel = sums[1] > 0 ? sqrt(sums[0] / sums[1]) : sqrt(sums[0]);
    printf("%-*s %-16s %4s -> %-4s  RMS error %.3g of the source's RMS\n", name_width, name, shape,
           qvl_dtype_name(src->dtype), qvl_dtype_name(to), rel);
    fflush(stdout);
}
