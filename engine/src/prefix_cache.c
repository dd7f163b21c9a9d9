/* Prefix matching within a partition. */
#include "qvl/prefix_cache.h"

#include <string.h>

void qvl_partition_make(int key_index, const char *salt, qvl_partition *out) {
    /* Each field is written with a length or a presence byte first, so that no two (key, salt)
     * pairs feed the hash the same bytes. */
    qvl_sha256_ctx h;
    qvl_sha256_init(&h);
    static const char domain[] = "qvl serve prefix partition v1";
    qvl_sha256_update(&h, domain, sizeof domain);
    const int64_t key = key_index;
    qvl_sha256_update(&h, &key, sizeof key);
    const uint8_t has_salt = salt != NULL;
    qvl_sha256_update(&h, &has_salt, 1);
    if (salt) {
        const uint64_t len = strlen(salt);
        qvl_sha256_update(&h, &len, sizeof len);
        qvl_sha256_update(&h, salt, (size_t)len);
    }
    qvl_sha256_final(&h, out->id);
}

bool qvl_partition_equal(const qvl_partition *a, const qvl_partition *b) {
    return memcmp(a->id, b->id, sizeof a->id) == 0;
}

uint64_t qvl_prefix_text_key(int32_t id) { return (uint64_t)(uint32_t)id; }

uint64_t qvl_prefix_pad_key(const uint8_t digest[QVL_SHA256_BYTES], int64_t k) {
    uint64_t d = 0;
    for (int i = 0; i < 8; i++) d = d << 8 | digest[i];
    return (d + (uint64_t)k * 0x9e3779b97f4a7c15ULL) | (1ULL << 63);
}

/* The cache's picture that starts at `at`, or NULL. */
static const qvl_prefix_image *image_at(const qvl_prefix *p, int64_t at) {
    for (size_t i = 0; i < p->n_images; i++)
        if (p->images[i].at == at) return &p->images[i];
    return NULL;
}

int64_t qvl_prefix_match(const qvl_prefix *cache, const qvl_prefix *prompt) {
    if (!cache->partition || !prompt->partition ||
        !qvl_partition_equal(cache->partition, prompt->partition))
        return 0;
    int64_t n = 0;
    while (n < cache->n_keys && n < prompt->n_keys && cache->keys[n] == prompt->keys[n]) n++;
    if (n >= prompt->n_keys) n = prompt->n_keys - 1;
    /* Pictures are encoded whole: keep one only when all its pads are kept and the cache holds
     * the same picture (full digest) at the same place. Pictures are in order, so the first
     * that fails ends the kept run. */
    for (size_t i = 0; i < prompt->n_images; i++) {
        const qvl_prefix_image *want = &prompt->images[i];
        if (want->at >= n) break;
        const qvl_prefix_image *have = image_at(cache, want->at);
        if (n < want->at + want->n_tokens || !have || have->n_tokens != want->n_tokens ||
            memcmp(have->digest, want->digest, sizeof want->digest) != 0) {
            n = want->at;
            break;
        }
    }
    return n < 0 ? 0 : n;
}
