/* SHA-256 (FIPS 180-4): the digest that names a picture in the server's prefix cache, and the
 * cache's partitions. A cryptographic hash because whoever controls a picture's bytes must not
 * be able to make two different pictures share an identity (a 64-bit hash can be collided). */
#ifndef QVL_SHA256_H
#define QVL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QVL_SHA256_BYTES 32

typedef struct qvl_sha256_ctx {
    uint32_t h[8];
    uint64_t total;     /* bytes fed so far */
    uint8_t block[64];  /* the unfinished block */
    size_t used;        /* bytes of block filled */
} qvl_sha256_ctx;

void qvl_sha256_init(qvl_sha256_ctx *s);
void qvl_sha256_update(qvl_sha256_ctx *s, const void *data, size_t n);
/* Writes the digest; s must be initialised again before reuse. */
void qvl_sha256_final(qvl_sha256_ctx *s, uint8_t out[QVL_SHA256_BYTES]);
/* The digest of data[0, n) in one call. */
void qvl_sha256(const void *data, size_t n, uint8_t out[QVL_SHA256_BYTES]);

#ifdef __cplusplus
}
#endif
#endif
