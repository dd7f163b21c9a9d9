/* Reading and writing elements of host-memory tensors of any dtype through their strides.
 *
 * For kernels on host memory (and for tests): a kernel asks for element offsets (in elements,
 * as in qvl_tensor_desc) and gets f32 values back, whatever the dtype (f32, f16, bf16, q8_0,
 * q4_k, q6_k)
 * and whatever the layout (contiguous or a permuted view). These are the slow, obviously
 * correct paths; fast kernels use them for the odd layouts only. */
#ifndef QVL_TENSOR_ACCESS_H
#define QVL_TENSOR_ACCESS_H

#include <stdint.h>

#include "qvl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element at element offset off (any float or block dtype), converted to f32; 0 for a dtype
 * that holds no floats. */
float qvl_elem_get(const qvl_tensor *t, int64_t off);
/* Store v at element offset off, rounded to the tensor's dtype (f32, f16 or bf16). */
void qvl_elem_set(qvl_tensor *t, int64_t off, float v);
/* Element of an i32 tensor (ids, positions, segment bounds). */
int32_t qvl_elem_get_i32(const qvl_tensor *t, int64_t off);
/* n elements starting at offset off, step elements apart, converted to f32 into out[0..n). */
void qvl_elem_gather(const qvl_tensor *t, int64_t off, int64_t step, int64_t n, float *out);

/* A "row" is one run along the innermost dimension; a [..., K] tensor has
 * prod(leading dims) rows of K elements, numbered row-major. */
int64_t qvl_desc_n_rows(const qvl_tensor_desc *d);
int64_t qvl_desc_row_len(const qvl_tensor_desc *d);
/* Element offset of the first element of row r. */
int64_t qvl_desc_row_offset(const qvl_tensor_desc *d, int64_t r);
/* Leading dims (all but the innermost) of a and b are equal (same ndim too). */
bool qvl_desc_same_leading(const qvl_tensor_desc *a, const qvl_tensor_desc *b);
/* Row r converted to f32 into out[0..row_len). */
void qvl_tensor_read_row(const qvl_tensor *t, int64_t r, float *out);
/* All rows, one after another, into out[0..n_rows*row_len): a contiguous f32 copy. */
void qvl_tensor_read_rows(const qvl_tensor *t, float *out);

/* The descriptor padded on the left to 4 dimensions (so loops can always nest 4 deep).
 * Dimensions of size 1 get stride 0: indexing them with a broadcast index stays at 0. */
void qvl_desc_align4(const qvl_tensor_desc *d, int64_t shape[4], int64_t stride[4]);

#ifdef __cplusplus
}
#endif
#endif
