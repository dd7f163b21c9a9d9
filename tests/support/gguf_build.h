/* Building GGUF files byte by byte in tests: a growable little-endian buffer. Nothing is
 * validated, so a test can write any hostile layout. Allocation failures abort the test. */
#ifndef QVL_TEST_GGUF_BUILD_H
#define QVL_TEST_GGUF_BUILD_H

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_buf {
    unsigned char *p;
    size_t len, cap;
} gguf_buf;

void gb_free(gguf_buf *b);
void gb_bytes(gguf_buf *b, const void *data, size_t n);
void gb_u8(gguf_buf *b, uint8_t v);
void gb_u16(gguf_buf *b, uint16_t v);
void gb_u32(gguf_buf *b, uint32_t v);
void gb_u64(gguf_buf *b, uint64_t v);
void gb_f32(gguf_buf *b, float v);
void gb_str(gguf_buf *b, const char *s);          /* u64 length + bytes */
void gb_pad(gguf_buf *b, size_t align);           /* zero bytes up to a multiple of align */
/* "GGUF", version, tensor count, kv count. */
void gb_header(gguf_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A key with a scalar u32 / string value. */
void gb_kv_u32(gguf_buf *b, const char *key, uint32_t v);
void gb_kv_str(gguf_buf *b, const char *key, const char *v);
/* A tensor info with ndim dims ne[] (GGUF order). */
void gb_tensor(gguf_buf *b, const char *name, uint32_t ndim, const uint64_t *ne, uint32_t type,
               uint64_t offset);
/* Writes the first n bytes to path (all of them when n is (size_t)-1); 0 on success. */
int gb_write(const gguf_buf *b, const char *path, size_t n);

#endif
