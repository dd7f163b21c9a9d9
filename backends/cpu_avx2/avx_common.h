/* What every cpu_avx2 kernel shares: the backend state, error messages, the node check every
 * kernel runs first, and reading rows of any dtype/stride as f32. */
#ifndef QVL_AVX_COMMON_H
#define QVL_AVX_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "avx_pool.h"
#include "qvl/backend_helpers.h"

struct qvl_backend {
    avx_pool *pool;
    int n_threads;
};

/* The name in every message, and "cpu_avx2: <op> '<name>': <what>" into err (err may be
 * NULL), returning s. The data checks (ids, segment bounds, `at`) are core's qvl_check_*. */
#define AVX_NAME "cpu_avx2"
#define avx_fail(n, err, s, ...) qvl_node_fail(AVX_NAME, n, err, s, __VA_ARGS__)

/* What every kernel does first: the op contract and this backend's declaration (the same
 * question supports() answers), then inputs and output have memory; messages say cpu_avx2. */
qvl_status avx_begin(qvl_backend *be, const qvl_node *n, qvl_error *err);

/* bytes of memory aligned to `align` (a power of two, at most AVX_HUGE), or NULL; free() it.
 * From AVX_HUGE_MIN bytes on, whole 2 MiB pages asked to be transparent huge pages where the
 * system gives them only on request (THP "madvise"): 512x fewer page faults when first
 * written. The cost: a buffer written only in part is resident in whole 2 MiB pages. */
#define AVX_HUGE ((size_t)2 << 20)
#define AVX_HUGE_MIN (2 * AVX_HUGE)
void *avx_alloc(size_t bytes, size_t align);

/* f32 scratch of n elements (at least 8, 32-byte aligned, 8 floats of slack past n; from
 * AVX_HUGE_MIN bytes on as avx_alloc says: a picture's rows, 12 MB and more per op, would
 * otherwise fault in page by page, hundreds of thousands of faults per vision encode), or NULL;
 * free() it. */
float *avx_scratch(int64_t n);

/* n elements of t from element offset off, step elements apart, as f32 into out. Vector
 * code for step 1 in every dtype (q8_0 from a block boundary); element by element
 * otherwise. */
void avx_gather(const qvl_tensor *t, int64_t off, int64_t step, int64_t n, float *out);

/* Row r (innermost dim) of t as f32: a pointer straight into t when t is f32 with innermost
 * stride 1, else converted into scratch (row_len floats). */
const float *avx_row(const qvl_tensor *t, int64_t r, float *scratch);

/* Element offset of row r, rows and row length (as in qvl/tensor_access.h). */
int64_t avx_row_offset(const qvl_tensor_desc *d, int64_t r);
int64_t avx_n_rows(const qvl_tensor_desc *d);
int64_t avx_row_len(const qvl_tensor_desc *d);

/* Convert n f32 values into dtype dt (f32, f16 or bf16) at dst, exactly as qvl_from_f32. */
void avx_store_f32(qvl_dtype dt, const float *src, void *dst, int64_t n);

#endif

/* All rows of t as one contiguous f32 [rows, row_len] array: t's own memory when it is f32
 * and contiguous, else a converted copy returned in *owned (free() it; NULL otherwise).
 * Returns NULL when out of memory. */
const float *avx_rows_f32(const qvl_tensor *t, float **owned);

/* Runs fn(ctx, r, scratch) for every row r in [0, rows), rows split across the pool's
 * threads; scratch is a per-thread f32 array of scratch_len elements. QVL_E_NOMEM when the
 * scratch cannot be allocated. */
typedef void (*avx_row_fn)(void *ctx, int64_t r, float *scratch);
qvl_status avx_for_rows(qvl_backend *be, int64_t rows, int64_t scratch_len, avx_row_fn fn,
                        void *ctx);
