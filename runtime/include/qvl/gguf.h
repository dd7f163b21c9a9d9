/* GGUF files: a read-only, memory-mapped reader.
 *
 * Format (versions 2 and 3; little-endian only):
 *   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
 *   kv_count x  (string key | u32 value type | value)
 *   tensor_count x  (string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset)
 *   padding to general.alignment (u32 key, a power of two; 32 when absent)
 *   data section: each tensor at data start + offset, offset a multiple of the alignment
 * A string is u64 length + that many bytes (no NUL). An array value is u32 element type + u64
 * count + the elements; elements may themselves be strings or arrays. Big-endian files (the
 * version reads byte-swapped) are refused in one line.
 *
 * Everything is checked against the file size and against the caps below before anything is
 * allocated or handed out, so a hostile file yields one error line, never an out-of-bounds
 * read: counts, string and array lengths, nesting, dimensions (n_dims <= 4, the size computed
 * with overflow checks, ne[0] whole blocks of the type), tensor offsets (aligned, inside the
 * file, no two tensors overlapping), unknown value types and unknown tensor types (named).
 * Known ggml types qvl cannot read (IQ2_XXS, ...) are accepted here: the file opens and using
 * such a tensor is refused where it is converted (qvl/ggml_types.h).
 *
 * Memory: the object holds the keys, tensor names and small per-value records; strings and
 * array elements are read in place from the mapping. All pointers the reader hands out live
 * until qvl_gguf_close.
 *
 * Tensor data is aligned to the file's alignment (the mapping starts on a page boundary): with
 * the usual 32, F32 data can be read as floats and blocks as qvl's block structs in place. A
 * file with alignment 1 or 2 may hand out unaligned data: check the address before such use. */
#ifndef QVL_GGUF_H
#define QVL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/ggml_types.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_GGUF_MAX_DIMS 4                    /* ggml's limit */
#define QVL_GGUF_MAX_TENSORS 1000000u
#define QVL_GGUF_MAX_KV 1000000u
#define QVL_GGUF_MAX_KEY_BYTES 65535u          /* the spec's limit on keys */
#define QVL_GGUF_MAX_NAME_BYTES 1024u          /* tensor names (ggml's own are under 64) */
#define QVL_GGUF_MAX_NESTING 8                 /* arrays of arrays of ... */
#define QVL_GGUF_MAX_INDEXED ((uint64_t)1 << 22) /* string and array elements, file-wide */
#define QVL_GGUF_MAX_ALIGNMENT ((uint32_t)1 << 30)

/* Metadata value types, numbered as the file stores them. */
typedef enum qvl_gguf_type {
    QVL_GGUF_U8 = 0,
    QVL_GGUF_I8 = 1,
    QVL_GGUF_U16 = 2,
    QVL_GGUF_I16 = 3,
    QVL_GGUF_U32 = 4,
    QVL_GGUF_I32 = 5,
    QVL_GGUF_F32 = 6,
    QVL_GGUF_BOOL = 7,
    QVL_GGUF_STRING = 8,
    QVL_GGUF_ARRAY = 9,
    QVL_GGUF_U64 = 10,
    QVL_GGUF_I64 = 11,
    QVL_GGUF_F64 = 12,
    QVL_GGUF_TYPE_COUNT
} qvl_gguf_type;

/* "u8", "i32", "f32", "bool", "string", "array", ... ; "?" for others. */
const char *qvl_gguf_type_name(qvl_gguf_type t);

/* A string in the mapping: len bytes, not NUL-terminated, any bytes (NULs included). */
typedef struct qvl_gguf_str {
    const char *ptr;
    uint64_t len;
} qvl_gguf_str;

typedef struct qvl_gguf_value qvl_gguf_value;
struct qvl_gguf_value {
    qvl_gguf_type type;
    union {
        uint64_t u;   /* U8, U16, U32, U64, BOOL (0 or 1) */
        int64_t i;    /* I8, I16, I32, I64 */
        double f;     /* F32 (exactly), F64 */
        qvl_gguf_str s;
        struct {
            qvl_gguf_type type;           /* element type */
            uint64_t count;
            const unsigned char *raw;     /* scalar elements, packed, in the mapping */
            const qvl_gguf_str *strs;     /* STRING elements (count of them) */
            const qvl_gguf_value *items;  /* ARRAY elements (count of them) */
        } arr;
    } v;
};

typedef struct qvl_gguf_kv {
    const char *key; /* NUL-terminated copy (keys holding a NUL byte are refused) */
    qvl_gguf_value value;
} qvl_gguf_kv;

typedef struct qvl_gguf_tensor {
    const char *name;                /* NUL-terminated copy */
    uint32_t type;                   /* ggml type id (qvl_ggml_type) */
    const qvl_ggml_type_info *info;  /* its name, block size and how qvl reads it */
    int32_t ndim;                    /* 0..QVL_GGUF_MAX_DIMS */
    int64_t ne[QVL_GGUF_MAX_DIMS];   /* GGUF order: ne[0] is the innermost (contiguous) dim;
                                        unused entries are 1 */
    int64_t shape[QVL_GGUF_MAX_DIMS];/* row-major order (shape[ndim-1] == ne[0]), as safetensors
                                        and qvl tensors give it; unused entries are 0 */
    int64_t nelems;                  /* product of ne (1 for ndim 0) */
    uint64_t offset;                 /* from the start of the data section */
    size_t nbytes;
    const void *data;                /* into the read-only mapping */
} qvl_gguf_tensor;

typedef struct qvl_gguf qvl_gguf;

/* Maps and validates one file. Errors read "PATH: header: ..." (with the byte offset where it
 * helps), "PATH: key 'K': ..." or "PATH: tensor 'NAME': ...". */
qvl_status qvl_gguf_open(const char *path, qvl_gguf **out, qvl_error *err);
void qvl_gguf_close(qvl_gguf *g); /* NULL is fine */

const char *qvl_gguf_path(const qvl_gguf *g);
uint32_t qvl_gguf_version(const qvl_gguf *g);
uint32_t qvl_gguf_alignment(const qvl_gguf *g);
uint64_t qvl_gguf_data_offset(const qvl_gguf *g); /* file offset of the data section */

/* Metadata in file order; NULL when i is out of range. */
size_t qvl_gguf_kv_count(const qvl_gguf *g);
const qvl_gguf_kv *qvl_gguf_kv_at(const qvl_gguf *g, size_t i);
/* NULL when absent. */
const qvl_gguf_value *qvl_gguf_find(const qvl_gguf *g, const char *key);

/* Typed getters. Each fails with one line naming the key and, for a wrong type, the type found
 * ("PATH: key 'qwen3vl.block_count' has type string, not an unsigned integer"); an absent key is
 * QVL_E_NOT_FOUND ("PATH: key 'K' is missing"). */
/* Any integer type whose value is in 0..max. */
qvl_status qvl_gguf_get_uint(const qvl_gguf *g, const char *key, uint64_t max, uint64_t *out,
                             qvl_error *err);
/* Any integer type whose value fits int64. */
qvl_status qvl_gguf_get_int(const qvl_gguf *g, const char *key, int64_t *out, qvl_error *err);
/* F32 or F64. */
qvl_status qvl_gguf_get_float(const qvl_gguf *g, const char *key, double *out, qvl_error *err);
qvl_status qvl_gguf_get_bool(const qvl_gguf *g, const char *key, bool *out, qvl_error *err);
qvl_status qvl_gguf_get_str(const qvl_gguf *g, const char *key, qvl_gguf_str *out,
                            qvl_error *err);
/* An array whose elements have type elem (QVL_GGUF_TYPE_COUNT: any). */
qvl_status qvl_gguf_get_array(const qvl_gguf *g, const char *key, qvl_gguf_type elem,
                              const qvl_gguf_value **out, qvl_error *err);

/* Element i of an array value; false when i is out of range or the element is not of that kind
 * (the same conversions as the getters above). */
bool qvl_gguf_arr_int(const qvl_gguf_value *arr, uint64_t i, int64_t *out);
bool qvl_gguf_arr_float(const qvl_gguf_value *arr, uint64_t i, double *out);
bool qvl_gguf_arr_str(const qvl_gguf_value *arr, uint64_t i, qvl_gguf_str *out);
const qvl_gguf_value *qvl_gguf_arr_item(const qvl_gguf_value *arr, uint64_t i);

/* A malloc'ed NUL-terminated copy of s (NULL when out of memory). */
char *qvl_gguf_str_dup(qvl_gguf_str s);
/* s equals the NUL-terminated text. */
bool qvl_gguf_str_eq(qvl_gguf_str s, const char *text);

/* Tensors in file order; NULL when i is out of range. */
size_t qvl_gguf_tensor_count(const qvl_gguf *g);
const qvl_gguf_tensor *qvl_gguf_tensor_at(const qvl_gguf *g, size_t i);
/* NULL when absent. */
const qvl_gguf_tensor *qvl_gguf_tensor_find(const qvl_gguf *g, const char *name);

#ifdef __cplusplus
}
#endif
#endif
