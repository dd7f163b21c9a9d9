/* The harness of the reference backend's own tests (test_reference_linear.c and
 * test_reference_pointwise.c): the backend they load, running one node on it, and comparing
 * its f32 outputs with expectations computed in double. Tensors come from test_tensors.h. */
#ifndef QVL_TEST_REFERENCE_UTIL_H
#define QVL_TEST_REFERENCE_UTIL_H

#include <stdbool.h>

#include "test_backend.h"
#include "test_tensors.h"

/* The reference backend, opened by ref_open_backend (a cmocka group setup). */
extern qvl_test_backend tb;
int ref_open_backend(void **state);
int ref_close_backend(void **state);

/* op on tb through its kernel (QVL_E_UNSUPPORTED when it has none), without asking first. */
qvl_status run(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src,
               qvl_error *err);
/* Would tb run this node? */
bool supported(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src);
/* Supported and runs without error, or the test fails saying why. */
void run_ok(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src);
/* Expect a failure with status `want` whose message names the op and contains `word`. */
void run_fails(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src,
               qvl_status want, const char *word);

/* Flat element i of a contiguous f32 tensor. */
double flat(const qvl_tensor *t, int64_t i);
/* got (f32, contiguous) against want[] within tol * max(1, |want|). */
void expect_close(const qvl_tensor *got, const double *want, double tol);
/* A fused result against the primitive chain: within rel relative (1e-5 as agreed). */
void expect_same(const qvl_tensor *got, const qvl_tensor *want);
/* A zeroed double per element of like (kept: freed after the test). */
double *want_buf(const qvl_tensor *like);

#endif
