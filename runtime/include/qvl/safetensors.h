/* Safetensors files: a read-only, memory-mapped reader and a streaming writer.
 *
 * Format: 8-byte little-endian u64 N, N bytes of JSON header
 *   {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "string", ...}}
 * then the raw little-endian row-major data; offsets count from the first byte after the
 * header. The reader validates everything against the file size before handing out pointers,
 * so a hostile file yields an error, never an out-of-bounds read. F32, F16 and BF16 tensors
 * are accepted; other safetensors dtypes are reported as unsupported, except U8 tensors that
 * hold qvl's block-quantised dtypes (below).
 *
 * Quantised tensors (q8_0, q4_k, q6_k; docs/QUANT.md): the tensor is stored as dtype "U8" with
 * shape [d0, row_bytes] (1-D: [bytes]), row_bytes being the bytes of one row of d1*...*dn-1
 * elements in whole blocks, and "__metadata__" holds "qvl:NAME": "DTYPE[d0,d1,...]" with the
 * logical shape. Other safetensors readers see a plain byte matrix; qvl's reader hands out the
 * logical tensor (dtype and shape) after checking that the bytes are exactly that dtype's for
 * that shape. A "qvl:" description without its U8 tensor is an error.
 *
 * Tensor data pointers point into the mapping and are NOT guaranteed to be aligned (the format
 * does not require it): read them with memcpy or copy them out. */
#ifndef QVL_SAFETENSORS_H
#define QVL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_ST_MAX_DIMS 8
#define QVL_ST_MAX_HEADER_BYTES ((uint64_t)100 << 20) /* 100 MiB of JSON */
#define QVL_ST_MAX_TENSORS 1000000u

typedef struct qvl_st_tensor {
    const char *name;              /* owned by the file object */
    qvl_dtype dtype;               /* QVL_F32, QVL_F16, QVL_BF16, or q8_0/q4_k/q6_k (above) */
    int32_t ndim;                  /* 0..QVL_ST_MAX_DIMS (0 = scalar); the logical shape */
    int64_t shape[QVL_ST_MAX_DIMS];/* unused entries are 0 */
    const void *data;              /* into the read-only mapping; may be unaligned */
    size_t nbytes;                 /* bytes of the data (qvl_dtype_row_bytes for block dtypes) */
} qvl_st_tensor;

/* The "__metadata__" key prefix describing a quantised tensor ("qvl:" + its name). */
#define QVL_ST_QUANT_PREFIX "qvl:"

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct qvl_safetensors qvl_safetensors;

/* Map and validate one file. Errors read "PATH: header: ..." or "PATH: tensor 'NAME': ...". */
qvl_status qvl_safetensors_open(const char *path, qvl_safetensors **out, qvl_error *err);
void qvl_safetensors_close(qvl_safetensors *st); /* NULL is fine */

const char *qvl_safetensors_path(const qvl_safetensors *st);
size_t qvl_safetensors_count(const qvl_safetensors *st);
/* Tensors in header order; NULL when i is out of range. */
const qvl_st_tensor *qvl_safetensors_at(const qvl_safetensors *st, size_t i);
/* NULL when absent. */
const qvl_st_tensor *qvl_safetensors_find(const qvl_safetensors *st, const char *name);
/* A "__metadata__" string value, NULL when absent. */
const char *qvl_safetensors_metadata(const qvl_safetensors *st, const char *key);

/* ---- writer ------------------------------------------------------------------------------
 * The data of each tensor comes either from a buffer or from a fill callback that produces it
 * chunk by chunk, so a multi-gigabyte file never has to sit in memory. The callback is called
 * for consecutive chunks of one tensor in order (byte_offset 0 first, then increasing);
 * every chunk holds a whole number of elements (of blocks, for a quantised dtype) and starts at
 * a multiple of 256 elements (whole blocks of every block dtype, so a callback may convert from
 * one). */
typedef qvl_status (*qvl_st_fill_fn)(void *user, size_t tensor_index, uint64_t byte_offset,
                                     void *dst, size_t nbytes, qvl_error *err);

typedef struct qvl_st_write_tensor {
    const char *name;
    qvl_dtype dtype;               /* QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0, QVL_Q4_K, QVL_Q6_K */
    int32_t ndim;                  /* 0..QVL_ST_MAX_DIMS (at least 1 for a quantised dtype) */
    int64_t shape[QVL_ST_MAX_DIMS];/* the logical shape; quantised rows are whole blocks */
    const void *data;              /* the bytes, or NULL to use fill */
    qvl_st_fill_fn fill;
    void *fill_user;
} qvl_st_write_tensor;

/* Write PATH under the rule of qvl/file_write.h (a regular file is written under a fresh
 * temporary name beside it and renamed at the end, so a failed write leaves no file; a FIFO or
 * device is written as it is; a symlink is followed and stays a link).
 * Tensors are laid out back to back in the given order (the format allows no gaps); the header
 * is padded with spaces so the data starts at a multiple of 8 bytes, so every tensor is aligned
 * to its element size when all tensors share a dtype or come in decreasing element size
 * (every quantised block is an even number of bytes with 2-byte fields: F32 tensors first keeps
 * everything aligned). Quantised tensors are written as described above, their "qvl:"
 * descriptions added to the metadata. metadata_kv holds n_metadata (key, value) string pairs
 * for "__metadata__" (e.g. {"format", "pt"}; no "qvl:" keys); pass NULL/0 for none. */
qvl_status qvl_safetensors_write(const char *path, const qvl_st_write_tensor *tensors,
                                 size_t n_tensors, const char *const *metadata_kv,
                                 size_t n_metadata, qvl_error *err);

/* Safetensors dtype name ("F32", "F16", "BF16"; "U8" for the quantised ones) of a qvl dtype,
 * NULL for others. */
const char *qvl_st_dtype_name(qvl_dtype t);

#ifdef __cplusplus
}
#endif
#endif
