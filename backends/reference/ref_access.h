/* Reading and writing single elements of any dtype through a descriptor's strides.
 *
 * Every kernel of the reference backend goes through these few functions, so a kernel never
 * cares whether its input is f32, f16, bf16 or q8_0, contiguous or a permuted view: it asks
 * for element offsets (in elements, as in qvl_tensor_desc) and gets f32 values back. */
#ifndef QVL_REF_ACCESS_H
#define QVL_REF_ACCESS_H

#include <stdint.h>

#include "qvl/tensor.h"

/* Element at element offset off (f32, f16, bf16 or q8_0), converted to f32. */
float ref_get(const qvl_tensor *t, int64_t off);
/* Store v at element offset off, converted to the tensor's dtype (f32, f16 or bf16). */
void ref_set(qvl_tensor *t, int64_t off, float v);
/* Element of an i32 tensor (ids, positions, segment bounds). */
int32_t ref_get_i32(const qvl_tensor *t, int64_t off);

/* n elements starting at offset off, step elements apart, converted to f32 into out[0..n). */
void ref_gather(const qvl_tensor *t, int64_t off, int64_t step, int64_t n, float *out);

/* A "row" is one run along the innermost dimension; a [..., K] tensor has
 * prod(leading dims) rows of K elements, numbered row-major. */
int64_t ref_n_rows(const qvl_tensor_desc *d);
int64_t ref_row_len(const qvl_tensor_desc *d);
/* Element offset of the first element of row r. */
int64_t ref_row_offset(const qvl_tensor_desc *d, int64_t r);
/* Row r converted to f32 into out[0..row_len). */
void ref_read_row(const qvl_tensor *t, int64_t r, float *out);
/* All rows, one after another, into out[0..n_rows*row_len): a contiguous f32 copy. */
void ref_read_rows(const qvl_tensor *t, float *out);

/* The descriptor padded on the left to 4 dimensions (so loops can always nest 4 deep).
 * Dimensions of size 1 get stride 0: indexing them with a broadcast index stays at 0. */
void ref_align4(const qvl_tensor_desc *d, int64_t shape[4], int64_t stride[4]);

#endif
