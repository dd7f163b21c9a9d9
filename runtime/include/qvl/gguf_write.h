/* GGUF files: a writer, the inverse of qvl/gguf.h's reader (the layout is described there).
 *
 * A writer collects metadata (serialised as it is added, in the order added) and tensor
 * descriptions (their data read only while writing), then writes version 3 of the format into a
 * qvl_new_file (qvl/file_write.h: a regular file is written under a temporary name and renamed
 * into place on commit, so a failed write leaves no partial file under the real name).
 *
 * Tensor data are aligned to 32 bytes (GGUF's default; no general.alignment key is written),
 * with zero bytes between tensors and after the tensor infos. A tensor's shape is given
 * row-major, as qvl and safetensors give it; the file stores it innermost first (ne[0] is the
 * last dimension). Its data come from a buffer or, chunk by chunk, from a fill callback, so a
 * multi-gigabyte model never sits in memory: chunks are consecutive, in order, each a whole
 * number of blocks starting at a multiple of 256 elements (whole blocks of every block type).
 *
 * Errors are one line naming the key or tensor. Adding a key twice, a tensor name twice, an
 * unknown type or a row that is not whole blocks of its type is refused when added. */
#ifndef QVL_GGUF_WRITE_H
#define QVL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/file_write.h"
#include "qvl/gguf.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_GGUF_WRITE_ALIGNMENT 32u

typedef struct qvl_gguf_writer qvl_gguf_writer;

/* Produces bytes [byte_offset, byte_offset + nbytes) of tensor `index` (the order of
 * qvl_gguf_writer_add_tensor, from 0) into dst. */
typedef qvl_status (*qvl_gguf_fill_fn)(void *user, size_t index, uint64_t byte_offset, void *dst,
                                       size_t nbytes, qvl_error *err);

/* what names the file in messages (its path). */
qvl_status qvl_gguf_writer_new(const char *what, qvl_gguf_writer **out, qvl_error *err);
void qvl_gguf_writer_free(qvl_gguf_writer *w); /* NULL is fine */

/* Metadata. Strings are given with their length (they need not end in NUL). */
qvl_status qvl_gguf_writer_u32(qvl_gguf_writer *w, const char *key, uint32_t v, qvl_error *err);
qvl_status qvl_gguf_writer_f32(qvl_gguf_writer *w, const char *key, float v, qvl_error *err);
qvl_status qvl_gguf_writer_bool(qvl_gguf_writer *w, const char *key, bool v, qvl_error *err);
qvl_status qvl_gguf_writer_str(qvl_gguf_writer *w, const char *key, const char *s, size_t len,
                               qvl_error *err);
/* An array of n scalars of type elem (not STRING or ARRAY), packed little-endian at raw (BOOL:
 * one byte each, 0 or 1). */
qvl_status qvl_gguf_writer_array(qvl_gguf_writer *w, const char *key, qvl_gguf_type elem,
                                 const void *raw, uint64_t n, qvl_error *err);
/* An array of n strings; strs[i] has lens[i] bytes. */
qvl_status qvl_gguf_writer_str_array(qvl_gguf_writer *w, const char *key,
                                     const char *const *strs, const size_t *lens, uint64_t n,
                                     qvl_error *err);
/* A value as qvl_gguf_find returned it from another file (any type, nested arrays included). */
qvl_status qvl_gguf_writer_value(qvl_gguf_writer *w, const char *key, const qvl_gguf_value *v,
                                 qvl_error *err);
bool qvl_gguf_writer_has_key(const qvl_gguf_writer *w, const char *key);

/* A tensor of ggml type `type` (qvl_ggml_type) and row-major shape[ndim] (1 <= ndim <= 4).
 * data: its bytes (borrowed until the write), or NULL to call fill. name is copied. */
qvl_status qvl_gguf_writer_add_tensor(qvl_gguf_writer *w, const char *name, uint32_t type,
                                      int ndim, const int64_t *shape, const void *data,
                                      qvl_gguf_fill_fn fill, void *fill_user, qvl_error *err);
size_t qvl_gguf_writer_tensor_count(const qvl_gguf_writer *w);
/* Total elements of the tensors added so far (general.size_label counts them). */
uint64_t qvl_gguf_writer_elements(const qvl_gguf_writer *w);

/* Writes the file into f (opened by the caller with qvl_new_file_open; the caller commits or
 * abandons it). */
qvl_status qvl_gguf_writer_write(const qvl_gguf_writer *w, qvl_new_file *f, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
