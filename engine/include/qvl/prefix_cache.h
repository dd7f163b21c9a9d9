/* Prefix reuse, decided without the model: what a slot's KV cache holds (or what a prompt
 * asks for) as a partition, one key per cache entry and the pictures in it; the longest part
 * of a cache a new prompt may keep. Kept apart from the slots (model-free) so that a prefix
 * cache shared by all slots can use it as it is.
 *
 * Partition: who may reuse whose cache. Two prompts share a prefix only when they were sent
 * with the same API key and the same cache_salt: otherwise `cached_tokens` (and the time a
 * prefill takes) would tell one client how far another's prompt matches its guess.
 *
 * Pictures: a pad token's key carries 64 bits of its picture's digest, so the keys find a
 * candidate; the whole SHA-256 digest (of the preprocessed pixels and the preprocessing that
 * made them) must then match too, so that no crafted picture can pass for another. */
#ifndef QVL_PREFIX_CACHE_H
#define QVL_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/sha256.h"

typedef struct qvl_partition {
    uint8_t id[QVL_SHA256_BYTES];
} qvl_partition;

/* No API key given: the key index is QVL_PARTITION_NO_KEY. */
#define QVL_PARTITION_NO_KEY (-1)

/* The partition of requests sent with API key number key_index (QVL_PARTITION_NO_KEY when
 * the server has none) and cache_salt `salt` (NULL: none; "" is a salt of its own). */
void qvl_partition_make(int key_index, const char *salt, qvl_partition *out);
bool qvl_partition_equal(const qvl_partition *a, const qvl_partition *b);

/* One picture of a prompt: its pad tokens are [at, at + n_tokens). */
typedef struct qvl_prefix_image {
    int64_t at, n_tokens;
    uint8_t digest[QVL_SHA256_BYTES];
} qvl_prefix_image;

/* A sequence of tokens as prefix reuse sees it (pictures in order of `at`). */
typedef struct qvl_prefix {
    const qvl_partition *partition;
    const uint64_t *keys;
    int64_t n_keys;
    const qvl_prefix_image *images;
    size_t n_images;
} qvl_prefix;

/* The key of a text token, and of the k-th pad token of a picture (top bit set: never equal
 * to a text token's key). */
uint64_t qvl_prefix_text_key(int32_t id);
uint64_t qvl_prefix_pad_key(const uint8_t digest[QVL_SHA256_BYTES], int64_t k);

/* Entries of `cache` that `prompt` may keep: 0 across partitions; else the common run of keys,
 * less what it would take of a picture that is not whole in it or not the same picture (by
 * digest), and never the prompt's last token (its logits choose the first answer token). */
int64_t qvl_prefix_match(const qvl_prefix *cache, const qvl_prefix *prompt);

#endif
