/* Tensors built by hand in host memory for the backend tests (reference, cpu_avx2, cuda_sm61):
 * allocation tracking freed after every test, dtype sizes, contiguous tensors and views,
 * element values decoded from the dtype definitions, seeded random data, and nodes handed to
 * kernels the way the executor hands them. One copy, so that every backend test builds its
 * inputs and reads its outputs the same way. Failures go through cmocka (fail_msg). */
#ifndef QVL_TEST_TENSORS_H
#define QVL_TEST_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/backend_helpers.h"

/* Literal shapes, multi-indices and source lists: SHAPE(2, 3), IDX(i, j), SRC(a, b). */
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define IDX(...) ((const int64_t[]){__VA_ARGS__})
#define SRC(...) ((const qvl_tensor *[QVL_MAX_SRC]){__VA_ARGS__})

/* ---- allocations, freed after every test ---- */

/* Remembers p (asserted non-NULL) for tt_free_all and returns it. */
void *tt_keep(void *p);
/* A cmocka teardown: frees everything tt_keep remembered. */
int tt_free_all(void **state);

/* ---- sizes and descriptors ---- */

size_t tt_elem_bytes(qvl_dtype dt);                 /* 4 for f32/i32, else 2 (not q8_0) */
size_t tt_storage_bytes(qvl_dtype dt, int64_t n);   /* n elements; q8_0 in whole blocks */
size_t tt_offset_bytes(qvl_dtype dt, int64_t off);  /* where element `off` starts */
int64_t tt_nelem(const qvl_tensor_desc *d);
void tt_set_desc(qvl_tensor *t, qvl_dtype dt, int ndim, const int64_t *shape,
                 const int64_t *stride);

/* ---- tensors (kept: freed by tt_free_all) ---- */

/* Makes every later tt_mk start its data one element past an aligned address, the way
 * weights mapped from safetensors may be only 2-byte aligned (cpu_avx2 must cope). */
void tt_set_misaligned(bool on);
/* A zeroed contiguous tensor. */
qvl_tensor *tt_mk(qvl_dtype dt, int ndim, const int64_t *shape);
/* A view into base's storage: own shape and strides, element 0 at `offset` elements. */
qvl_tensor *tt_view(const qvl_tensor *base, int ndim, const int64_t *shape,
                    const int64_t *stride, int64_t offset);
qvl_tensor *tt_f32_of(int ndim, const int64_t *shape, const float *values);
qvl_tensor *tt_i32_of(int ndim, const int64_t *shape, const int32_t *values);

/* ---- element values, decoded here from the dtype definitions in dtype.h ---- */

double tt_value(const qvl_tensor *t, int64_t off);        /* at element offset off */
double tt_at(const qvl_tensor *t, const int64_t *idx);    /* at a multi-index */
double tt_at_flat(const qvl_tensor *t, int64_t i);        /* i-th in row-major order */

/* ---- random data: one LCG per test program, seeded by it ---- */

void tt_seed(uint32_t seed);
float tt_frand(float lo, float hi); /* [lo, hi) */
/* n elements of dt at data: values in [lo, hi) (i32: truncated); q8_0 gets random scales
 * and quants instead, in (n + 31) / 32 blocks. */
void tt_fill_random(qvl_dtype dt, void *data, int64_t n, float lo, float hi);
/* A contiguous tensor filled by tt_fill_random. */
qvl_tensor *tt_rnd(qvl_dtype dt, int ndim, const int64_t *shape, float lo, float hi);

/* ---- nodes ---- */

/* A node of op as the executor hands it over: all QVL_MAX_SRC slots of src, named "t". */
qvl_node tt_node(qvl_op op, const qvl_params *p, qvl_tensor *dst, const qvl_tensor *const *src);

#endif
