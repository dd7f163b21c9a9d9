/* Tensor descriptors: dtype, up to 4 dimensions, element strides.
 *
 * Dimension order is PyTorch's: shape[0] is the outermost dimension and shape[ndim-1] the
 * innermost. stride[i] is the distance in ELEMENTS between neighbours along dimension i
 * (a contiguous [M,K] tensor has stride {K,1}). Views (slices, permutes) share storage with
 * their source and carry their own strides.
 * For the block dtypes (q8_0: 32 elements in 34 bytes; q4_k, q6_k: 256 in 144 / 210 bytes) the
 * innermost stride must be 1 and every other stride a multiple of the block, so the byte
 * offset of an element is (element offset / block) * block bytes + its position in the block
 * (for q8_0 that position is also the byte of its quant after the 2-byte scale). */
#ifndef QVL_TENSOR_H
#define QVL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_MAX_DIMS 4

typedef struct qvl_tensor_desc {
    qvl_dtype dtype;
    int32_t ndim;                  /* 1..QVL_MAX_DIMS */
    int64_t shape[QVL_MAX_DIMS];   /* unused trailing entries are 1 */
    int64_t stride[QVL_MAX_DIMS];  /* in elements; unused trailing entries are 1 */
} qvl_tensor_desc;

/* A tensor as kernels see it: a descriptor plus the backend address of element [0,...,0].
 * For host backends data is a host pointer; for device backends a device address. */
typedef struct qvl_tensor {
    qvl_tensor_desc desc;
    void *data;
} qvl_tensor;

/* A contiguous descriptor. Returns false if ndim is out of range or a dim is < 1. */
bool qvl_desc_init(qvl_tensor_desc *d, qvl_dtype dtype, int ndim, const int64_t *shape);
int64_t qvl_desc_nelem(const qvl_tensor_desc *d);
bool qvl_desc_is_contiguous(const qvl_tensor_desc *d);
/* Bytes spanned by the tensor's storage (from element 0 to the last element, inclusive, whole
 * blocks for a block dtype); false on overflow or a layout that splits blocks. */
bool qvl_desc_span_bytes(const qvl_tensor_desc *d, size_t *out);
/* Byte offset of an element offset (in elements) within storage of this dtype; for a block
 * dtype, the offset of the element's block plus its position in the block. */
size_t qvl_dtype_offset_bytes(qvl_dtype t, int64_t elem_offset);
/* Same shapes (ignores strides and dtype). */
bool qvl_desc_same_shape(const qvl_tensor_desc *a, const qvl_tensor_desc *b);
/* "[2048, 151936] bf16" style text for messages and dumps. Returns buf. */
char *qvl_desc_str(const qvl_tensor_desc *d, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
