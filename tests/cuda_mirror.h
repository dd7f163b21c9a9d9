/* The harness of test_cuda_backend.c: host tensors whose storage is mirrored into cuda_sm61
 * buffers, one node run on the reference (host) and on cuda_sm61 (device) and the device result
 * downloaded and compared within |cuda - ref| <= tol * max(1, max|ref|) (plus, for q8_0
 * weights, the activation quantisation bound test_cuda_backend.c's top comment derives), and
 * the two backends opened. Failures go through cmocka. */
#ifndef QVL_TEST_CUDA_MIRROR_H
#define QVL_TEST_CUDA_MIRROR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/backend.h"
#include "test_backend.h"
#include "test_tensors.h"

#define TOL_EXACT 0.0 /* data movement */
#define TOL_EW 1e-5   /* element-wise ops (the device's expf/sinf/cosf within 2 ulp) */
#define TOL_NORM 1e-5 /* norms and rotations (f32 sums) */
#define TOL_DOT 1e-4  /* dot products: matmul, norm_linear, mlp_residual, attention */

/* The reference (host) and cuda_sm61: opened by open_backends and cuda_available. */
extern qvl_test_backend ref, cu;

/* A tensor of the test: the host tensor (what the reference sees) and its storage, an index
 * into the harness's storages (each a host block and its device twin). */
typedef struct tt {
    qvl_tensor h;
    int store;
} tt;

/* Sources here are tt pairs (host tensor and storage), not test_tensors.h's qvl_tensors. */
#undef SRC
#define SRC(...) ((tt *[QVL_MAX_SRC]){__VA_ARGS__})

/* A zeroed contiguous tensor with its own storage. */
tt *mk(qvl_dtype dt, int ndim, const int64_t *shape);
/* A view of base's storage with its own shape and strides, element 0 at offset. */
tt *view(const tt *base, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset);
/* A contiguous tensor of random values in [lo, hi) (tt_fill_random) with its own storage. */
tt *rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi);
/* A 1-D i32 tensor holding values[0..n). */
tt *i32_of(int64_t n, const int32_t *values);
/* A random integer in [lo, hi] (tt_seed's sequence). */
int irand(int lo, int hi);

/* Upload storage st's host bytes to its device twin (allocated on first use). */
void to_device(int st);
/* The device twin of t: same descriptor, address at the same byte offset in the buffer. */
qvl_tensor dev_of(const tt *t);
/* Download the device copy of storage st and compare it, read through the host tensor want's
 * descriptor (which lies in the same storage), with want's values within tol. */
void compare_store(const char *what, int st, const qvl_tensor *want, double tol);
/* Run op on both backends: dst is the reference's output tensor (its storage is mirrored too,
 * so STORE_ROWS sees the same initial cache); compare within tol (and the q8_0 allowance). */
void check_op(qvl_op op, const qvl_params *p, tt *dst, tt *const *src, double tol);

/* cmocka teardown: every storage freed, host and device. */
int free_all(void **state);
/* cmocka group setup and teardown: the reference opened; both backends closed. */
int open_backends(void **state);
int close_backends(void **state);
/* Load cuda_sm61 and init it into cu; on failure false, with the reason (no GPU in CI). */
bool cuda_available(char *why, size_t size);

#endif
