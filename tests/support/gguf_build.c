/* Building GGUF files byte by byte in tests (gguf_build.h). */
#include "gguf_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gb_free(gguf_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void gb_bytes(gguf_buf *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) abort();
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void le(gguf_buf *b, uint64_t v, int bytes) {
    unsigned char tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (unsigned char)(v >> (8 * i));
    gb_bytes(b, tmp, (size_t)bytes);
}

void gb_u8(gguf_buf *b, uint8_t v) { le(b, v, 1); }
void gb_u16(gguf_buf *b, uint16_t v) { le(b, v, 2); }
void gb_u32(gguf_buf *b, uint32_t v) { le(b, v, 4); }
void gb_u64(gguf_buf *b, uint64_t v) { le(b, v, 8); }

void gb_f32(gguf_buf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    le(b, u, 4);
}

void gb_str(gguf_buf *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

void gb_pad(gguf_buf *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}

void gb_header(gguf_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_kv_u32(gguf_buf *b, const char *key, uint32_t v) {
    gb_str(b, key);
    gb_u32(b, 4); /* u32 */
    gb_u32(b, v);
}

void gb_kv_str(gguf_buf *b, const char *key, const char *v) {
    gb_str(b, key);
    gb_u32(b, 8); /* string */
    gb_str(b, v);
}

void gb_tensor(gguf_buf *b, const char *name, uint32_t ndim, const uint64_t *ne, uint32_t type,
               uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, ndim);
    for (uint32_t i = 0; i < ndim; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

int gb_write(const gguf_buf *b, const char *path, size_t n) {
    if (n == (size_t)-1 || n > b->len) n = b->len;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(b->p, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}
